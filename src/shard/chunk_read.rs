//! Reading the bytes of a located chunk, pinned to the version its location came from.
//!
//! On an object store the shard-data cache answers most reads: the bytes a shard's index
//! brought, a window fetched for a shard's first read, or the whole shard once a reader keeps
//! missing (a walker). One such fetch per shard is in flight at a time; readers of its other
//! chunks wait for it. No fetch takes more than a sixteenth of the cache, so the shards a
//! reader goes through together stay. Without a cache (local stores) a read is one ranged read.

use bytes::Bytes;

use super::array::WHOLE_SHARD_LIMIT;
use super::data_cache::DataCache;
use super::index_cache::IndexKey;
use super::{ChunkLocation, ShardedArray};
use crate::store::{ByteRange, GetOptions, StoreError};

impl ShardedArray {
    /// Read `len` bytes at `offset` of a located chunk (clamped to the chunk), pinned to the
    /// version the location came from.
    pub async fn read_at(&self, loc: &ChunkLocation, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let start = offset.min(loc.nbytes);
        let length = len.min(loc.nbytes - start);
        if length == 0 {
            return Ok(Bytes::new());
        }
        let absolute = loc.offset + start;
        if let Some(cache) = &self.options.data_cache {
            self.note_read();
            if let Some(bytes) = cache.get(&loc.shard_key, &loc.version, absolute, length) {
                super::ShardStats::add(&self.options.stats.data_hits);
                return Ok(bytes);
            }
            super::ShardStats::add(&self.options.stats.data_misses);
            // None of the shard's bytes came with its index (a walk that only listed fetched
            // it): a window now, as the index would have brought.
            let unwindowed = !cache.holds(&loc.shard_key, &loc.version)
                && self.window_for_first_read(self.cache_size_of(&loc.shard_key));
            if unwindowed || cache.misses(&loc.shard_key, &loc.version) >= 2 {
                // One such fetch per shard at a time: readers of its other chunks wait for it
                // (parallel copies read many chunks of one shard at once).
                let _fetching = self.loads.lock(&format!("{}\0bytes", loc.shard_key)).await;
                if let Some(bytes) = cache.get(&loc.shard_key, &loc.version, absolute, length) {
                    super::ShardStats::add(&self.options.stats.data_hits);
                    return Ok(bytes);
                }
                return self.read_walking(cache, loc, absolute, length, unwindowed).await;
            }
        }
        let range = ByteRange::Range {
            offset: absolute,
            length,
        };
        let got = self
            .store
            .get(&loc.shard_key, GetOptions::pinned(range, loc.version.clone()))
            .await?;
        exact(got, loc, length)
    }

    /// A reader is walking this shard's chunks (the cached region kept missing), or reads a
    /// shard none of whose bytes are cached (`first`): fetch the whole shard if it is small
    /// enough (a walker: up to 64 MiB or a quarter of the cache; a first read: up to the
    /// prefetch window), else a prefetch window from here, in one request, and serve the chunk
    /// from it.
    async fn read_walking(
        &self,
        cache: &DataCache,
        loc: &ChunkLocation,
        absolute: u64,
        length: u64,
        first: bool,
    ) -> Result<Bytes, StoreError> {
        // Never more than a sixteenth of the cache at once, so the shards a reader goes
        // through together stay (a walk of a directory spans several).
        let share = cache.capacity() as u64 / 16;
        let limit = if first {
            self.options.prefetch_bytes
        } else {
            WHOLE_SHARD_LIMIT
        }
        .min(share);
        let shard_size = self.cache_size_of(&loc.shard_key);
        let range = match shard_size {
            Some(size) if size <= limit => ByteRange::Range {
                offset: 0,
                length: size,
            },
            _ => ByteRange::Range {
                offset: absolute,
                length: self.options.prefetch_bytes.min(share).max(length),
            },
        };
        let got = self
            .store
            .get(&loc.shard_key, GetOptions::pinned(range, loc.version.clone()))
            .await?;
        let Some(got) = got else {
            return exact(None, loc, length);
        };
        let start = absolute.checked_sub(got.offset).unwrap_or(u64::MAX) as usize;
        let bytes = got
            .bytes
            .get(start..start.saturating_add(length as usize))
            .map(|b| got.bytes.slice_ref(b));
        cache.put(&loc.shard_key, &loc.version, got.offset, got.bytes.clone());
        exact(
            bytes.map(|bytes| crate::store::GetResult {
                bytes,
                offset: absolute,
                meta: got.meta,
            }),
            loc,
            length,
        )
    }

    /// The stored size of a shard, from its cached index.
    fn cache_size_of(&self, shard_key: &str) -> Option<u64> {
        self.cache
            .get(&IndexKey {
                shard: shard_key.to_string(),
                sub: Vec::new(),
            })
            .map(|c| c.shard_size)
    }
}

/// The bytes of a read that must be exactly `length` long; anything else means the shard
/// changed under the read.
fn exact(got: Option<crate::store::GetResult>, loc: &ChunkLocation, length: u64) -> Result<Bytes, StoreError> {
    match got {
        Some(r) if r.bytes.len() as u64 == length => Ok(r.bytes),
        Some(_) | None => Err(StoreError::VersionMismatch {
            key: loc.shard_key.clone(),
            expected: loc.version.0.clone(),
        }),
    }
}
