//! What the mount counts (what `zarrfs stats` prints): the requests the
//! kernel sent to the filesystem (what its caches did not answer), and, through [`Counters`],
//! the counters of the layers below the view (store requests, transport), which `fs` receives
//! without knowing their types.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the layers below the view (store requests, transport), taken when asked for.
pub trait Counters: std::fmt::Debug + Send + Sync {
    fn snapshot(&self) -> serde_json::Map<String, serde_json::Value>;
}

/// Requests that reached the filesystem, for the stats attribute (what the kernel's caches
/// did not answer).
#[derive(Debug, Default)]
pub struct OpCounts {
    pub(super) lookups: AtomicU64,
    pub(super) getattrs: AtomicU64,
    pub(super) opens: AtomicU64,
    pub(super) reads: AtomicU64,
    pub(super) readdirs: AtomicU64,
    pub(super) opendirs: AtomicU64,
    /// Directory opens answered with the kernel's kept listing (`kernel_listings`).
    pub(super) listings_kept: AtomicU64,
    /// Listings handed without attributes: the walker was guessed to want names only
    /// (`walkers.rs`).
    pub(super) listings_bare: AtomicU64,
    pub(super) getxattrs: AtomicU64,
    pub(super) flushes: AtomicU64,
    /// Names the kernel was asked to forget, to keep the inode table bounded.
    pub(super) forgets_asked: AtomicU64,
}

impl OpCounts {
    pub(super) fn count(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> serde_json::Map<String, serde_json::Value> {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = serde_json::Map::new();
        for (name, counter) in [
            ("fuse_lookups", &self.lookups),
            ("fuse_getattrs", &self.getattrs),
            ("fuse_opens", &self.opens),
            ("fuse_reads", &self.reads),
            ("fuse_readdirs", &self.readdirs),
            ("fuse_opendirs", &self.opendirs),
            ("kernel_listings_kept", &self.listings_kept),
            ("listings_without_attributes", &self.listings_bare),
            ("fuse_getxattrs", &self.getxattrs),
            ("fuse_flushes", &self.flushes),
            ("kernel_forgets_asked", &self.forgets_asked),
        ] {
            out.insert(name.into(), load(counter).into());
        }
        out
    }
}
