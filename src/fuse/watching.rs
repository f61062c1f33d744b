//! Telling the kernel what changed in the source, when the mount is told of changes (a watched
//! local source): a thread of its own waits for each batch, has the filesystem forget what it
//! touched (`fs/source_changes.rs`), and asks the kernel to drop those names and attributes
//! (`FUSE_NOTIFY_INVAL_ENTRY`, `FUSE_NOTIFY_INVAL_INODE`).
//!
//! Never from a request's thread: an invalidation waits for the directory's lock, which a
//! request in flight there may hold. A name the kernel no longer has is an error from the
//! kernel, and harmless.
//!
//! If the feed fails (it cannot tell changes any more), the kernel would keep what it holds
//! for ever: from then on everything is taken as changed every [`FALLBACK_PERIOD`], as a TTL
//! of that length would, and the failure is logged.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{INodeNo, Notifier};

use crate::fs::source_changes::Invalidations;
use crate::fs::Fs;

/// Where a mount learns of its source's changes: waits up to the given time for the next
/// batch (the keys that changed, and whether anything may have); `Err` when it can tell no more.
pub type ChangeFeed = Box<dyn FnMut(Duration) -> std::io::Result<Option<(BTreeSet<String>, bool)>> + Send>;

/// How long a wait lasts before the thread looks whether to stop.
const WAIT: Duration = Duration::from_millis(250);

/// After the feed failed: how often everything is taken as changed.
pub const FALLBACK_PERIOD: Duration = Duration::from_secs(1);

/// The thread that hands a mount's source changes to the kernel.
pub struct Watching {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watching {
    pub fn start(fs: Arc<Fs>, notifier: Notifier, mut feed: ChangeFeed) -> Watching {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("zarrfs-watch".into())
            .spawn(move || {
                let mut failed = false;
                while !stopped.load(Ordering::Relaxed) {
                    if failed {
                        std::thread::sleep(FALLBACK_PERIOD);
                        tell(&notifier, &fs.source_changed(&BTreeSet::new(), true));
                        continue;
                    }
                    match feed(WAIT) {
                        Ok(Some((keys, everything))) => tell(&notifier, &fs.source_changed(&keys, everything)),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::error!(
                                "the watch of the source failed ({e}): from now on everything is taken as \
                                 changed every {} s",
                                FALLBACK_PERIOD.as_secs()
                            );
                            failed = true;
                        }
                    }
                }
            })
            .map_err(|e| tracing::error!("no thread to watch the source: {e}"))
            .ok();
        Watching { stop, thread }
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Ask the kernel to drop what changed.
fn tell(notifier: &Notifier, drop: &Invalidations) {
    let mut refused = 0;
    for (dir, name) in &drop.entries {
        if notifier.inval_entry(INodeNo(*dir), OsStr::new(name)).is_err() {
            refused += 1;
        }
    }
    for ino in &drop.inodes {
        if notifier.inval_inode(INodeNo(*ino), 0, 0).is_err() {
            refused += 1;
        }
    }
    tracing::debug!(
        names = drop.entries.len(),
        inodes = drop.inodes.len(),
        refused,
        "the source changed: asked the kernel to drop what it touched"
    );
}
