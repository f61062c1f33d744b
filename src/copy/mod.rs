//! `zarrfs copy SOURCE DEST --unshard` (or `--shard SHAPE`): the unsharded view of SOURCE
//! written to DEST without a mount (or packed into shards), split over machines with
//! `--part K/N`, resumable, with progress.
//!
//! The copy is the mount's view itself, read exactly as a default read-only mount reads it
//! (`reading::open`): the same rewritten metadata, the same chunk files, so DEST holds byte for
//! byte what `cp -r` of a mount of SOURCE gives; nothing is decoded or re-encoded. It runs in
//! three steps:
//! - [`plan`]: the view walked once, sharded arrays' chunk trees taken as their stored shards
//!   (listings only), and the part's share cut from it by bytes;
//! - a check that DEST, if it holds anything, holds no other hierarchy: every metadata document
//!   of the plan that DEST holds must have the copy's bytes, or nothing is written;
//! - [`work`]: the part's units copied, each shard's index read and its chunk files written,
//!   `--jobs` files at a time, files already in DEST skipped; [`progress`] shows how far it
//!   got and sums up. Metadata is written last.
//!
//! With `--shard SHAPE` (or `--shard auto`) the same steps pack instead: the walk takes every
//! chunk file, and a unit is a destination shard ([`pack`]).

mod dest;
mod pack;
pub mod plan;
mod progress;
mod work;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Parser;

use crate::view::View;
use dest::Dest;
pub use pack::{Shaping, DEFAULT_SHARD_BYTES};
pub use plan::Part;
use plan::Unit;
use progress::{Progress, Tally, Totals};

/// Files copied at once unless `--jobs` says otherwise.
pub const DEFAULT_JOBS: usize = 16;

/// What `zarrfs copy` was asked to do.
#[derive(Debug, Clone)]
pub struct CopyArgs {
    pub source: String,
    pub dest: String,
    pub jobs: usize,
    pub part: Part,
    pub verify: bool,
    pub json: bool,
    pub progress_every: Duration,
    /// `--shard SHAPE` or `--shard auto`: pack into shards instead of unsharding.
    pub shard: Option<pack::Shaping>,
    /// `--max-probe-shards`, as the mount takes it.
    pub max_probe_shards: Option<u64>,
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

/// The unsharded view of SOURCE, read exactly as a read-only mount of it with the default
/// options would read it (its caches, prefetch window and TTL).
fn source_view(source: &str, max_probe_shards: Option<u64>) -> Result<View> {
    let mut argv = vec![
        "zarrfs".to_string(),
        "mount".into(),
        source.into(),
        "/".into(),
        "--read-only".into(),
    ];
    if let Some(n) = max_probe_shards {
        argv.extend(["--max-probe-shards".into(), n.to_string()]);
    }
    let cli = crate::cli::Cli::try_parse_from(argv)?;
    let crate::cli::Command::Mount(args) = cli.command else {
        bail!("{source}: not a source");
    };
    let settings = args.settings().map_err(|m| anyhow::anyhow!(m))?;
    Ok(crate::reading::open(&settings)?.view)
}

/// `zarrfs copy SOURCE DEST --unshard …`.
pub fn run(args: &CopyArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let started = Instant::now();
    let tally = Arc::new(Tally::default());
    let totals = match runtime.block_on(copy(args, &tally)) {
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
    Ok(())
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

async fn copy(args: &CopyArgs, tally: &Arc<Tally>) -> Result<Totals> {
    let view = Arc::new(source_view(&args.source, args.max_probe_shards)?);
    dest::refuse_inside(&args.source, &args.dest)?;
    let (dest, empty) = Dest::open(&args.dest).await?;
    let planning = async {
        let walked = plan::walk(&view, args.shard.is_some()).await?;
        match &args.shard {
            Some(shaping) => pack::plan(&view, walked, shaping, (!empty).then_some(&dest), args.jobs).await,
            None => Ok(walked),
        }
    };
    let plan = planning
        .await
        .map_err(|e| e.context(format!("cannot plan the copy of {}", args.source)))?;
    if !empty {
        let conflicts = work::metadata_conflicts(&view, &dest, &plan.units, args.jobs).await?;
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
    let mine: Vec<Unit> = plan::cut(&plan.units, args.part)
        .into_iter()
        .map(|i| plan.units[i].clone())
        .collect();
    if args.part.k == 0 {
        for dir in &plan.dirs {
            if let Err(e) = dest.make_dir(dir).await {
                tally.failed(dir, &e.context(format!("cannot make the directory {dir}")));
            }
        }
    }
    let totals = Totals {
        units: mine.len() as u64,
        shards: mine
            .iter()
            .filter(|u| matches!(u, Unit::Shard(_) | Unit::Pack(_)))
            .count() as u64,
        bytes: mine.iter().map(Unit::size).sum(),
        packed: plan.packed,
    };
    if !args.json {
        say_packed(&totals.packed);
    }
    let progress = Progress::start(tally.clone(), totals.clone(), args.progress_every);
    let work = work::Work {
        view: &view,
        dest: &dest,
        tally,
        jobs: args.jobs,
        check_dest: !empty,
        verify: args.verify,
        packing: pack::budget(),
    };
    let done = work.run(mine).await;
    progress.finish();
    // What was written is made durable even when the copy stopped early: a rerun skips it.
    dest.finish().await?;
    done?;
    Ok(totals)
}

fn summary(args: &CopyArgs, tally: &Tally, elapsed: Duration) -> String {
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Relaxed);
    let secs = elapsed.as_secs_f64();
    let copied = get(&tally.bytes_copied);
    let mut line = format!(
        "copied {} files ({}) to {} in {secs:.2} s ({:.1} MB/s)",
        get(&tally.files_copied),
        crate::mount_stats::bytes(copied),
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
            crate::mount_stats::bytes(get(&tally.bytes_skipped))
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
