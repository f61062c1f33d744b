//! Errors of the sharding transformer.

use thiserror::Error;

use crate::store::StoreError;
use crate::zarr::ZarrError;

#[derive(Debug, Error)]
pub enum ShardError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Stored bytes that cannot be a valid shard: names the shard key and the reason.
    #[error("corrupt shard {key}: {reason}")]
    Corrupt { key: String, reason: String },
    /// The shard kept changing while being read or committed, beyond the retry budget.
    #[error("shard {key} changed repeatedly while being read or written")]
    Unstable { key: String },
    /// A chunk key that lies outside the array's chunk grid.
    #[error("{key}: outside the array's chunk grid")]
    OutsideGrid { key: String },
    /// The outcome of a group commit, shared by every writer of the batch.
    #[error(transparent)]
    Shared(std::sync::Arc<ShardError>),
}

impl ShardError {
    pub fn corrupt(key: &str, reason: impl std::fmt::Display) -> Self {
        ShardError::Corrupt {
            key: key.to_string(),
            reason: reason.to_string(),
        }
    }

    pub fn from_zarr(key: &str, e: ZarrError) -> Self {
        Self::corrupt(key, e)
    }

    /// The key of the shard or chunk the error is about, when it names one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ShardError::Corrupt { key, .. } | ShardError::Unstable { key } | ShardError::OutsideGrid { key } => {
                Some(key)
            }
            ShardError::Store(_) => None,
            ShardError::Shared(inner) => inner.key(),
        }
    }
}
