//! One sharded array: mapping inner-chunk coordinates to byte ranges of stored shards.
//!
//! `locate` walks the levels of (possibly nested) sharding: the stored shard's index is read
//! with one ranged request (a suffix range for an end-located index), each nested sub-shard's
//! index with one more, all cached by version. `read` then fetches the chunk's bytes pinned to
//! that version; if the shard was replaced meanwhile the store refuses, the cache entry is
//! dropped and the chunk is located again (bounded retries), so bytes of two versions never mix.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::index_cache::{CachedIndex, IndexCache, IndexKey};
use super::ShardError;
use crate::store::{ByteRange, GetOptions, ObjectMeta, Store, StoreError, Version};
use crate::zarr::grid::grid_shape;
use crate::zarr::key_encoding::ChunkKeyEncoding;
use crate::zarr::metadata::ArrayMetadata;
use crate::zarr::shard_index::ShardIndex;
use crate::zarr::sharding::{IndexLocation, ShardLayout, ShardLevel};

/// How many times a read re-locates a chunk whose shard changed under it.
const VERSION_RETRIES: usize = 3;

/// Tunables shared by every sharded array of a mount.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    /// How long a cached index is trusted for lookups and listings before its shard's version
    /// is checked again. Reads are pinned to the version regardless.
    pub revalidate_after: Duration,
}

impl Default for ShardOptions {
    fn default() -> Self {
        ShardOptions {
            revalidate_after: Duration::from_secs(1),
        }
    }
}

/// Where an inner chunk's encoded bytes live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkLocation {
    pub shard_key: String,
    pub version: Version,
    /// Absolute offset within the stored shard.
    pub offset: u64,
    pub nbytes: u64,
    /// Modification time of the shard, when known.
    pub mtime_ns: Option<i128>,
}

#[derive(Debug)]
pub struct ShardedArray {
    pub(super) store: Arc<dyn Store>,
    /// Key prefix of the array (`""` or ending in `/`).
    pub(super) prefix: String,
    pub(super) layout: ShardLayout,
    pub(super) encoding: ChunkKeyEncoding,
    /// Inner chunks per dimension of the view (ceil(shape / inner chunk shape)).
    pub(super) inner_grid: Vec<u64>,
    /// Inner chunks per stored shard, per dimension.
    pub(super) per_shard: Vec<u64>,
    cache: Arc<IndexCache>,
    options: ShardOptions,
    pub(super) commits: super::commit::CommitQueues,
}

impl ShardedArray {
    pub fn new(
        store: Arc<dyn Store>,
        prefix: String,
        meta: &ArrayMetadata,
        layout: ShardLayout,
        cache: Arc<IndexCache>,
        options: ShardOptions,
    ) -> Result<Self, ShardError> {
        let bad = |e| ShardError::corrupt(&format!("{prefix}zarr.json"), e);
        let inner_grid = grid_shape(&meta.shape, &layout.inner_chunk_shape).map_err(bad)?;
        let shard_shape = &layout.levels.first().ok_or_else(|| bad_layout(&prefix))?.shard_shape;
        let per_shard = grid_shape(shard_shape, &layout.inner_chunk_shape).map_err(bad)?;
        Ok(ShardedArray {
            store,
            prefix,
            layout,
            encoding: meta.chunk_key_encoding,
            inner_grid,
            per_shard,
            cache,
            options,
            commits: Default::default(),
        })
    }

    pub fn ndim(&self) -> usize {
        self.inner_grid.len()
    }

    pub fn encoding(&self) -> ChunkKeyEncoding {
        self.encoding
    }

    pub fn inner_grid(&self) -> &[u64] {
        &self.inner_grid
    }

    pub fn inner_chunks_per_shard(&self) -> &[u64] {
        &self.per_shard
    }

    pub(super) fn in_grid(&self, coords: &[u64]) -> bool {
        coords.len() == self.inner_grid.len() && coords.iter().zip(&self.inner_grid).all(|(c, g)| c < g)
    }

