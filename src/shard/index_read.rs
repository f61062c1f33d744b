//! Reading shard indexes. The stored shard's index costs one ranged request (a suffix range
//! for an end-located index), read together with a prefetch window when shard bytes are cached
//! (the whole shard when it fits, so its chunks cost no further request); each nested
//! sub-shard's index is cut from the bytes already held or read with one more request. Every
//! index is decoded by its level (`ShardLevel::decode_index`) and cached under the shard's
//! version.

use std::sync::Arc;
use std::time::Duration;

use super::index_cache::{CachedIndex, IndexKey};
use super::{Corruption, ShardError, ShardedArray};
use crate::store::{ByteRange, GetOptions, ObjectMeta};
use crate::zarr::shard_index::ShardIndex;
use crate::zarr::sharding::{IndexLocation, ShardLevel};

impl ShardedArray {
    /// Whether the shard's index is cached and fresh (reading it sends nothing).
    pub(super) fn index_is_fresh(&self, shard_key: &str) -> bool {
        let key = IndexKey {
            shard: shard_key.to_string(),
            sub: Vec::new(),
        };
        self.cache
            .get(&key)
            .is_some_and(|cached| cached.age() < self.options.revalidate_after)
    }

    /// The stored shard's own index, from the cache when its version was confirmed less than
    /// `max_age` ago.
    pub(super) async fn top_index(
        &self,
        shard_key: &str,
        max_age: Duration,
    ) -> Result<Option<Arc<CachedIndex>>, ShardError> {
        // Before the load, so that the shards after it go out in the same round trip.
        self.read_reached(shard_key);
        self.top_index_for(shard_key, max_age, Purpose::Read).await
    }

    /// The stored shard's index for a listing: with its prefetch window only while walkers of
    /// this array read what they list (`read_ahead`).
    pub(super) async fn top_index_listed(&self, shard_key: &str) -> Result<Option<Arc<CachedIndex>>, ShardError> {
        let room = self.listing_window();
        let purpose = Purpose::List { window: room.is_some() };
        self.top_index_for(shard_key, self.options.revalidate_after, purpose)
            .await
    }

    /// The stored shard's index, loaded ahead of a walk (`read_ahead`) unless cached, with or
    /// without its prefetch window.
    pub(super) async fn top_index_ahead(
        &self,
        shard_key: &str,
        window: bool,
    ) -> Result<Option<Arc<CachedIndex>>, ShardError> {
        self.top_index_for(shard_key, self.options.revalidate_after, Purpose::Ahead { window })
            .await
    }

    async fn top_index_for(
        &self,
        shard_key: &str,
        max_age: Duration,
        purpose: Purpose,
    ) -> Result<Option<Arc<CachedIndex>>, ShardError> {
        let ahead = matches!(purpose, Purpose::Ahead { .. });
        let key = IndexKey {
            shard: shard_key.to_string(),
            sub: Vec::new(),
        };
        if let Some(cached) = self.cache.get(&key) {
            if cached.age() < max_age {
                super::ShardStats::add(&self.options.stats.index_hits);
                return Ok(Some(cached));
            }
            if ahead {
                return Ok(None); // revalidating is the walk's own business
            }
            match self.store.head(shard_key).await? {
                Some(meta) if meta.version == cached.version => {
                    cached.touch();
                    return Ok(Some(cached));
                }
                Some(_) => self.forget_shard(shard_key),
                None => {
                    self.forget_shard(shard_key);
                    return Ok(None);
                }
            }
        }
        // One load per shard at a time: whoever waited here finds the other's load cached.
        let _loading = self.loads.lock(shard_key).await;
        if let Some(cached) = self.cache.get(&key).filter(|c| c.age() < max_age) {
            super::ShardStats::add(&self.options.stats.index_hits);
            return Ok(Some(cached));
        }
        if !ahead {
            super::ShardStats::add(&self.options.stats.index_misses);
        }
        let level = self.top_level(shard_key)?;
        let since = self.cache.generation();
        let Some(loaded) = self.load_top_index(shard_key, &level, purpose).await? else {
            return Ok(None);
        };
        let loaded = Arc::new(loaded);
        self.cache.insert_since(key, loaded.clone(), since);
        Ok(Some(loaded))
    }

