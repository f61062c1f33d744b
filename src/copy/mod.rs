//! `zarrfs copy SOURCE DEST --unshard` (or `--shard SHAPE`): the unsharded view of SOURCE
//! written to DEST without a mount (or packed into shards), split over machines with
//! `--part K/N`, resumable, with progress.
//!
//! The copy is the mount's view itself, read exactly as a default read-only mount reads it
//! (`mount::reading::open`, from the settings of such a mount, [`CopyOptions::read`]): the
//! same rewritten metadata, the same chunk files, so DEST holds byte for byte what `cp -r` of a
//! mount of SOURCE gives; nothing is decoded or re-encoded. It runs in three steps:
//! - [`outline`]: the hierarchy outside its arrays walked (groups, every metadata document,
//!   where the arrays are); with `--shard`, [`pack::decide`] then says which arrays are packed
//!   and how;
//! - a check that DEST, if it holds anything, holds no other hierarchy: every metadata document
//!   the copy writes that DEST holds must have the copy's bytes, or nothing is written;
//! - [`walk`] and [`work`] side by side: the arrays walked one at a time, a directory at a
//!   time (sharded arrays' chunk trees as their stored shards, with `--shard` chunk files
//!   gathered into destination shards a row at a time, see [`pack_rows`]), each batch of units
//!   dealt to the parts as it comes ([`plan`]) and the part's units copied while the walk goes
//!   on, `--jobs` files at a time, files already in DEST skipped; [`progress`] shows how far it
//!   got and sums up. Metadata is written last.
//!
//! So what the copy holds in memory is bounded by the largest directory and row of shards, not
//! by the number of chunks (issue 35): `Tally::held` counts it, and the `--json` summary says
//! its peak (`held_keys_peak`); a row of shards keeps 4 bytes a chunk file ([`sizes`]), whose
//! peak the summary says too (`pack_held_bytes_peak`).
//!
//! It owns the copy's plan, its destination and its progress. It never mounts and never names
//! the command line: it takes a plain [`CopyOptions`] (built by `cli/` from its arguments),
//! reads SOURCE only through the view, and writes DEST as plain files or through a store.

mod ahead;
mod dest;
mod outline;
mod pack;
mod pack_rows;
pub mod plan;
mod progress;
mod sizes;
mod walk;
mod work;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::mount::settings::MountSettings;
use dest::Dest;
pub use pack::{Shaping, DEFAULT_SHARD_BYTES};
pub use plan::Part;
use plan::Unit;
use progress::{Progress, Tally, Totals};

/// Files copied at once unless `--jobs` says otherwise.
pub const DEFAULT_JOBS: usize = 16;

/// What `zarrfs copy` was asked to do, in plain values (the command line builds it from its
/// arguments).
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// SOURCE as given (named in messages and the summary; compared with DEST).
    pub source: String,
    /// How SOURCE is read: the settings of a read-only mount of it with the default options
    /// (and `--max-probe-shards`), so the copy reads it exactly as such a mount would (its
    /// caches, prefetch window and TTL); see `cli::read_settings`.
    pub read: MountSettings,
    pub dest: String,
    pub jobs: usize,
    pub part: Part,
    pub verify: bool,
    pub json: bool,
    pub progress_every: Duration,
    /// `--shard SHAPE` or `--shard auto`: pack into shards instead of unsharding.
    pub shard: Option<pack::Shaping>,
}

/// Run `task` on the runtime as a task of its own. The copy's futures are driven from one
/// thread (`block_on`), where a local source's file I/O runs inline (see `store::local`), so
/// reads and listings awaited there would go one after another. As tasks, each runs on a
/// worker whose blocking I/O hands the worker's other tasks on (`block_in_place`), and they run
/// side by side, as a remote source's requests, which do not block, do anyway.
pub(crate) async fn on_task<T: Send + 'static>(
    task: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    tokio::spawn(task)
        .await
        .map_err(|e| anyhow::anyhow!("a copy task ended: {e}"))?
}

