//! Byte ranges of stored shards kept in memory, for object stores where every request costs a
//! round trip.
//!
//! A shard has at most one cached region: the bytes that came along with its index read (the
//! prefetch window), or a larger range fetched when a reader walks the shard's chunks. A region
//! is tied to the shard version it was read from; a read pinned to another version never uses
//! it. The cache is bounded in bytes, least recently used regions go first.
//!
//! A region fetched ahead of a walk (`read_ahead`) is marked until a read uses it: the bytes of
//! such regions are counted as used when read, as wasted when they leave the cache unread, and
//! their unread total bounds how far read-ahead may go.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lru::LruCache;

use crate::store::Version;

#[derive(Debug)]
struct Region {
    version: Version,
    /// Absolute offset of `bytes[0]` in the shard.
    offset: u64,
    bytes: Bytes,
    /// Reads of this shard that the region could not serve (a walker needs a larger region).
    misses: u32,
    /// Fetched ahead of a walk and not read yet.
    ahead: bool,
}

/// Shards read with none of their bytes cached, remembered by count (their misses), so that a
/// reader walking one is noticed as it is when a region keeps missing.
const UNCACHED_REMEMBERED: usize = 1024;

#[derive(Debug)]
struct State {
    regions: LruCache<String, Region>,
    /// Misses of shards without a region: (version, misses).
    uncached: LruCache<String, (Version, u32)>,
    /// Bytes of all regions.
    used: usize,
    /// Bytes of regions fetched ahead and not read yet.
    unread_ahead: u64,
}

impl State {
    /// Reads of this version of the shard that found none of their bytes.
    fn misses(&self, shard: &str, version: &Version) -> u32 {
        match self.regions.peek(shard).filter(|r| r.version == *version) {
            Some(region) => region.misses,
            None => self
                .uncached
                .peek(shard)
                .filter(|(v, _)| v == version)
                .map_or(0, |(_, misses)| *misses),
        }
    }

    fn remove(&mut self, shard: &str, stats: &super::ShardStats) -> Option<Region> {
        let old = self.regions.pop(shard)?;
        self.dropped(&old, stats);
        Some(old)
    }

    fn dropped(&mut self, old: &Region, stats: &super::ShardStats) {
        self.used -= old.bytes.len();
        if old.ahead {
            self.unread_ahead -= old.bytes.len() as u64;
            stats.ahead_wasted_bytes.fetch_add(old.bytes.len() as u64, Relaxed);
        }
    }
}

#[derive(Debug)]
pub struct DataCache {
    capacity: usize,
    state: Mutex<State>,
    stats: Arc<super::ShardStats>,
}