    async fn load_top_index(
        &self,
        shard_key: &str,
        level: &ShardLevel,
        purpose: Purpose,
    ) -> Result<Option<CachedIndex>, ShardError> {
        let index_size = level.index_size();
        // With a data cache, read a prefetch window along with the index: the whole shard
        // when it fits, so that its chunks cost no further request.
        let window = match purpose {
            Purpose::Read => true,
            Purpose::List { window } | Purpose::Ahead { window } => window,
        };
        let want = match &self.options.data_cache {
            Some(_) if window => index_size.max(self.options.prefetch_bytes),
            _ => index_size,
        };
        let range = match level.index_location {
            IndexLocation::End => ByteRange::Suffix(want),
            IndexLocation::Start => ByteRange::Range {
                offset: 0,
                length: want,
            },
        };
        let Some(got) = self.store.get(shard_key, GetOptions::range(range)).await? else {
            return Ok(None);
        };
        let size = got.meta.size;
        let got_len = got.bytes.len() as u64;
        if size < index_size || got_len < index_size {
            return Err(ShardError::corrupt(
                shard_key,
                Corruption::ShorterThanIndex { size, index_size },
            ));
        }
        let index_bytes = match level.index_location {
            IndexLocation::End => got.bytes.slice((got_len - index_size) as usize..),
            IndexLocation::Start => got.bytes.slice(..index_size as usize),
        };
        let index = decode_index(shard_key, &[], &index_bytes, level, 0, size)?;
        // Cached even when only the index came: later misses on it reveal a walking reader.
        if let Some(cache) = &self.options.data_cache {
            if window {
                let seen = &self.loads.window_seen;
                seen.fetch_max(got_len, std::sync::atomic::Ordering::Relaxed);
            }
            if matches!(purpose, Purpose::Read) {
                cache.put(shard_key, &got.meta.version, got.offset, got.bytes.clone());
            } else if window {
                // Fetched for a listing or ahead of a walk: counted as read-ahead until a
                // read uses it.
                let stats = &self.options.stats;
                stats
                    .ahead_bytes
                    .fetch_add(got_len, std::sync::atomic::Ordering::Relaxed);
                cache.put_ahead(shard_key, &got.meta.version, got.offset, got.bytes.clone());
            }
        }
        if matches!(purpose, Purpose::Ahead { .. }) {
            super::ShardStats::add(&self.options.stats.ahead_indexes);
        }
        Ok(Some(CachedIndex::new(&got.meta, index.0, index.1)))
    }

    /// The index of a nested sub-shard occupying `[offset, offset+nbytes)` of the stored shard.
    pub(super) async fn sub_index(
        &self,
        key: IndexKey,
        parent: &CachedIndex,
        level: &ShardLevel,
        offset: u64,
        nbytes: u64,
    ) -> Result<Arc<CachedIndex>, ShardError> {
        if let Some(cached) = self.cache.get(&key) {
            if cached.version == parent.version {
                return Ok(cached);
            }
        }
        let index_size = level.index_size();
        if nbytes < index_size {
            return Err(ShardError::corrupt_at(
                &key.shard,
                &key.sub,
                Corruption::NestedShorterThanIndex { nbytes },
            ));
        }
        let index_offset = match level.index_location {
            IndexLocation::Start => offset,
            IndexLocation::End => offset + (nbytes - index_size),
        };
        let range = ByteRange::Range {
            offset: index_offset,
            length: index_size,
        };
        let got = self
            .store
            .get(&key.shard, GetOptions::pinned(range, parent.version.clone()))
            .await?;
        let Some(got) = got.filter(|g| g.bytes.len() as u64 == index_size) else {
            return Err(ShardError::corrupt_at(
                &key.shard,
                &key.sub,
                Corruption::NestedIndexPastEnd,
            ));
        };
        let (base, index) = decode_index(&key.shard, &key.sub, &got.bytes, level, offset, nbytes)?;
        let meta = ObjectMeta {
            size: parent.shard_size,
            version: parent.version.clone(),
            mtime_ns: parent.mtime_ns,
        };
        let entry = Arc::new(CachedIndex::new(&meta, base, index));
        self.cache.insert(key, entry.clone());
        Ok(entry)
    }
}

/// Why an index is loaded, which decides whether a prefetch window comes with it.
#[derive(Debug, Clone, Copy)]
enum Purpose {
    /// A read needs it (and most likely the chunk's bytes next to it).
    Read,
    /// A listing needs it.
    List { window: bool },
    /// Read ahead of a walk.
    Ahead { window: bool },
}

/// Decode the index of a (sub-)shard that occupies `len` bytes from absolute offset `start`;
/// returns the base its offsets are relative to and the index. Chunks must lie inside the
/// (sub-)shard and outside its index.
fn decode_index(
    key: &str,
    entry: &[u64],
    bytes: &[u8],
    level: &ShardLevel,
    start: u64,
    len: u64,
) -> Result<(u64, ShardIndex), ShardError> {
    let index = level
        .decode_index(bytes, len)
        .map_err(|e| ShardError::corrupt_at(key, entry, e))?;
    Ok((start, index))
}
