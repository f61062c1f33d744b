//! What the view hands up: its modes and options, its errors, the nodes it shows (and where
//! their bytes come from), and what writing a file at a path means.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use super::nodes::ShardedNode;
use crate::shard::{ShardError, ShardedArray};
use crate::store::StoreError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewMode {
    /// Sharded arrays shown as unsharded arrays (the default).
    Unsharded,
    /// The store exactly as it is.
    Raw,
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
    /// Metadata written through the view that the store cannot hold as it stands.
    #[error("{key}: metadata write refused: {refusal}")]
    Refused {
        key: String,
        refusal: crate::zarr::translate::Refusal,
    },
}

/// Where a node's bytes come from.
#[derive(Debug, Clone)]
pub enum Source {
    Dir,
    /// A value of the underlying store, passed through.
    Stored {
        key: String,
    },
    /// Bytes the view made (a rewritten `zarr.json`).
    Memory(Bytes),
    /// An inner chunk of a sharded array.
    Chunk {
        array: Arc<ShardedArray>,
        coords: Vec<u64>,
    },
}

/// What writing a file at a path of the view means.
#[derive(Debug, Clone)]
pub enum Target {
    /// An inner chunk of a sharded array: packed into its shard.
    Chunk { array: Arc<ShardedArray>, coords: Vec<u64> },
    /// The view's `zarr.json` of a sharded array.
    Metadata(Arc<ShardedNode>),
    /// A `zarr.json` outside sharded arrays (a group, an array shown as stored, a new node):
    /// translated back where it describes arrays shown unsharded.
    NodeMetadata { dir: String },
    /// Any other file: passed through to the store under this key.
    Stored { key: String },
    /// A name that cannot be a file there (e.g. not a chunk key inside a chunk directory).
    Refused(&'static str),
}

impl Target {
    /// Whether this is a metadata document the view may translate (shown as stored until its
    /// write is accepted).
    pub fn is_metadata(&self) -> bool {
        matches!(self, Target::Metadata(_) | Target::NodeMetadata { .. })
    }
}

/// A file or directory of the view.
#[derive(Debug, Clone)]
pub struct Node {
    pub size: u64,
    pub mtime_ns: Option<i128>,
    pub source: Source,
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
}