/// What a copy did, for callers other than the command line (tests, benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub files_copied: u64,
    pub files_skipped: u64,
    /// The most keys of the source held in memory at once (see `progress::Gauge`).
    pub held_peak: u64,
    /// `--shard`: the most bytes of chunk records held at once while rows of shards are
    /// gathered (`pack_held_bytes_peak` of `--json`).
    pub pack_held_peak: u64,
}

/// Bounds of a copy's memory that the command line does not set (tests set smaller ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Keys held ahead of and by the copying (see `ahead`).
    pub keys_ahead: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            keys_ahead: ahead::KEYS_AHEAD,
        }
    }
}

/// Threads for a copy's blocking file I/O: DEST's writes (`--jobs` at once), a local source's
/// reads, and the runtime's workers handed on while they read (`on_task`). Tokio allows 512 and
/// keeps a thread 10 s after its last task: under load the copy of 10^7 chunk files had grown to
/// hundreds of them, each with its stack and allocator caches (issue 35).
fn blocking_threads(jobs: usize) -> usize {
    jobs.saturating_mul(2).clamp(16, 256) + 16
}

/// `zarrfs copy SOURCE DEST --unshard …`.
pub fn run(args: &CopyOptions) -> Result<Report> {
    run_with(args, Limits::default())
}

/// [`run`] within other [`Limits`].
pub fn run_with(args: &CopyOptions, limits: Limits) -> Result<Report> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(blocking_threads(args.jobs))
        .enable_all()
        .build()?;
    let started = Instant::now();
    let tally = Arc::new(Tally::default());
    let totals = match runtime.block_on(copy(args, limits, &tally)) {
        Ok(totals) => totals,
        Err(e) => {
            // Stopped part way (too many failures): say what failed before why it stopped.
            print_failures(&tally);
            return Err(e);
        }
    };
    let elapsed = started.elapsed();
    let failed = tally.files_failed.load(Relaxed);
    if args.json {
        let head = serde_json::json!({ "source": args.source, "dest": args.dest, "part": args.part.to_string() });
        println!("{}", tally.json(head, &totals, elapsed));
    } else {
        println!("{}", summary(args, &tally, elapsed));
        print_failures(&tally);
    }
    if failed > 0 {
        bail!(
            "{failed} files failed (named above); rerun the same command to copy them: what is already in {} is skipped",
            args.dest
        );
    }
    Ok(Report {
        files_copied: tally.files_copied.load(Relaxed),
        files_skipped: tally.files_skipped.load(Relaxed),
        held_peak: tally.held.peak(),
        pack_held_peak: tally.pack_held_peak.load(Relaxed),
    })
}

/// Packed arrays most named before the copy starts (the JSON summary names them all).
const PACKED_SHOWN: usize = 20;

/// Say which arrays `--shard` packs, and in which shards (`--shard auto` chooses them).
fn say_packed(packed: &std::collections::BTreeMap<String, Vec<u64>>) {
    for (dir, shape) in packed.iter().take(PACKED_SHOWN) {
        let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
        let dir = if dir.is_empty() { "/" } else { dir };
        eprintln!("zarrfs copy: packing {dir} in shards of {}", shape.join(" x "));
    }
    if packed.len() > PACKED_SHOWN {
        eprintln!(
            "zarrfs copy: and {} more arrays (--json names them all)",
            packed.len() - PACKED_SHOWN
        );
    }
}

fn print_failures(tally: &Tally) {
    for (path, error) in tally.failures() {
        eprintln!("zarrfs copy: failed: {path}: {error}");
    }
}

