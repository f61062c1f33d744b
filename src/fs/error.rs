//! Errors of filesystem operations and the one place where every error becomes an errno.
//!
//! Each error also knows how loudly to log: expected misses (a lookup of a name that does not
//! exist) at debug level; corrupt stored data as a warning naming the key and the reason,
//! once per distinct message so a damaged shard read by a thousand requests logs one line.
//! Running out of descriptors fails every operation that needs one, each with its own key, so
//! it gets one warning of its own (saying which limit ran out) at most once a minute instead.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::buffer::BufferError;
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
    /// The file this name led to when the kernel looked it up was replaced since.
    #[error("the file was replaced")]
    Replaced,
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
    /// A request the daemon made of its own mount (a symlink or bind mount in the source that
    /// leads into the mountpoint): refused, as serving it could wait on itself for good.
    #[error(
        "the daemon reached its own mount through its source (a symlink or bind mount in the \
         source leads into the mountpoint): refused, as it would wait on itself"
    )]
    OwnMount,
    /// The local buffer of a file being written failed (spill directory full, unwritable).
    #[error("{0}")]
    Buffer(Arc<BufferError>),
    /// A write to this file failed earlier, so its content may be incomplete: it is not
    /// committed (the stored version stays as it was).
    #[error("not stored, as an earlier write to it failed: {0}")]
    Unwritten(Arc<BufferError>),
    /// The write journal on local disk could not take or drop a record (a full disk, an
    /// unwritable journal directory): the close is refused, as its content is not durable.
    #[error("the write journal on local disk failed: {0}")]
    Journal(Arc<std::io::Error>),
    #[error(transparent)]
    View(#[from] ViewError),
}

impl From<BufferError> for FsError {
    fn from(e: BufferError) -> Self {
        FsError::Buffer(Arc::new(e))
    }
}

/// A full disk, a quota or a descriptor limit is said as such: the caller can act on it (and
/// nothing was changed: a commit fails before it replaces anything). Other I/O errors are EIO.
fn io_errno(e: &std::io::Error) -> i32 {
    match e.raw_os_error() {
        Some(code @ (libc::ENOSPC | libc::EDQUOT | libc::EMFILE | libc::ENFILE)) => code,
        _ if e.kind() == std::io::ErrorKind::StorageFull => libc::ENOSPC,
        _ => libc::EIO,
    }
}

fn buffer_errno(e: &BufferError) -> i32 {
    match e {
        BufferError::TooLarge => libc::EFBIG,
        BufferError::Spill { source, .. } => io_errno(source),
    }
}

fn store_errno(e: &StoreError) -> i32 {
    match e {
        StoreError::InvalidKey { .. } => libc::EINVAL,
        StoreError::VersionMismatch { .. } => libc::ESTALE,
        StoreError::Io { source, .. } => io_errno(source),
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
        ShardError::Corrupt { .. } | ShardError::Layout { .. } | ShardError::Unlistable { .. } => libc::EIO,
        ShardError::Unstable { .. } => libc::ESTALE,
        ShardError::OutsideGrid { .. } => libc::EINVAL,
        ShardError::Exists { .. } => libc::EEXIST,
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
            FsError::Replaced => libc::ESTALE,
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
            FsError::OwnMount => libc::ELOOP,
            FsError::Buffer(e) | FsError::Unwritten(e) => buffer_errno(e),
            FsError::Journal(e) => e.raw_os_error().unwrap_or(libc::EIO),
            FsError::View(ViewError::Store(e)) => store_errno(e),
            FsError::View(ViewError::Shard(e)) => shard_errno(e),
            FsError::View(ViewError::Vanished(_)) => libc::ESTALE,
            FsError::View(ViewError::NotFound(_)) => libc::ENOENT,
            FsError::View(ViewError::Exists(_)) => libc::EEXIST,
            FsError::View(ViewError::CannotMove(_)) => libc::EXDEV,
            FsError::View(ViewError::Refused { .. }) => libc::EINVAL,
        }
    }

    /// Whether this is a failure worth a warning rather than an expected outcome. A name's
    /// file replaced since the kernel looked it up is a race the kernel resolves by looking
    /// again.
    fn is_loud(&self) -> bool {
        !matches!(self, FsError::Replaced)
            && matches!(
                self.errno(),
                libc::EIO
                    | libc::ESTALE
                    | libc::EACCES
                    | libc::ENOSPC
                    | libc::EDQUOT
                    | libc::EMFILE
                    | libc::ENFILE
                    | libc::ELOOP
            )
    }
}

