//! The process and the system around it: the few helpers every layer may use, each a thin
//! wrapper of the C library or of tokio, with its `unsafe` or its global state in one place.
//!
//! - [`allocator`]: glibc's malloc tuned at start and asked to give freed memory back.
//! - [`fd_limit`]: the descriptor limit (`ulimit -n`) raised at start and read by who sizes by it.
//! - [`dir_lock`]: one process at a time per directory (a journal's, a disk cache's).
//! - [`threads`]: which kind of thread the caller is on, so blocking work goes where it may.
//!
//! They are here rather than in one layer because several layers use each (the inode table and
//! the view give memory back; the store and the error log read the descriptor limit; the fs and
//! store layers lock their directories; fuse, fs, shard and store ask about threads). This
//! folder names nothing else of the crate, so any module may use it without a cycle.

pub mod allocator;
pub mod dir_lock;
pub mod fd_limit;
pub mod threads;