async fn copy(args: &CopyOptions, limits: Limits, tally: &Arc<Tally>) -> Result<Totals> {
    let view = Arc::new(crate::mount::reading::open(&args.read)?.view);
    dest::refuse_inside(&args.source, &args.dest)?;
    let (dest, empty) = Dest::open(&args.dest).await?;
    let cannot_plan = |e: anyhow::Error| e.context(format!("cannot plan the copy of {}", args.source));
    let outline = outline::outline(&view).await.map_err(cannot_plan)?;
    let packing = match &args.shard {
        Some(shaping) => Some(
            pack::decide(&view, &outline, shaping, (!empty).then_some(&dest), args.jobs)
                .await
                .map_err(cannot_plan)?,
        ),
        None => None,
    };
    let metadata: Vec<Unit> = outline
        .files
        .iter()
        .filter(|(path, _)| plan::is_metadata_path(path))
        .map(
            |(path, node)| match packing.as_ref().and_then(|p| p.rewritten.get(path)) {
                Some(bytes) => Unit::Doc {
                    path: path.clone(),
                    bytes: bytes.clone(),
                },
                None => Unit::File {
                    path: path.clone(),
                    node: node.clone(),
                },
            },
        )
        .collect();
    if !empty {
        let conflicts = work::metadata_conflicts(&view, &dest, &metadata, args.jobs).await?;
        if let Some(first) = conflicts.first() {
            bail!(
                "the destination {} holds another hierarchy: its {first}{} differs from what this copy writes; \
                 nothing was written (copy into an empty destination, or one holding an earlier copy of the same source)",
                args.dest,
                match conflicts.len() {
                    1 => String::new(),
                    n => format!(" (and {} more metadata documents)", n - 1),
                }
            );
        }
    }
    let packed = packing.as_ref().map(|p| p.packed.clone()).unwrap_or_default();
    if !args.json {
        say_packed(&packed);
    }
    let progress = Progress::start(tally.clone(), args.progress_every);
    let (queue, units) = tokio::sync::mpsc::channel(walk::UNITS_QUEUED);
    let walker = walk::Walk {
        view: &view,
        dest: &dest,
        tally,
        cutter: plan::Cutter::new(args.part),
        make_dirs: args.part.k == 0,
        packing: packing.as_ref(),
        queue,
    };
    let work = work::Work {
        view: &view,
        dest: &dest,
        tally,
        jobs: args.jobs,
        check_dest: !empty,
        verify: args.verify,
        packing: pack::budget(),
        keys_ahead: limits.keys_ahead,
    };
    // The walk hands units on as it finds them; the copying stops the walk when it stops.
    let (walked, done) = futures::join!(
        walker.run(outline, metadata),
        work.run(futures::stream::unfold(units, |mut units| async move {
            units.recv().await.map(|unit| (unit, units))
        }))
    );
    progress.finish();
    // What was written is made durable even when the copy stopped early: a rerun skips it.
    dest.finish().await?;
    done?;
    walked.map_err(cannot_plan)?;
    Ok(tally.totals(packed))
}

fn summary(args: &CopyOptions, tally: &Tally, elapsed: Duration) -> String {
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Relaxed);
    let secs = elapsed.as_secs_f64();
    let copied = get(&tally.bytes_copied);
    let mut line = format!(
        "copied {} files ({}) to {} in {secs:.2} s ({:.1} MB/s)",
        get(&tally.files_copied),
        crate::mount::stats::bytes(copied),
        args.dest,
        copied as f64 / 1e6 / secs.max(1e-9)
    );
    if !args.part.is_whole() {
        line += &format!(", part {} ({} shards)", args.part, get(&tally.shards_done));
    }
    let skipped = get(&tally.files_skipped);
    if skipped > 0 {
        line += &format!(
            "; skipped {skipped} files ({}) the destination already held",
            crate::mount::stats::bytes(get(&tally.bytes_skipped))
        );
    }
    if args.verify {
        line += &format!("; verified {} files", get(&tally.files_verified));
    }
    let failed = get(&tally.files_failed);
    if failed > 0 {
        line += &format!("; {failed} failed");
    }
    line
}
