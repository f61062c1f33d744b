//! What a copy has done, counted as it goes, shown while it runs and summed up at the end.
//!
//! On a terminal, a progress bar (stored bytes done of the part's total, rate, time left,
//! shards and files), drawn by the `indicatif` crate; otherwise (a batch job's log) a plain
//! line every `--progress-every` seconds. The summary is one line of text, or with `--json`
//! one JSON object on stdout, which says what was copied, skipped, verified and failed.
//!
//! The copy plans as it goes (see `walk`), so the part's totals grow while it runs: until the
//! last array is planned, the total shown is what is planned so far, marked with a `+`.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::mount::stats::bytes as shown_bytes;

/// Failures named one by one in the summary (the rest are counted).
const FAILURES_NAMED: usize = 20;

/// Counters of a copy, shared by its tasks.
#[derive(Debug, Default)]
pub struct Tally {
    pub files_copied: AtomicU64,
    pub bytes_copied: AtomicU64,
    pub files_skipped: AtomicU64,
    pub bytes_skipped: AtomicU64,
    pub files_verified: AtomicU64,
    pub files_failed: AtomicU64,
    /// Units (shards, files outside chunk trees) finished, and shards among them.
    pub units_done: AtomicU64,
    pub shards_done: AtomicU64,
    /// Stored bytes of the part accounted for, for progress.
    pub progress_bytes: AtomicU64,
    /// The part's units planned so far, shards among them, and their stored bytes.
    pub planned_units: AtomicU64,
    pub planned_shards: AtomicU64,
    pub planned_bytes: AtomicU64,
    /// Every unit is planned.
    pub planned: AtomicBool,
    /// Keys of the source the copy holds in memory.
    pub held: Gauge,
    /// `--shard`: the most bytes of chunk records (`sizes`) held at once by the shards being
    /// gathered.
    pub pack_held_peak: AtomicU64,
    failures: Mutex<Vec<(String, String)>>,
}

/// Keys of the source held in memory (units waiting or in progress, a listing being dealt),
/// and the most held at once: what planning as the copy goes keeps bounded (issue 35).
#[derive(Debug, Default)]
pub struct Gauge {
    now: AtomicU64,
    peak: AtomicU64,
}

impl Gauge {
    pub fn take(&self, n: u64) {
        let now = self.now.fetch_add(n, Relaxed).saturating_add(n);
        self.peak.fetch_max(now, Relaxed);
    }

    pub fn give(&self, n: u64) {
        let _ = self
            .now
            .fetch_update(Relaxed, Relaxed, |now| Some(now.saturating_sub(n)));
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Relaxed)
    }
}

/// What the part holds in all.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub units: u64,
    pub shards: u64,
    pub bytes: u64,
    /// `--shard`: the arrays packed and their shard shapes.
    pub packed: std::collections::BTreeMap<String, Vec<u64>>,
}

impl Tally {
    pub fn failed(&self, what: &str, error: &anyhow::Error) {
        self.files_failed.fetch_add(1, Relaxed);
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() < FAILURES_NAMED {
            failures.push((what.to_string(), format!("{error:#}")));
        }
    }

    /// A unit of the part planned.
    pub fn planned(&self, size: u64, shard: bool) {
        self.planned_units.fetch_add(1, Relaxed);
        self.planned_bytes.fetch_add(size, Relaxed);
        if shard {
            self.planned_shards.fetch_add(1, Relaxed);
        }
    }

    /// What the part holds in all (so far, while it is planned).
    pub fn totals(&self, packed: std::collections::BTreeMap<String, Vec<u64>>) -> Totals {
        Totals {
            units: Self::get(&self.planned_units),
            shards: Self::get(&self.planned_shards),
            bytes: Self::get(&self.planned_bytes),
            packed,
        }
    }

    /// `+` while the totals still grow.
    fn more(&self) -> &'static str {
        if self.planned.load(Relaxed) {
            ""
        } else {
            "+"
        }
    }

    pub fn failures(&self) -> Vec<(String, String)> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Relaxed)
    }

    /// One line saying where the copy stands.
    pub fn line(&self, elapsed: Duration) -> String {
        let totals = self.totals(Default::default());
        let more = self.more();
        let done = Self::get(&self.progress_bytes);
        let secs = elapsed.as_secs_f64().max(1e-3);
        let rate = done as f64 / secs;
        let left = if rate > 0.0 && totals.bytes > done {
            format!(", {:.0} s left", (totals.bytes - done) as f64 / rate)
        } else {
            String::new()
        };
        format!(
            "{} of {}{more} ({:.0}%), {} of {}{more} shards, {} files copied, {} skipped, {} failed, {}/s{left}",
            shown_bytes(done),
            shown_bytes(totals.bytes),
            100.0 * done as f64 / totals.bytes.max(1) as f64,
            Self::get(&self.shards_done),
            totals.shards,
            Self::get(&self.files_copied),
            Self::get(&self.files_skipped),
            Self::get(&self.files_failed),
            shown_bytes(rate as u64),
        )
    }

    /// The summary as JSON.
    pub fn json(&self, head: serde_json::Value, totals: &Totals, elapsed: Duration) -> serde_json::Value {
        let mut out = head;
        let failures: Vec<_> = self
            .failures()
            .into_iter()
            .map(|(path, error)| serde_json::json!({ "path": path, "error": error }))
            .collect();
        let body = serde_json::json!({
            "ok": Self::get(&self.files_failed) == 0,
            "seconds": elapsed.as_secs_f64(),
            "units": totals.units,
            "shards": totals.shards,
            "stored_bytes": totals.bytes,
            "files_copied": Self::get(&self.files_copied),
            "bytes_copied": Self::get(&self.bytes_copied),
            "files_skipped": Self::get(&self.files_skipped),
            "bytes_skipped": Self::get(&self.bytes_skipped),
            "files_verified": Self::get(&self.files_verified),
            "files_failed": Self::get(&self.files_failed),
            "failures": failures,
            "held_keys_peak": self.held.peak(),
            "pack_held_bytes_peak": Self::get(&self.pack_held_peak),
        });
        if let (Some(out), serde_json::Value::Object(body)) = (out.as_object_mut(), body) {
            out.extend(body);
            if !totals.packed.is_empty() {
                out.insert("packed".into(), serde_json::json!(totals.packed));
            }
        }
        out
    }
}

/// Progress shown while a copy runs.
pub struct Progress {
    task: tokio::task::JoinHandle<()>,
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    /// Start showing progress on stderr (a bar on a terminal, else a line every `every`).
    pub fn start(tally: Arc<Tally>, every: Duration) -> Progress {
        let started = Instant::now();
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(0);
            let style = indicatif::ProgressStyle::with_template(
                "{wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            let shown = bar.clone();
            let task = tokio::spawn(async move {
                loop {
                    shown.set_length(tally.planned_bytes.load(Relaxed));
                    shown.set_position(tally.progress_bytes.load(Relaxed));
                    shown.set_message(format!(
                        "{}/{}{} shards, {} files",
                        tally.shards_done.load(Relaxed),
                        tally.planned_shards.load(Relaxed),
                        tally.more(),
                        tally.files_copied.load(Relaxed) + tally.files_skipped.load(Relaxed)
                    ));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            });
            return Progress { task, bar: Some(bar) };
        }
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every.max(Duration::from_millis(100))).await;
                eprintln!("zarrfs copy: {}", tally.line(started.elapsed()));
            }
        });
        Progress { task, bar: None }
    }

    pub fn finish(self) {
        self.task.abort();
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
