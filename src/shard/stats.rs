//! Counters of the sharding layer, published with the store's request counters (`zarrfs
//! stats`): index and shard-data cache hits and misses, shard commits with the conflicts (lost
//! races, retried) they met, and shards looked for on a store that cannot be listed.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub struct ShardStats {
    pub index_hits: AtomicU64,
    pub index_misses: AtomicU64,
    pub data_hits: AtomicU64,
    pub data_misses: AtomicU64,
    pub commits: AtomicU64,
    pub conflicts: AtomicU64,
    /// Shards whose index a listing read because the store could not list them.
    pub probes: AtomicU64,
    /// Shard indexes fetched ahead of a walk (`read_ahead`), and the shard bytes that came
    /// with them.
    pub ahead_indexes: AtomicU64,
    pub ahead_bytes: AtomicU64,
    /// Bytes fetched ahead that a read used, and that left the cache unread.
    pub ahead_used_bytes: AtomicU64,
    pub ahead_wasted_bytes: AtomicU64,
    /// How long each shard commit took, retries included (the Prometheus endpoint's
    /// `zarrfs_shard_commit_duration_seconds`).
    pub commit_latency: crate::metrics::histogram::Histogram,
}

impl ShardStats {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// The counters as JSON fields.
    pub fn snapshot(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut out = serde_json::Map::new();
        for (name, counter) in [
            ("index_cache_hits", &self.index_hits),
            ("index_cache_misses", &self.index_misses),
            ("data_cache_hits", &self.data_hits),
            ("data_cache_misses", &self.data_misses),
            ("shard_commits", &self.commits),
            ("commit_conflicts", &self.conflicts),
            ("shard_probes", &self.probes),
            ("read_ahead_indexes", &self.ahead_indexes),
            ("read_ahead_bytes", &self.ahead_bytes),
            ("read_ahead_used_bytes", &self.ahead_used_bytes),
            ("read_ahead_wasted_bytes", &self.ahead_wasted_bytes),
        ] {
            out.insert(name.to_string(), counter.load(Relaxed).into());
        }
        out
    }
}
