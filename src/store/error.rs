//! Errors of the store layer. Variants keep their meaning up the stack: a missing key is not
//! an error at all (`Ok(None)`), a version mismatch (of a read) or a conflict (of a conditional
//! write) is a race the caller may retry, an invalid key is the caller's fault, I/O failures
//! carry the key.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    #[error("{key}: changed while being read (version {expected} expected)")]
    VersionMismatch { key: String, expected: String },
    #[error("{key}: {source}")]
    Io {
        key: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{key}: permission denied")]
    PermissionDenied { key: String },
    #[error("store is read-only")]
    ReadOnly,
    #[error("operation not supported by this store: {0}")]
    Unsupported(&'static str),
    /// The precondition of a conditional write did not hold; nothing was written. The caller
    /// re-reads and retries.
    #[error("{key}: changed by another writer (conditional write refused)")]
    Conflict { key: String },
    #[error("{key}: is a directory")]
    IsDirectory { key: String },
}

impl StoreError {
    pub fn io(key: &str, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::PermissionDenied {
            return StoreError::PermissionDenied { key: key.to_string() };
        }
        StoreError::Io {
            key: key.to_string(),
            source,
        }
    }
}
