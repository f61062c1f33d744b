//! What the Prometheus endpoint says of the journal besides its backlog: how long appends
//! take (the fsync a `close()` waits for) and how long the oldest record not yet committed
//! has waited. A backlog that only grows older means commits are failing or stuck.
//!
//! Each append notes its first sequence number and its time; the oldest live record's time
//! is that of the last append that began at or before it. Entries older than the oldest live
//! record are dropped as they are passed, so this holds one entry per append still pending.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::metrics::histogram::Histogram;

#[derive(Debug, Default)]
pub(super) struct Ages {
    /// `(first seq, when)` of each append, oldest first.
    appended: Mutex<VecDeque<(u64, Instant)>>,
    pub(super) append_latency: Histogram,
}

impl Ages {
    pub(super) fn appended(&self, first_seq: u64, at: Instant) {
        self.lock().push_back((first_seq, at));
    }

    /// The age of the record `oldest_live` (the smallest live sequence number), `None` when
    /// nothing is live or it came from an earlier mount.
    pub(super) fn oldest(&self, oldest_live: Option<u64>) -> Option<Duration> {
        let mut appended = self.lock();
        let Some(live) = oldest_live else {
            appended.clear();
            return None;
        };
        while appended.get(1).is_some_and(|(seq, _)| *seq <= live) {
            appended.pop_front();
        }
        match appended.front() {
            Some((seq, at)) if *seq <= live => Some(at.elapsed()),
            _ => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Instant)>> {
        self.appended.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_live_record_ages_from_its_append() {
        let ages = Ages::default();
        let start = Instant::now();
        ages.appended(1, start - Duration::from_secs(30));
        ages.appended(4, start - Duration::from_secs(10));
        let age = ages.oldest(Some(2)).unwrap();
        assert!(age >= Duration::from_secs(30), "{age:?}");
        let age = ages.oldest(Some(5)).unwrap();
        assert!(
            age >= Duration::from_secs(10) && age < Duration::from_secs(30),
            "{age:?}"
        );
        assert_eq!(ages.lock().len(), 1, "the passed append is dropped");
        assert_eq!(ages.oldest(None), None);
        assert_eq!(ages.oldest(Some(0)), None, "replayed from an earlier mount");
    }
}
