//! Byte ranges of stored shards kept in memory, for object stores where every request costs a
//! round trip.
//!
//! A shard has at most one cached region: the bytes that came along with its index read (the
//! prefetch window), or a larger range fetched when a reader walks the shard's chunks. A region
//! is tied to the shard version it was read from; a read pinned to another version never uses
//! it. The cache is bounded in bytes, least recently used regions go first.

use std::sync::Mutex;

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
}

#[derive(Debug)]
pub struct DataCache {
    capacity: usize,
    state: Mutex<(LruCache<String, Region>, usize)>,
}

impl DataCache {
    pub fn new(capacity: usize) -> Self {
        DataCache {
            capacity,
            state: Mutex::new((LruCache::unbounded(), 0)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (LruCache<String, Region>, usize)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// `len` bytes at absolute `offset` of this version of the shard, if cached. A miss on a
    /// cached shard is counted (see [`misses`](Self::misses)).
    pub fn get(&self, shard: &str, version: &Version, offset: u64, len: u64) -> Option<Bytes> {
        let mut state = self.lock();
        let region = state.0.get_mut(shard)?;
        if region.version != *version {
            return None;
        }
        let covered = offset
            .checked_sub(region.offset)
            .and_then(|start| Some((start, start.checked_add(len)?)))
            .filter(|(_, end)| *end <= region.bytes.len() as u64);
        match covered {
            Some((start, end)) => Some(region.bytes.slice(start as usize..end as usize)),
            None => {
                region.misses += 1;
                None
            }
        }
    }

    /// How many reads of this version of the shard its cached region could not serve.
    pub fn misses(&self, shard: &str, version: &Version) -> u32 {
        let state = self.lock();
        state
            .0
            .peek(shard)
            .filter(|r| r.version == *version)
            .map_or(0, |r| r.misses)
    }

    /// Keep `bytes` read from absolute `offset` of this version of the shard.
    pub fn put(&self, shard: &str, version: &Version, offset: u64, bytes: Bytes) {
        if bytes.len() > self.capacity {
            return;
        }
        let mut state = self.lock();
        let misses = state
            .0
            .peek(shard)
            .filter(|r| r.version == *version)
            .map_or(0, |r| r.misses);
        if let Some(old) = state.0.pop(shard) {
            state.1 -= old.bytes.len();
        }
        while state.1 + bytes.len() > self.capacity {
            match state.0.pop_lru() {
                Some((_, old)) => state.1 -= old.bytes.len(),
                None => break,
            }
        }
        state.1 += bytes.len();
        let region = Region {
            version: version.clone(),
            offset,
            bytes,
            misses,
        };
        state.0.put(shard.to_string(), region);
    }

    pub fn forget(&self, shard: &str) {
        let mut state = self.lock();
        if let Some(old) = state.0.pop(shard) {
            state.1 -= old.bytes.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_by_version_bounded_and_counting_misses() {
        let cache = DataCache::new(100);
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
}