    /// The store key of the shard with these shard-grid coordinates.
    pub fn shard_key(&self, shard_coords: &[u64]) -> String {
        format!("{}{}", self.prefix, self.encoding.encode(shard_coords))
    }

    /// Where the inner chunk at `coords` is stored; `None` when it is outside the grid, its
    /// shard does not exist or its index entry is empty. A shard replaced while its nested
    /// indexes are read is located again from its new version (bounded retries).
    pub async fn locate(&self, coords: &[u64]) -> Result<Option<ChunkLocation>, ShardError> {
        self.locate_within(coords, self.options.revalidate_after).await
    }

    /// Like [`locate`](Self::locate), but first confirms that the shard's cached index is
    /// still its current version (one `head`), for operations that must not act on a stale
    /// index: opening a file.
    pub async fn locate_current(&self, coords: &[u64]) -> Result<Option<ChunkLocation>, ShardError> {
        self.locate_within(coords, Duration::ZERO).await
    }

    async fn locate_within(&self, coords: &[u64], max_age: Duration) -> Result<Option<ChunkLocation>, ShardError> {
        for _ in 0..VERSION_RETRIES {
            match self.locate_once(coords, max_age).await {
                Err(ShardError::Store(StoreError::VersionMismatch { key, .. })) => self.forget_shard(&key),
                other => return other,
            }
        }
        Err(ShardError::Unstable {
            key: self.encoding.encode(coords),
        })
    }

    async fn locate_once(&self, coords: &[u64], max_age: Duration) -> Result<Option<ChunkLocation>, ShardError> {
        if !self.in_grid(coords) {
            return Ok(None);
        }
        let Some(loc) = self.layout.locate(coords) else {
            return Ok(None);
        };
        let shard_key = self.shard_key(&loc.shard_coords);
        let Some(mut index) = self.top_index(&shard_key, max_age).await? else {
            return Ok(None);
        };
        let (version, mtime_ns) = (index.version.clone(), index.mtime_ns);
        let mut path = Vec::with_capacity(loc.per_level_index.len());
        for (level, &chunk) in loc.per_level_index.iter().enumerate() {
            let Some(range) = index.index.get(chunk) else {
                return Ok(None);
            };
            let offset = index
                .base
                .checked_add(range.offset)
                .ok_or_else(|| ShardError::corrupt(&shard_key, "offset overflow"))?;
            path.push(chunk);
            match self.layout.levels.get(level + 1) {
                None => {
                    return Ok(Some(ChunkLocation {
                        shard_key,
                        version,
                        offset,
                        nbytes: range.nbytes,
                        mtime_ns,
                    }))
                }
                Some(next) => {
                    let key = IndexKey {
                        shard: shard_key.clone(),
                        sub: path.clone(),
                    };
                    index = self.sub_index(key, &index, next, offset, range.nbytes).await?;
                }
            }
        }
        Ok(None)
    }

    /// Read `len` bytes at `offset` of a located chunk (clamped to the chunk), pinned to the
    /// version the location came from.
    pub async fn read_at(&self, loc: &ChunkLocation, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let start = offset.min(loc.nbytes);
        let length = len.min(loc.nbytes - start);
        if length == 0 {
            return Ok(Bytes::new());
        }
        let range = ByteRange::Range {
            offset: loc.offset + start,
            length,
        };
        let got = self
            .store
            .get(&loc.shard_key, GetOptions::pinned(range, loc.version.clone()))
            .await?;
        match got {
            Some(r) if r.bytes.len() as u64 == length => Ok(r.bytes),
            Some(_) | None => Err(StoreError::VersionMismatch {
                key: loc.shard_key.clone(),
                expected: loc.version.0.clone(),
            }),
        }
    }

