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
        ] {
            out.insert(name.to_string(), counter.load(Relaxed).into());
        }
        out
    }
}
