//! One sharded array: mapping inner-chunk coordinates to byte ranges of stored shards.
//!
//! `locate` walks the levels of (possibly nested) sharding: the stored shard's index is read
//! with one ranged request (a suffix range for an end-located index), each nested sub-shard's
//! index with one more, all cached by version. `read` then fetches the chunk's bytes pinned to
//! that version; if the shard was replaced meanwhile the store refuses, the cache entry is
//! dropped and the chunk is located again (bounded retries), so bytes of two versions never mix.
//! Reading the indexes themselves is in `index_read`, a located chunk's bytes in `chunk_read`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::data_cache::DataCache;
use super::index_cache::{IndexCache, IndexKey};
use super::{Corruption, ShardError};
use crate::store::{Store, StoreError, Version};
use crate::zarr::grid::grid_shape;
use crate::zarr::key_encoding::ChunkKeyEncoding;
use crate::zarr::metadata::ArrayMetadata;
use crate::zarr::rectilinear::EdgeAxis;
use crate::zarr::sharding::{ShardLayout, ShardLevel};

/// How many times a read re-locates a chunk whose shard changed under it.
const VERSION_RETRIES: usize = 3;

/// Tunables shared by every sharded array of a mount.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    /// How long a cached index is trusted for lookups and listings before its shard's version
    /// is checked again. Reads are pinned to the version regardless.
    pub revalidate_after: Duration,
    /// Bytes read along with a shard's index (at least the index): a shard that fits costs
    /// one request in all. 0 reads the index alone (local stores: the page cache does better).
    pub prefetch_bytes: u64,
    /// Where prefetched and walked shard bytes are kept; none: no prefetch.
    pub data_cache: Option<Arc<DataCache>>,
    /// Confirm a shard's version before a file of it is opened (cheap on a local disk, a
    /// request on an object store, where the index is trusted for `revalidate_after` instead).
    pub revalidate_on_open: bool,
    /// Chunk directories above the last level exist exactly when a chunk lies below them
    /// (reading shard indexes), rather than when a shard covers them (one listing). Arrays
    /// this mount writes to are always exact: a client creating a directory it just saw
    /// missing must not find it "already there".
    pub exact_prefix_dirs: bool,
    /// On a store that cannot be listed, the most shards whose indexes one chunk directory's
    /// listing reads to find its chunks; beyond it see [`super::listing`] (its chunks can
    /// still be opened by name).
    pub max_probe_shards: u64,
    /// Cache and commit counters, shared by the arrays of a mount.
    pub stats: Arc<super::ShardStats>,
    /// Shards decoded from codecs around them, shared by the arrays of a mount.
    pub decoded: Arc<super::outer::DecodedShards>,
}

impl Default for ShardOptions {
    fn default() -> Self {
        ShardOptions {
            revalidate_after: Duration::from_secs(1),
            prefetch_bytes: 0,
            data_cache: None,
            revalidate_on_open: true,
            exact_prefix_dirs: true,
            max_probe_shards: super::DEFAULT_MAX_PROBE_SHARDS,
            stats: Default::default(),
            decoded: Default::default(),
        }
    }
}