    /// Locate and read a byte range of an inner chunk, re-locating if the shard changes
    /// between the two. `Ok(None)`: the chunk does not exist.
    pub async fn read_chunk(
        &self,
        coords: &[u64],
        offset: u64,
        len: u64,
    ) -> Result<Option<(ChunkLocation, Bytes)>, ShardError> {
        for _ in 0..VERSION_RETRIES {
            let Some(loc) = self.locate(coords).await? else {
                return Ok(None);
            };
            match self.read_at(&loc, offset, len).await {
                Ok(bytes) => return Ok(Some((loc, bytes))),
                Err(StoreError::VersionMismatch { .. }) => self.forget_shard(&loc.shard_key),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ShardError::Unstable {
            key: self.encoding.encode(coords),
        })
    }

    /// Drop cached indexes of a shard (after a version mismatch, or after a commit).
    pub fn forget_shard(&self, shard_key: &str) {
        self.cache.invalidate_shard(shard_key);
    }

    /// The stored shard's own index, from the cache when its version was confirmed less than
    /// `max_age` ago.
    pub(super) async fn top_index(
        &self,
        shard_key: &str,
        max_age: Duration,
    ) -> Result<Option<Arc<CachedIndex>>, ShardError> {
        let key = IndexKey {
            shard: shard_key.to_string(),
            sub: Vec::new(),
        };
        if let Some(cached) = self.cache.get(&key) {
            if cached.age() < max_age {
                return Ok(Some(cached));
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
        let Some(level) = self.layout.levels.first() else {
            return Err(bad_layout(&self.prefix));
        };
        let Some(loaded) = self.load_top_index(shard_key, level).await? else {
            return Ok(None);
        };
        let loaded = Arc::new(loaded);
        self.cache.insert(key, loaded.clone());
        Ok(Some(loaded))
    }

    async fn load_top_index(&self, shard_key: &str, level: &ShardLevel) -> Result<Option<CachedIndex>, ShardError> {
        let index_size = level.index_size();
        let range = match level.index_location {
            IndexLocation::End => ByteRange::Suffix(index_size),
            IndexLocation::Start => ByteRange::Range {
                offset: 0,
                length: index_size,
            },
        };
        let Some(got) = self.store.get(shard_key, GetOptions::range(range)).await? else {
            return Ok(None);
        };
        let size = got.meta.size;
        if size < index_size || (got.bytes.len() as u64) < index_size {
            return Err(ShardError::corrupt(
                shard_key,
                format!("shard is {size} bytes, shorter than its {index_size}-byte index"),
            ));
        }
        let index = decode_index(shard_key, &got.bytes, level, 0, size)?;
        Ok(Some(CachedIndex::new(&got.meta, index.0, index.1)))
    }

    /// The index of a nested sub-shard occupying `[offset, offset+nbytes)` of the stored shard.
    async fn sub_index(
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
            return Err(ShardError::corrupt(
                &key.shard,
                format!("nested shard of {nbytes} bytes is shorter than its index"),
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
            return Err(ShardError::corrupt(
                &key.shard,
                "nested shard index lies past the end of the shard",
            ));
        };
        let (base, index) = decode_index(&key.shard, &got.bytes, level, offset, nbytes)?;
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

/// Decode the index of a (sub-)shard that occupies `len` bytes from absolute offset `start`;
/// returns the base its offsets are relative to and the index. Chunks must lie inside the
/// (sub-)shard and outside its index.
fn decode_index(
    key: &str,
    bytes: &[u8],
    level: &ShardLevel,
    start: u64,
    len: u64,
) -> Result<(u64, ShardIndex), ShardError> {
    let index_size = level.index_size();
    let data_len = match level.index_location {
        IndexLocation::End => len - index_size,
        IndexLocation::Start => len,
    };
    let index = ShardIndex::decode(bytes, level.num_chunks(), level.index_codec, data_len)
        .map_err(|e| ShardError::from_zarr(key, e))?;
    if level.index_location == IndexLocation::Start {
        let overlapping = index.iter().find(|(_, r)| r.is_some_and(|r| r.offset < index_size));
        if let Some((chunk, _)) = overlapping {
            return Err(ShardError::corrupt(
                key,
                format!("index entry of chunk {chunk} points into the index"),
            ));
        }
    }
    Ok((start, index))
}

fn bad_layout(prefix: &str) -> ShardError {
    ShardError::corrupt(&format!("{prefix}zarr.json"), "sharding layout without levels")
}
