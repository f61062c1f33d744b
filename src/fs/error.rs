//! Errors of filesystem operations and the one place where every error becomes an errno.
//!
//! Each error also knows how loudly to log: expected misses (a lookup of a name that does not
//! exist) at debug level; corrupt stored data as a warning naming the key and the reason,
//! once per distinct message so a damaged shard read by a thousand requests logs one line.

use std::collections::HashSet;
use std::sync::Mutex;

use thiserror::Error;

use crate::shard::ShardError;
use crate::store::StoreError;
use crate::view::ViewError;

#[derive(Debug, Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("not a directory")]
    NotADirectory,
    #[error("is a directory")]
    IsADirectory,
    #[error("read-only file system")]
    ReadOnly,
    #[error("invalid name")]
    InvalidName,
    #[error("stale file handle")]
    BadHandle,
    #[error("no such attribute")]
    NoAttribute,
    #[error("file exists")]
    Exists,
    #[error("directory not empty")]
    NotEmpty,
    #[error("operation not permitted")]
    NotPermitted,
    #[error("invalid argument")]
    InvalidArgument,
    #[error("cannot move across this boundary")]
    CrossDevice,
    #[error("file too large")]
    FileTooLarge,
    /// The caller's buffer is shorter than the answer (an extended attribute's value).
    #[error("buffer too small")]
    BufferTooSmall,
    /// An ioctl: nothing here is a terminal or a device.
    #[error("not a terminal")]
    NotATerminal,
    /// An operation the filesystem does not implement (the kernel stops asking).
    #[error("not implemented")]
    NotImplemented,
    /// The local buffer of a file being written failed (spill directory full, unwritable).
    #[error("write buffer: {0}")]
    Buffer(std::io::Error),
    #[error(transparent)]
    View(#[from] ViewError),
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> Self {
        FsError::Buffer(e)
    }
}

fn store_errno(e: &StoreError) -> i32 {
    match e {
        StoreError::InvalidKey { .. } => libc::EINVAL,
        StoreError::VersionMismatch { .. } => libc::ESTALE,
        // A full disk, a quota or the process's file limit is said as such: the caller can act
        // on it (and nothing was changed: a commit fails before it replaces anything).
        StoreError::Io { source, .. } => match source.raw_os_error() {
            Some(code @ (libc::ENOSPC | libc::EDQUOT | libc::EMFILE | libc::ENFILE)) => code,
            _ if source.kind() == std::io::ErrorKind::StorageFull => libc::ENOSPC,
            _ => libc::EIO,
        },
        StoreError::PermissionDenied { .. } => libc::EACCES,
        StoreError::ReadOnly => libc::EROFS,
        StoreError::Unsupported(_) => libc::ENOTSUP,
        StoreError::IsDirectory { .. } => libc::EISDIR,
        StoreError::Conflict { .. } => libc::ESTALE,
    }
}

fn shard_errno(e: &ShardError) -> i32 {
    match e {
        ShardError::Store(e) => store_errno(e),
        ShardError::Corrupt { .. } | ShardError::Layout { .. } => libc::EIO,
        ShardError::Unstable { .. } => libc::ESTALE,
        ShardError::OutsideGrid { .. } => libc::EINVAL,
        ShardError::Shared(inner) => shard_errno(inner),
    }
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::NotADirectory | FsError::View(ViewError::NotADirectory(_)) => libc::ENOTDIR,
            FsError::IsADirectory | FsError::View(ViewError::IsADirectory) => libc::EISDIR,
            FsError::ReadOnly => libc::EROFS,
            FsError::InvalidName => libc::EINVAL,
            FsError::BadHandle => libc::EBADF,
            FsError::NoAttribute => libc::ENODATA,
            FsError::Exists => libc::EEXIST,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NotPermitted => libc::EPERM,
            FsError::InvalidArgument => libc::EINVAL,
            FsError::CrossDevice => libc::EXDEV,
            FsError::FileTooLarge => libc::EFBIG,
            FsError::BufferTooSmall => libc::ERANGE,
            FsError::NotATerminal => libc::ENOTTY,
            FsError::NotImplemented => libc::ENOSYS,
            FsError::Buffer(e) => e.raw_os_error().unwrap_or(libc::EIO),
            FsError::View(ViewError::Store(e)) => store_errno(e),
            FsError::View(ViewError::Shard(e)) => shard_errno(e),
            FsError::View(ViewError::Vanished(_)) => libc::ESTALE,
            FsError::View(ViewError::NotFound(_)) => libc::ENOENT,
            FsError::View(ViewError::Exists(_)) => libc::EEXIST,
            FsError::View(ViewError::CannotMove(_)) => libc::EXDEV,
            FsError::View(ViewError::Refused { .. }) => libc::EINVAL,
        }
    }

    /// Whether this is a failure worth a warning rather than an expected outcome.
    fn is_loud(&self) -> bool {
        matches!(
            self.errno(),
            libc::EIO | libc::ESTALE | libc::EACCES | libc::ENOSPC | libc::EDQUOT | libc::EMFILE | libc::ENFILE
        )
    }
}

/// Logs operation failures, each distinct loud message once.
#[derive(Debug, Default)]
pub struct ErrorLog {
    seen: Mutex<HashSet<String>>,
}

/// Distinct loud messages remembered before the memory is reset.
const SEEN_LIMIT: usize = 4096;

impl ErrorLog {
    pub fn record(&self, op: &str, path: &str, e: &FsError) {
        if !e.is_loud() {
            tracing::debug!(op, path, error = %e);
            return;
        }
        let message = e.to_string();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= SEEN_LIMIT {
            seen.clear();
        }
        if seen.insert(message.clone()) {
            tracing::warn!(op, path, "{message}");
        } else {
            tracing::debug!(op, path, "{message}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_keep_their_meaning() {
        assert_eq!(FsError::NotFound.errno(), libc::ENOENT);
        assert_eq!(FsError::ReadOnly.errno(), libc::EROFS);
        let crc = crate::zarr::ZarrError::Checksum { stored: 1, computed: 2 };
        let corrupt = FsError::View(ViewError::Shard(ShardError::corrupt("a/c/0", crc)));
        assert_eq!(corrupt.errno(), libc::EIO);
        assert!(corrupt.to_string().contains("a/c/0") && corrupt.to_string().contains("crc32c"));
        let store = |e| FsError::View(ViewError::Store(e));
        let stale = store(StoreError::VersionMismatch {
            key: "k".into(),
            expected: "v".into(),
        });
        assert_eq!(stale.errno(), libc::ESTALE);
        assert_eq!(
            store(StoreError::PermissionDenied { key: "k".into() }).errno(),
            libc::EACCES
        );
    }

    #[test]
    fn full_disks_and_limits_are_said_as_such() {
        let io = |e: std::io::Error| FsError::View(ViewError::Store(StoreError::io("k", e)));
        for code in [libc::ENOSPC, libc::EDQUOT, libc::EMFILE, libc::ENFILE] {
            let e = io(std::io::Error::from_raw_os_error(code));
            assert_eq!(e.errno(), code);
            assert!(e.is_loud());
        }
        assert_eq!(
            io(std::io::Error::from(std::io::ErrorKind::StorageFull)).errno(),
            libc::ENOSPC
        );
        assert_eq!(io(std::io::Error::other("broken")).errno(), libc::EIO);
        assert_eq!(io(std::io::Error::from_raw_os_error(libc::EPIPE)).errno(), libc::EIO);
    }
}
