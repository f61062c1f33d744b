//! A cache of decoded shard indexes, bounded in bytes.
//!
//! An entry is found by (shard key, path of nested sub-shard) and carries the shard *version*
//! its bytes came from; callers only use an entry whose version equals the version they hold
//! (chunk reads are pinned to it), so a rewritten shard is never served from a stale index.
//! `checked_at` records when the version was last confirmed against the store, which lets
//! lookups trust an entry for a short time without asking the store again.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use lru::LruCache;

use crate::store::{ObjectMeta, Version};
use crate::zarr::shard_index::ShardIndex;

/// Which index: the stored shard's own (`sub` empty) or that of a nested sub-shard, named by
/// the chunk indexes that lead to it level by level.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndexKey {
    pub shard: String,
    pub sub: Vec<u64>,
}

/// A decoded index and where its chunk offsets are counted from.
#[derive(Debug)]
pub struct CachedIndex {
    pub version: Version,
    /// Size of the stored shard.
    pub shard_size: u64,
    /// Modification time of the stored shard, when the store knows it.
    pub mtime_ns: Option<i128>,
    /// Absolute offset (within the stored shard) that this index's offsets are relative to.
    pub base: u64,
    pub index: ShardIndex,
    pub checked_at: Mutex<Instant>,
}

impl CachedIndex {
    pub fn new(meta: &ObjectMeta, base: u64, index: ShardIndex) -> Self {
        CachedIndex {
            version: meta.version.clone(),
            shard_size: meta.size,
            mtime_ns: meta.mtime_ns,
            base,
            index,
            checked_at: Mutex::new(Instant::now()),
        }
    }

    /// Bytes this entry holds, for the cache bound.
    fn weight(&self, key: &IndexKey) -> usize {
        let entries = usize::try_from(self.index.num_chunks()).unwrap_or(usize::MAX);
        entries
            .saturating_mul(16)
            .saturating_add(key.shard.len() + key.sub.len() * 8 + 128)
    }

    pub fn age(&self) -> std::time::Duration {
        lock(&self.checked_at).elapsed()
    }

    pub fn touch(&self) {
        *lock(&self.checked_at) = Instant::now();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug)]
pub struct IndexCache {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    lru: LruCache<IndexKey, Arc<CachedIndex>>,
    used: usize,
    /// Bumped by every invalidation: an index loaded while one happened may predate it.
    generation: u64,
}

impl IndexCache {
    /// A cache holding at most `capacity` bytes of decoded indexes.
    pub fn new(capacity: usize) -> Self {
        // Bounded by bytes, not entries, so the LRU itself is unbounded in count.
        IndexCache {
            capacity,
            state: Mutex::new(State {
                lru: LruCache::unbounded(),
                used: 0,
                generation: 0,
            }),
        }
    }

    pub fn get(&self, key: &IndexKey) -> Option<Arc<CachedIndex>> {
        lock(&self.state).lru.get(key).cloned()
    }

    /// Taken before loading an index, for [`insert_since`](Self::insert_since).
    pub fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    /// Insert an index loaded from the store, unless a shard was invalidated since
    /// `generation` was taken: the load may then have read the version a commit just replaced,
    /// and caching it would serve that old version to readers of the commit (a reader's own
    /// write among them) until the entry is checked again.
    pub fn insert_since(&self, key: IndexKey, value: Arc<CachedIndex>, generation: u64) {
        let mut state = lock(&self.state);
        if state.generation == generation {
            Self::insert_locked(&mut state, self.capacity, key, value);
        }
    }

    /// Insert, evicting least recently used entries beyond the byte bound. An index larger than
    /// the whole cache is not kept (the caller still uses the one it decoded).
    pub fn insert(&self, key: IndexKey, value: Arc<CachedIndex>) {
        let mut state = lock(&self.state);
        Self::insert_locked(&mut state, self.capacity, key, value);
    }

    fn insert_locked(state: &mut State, capacity: usize, key: IndexKey, value: Arc<CachedIndex>) {
        let weight = value.weight(&key);
        if let Some(old) = state.lru.pop(&key) {
            state.used = state.used.saturating_sub(old.weight(&key));
        }
        if weight > capacity {
            return;
        }
        while state.used + weight > capacity {
            match state.lru.pop_lru() {
                Some((k, v)) => state.used = state.used.saturating_sub(v.weight(&k)),
                None => break,
            }
        }
        state.used += weight;
        state.lru.put(key, value);
    }

    /// Bytes the cache may still take before it is full (the inode table's memory grows
    /// into them meanwhile: see `fuse/pruning.rs`).
    pub fn room(&self) -> usize {
        self.capacity.saturating_sub(lock(&self.state).used)
    }

    /// Drop every entry (the store changed in ways not known).
    pub fn clear(&self) {
        let mut state = lock(&self.state);
        state.generation += 1;
        state.lru.clear();
        state.used = 0;
    }

    /// Drop every entry of one stored shard (its own index and nested ones).
    pub fn invalidate_shard(&self, shard: &str) {
        let mut state = lock(&self.state);
        state.generation += 1;
        let stale: Vec<IndexKey> = state
            .lru
            .iter()
            .filter(|(k, _)| k.shard == shard)
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            if let Some(v) = state.lru.pop(&key) {
                state.used = state.used.saturating_sub(v.weight(&key));
            }
        }
    }

    pub fn used_bytes(&self) -> usize {
        lock(&self.state).used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64) -> Arc<CachedIndex> {
        let meta = ObjectMeta {
            size: 0,
            version: crate::store::Version("v".into()),
            mtime_ns: None,
        };
        Arc::new(CachedIndex::new(&meta, 0, ShardIndex::empty(n).unwrap()))
    }

    fn key(s: &str) -> IndexKey {
        IndexKey {
            shard: s.into(),
            sub: vec![],
        }
    }

    #[test]
    fn bounded_in_bytes_and_evicts_lru() {
        let cache = IndexCache::new(3 * (16 * 100 + 200));
        for name in ["a", "b", "c"] {
            cache.insert(key(name), entry(100));
        }
        assert!(cache.get(&key("a")).is_some()); // a is now most recent
        cache.insert(key("d"), entry(100));
        assert!(cache.get(&key("b")).is_none(), "least recently used entry survived");
        assert!(cache.get(&key("a")).is_some());
        assert!(cache.used_bytes() <= 3 * (16 * 100 + 200));
        cache.insert(key("huge"), entry(1_000_000));
        assert!(cache.get(&key("huge")).is_none());
    }

    #[test]
    fn a_load_that_raced_an_invalidation_is_not_kept() {
        let cache = IndexCache::new(1 << 20);
        let since = cache.generation();
        cache.invalidate_shard("c/0"); // a commit of any shard while the load ran
        cache.insert_since(key("c/0"), entry(1), since);
        assert!(cache.get(&key("c/0")).is_none());
        let since = cache.generation();
        cache.insert_since(key("c/0"), entry(2), since);
        assert!(cache.get(&key("c/0")).is_some());
    }

    #[test]
    fn invalidation_drops_nested_entries() {
        let cache = IndexCache::new(1 << 20);
        cache.insert(key("s"), entry(4));
        cache.insert(
            IndexKey {
                shard: "s".into(),
                sub: vec![1],
            },
            entry(4),
        );
        cache.insert(key("t"), entry(4));
        cache.invalidate_shard("s");
        assert!(cache.get(&key("s")).is_none());
        assert!(cache
            .get(&IndexKey {
                shard: "s".into(),
                sub: vec![1]
            })
            .is_none());
        assert!(cache.get(&key("t")).is_some());
    }
}
