//! The latency histograms the filesystem keeps, handed out together for the Prometheus
//! endpoint (`crate::metrics`): kernel requests by operation, shard commits (kept by the
//! sharding layer) and journal appends. Counters and gauges go through `stats_json`, the same
//! source as `zarrfs stats`, so the two never disagree.

use super::*;
use crate::metrics::histogram::Snapshot;

/// The histograms at one moment.
#[derive(Debug, Clone)]
pub struct Timings {
    /// Per FUSE operation kind, from arrival to reply.
    pub fuse: Vec<(&'static str, Snapshot)>,
    /// Shard commits, retries included.
    pub commit: Snapshot,
    /// Journal appends (fsync included); `None` without a journal.
    pub journal_append: Option<Snapshot>,
}

impl Fs {
    pub fn timings(&self) -> Timings {
        Timings {
            fuse: self.latencies.snapshots(),
            commit: self.view.shard_stats().commit_latency.snapshot(),
            journal_append: self.journal().map(|j| j.append_latency()),
        }
    }
}