impl DataCache {
    /// A cache of at most `capacity` bytes, counting its read-ahead in `stats`.
    pub fn new(capacity: usize, stats: Arc<super::ShardStats>) -> Self {
        DataCache {
            capacity,
            state: Mutex::new(State {
                regions: LruCache::unbounded(),
                uncached: LruCache::new(
                    std::num::NonZeroUsize::new(UNCACHED_REMEMBERED).unwrap_or(std::num::NonZeroUsize::MIN),
                ),
                used: 0,
                unread_ahead: 0,
            }),
            stats,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes fetched ahead of a walk that no read has used yet.
    pub fn unread_ahead(&self) -> u64 {
        self.lock().unread_ahead
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// `len` bytes at absolute `offset` of this version of the shard, if cached. A miss on a
    /// cached shard is counted (see [`misses`](Self::misses)).
    pub fn get(&self, shard: &str, version: &Version, offset: u64, len: u64) -> Option<Bytes> {
        let mut state = self.lock();
        let Some(region) = state.regions.get_mut(shard).filter(|r| r.version == *version) else {
            let counted = state.uncached.get_mut(shard).filter(|(v, _)| v == version);
            match counted {
                Some((_, misses)) => *misses += 1,
                None => {
                    state.uncached.put(shard.to_string(), (version.clone(), 1));
                }
            }
            return None;
        };
        let first_read_ahead = region.ahead && {
            region.ahead = false;
            true
        };
        let covered = offset
            .checked_sub(region.offset)
            .and_then(|start| Some((start, start.checked_add(len)?)))
            .filter(|(_, end)| *end <= region.bytes.len() as u64);
        let got = match covered {
            Some((start, end)) => Some(region.bytes.slice(start as usize..end as usize)),
            None => {
                region.misses += 1;
                None
            }
        };
        if first_read_ahead {
            let len = region.bytes.len() as u64;
            state.unread_ahead -= len;
            self.stats.ahead_used_bytes.fetch_add(len, Relaxed);
        }
        got
    }

    /// Whether some bytes of this version of the shard are cached.
    pub fn holds(&self, shard: &str, version: &Version) -> bool {
        self.lock().regions.peek(shard).is_some_and(|r| r.version == *version)
    }

    /// How many reads of this version of the shard its cached region could not serve.
    pub fn misses(&self, shard: &str, version: &Version) -> u32 {
        self.lock().misses(shard, version)
    }

    /// Keep `bytes` read from absolute `offset` of this version of the shard.
    pub fn put(&self, shard: &str, version: &Version, offset: u64, bytes: Bytes) {
        self.keep(shard, version, offset, bytes, false);
    }

    /// Keep `bytes` fetched ahead of a walk, as [`put`](Self::put) does.
    pub fn put_ahead(&self, shard: &str, version: &Version, offset: u64, bytes: Bytes) {
        self.keep(shard, version, offset, bytes, true);
    }

    fn keep(&self, shard: &str, version: &Version, offset: u64, bytes: Bytes, ahead: bool) {
        if bytes.len() > self.capacity {
            return;
        }
        let mut state = self.lock();
        let misses = state.misses(shard, version);
        state.remove(shard, &self.stats);
        state.uncached.pop(shard);
        while state.used + bytes.len() > self.capacity {
            match state.regions.pop_lru() {
                Some((_, old)) => state.dropped(&old, &self.stats),
                None => break,
            }
        }
        state.used += bytes.len();
        if ahead {
            state.unread_ahead += bytes.len() as u64;
        }
        let region = Region {
            version: version.clone(),
            offset,
            bytes,
            misses,
            ahead,
        };
        state.regions.put(shard.to_string(), region);
    }

    pub fn forget(&self, shard: &str) {
        self.lock().remove(shard, &self.stats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_by_version_bounded_and_counting_misses() {
        let cache = DataCache::new(100, Default::default());
        let v1 = Version("1".into());
        cache.put("s", &v1, 40, Bytes::from(vec![7u8; 60]));
        assert_eq!(cache.get("s", &v1, 50, 10).unwrap().len(), 10);
        assert!(
            cache.get("s", &Version("2".into()), 50, 10).is_none(),
            "another version"
        );
        assert!(cache.get("s", &v1, 10, 10).is_none());
        assert!(cache.get("s", &v1, 95, 10).is_none());
        assert_eq!(cache.misses("s", &v1), 2, "reads before and past the region are misses");
        cache.put("t", &v1, 0, Bytes::from(vec![1u8; 50])); // evicts s (60 + 50 > 100)
        assert!(cache.get("s", &v1, 50, 10).is_none());
        assert!(cache.get("t", &v1, 0, 50).is_some());
        cache.put("big", &v1, 0, Bytes::from(vec![0u8; 101]));
        assert!(cache.get("big", &v1, 0, 1).is_none());
        cache.forget("t");
        assert!(cache.get("t", &v1, 0, 1).is_none());
    }

    #[test]
    fn misses_of_a_shard_without_bytes_are_counted_by_version() {
        let cache = DataCache::new(100, Default::default());
        let (v1, v2) = (Version("1".into()), Version("2".into()));
        assert!(cache.get("s", &v1, 0, 10).is_none());
        assert!(cache.get("s", &v1, 10, 10).is_none());
        assert_eq!(
            cache.misses("s", &v1),
            2,
            "a reader walking a shard none of whose bytes are kept"
        );
        assert_eq!(cache.misses("s", &v2), 0, "another version");
        cache.put("s", &v1, 0, Bytes::from(vec![1u8; 20]));
        assert_eq!(cache.misses("s", &v1), 2, "a region keeps the count it had");
        assert!(cache.get("s", &v1, 0, 20).is_some());
    }
}
