//! Errors of the sharding transformer, structured: which shard, which nested entry, and why,
//! kept as values up to `fs/error.rs`, where the errno is chosen.

use thiserror::Error;

use crate::store::StoreError;
use crate::zarr::ZarrError;

#[derive(Debug, Error)]
pub enum ShardError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Stored bytes that cannot be a valid shard. `entry` is the path of index entries down to
    /// the nested shard at fault (empty: the stored shard itself).
    #[error("corrupt shard {key}{}: {why}", nested(entry))]
    Corrupt {
        key: String,
        entry: Vec<u64>,
        why: Corruption,
    },
    /// The array's metadata (at `key`) describes a sharding its chunk grid cannot follow.
    #[error("{key}: unusable sharding layout: {why}")]
    Layout { key: String, why: ZarrError },
    /// The shard kept changing while being read or committed, beyond the retry budget.
    #[error("shard {key} changed repeatedly while being read or written")]
    Unstable { key: String },
    /// The store cannot be listed and the array has more shards than may be probed.
    #[error(
        "{key}: the source cannot be listed and the array has {shards} shards, more than \
         --max-probe-shards {limit} (raise it to find them by reading their indexes)"
    )]
    Unlistable { key: String, shards: u64, limit: u64 },
    /// An exclusive create of an inner chunk found it stored already (in this shard).
    #[error("{key}: the chunk exists already")]
    Exists { key: String },
    /// A chunk key that lies outside the array's chunk grid.
    #[error("{key}: outside the array's chunk grid")]
    OutsideGrid { key: String },
    /// The outcome of a group commit, shared by every writer of the batch.
    #[error(transparent)]
    Shared(std::sync::Arc<ShardError>),
}

/// Why stored bytes are not a valid shard.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Corruption {
    /// The bytes break the format: index checksum, entries out of bounds or overlapping.
    #[error(transparent)]
    Format(#[from] ZarrError),
    #[error("shard is {size} bytes, shorter than its {index_size}-byte index")]
    ShorterThanIndex { size: u64, index_size: u64 },
    #[error("nested shard of {nbytes} bytes is shorter than its index")]
    NestedShorterThanIndex { nbytes: u64 },
    #[error("nested shard index lies past the end of the shard")]
    NestedIndexPastEnd,
    #[error("chunk offset overflows")]
    OffsetOverflow,
}

fn nested(entry: &[u64]) -> String {
    if entry.is_empty() {
        String::new()
    } else {
        format!(" (nested shard at index entries {entry:?})")
    }
}

impl ShardError {
    /// The stored shard at `key` is corrupt.
    pub fn corrupt(key: &str, why: impl Into<Corruption>) -> Self {
        Self::corrupt_at(key, &[], why)
    }

    /// The nested shard reached by index entries `entry` of the stored shard `key` is corrupt.
    pub fn corrupt_at(key: &str, entry: &[u64], why: impl Into<Corruption>) -> Self {
        ShardError::Corrupt {
            key: key.to_string(),
            entry: entry.to_vec(),
            why: why.into(),
        }
    }

    /// The key of the shard or chunk the error is about, when it names one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ShardError::Corrupt { key, .. }
            | ShardError::Layout { key, .. }
            | ShardError::Unstable { key }
            | ShardError::OutsideGrid { key }
            | ShardError::Exists { key }
            | ShardError::Unlistable { key, .. } => Some(key),
            ShardError::Store(_) => None,
            ShardError::Shared(inner) => inner.key(),
        }
    }
}
