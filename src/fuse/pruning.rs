//! Keeping the inode table bounded: the kernel holds an inode for every file a walk touched
//! until memory pressure makes it let go, and the daemon keeps an entry for each inode the
//! kernel holds. A walk of ten million chunk files would so keep ten million entries. When the
//! table holds more than `--max-inodes`, a thread of its own asks the kernel to forget the
//! names walked longest ago (`FUSE_NOTIFY_INVAL_ENTRY`, usually a whole chunk directory at
//! once); the kernel drops those dentries, and their inodes' FORGETs empty the table.
//!
//! The limit is also what fits in memory: the daemon keeps to `--cache-size` and 64 MiB more,
//! so the table holds no more inodes than fit in 36 MiB and the part of the cache of shard
//! indexes not yet taken (`Fs::inodes_fitting`). A walk of a million files leaves most of the
//! default cache free and keeps every inode (walking it again asks nothing); a walk of ten
//! million fills the cache, and keeps some 600,000 inodes.
//!
//! Never from a request's thread: an invalidation waits for the directory's lock, which a
//! request in flight in that directory may hold. A name the kernel no longer has is an error
//! from the kernel, and harmless. A forgotten file is looked up again the next time it is
//! used; nothing open is affected (an open file keeps its inode).

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{INodeNo, Notifier};

use crate::fs::Fs;

/// The default of `--max-inodes`.
pub const DEFAULT_MAX_INODES: usize = 1 << 20;

/// Threads that send one pass's invalidations.
const INVALIDATORS: usize = 4;

/// How often the table's size is looked at.
const PERIOD: Duration = Duration::from_millis(250);

/// The pruning thread of a mount.
pub struct Pruner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Pruner {
    /// Start watching `fs`'s inode table, keeping it near `max` inodes at most.
    pub fn start(fs: Arc<Fs>, notifier: Notifier, max: usize) -> Pruner {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("zarrfs-prune".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(PERIOD);
                    prune(&fs, &notifier, max);
                }
            })
            .map_err(|e| tracing::warn!("no thread to bound the inode table: {e}"))
            .ok();
        Pruner { stop, thread }
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One look: above `max` (or what fits in memory), ask the kernel to forget enough to come
/// back to 7/8 of it.
fn prune(fs: &Fs, notifier: &Notifier, max: usize) {
    let max = max.min(fs.inodes_fitting());
    let held = fs.inodes_held();
    if held <= max {
        return;
    }
    let want = held - max / 8 * 7;
    let names = fs.inodes_to_forget(want);
    // Several at once: each invalidation waits for its directory's lock, which a walk's
    // lookups in that directory take in turn, so one at a time they go no faster than the walk.
    let per_thread = names.len().div_ceil(INVALIDATORS).max(1);
    let refused: usize = std::thread::scope(|scope| {
        let sent: Vec<_> = names
            .chunks(per_thread)
            .map(|part| {
                let notifier = notifier.clone();
                scope.spawn(move || {
                    part.iter()
                        .filter(|(dir, name)| notifier.inval_entry(INodeNo(*dir), OsStr::new(name)).is_err())
                        .count()
                })
            })
            .collect();
        sent.into_iter().map(|t| t.join().unwrap_or(0)).sum()
    });
    tracing::debug!(
        held,
        max,
        asked = names.len(),
        refused,
        "asked the kernel to forget names"
    );
}