/// Logs operation failures, each distinct loud message once.
#[derive(Debug, Default)]
pub struct ErrorLog {
    seen: Mutex<HashSet<String>>,
    /// When running out of descriptors was last said.
    out_of_descriptors: Mutex<Option<Instant>>,
}

/// Distinct loud messages remembered before the memory is reset.
const SEEN_LIMIT: usize = 4096;

/// How often running out of descriptors is said, at most.
const DESCRIPTORS_WARNING_EVERY: Duration = Duration::from_secs(60);

impl ErrorLog {
    pub fn record(&self, op: &str, path: &str, e: &FsError) {
        if !e.is_loud() {
            tracing::debug!(op, path, error = %e);
            return;
        }
        if matches!(e.errno(), libc::EMFILE | libc::ENFILE) {
            return self.out_of_descriptors(op, path, e);
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

impl ErrorLog {
    /// One warning a minute that says which limit ran out; each failure at debug level.
    fn out_of_descriptors(&self, op: &str, path: &str, e: &FsError) {
        let mut last = self.out_of_descriptors.lock().unwrap_or_else(|p| p.into_inner());
        if !last.is_none_or(|at| at.elapsed() >= DESCRIPTORS_WARNING_EVERY) {
            tracing::debug!(op, path, error = %e);
            return;
        }
        *last = Some(Instant::now());
        if e.errno() == libc::ENFILE {
            tracing::warn!(
                op,
                path,
                "the system is out of file descriptors (its file table is full, see fs.file-max): \
                 operations needing one fail with ENFILE until others are closed; {e}"
            );
            return;
        }
        let limit = crate::sys::fd_limit::soft().map_or_else(|| "unknown".to_string(), |n| n.to_string());
        tracing::warn!(
            op,
            path,
            "out of file descriptors: this daemon may hold {limit} (ulimit -n, RLIMIT_NOFILE; \
             LimitNOFILE= in a systemd unit) and holds them all; operations needing one fail with \
             EMFILE until others are closed; {e}"
        );
    }
}

impl super::Fs {
    /// Log a failed operation (at the level its error deserves) and hand the errno back.
    pub fn fail(&self, op: &str, ino: u64, e: &FsError) -> i32 {
        let path = self.inodes.path(ino);
        self.errors.record(op, path.as_deref().unwrap_or("?"), e);
        e.errno()
    }

    /// What symbolic links, device nodes and extended attributes get: a Zarr store cannot
    /// hold them.
    pub fn cannot_represent(&self) -> FsError {
        if self.config.writable {
            FsError::NotPermitted
        } else {
            FsError::ReadOnly
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

    #[test]
    fn spill_failures_keep_their_errno_and_name_the_directory() {
        let spill = |code| {
            Arc::new(BufferError::Spill {
                dir: "/spill/here".into(),
                limit: 4096,
                source: std::io::Error::from_raw_os_error(code),
            })
        };
        for code in [libc::ENOSPC, libc::EDQUOT, libc::EMFILE, libc::ENFILE] {
            assert_eq!(FsError::Buffer(spill(code)).errno(), code);
            assert_eq!(FsError::Unwritten(spill(code)).errno(), code);
        }
        assert_eq!(FsError::Buffer(spill(libc::EACCES)).errno(), libc::EIO);
        assert_eq!(FsError::from(BufferError::TooLarge).errno(), libc::EFBIG);
        let unwritten = FsError::Unwritten(spill(libc::ENOSPC)).to_string();
        assert!(
            unwritten.contains("not stored") && unwritten.contains("/spill/here"),
            "{unwritten}"
        );
    }

    #[test]
    fn running_out_of_descriptors_is_said_once_a_minute() {
        let log = ErrorLog::default();
        let e = FsError::Buffer(Arc::new(BufferError::Spill {
            dir: "/spill".into(),
            limit: 1,
            source: std::io::Error::from_raw_os_error(libc::EMFILE),
        }));
        log.record("write", "a/c/0", &e);
        let first = *log.out_of_descriptors.lock().unwrap();
        log.record("write", "a/c/1", &e);
        assert!(first.is_some());
        assert_eq!(*log.out_of_descriptors.lock().unwrap(), first, "not said again");
        assert!(log.seen.lock().unwrap().is_empty(), "not remembered per message");
    }
}
