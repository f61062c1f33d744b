//! Open file and directory handles.
//!
//! A file handle is either a reader — a file of the view as confirmed at open, read
//! consistently by the view (see `view::OpenFile`) — or a handle of a file being written, whose
//! content the mount holds (shared by every handle of that name, see [`super::inodes`]). A
//! directory handle holds the listing taken at `opendir`, so offsets stay stable while the
//! directory is read.
//!
//! A file whose write failed (its spill directory full, out of descriptors) may hold part of
//! that write: it is marked failed, and every commit of it is refused with the same error
//! until it is truncated whole, so a partial chunk never replaces a stored one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::buffer::{Budget, Buffer, BufferError};
use super::{FsError, FsResult};
pub use crate::view::SNAPSHOT_LIMIT;
use crate::view::{Node, OpenFile, Target};

/// An open file: a node of the view read from, or a file being written.
// Handles live behind an `Arc` in the handle table and are never moved by value; boxing the
// larger variant would only add an allocation to every open on the read path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum FileHandle {
    /// A file opened for reading that nobody is writing through this mount.
    Read(ReadHandle),
    Write(WriteHandle),
}

/// A handle of a file opened for reading.
#[derive(Debug)]
pub struct ReadHandle {
    /// The inode it was opened at (an unlinked one is still read through it).
    pub ino: u64,
    pub file: OpenFile,
    /// Given the page cache: counted by the inode table until released (see
    /// `fs/inodes/caching.rs`).
    pub cached: AtomicBool,
}

/// A handle of a file being written: its buffered content, shared by the handles of its name.
#[derive(Debug)]
pub struct WriteHandle {
    /// The inode the file was opened at: wherever renames take it, the file goes there.
    pub ino: u64,
    pub file: Arc<WriteFile>,
    /// Opened for writing: only such handles commit (a reader of a file being written sees its
    /// content but never stores it).
    pub can_write: bool,
    /// Not flushed since it was opened or last written through: only then does its release
    /// commit. The kernel sends a closed handle's release later, on its own; by then the name
    /// may be open again and truncated, and committing at that release would store the next
    /// writer's half-written content (an empty chunk, found by scripts/dev/crash_loop.py).
    pub unflushed: AtomicBool,
}

impl FileHandle {
    pub fn reader(ino: u64, file: OpenFile) -> Self {
        FileHandle::Read(ReadHandle {
            ino,
            file,
            cached: AtomicBool::new(false),
        })
    }

    /// Mark a reader as given the page cache (see [`ReadHandle::cached`]); false for a writer.
    pub fn mark_cached(&self) -> bool {
        match self {
            FileHandle::Read(r) => {
                r.cached.store(true, Ordering::SeqCst);
                true
            }
            FileHandle::Write(_) => false,
        }
    }

    /// The inode the handle was opened at.
    pub fn ino(&self) -> u64 {
        match self {
            FileHandle::Read(r) => r.ino,
            FileHandle::Write(w) => w.ino,
        }
    }

    pub fn writer(ino: u64, file: Arc<WriteFile>, can_write: bool) -> Self {
        FileHandle::Write(WriteHandle {
            ino,
            file,
            can_write,
            unflushed: AtomicBool::new(true),
        })
    }

    /// The handle of a file being written, for any handle of it.
    pub fn written(&self) -> Option<&WriteHandle> {
        match self {
            FileHandle::Write(w) => Some(w),
            FileHandle::Read(_) => None,
        }
    }

    /// The handle of a file being written, for a handle that may commit it.
    pub fn committer(&self) -> Option<&WriteHandle> {
        match self {
            FileHandle::Write(w) if w.can_write => Some(w),
            _ => None,
        }
    }
}

/// Where a written file's bytes go when it is closed.
#[derive(Debug, Clone)]
pub enum Sink {
    /// Into the store (a chunk into its shard, metadata translated, other files as they are).
    Commit(Target),
    /// Nowhere yet: a temporary name inside a sharded array, kept until renamed or removed.
    Staged,
}

/// A file being written: its content in memory until committed. Where it goes is its
/// inode's (see [`super::inodes`]): a rename moves it, an unlink takes it away (the content is
/// then discarded at close), so every handle commits to wherever the file is now.
#[derive(Debug)]
pub struct WriteFile {
    pub state: tokio::sync::Mutex<WriteState>,
}

#[derive(Debug)]
pub struct WriteState {
    /// The file's current content, once `loaded`.
    pub data: Buffer,
    /// Whether `data` holds the content (an existing file is read on first need).
    pub loaded: bool,
    /// Changed since the last commit.
    pub dirty: bool,
    /// What an existing file was opened from, and its size before loading.
    pub base: Option<Node>,
    pub size_hint: u64,
    pub mtime: std::time::SystemTime,
    /// Counts changes, so a commit of older bytes does not mark newer ones clean.
    pub generation: u64,
    /// Why a write failed, leaving the content possibly incomplete: it is not committed.
    pub failed: Option<Arc<BufferError>>,
    /// The journal record of the content last closed (see `fs/journaling.rs`).
    pub journaled: Option<u64>,
}

impl WriteFile {
    /// A new, empty file (dirty: it must be stored even if nothing is written).
    pub fn new_empty(budget: Arc<Budget>) -> Self {
        Self::with(WriteState {
            data: Buffer::new(budget),
            loaded: true,
            dirty: true,
            base: None,
            size_hint: 0,
            mtime: std::time::SystemTime::now(),
            generation: 0,
            failed: None,
            journaled: None,
        })
    }

