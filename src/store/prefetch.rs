//! What the mount fetched before anyone asked (the metadata warm-up of a remote source, see
//! `view::warm_up`), and whether it was worth it.
//!
//! The warm-up runs its requests inside [`scope`]; the caches that keep answers (the list
//! cache, the view's node cache) ask [`prefetching`] when they fetch, count the request as a
//! prefetch, and mark what they keep as prefetched. The first time something else is answered
//! from a prefetched entry, it counts as used. A task-local flag rather than a parameter: the
//! warm-up reaches the caches through the `Store` trait and the view, which have no word for
//! "on behalf of whom", and giving them one would touch every decorator for a counter.
//!
//! Requests that found the same request already in flight and waited for its answer instead
//! of sending their own (single flight, see [`super::single_flight`]) are counted as joined,
//! whoever sent the first.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

tokio::task_local! {
    static PREFETCHING: ();
}

/// Run `fut` as a prefetch: what it fetches through the caches is counted and marked so.
pub async fn scope<F: std::future::Future>(fut: F) -> F::Output {
    PREFETCHING.scope((), fut).await
}

/// Whether the running task is prefetching (inside [`scope`]).
pub fn prefetching() -> bool {
    PREFETCHING.try_with(|_| ()).is_ok()
}

/// Counters of prefetching, published in the mount's statistics.
#[derive(Debug, Default)]
pub struct PrefetchStats {
    listings: AtomicU64,
    documents: AtomicU64,
    used: AtomicU64,
    joined: AtomicU64,
}

/// A snapshot of [`PrefetchStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PrefetchCounts {
    /// Directory listings sent by the warm-up.
    pub prefetch_listings: u64,
    /// Metadata documents (`zarr.json`) asked for by the warm-up, found or not.
    pub prefetch_documents: u64,
    /// Prefetched listings and documents that later answered someone else (each once).
    pub prefetch_used: u64,
    /// Requests not sent because the same one was in flight: the caller waited for its answer.
    pub requests_joined: u64,
}

impl PrefetchStats {
    /// A listing was sent; counted when the running task is prefetching.
    pub fn listing_sent(&self) {
        if prefetching() {
            self.listings.fetch_add(1, Relaxed);
        }
    }

    /// A metadata document was asked for; counted when the running task is prefetching.
    pub fn document_sent(&self) {
        if prefetching() {
            self.documents.fetch_add(1, Relaxed);
        }
    }

    /// A prefetched entry answered someone else for the first time.
    pub fn used(&self) {
        self.used.fetch_add(1, Relaxed);
    }

    /// A request waited for the same request in flight instead of being sent.
    pub fn joined(&self) {
        self.joined.fetch_add(1, Relaxed);
    }

    pub fn counts(&self) -> PrefetchCounts {
        PrefetchCounts {
            prefetch_listings: self.listings.load(Relaxed),
            prefetch_documents: self.documents.load(Relaxed),
            prefetch_used: self.used.load(Relaxed),
            requests_joined: self.joined.load(Relaxed),
        }
    }
}

/// Whether an entry kept with this `prefetched` mark is now used for the first time by
/// someone other than the warm-up (then the mark is cleared and the use counted).
pub fn first_use(prefetched: &mut bool, stats: &PrefetchStats) {
    if *prefetched && !prefetching() {
        *prefetched = false;
        stats.used();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_requests_inside_the_scope_count_as_prefetches() {
        let stats = PrefetchStats::default();
        stats.listing_sent();
        assert!(!prefetching());
        scope(async {
            assert!(prefetching());
            stats.listing_sent();
            stats.document_sent();
            let mut mark = true;
            first_use(&mut mark, &stats);
            assert!(mark, "the warm-up's own use is no use");
        })
        .await;
        let mut mark = true;
        first_use(&mut mark, &stats);
        first_use(&mut mark, &stats);
        assert!(!mark);
        let c = stats.counts();
        assert_eq!((c.prefetch_listings, c.prefetch_documents, c.prefetch_used), (1, 1, 1));
    }
}