/// Largest shard a walking reader gets whole in one request (beyond it, prefetch windows).
pub(super) const WHOLE_SHARD_LIMIT: u64 = 64 << 20;

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
    /// The stored shards along each dimension, in inner chunks (regular, or a rectilinear
    /// grid's edges over the inner chunk's).
    pub(super) shards: Vec<EdgeAxis>,
    pub(super) cache: Arc<IndexCache>,
    pub(super) options: ShardOptions,
    pub(super) commits: super::commit::CommitQueues,
    /// This mount has written to the array (its prefix directories are then always exact).
    pub(super) written: std::sync::atomic::AtomicBool,
    /// Index loads in progress, one per shard (`read_ahead`).
    pub(super) loads: super::read_ahead::Loads,
    /// What the array's walkers do with what they list (`read_ahead`).
    pub(super) walk: super::read_ahead::Walk,
    /// The order in which reads load shards (`read_order`).
    pub(super) read_order: super::read_order::ReadOrder,
    /// The array itself, once [`shared`](Self::shared): what a background read-ahead holds.
    pub(super) me: std::sync::OnceLock<std::sync::Weak<ShardedArray>>,
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
        let bad = |why| ShardError::Layout {
            key: format!("{prefix}zarr.json"),
            why,
        };
        let inner_grid = grid_shape(&meta.shape, &layout.inner_chunk_shape).map_err(bad)?;
        let shards = layout.shard_axes().ok_or_else(|| bad_layout(&prefix))?;
        let store: Arc<dyn Store> = if layout.outer_codecs.is_empty() {
            store
        } else {
            Arc::new(super::outer::OuterCodecs::new(
                store,
                layout.outer_codecs.clone(),
                options.decoded.clone(),
                prefix.clone(),
                meta.chunk_key_encoding,
                meta.shape.len(),
            ))
        };
        Ok(ShardedArray {
            store,
            prefix,
            layout,
            encoding: meta.chunk_key_encoding,
            inner_grid,
            shards,
            cache,
            options,
            commits: Default::default(),
            written: Default::default(),
            loads: Default::default(),
            walk: Default::default(),
            read_order: Default::default(),
            me: Default::default(),
        })
    }

    /// The array, shared: as such it can read ahead in the background (`read_ahead`).
    pub fn shared(self) -> Arc<Self> {
        let array = Arc::new(self);
        let _ = array.me.set(Arc::downgrade(&array));
        array
    }

    pub fn ndim(&self) -> usize {
        self.inner_grid.len()
    }

    /// How the array is sharded.
    pub fn layout(&self) -> &ShardLayout {
        &self.layout
    }

    pub fn encoding(&self) -> ChunkKeyEncoding {
        self.encoding
    }

    pub fn inner_grid(&self) -> &[u64] {
        &self.inner_grid
    }

    pub(super) fn in_grid(&self, coords: &[u64]) -> bool {
        coords.len() == self.inner_grid.len() && coords.iter().zip(&self.inner_grid).all(|(c, g)| c < g)
    }

    /// The store key of the shard with these shard-grid coordinates.
    pub fn shard_key(&self, shard_coords: &[u64]) -> String {
        format!("{}{}", self.prefix, self.encoding.encode(shard_coords))
    }

    /// Stored shards along dimension `d` that hold chunks of the view's grid.
    pub(super) fn shards_along(&self, d: usize) -> u64 {
        match (self.shards.get(d), self.inner_grid.get(d)) {
            (Some(axis), Some(&g)) => axis.count_covering(g),
            _ => 0,
        }
    }

    /// The shard along dimension `d` holding inner coordinate `i` (`u64::MAX` past the edges).
    pub(super) fn shard_of(&self, d: usize, i: u64) -> u64 {
        self.shards
            .get(d)
            .and_then(|a| a.find(i))
            .map_or(u64::MAX, |(s, _, _)| s)
    }

    /// The inner coordinates along dimension `d` that shard `s` spans (not clipped to the grid).
    pub(super) fn span(&self, d: usize, s: u64) -> std::ops::Range<u64> {
        match self.shards.get(d).and_then(|a| a.chunk(s)) {
            Some((start, edge)) => start..start.saturating_add(edge),
            None => u64::MAX..u64::MAX,
        }
    }

    /// The inner chunks of the view that the stored shard at `shard_key` holds, in C order
    /// and clipped to the grid: what a change of that shard may change. `None` when the key is
    /// not one of this array's shards, or when the shard spans more than `max` chunks (the
    /// caller then stands for them all by the array's directory).
    pub fn chunks_of_key(&self, shard_key: &str, max: u64) -> Option<Vec<Vec<u64>>> {
        let rel = shard_key.strip_prefix(&self.prefix)?;
        let shard = self.encoding.decode(rel, self.ndim())?;
        let spans: Vec<std::ops::Range<u64>> = (0..self.ndim())
            .map(|d| {
                let span = self.span(d, shard.get(d).copied().unwrap_or(u64::MAX));
                let end = span.end.min(self.inner_grid[d]);
                span.start.min(end)..end
            })
            .collect();
        let count = spans.iter().try_fold(1u64, |n, s| n.checked_mul(s.end - s.start))?;
        if count > max {
            return None;
        }
        let mut out = Vec::with_capacity(usize::try_from(count).ok()?);
        if count == 0 {
            return Some(out);
        }
        let mut at: Vec<u64> = spans.iter().map(|s| s.start).collect();
        loop {
            out.push(at.clone());
            // The next coordinates in C order: the last dimension fastest.
            let mut d = self.ndim();
            loop {
                if d == 0 {
                    return Some(out);
                }
                d -= 1;
                at[d] += 1;
                if at[d] < spans[d].end {
                    break;
                }
                at[d] = spans[d].start;
            }
        }
    }

    /// The levels of the stored shard at `shard_key`: the layout's, or on a rectilinear grid
    /// with that shard's own outermost level (its index shape).
    pub(super) fn levels_of_key(&self, shard_key: &str) -> Result<std::borrow::Cow<'_, [ShardLevel]>, ShardError> {
        if self.layout.rectilinear.is_none() {
            return Ok(std::borrow::Cow::Borrowed(&self.layout.levels));
        }
        shard_key
            .strip_prefix(&self.prefix)
            .and_then(|rel| self.encoding.decode(rel, self.ndim()))
            .and_then(|coords| self.layout.levels_of(&coords))
            .ok_or_else(|| ShardError::OutsideGrid {
                key: shard_key.to_string(),
            })
    }

    /// The outermost level of the stored shard at `shard_key` (see [`levels_of_key`](Self::levels_of_key)).
    pub(super) fn top_level(&self, shard_key: &str) -> Result<ShardLevel, ShardError> {
        let levels = self.levels_of_key(shard_key)?;
        levels.first().cloned().ok_or_else(|| bad_layout(&self.prefix))
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
        let max_age = if self.options.revalidate_on_open {
            Duration::ZERO
        } else {
            self.options.revalidate_after
        };
        self.locate_within(coords, max_age).await
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
                .ok_or_else(|| ShardError::corrupt_at(&shard_key, &path, Corruption::OffsetOverflow))?;
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

    /// Drop cached indexes and bytes of a shard (after a version mismatch, or after a commit).
    pub fn forget_shard(&self, shard_key: &str) {
        self.cache.invalidate_shard(shard_key);
        if let Some(data) = &self.options.data_cache {
            data.forget(shard_key);
        }
    }
}

pub(super) fn bad_layout(prefix: &str) -> ShardError {
    ShardError::Layout {
        key: format!("{prefix}zarr.json"),
        why: crate::zarr::ZarrError::invalid("codecs", "sharding layout without levels"),
    }
}