    /// An existing file, loaded lazily.
    pub fn existing(node: Node, budget: Arc<Budget>) -> Self {
        let size_hint = node.size;
        Self::with(WriteState {
            data: Buffer::new(budget),
            loaded: false,
            dirty: false,
            base: Some(node),
            size_hint,
            mtime: std::time::SystemTime::now(),
            generation: 0,
            failed: None,
            journaled: None,
        })
    }

    fn with(state: WriteState) -> Self {
        WriteFile {
            state: tokio::sync::Mutex::new(state),
        }
    }
}

impl WriteState {
    /// Empty the content (O_TRUNC, or a new file): whatever a failed write left is gone.
    pub fn truncate(&mut self) -> Result<(), BufferError> {
        self.data.resize(0)?;
        self.loaded = true;
        self.failed = None;
        self.touch();
        Ok(())
    }

    /// Write into the content; a failure marks the file failed (see the module notes).
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> FsResult<()> {
        if let Err(e) = self.data.write_at(offset, data) {
            let e = Arc::new(e);
            self.failed = Some(e.clone());
            return Err(FsError::Buffer(e));
        }
        self.touch();
        Ok(())
    }

    /// Change the size (truncate); truncated whole, whatever a failed write left is gone.
    pub fn resize(&mut self, size: u64) -> FsResult<()> {
        self.data.resize(size)?;
        if size == 0 {
            self.failed = None;
        }
        self.touch();
        Ok(())
    }

    /// Refused with the failure if a write to the file failed (see the module notes).
    pub fn check_whole(&self) -> FsResult<()> {
        match &self.failed {
            Some(e) => Err(FsError::Unwritten(e.clone())),
            None => Ok(()),
        }
    }

    /// The whole content, to be committed: refused once a write to it failed.
    pub fn content(&self) -> FsResult<Bytes> {
        self.check_whole()?;
        Ok(self.data.to_bytes()?)
    }

    pub fn touch(&mut self) {
        self.dirty = true;
        self.generation += 1;
        self.mtime = std::time::SystemTime::now();
    }
}

/// A directory's listing, as far as it was taken (see `fs/readdir/listing.rs`).
pub type Entries = Arc<super::readdir::DirListing>;

/// An open directory: its path and the listing it pages through, with the mount's change
/// generation the listing was taken at (see `Fs::dir_items`).
#[derive(Debug)]
pub struct DirHandle {
    pub path: Arc<str>,
    /// The listing, and the mount's change generation it was taken at (`None`: not taken yet).
    listing: std::sync::Mutex<(Option<u64>, Entries)>,
}

impl DirHandle {
    pub fn new(path: Arc<str>, generation: u64, listing: super::readdir::DirListing) -> Self {
        DirHandle {
            path,
            listing: std::sync::Mutex::new((Some(generation), Arc::new(listing))),
        }
    }

    /// A handle whose listing is taken when first read (the kernel lists the directory from
    /// what it kept, and reads the handle only if it no longer has that).
    pub fn unlisted(path: Arc<str>) -> Self {
        DirHandle {
            path,
            listing: std::sync::Mutex::new((None, Arc::default())),
        }
    }

    pub fn listing(&self) -> (Option<u64>, Entries) {
        let l = self.listing.lock().unwrap_or_else(|e| e.into_inner());
        (l.0, l.1.clone())
    }

    pub fn replace(&self, generation: u64, listing: Entries) {
        *self.listing.lock().unwrap_or_else(|e| e.into_inner()) = (Some(generation), listing);
    }
}

/// Handles by number. Numbers start at 1 and are never reused.
#[derive(Debug)]
pub struct HandleTable<T> {
    next: AtomicU64,
    handles: Mutex<HashMap<u64, Arc<T>>>,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        HandleTable {
            next: AtomicU64::new(1),
            handles: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> HandleTable<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<T>>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn insert(&self, value: T) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(fh, Arc::new(value));
        fh
    }

    pub fn get(&self, fh: u64) -> Option<Arc<T>> {
        self.lock().get(&fh).cloned()
    }

    pub fn remove(&self, fh: u64) -> Option<Arc<T>> {
        self.lock().remove(&fh)
    }

    /// The handles open now that `keep` picks.
    pub fn find(&self, keep: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        self.lock().values().filter(|h| keep(h)).cloned().collect()
    }

    /// Handles open now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_is_never_committed_until_truncated_whole() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"").unwrap();
        let file = WriteFile::new_empty(Budget::new(4, not_a_dir));
        let mut state = file.state.try_lock().unwrap();
        state.write_at(0, b"1234").unwrap();
        assert_eq!(&state.content().unwrap()[..], b"1234");
        let e = state.write_at(4, b"5678").unwrap_err();
        assert!(matches!(e, FsError::Buffer(_)), "{e}");
        let refused = state.content().unwrap_err();
        assert!(matches!(refused, FsError::Unwritten(_)), "{refused}");
        assert_eq!(refused.errno(), e.errno());
        assert!(state.check_whole().is_err());
        state.resize(2).unwrap();
        assert!(state.check_whole().is_err(), "a partial truncate keeps the failure");
        state.truncate().unwrap();
        state.write_at(0, b"ok").unwrap();
        assert_eq!(&state.content().unwrap()[..], b"ok");
        state.write_at(2, b"again").unwrap_err();
        state.resize(0).unwrap();
        assert!(state.content().unwrap().is_empty());
    }
}
