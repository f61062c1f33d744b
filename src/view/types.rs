//! What the view hands up: its modes and options, its errors, the nodes it shows (and where
//! their bytes come from), and what writing a file at a path means.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use crate::shard::{ChunkLocation, ShardError, ShardedArray};
use crate::store::{StoreError, Version};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewMode {
    /// Sharded arrays shown as unsharded arrays (the default).
    Unsharded,
    /// The store exactly as it is.
    Raw,
    /// Every array as Zarr v2 (read-only; see `view::v2`).
    V2,
}

#[derive(Debug, Clone)]
pub struct ViewOptions {
    pub mode: ViewMode,
    /// Bytes of decoded shard indexes kept in memory.
    pub index_cache_bytes: usize,
    /// Bytes of shard data kept in memory (prefetched along with indexes, or fetched for a
    /// reader walking a shard); 0 for none.
    pub data_cache_bytes: usize,
    /// Bytes read along with each shard index (see `ShardOptions::prefetch_bytes`).
    pub prefetch_bytes: u64,
    /// How long metadata and shard indexes are trusted before their version is checked again.
    pub metadata_ttl: Duration,
    /// The source is an object store, where every request counts: indexes are trusted for the
    /// TTL on open too, prefix directories come from shard listings, stored files are read
    /// ahead `prefetch_bytes` at a time.
    pub remote: bool,
    /// On a source that cannot be listed, the most shards whose indexes a chunk directory's
    /// listing reads (see `ShardOptions::max_probe_shards`).
    pub max_probe_shards: u64,
    /// The compressor of chunks the v2 view transcodes.
    pub v2_compressor: crate::zarr::transcode::V2Compressor,
    /// Bytes of whole chunks that files open for reading may hold together (see `open_file`).
    pub open_snapshot_bytes: u64,
    /// Where the node cache counts what the metadata warm-up read and what of it was used.
    pub prefetch_stats: std::sync::Arc<crate::store::prefetch::PrefetchStats>,
}

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            mode: ViewMode::Unsharded,
            index_cache_bytes: 64 << 20,
            data_cache_bytes: 0,
            prefetch_bytes: 0,
            metadata_ttl: Duration::from_secs(1),
            remote: false,
            max_probe_shards: crate::shard::DEFAULT_MAX_PROBE_SHARDS,
            v2_compressor: Default::default(),
            open_snapshot_bytes: 64 << 20,
            prefetch_stats: Default::default(),
        }
    }
}

#[derive(Debug, Error)]
pub enum ViewError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error("{0}: not a directory")]
    NotADirectory(String),
    #[error("is a directory")]
    IsADirectory,
    /// A file that was open has disappeared from the store.
    #[error("{0}: removed from the store while open")]
    Vanished(String),
    #[error("{0}: not found")]
    NotFound(String),
    #[error("{0}: already exists")]
    Exists(String),
    /// A move the view cannot make without changing what the bytes mean (between arrays,
    /// of directories or metadata).
    #[error("{0}: cannot be moved there")]
    CannotMove(String),
    /// Metadata written through the view that the store cannot hold as it stands.
    #[error("{key}: metadata write refused: {refusal}")]
    Refused {
        key: String,
        refusal: crate::zarr::translate::Refusal,
    },
}

/// Where a node's bytes come from. Private to the view: what lies behind a file is the view's
/// business, and callers act on nodes only through the view's operations.
#[derive(Debug, Clone)]
pub(super) enum Source {
    Dir,
    /// A value of the underlying store, passed through (its version when it was looked up).
    Stored {
        key: String,
        version: Option<Version>,
    },
    /// Bytes the view made: the rewritten metadata document of the node at `dir`, whose
    /// stored document is `key`.
    Rewritten {
        bytes: Bytes,
        dir: String,
        key: String,
    },
    /// An inner chunk of a sharded array, with where it was found when the file was opened.
    Chunk {
        array: Arc<ShardedArray>,
        coords: Coords,
        at: Option<ChunkLocation>,
    },
    /// A file only the mount knows of (being written), listed with its size.
    Unstored,
}

/// A chunk's coordinates, inline up to 4 dimensions: a listing clones a node per entry.
pub(super) type Coords = smallvec::SmallVec<[u64; 4]>;

/// Identifies the bytes of a file (see [`Node::content_id`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentId(String);

#[cfg(test)]
impl ContentId {
    /// A content id for tests of those that compare them.
    pub fn for_test(n: u64) -> Self {
        ContentId(n.to_string())
    }
}

/// A file or directory of the view, as found now: its size and time for attributes, and
/// (opaque to callers) where its bytes come from.
#[derive(Debug, Clone)]
pub struct Node {
    pub size: u64,
    pub mtime_ns: Option<i128>,
    pub(super) source: Source,
}

impl Node {
    pub fn is_dir(&self) -> bool {
        matches!(self.source, Source::Dir)
    }

    pub fn dir() -> Self {
        Node {
            size: 0,
            mtime_ns: None,
            source: Source::Dir,
        }
    }

    /// A file only the mount knows of (being written, staged), for listings and attributes.
    pub fn unstored(size: u64) -> Self {
        Node {
            size,
            mtime_ns: None,
            source: Source::Unstored,
        }
    }

    /// What identifies the bytes of this file as confirmed when it was found: two nodes with
    /// the same id hold the same bytes. `None` when unknown (directories, files only the mount
    /// holds, nodes from listings, chunks not yet located afresh).
    pub fn content_id(&self) -> Option<ContentId> {
        let id = match &self.source {
            Source::Stored { key, version } => format!("{key}@{}", version.as_ref()?.0),
            Source::Chunk { at, .. } => {
                let loc = at.as_ref()?;
                format!("{}@{}:{}+{}", loc.shard_key, loc.version.0, loc.offset, loc.nbytes)
            }
            Source::Rewritten { bytes, key, .. } => {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut hasher);
                format!("{key}#{}:{:016x}", bytes.len(), hasher.finish())
            }
            Source::Dir | Source::Unstored => return None,
        };
        Some(ContentId(id))
    }

    pub(super) fn rewritten(bytes: Bytes, dir: &str, key: &str, mtime_ns: Option<i128>) -> Self {
        Node {
            size: bytes.len() as u64,
            mtime_ns,
            source: Source::Rewritten {
                bytes,
                dir: dir.to_string(),
                key: key.to_string(),
            },
        }
    }
}
