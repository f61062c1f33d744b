//! Filesystem operations, without fuser types: what each FUSE request does.
//!
//! [`Fs`] turns inode numbers into view paths (through the inode table), asks the view, and
//! returns plain attributes, bytes and listings. Mutations ([`write`]) are refused with EROFS
//! unless the mount is writable. Errors are [`FsError`]s; the errno mapping and its logging live in
//! [`error`]. The FUSE adapter in `fuse/` only translates requests and replies.

pub mod buffer;
pub mod error;
pub mod handles;
mod overlay;
mod read_ahead;
mod readdir;
mod rename;
mod write;
pub mod writeback;
mod xattr;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

pub use error::{ErrorLog, FsError};
use handles::{DirHandle, FileHandle, HandleTable, Sink, WriteFile, SNAPSHOT_LIMIT};

use crate::store::counting::CountingStore;
use crate::store::transport::WireStats;
use crate::store::ByteRange;
use crate::view::inodes::{InodeTable, ROOT_INO};
use crate::view::{Node, Source, View};

pub type FsResult<T> = Result<T, FsError>;

/// The name of the extended attribute that tells where a file's bytes are stored.
pub const XATTR_SOURCE: &str = "user.zarrfs.source";
/// The extended attribute of the mount's root that holds the store request counters (JSON).
pub const XATTR_STATS: &str = "user.zarrfs.stats";

#[derive(Debug, Clone)]
pub struct FsConfig {
    pub uid: u32,
    pub gid: u32,
    /// How long the kernel may cache entries and attributes.
    pub attr_ttl: Duration,
    /// Whether mutations are allowed.
    pub writable: bool,
    /// Largest file that may be written through the mount (held in memory until committed).
    pub max_file_size: usize,
    /// Opt-in write-back: how long closed chunk files may wait before their shard is committed.
    pub write_back_delay: Option<Duration>,
    /// Memory for the content of files being written; beyond it they spill to `spill_dir`.
    pub write_buffer_bytes: usize,
    pub spill_dir: std::path::PathBuf,
}

impl FsConfig {
    pub fn read_only(uid: u32, gid: u32, attr_ttl: Duration) -> Self {
        FsConfig {
            uid,
            gid,
            attr_ttl,
            writable: false,
            max_file_size: 1 << 30,
            write_back_delay: None,
            write_buffer_bytes: 256 << 20,
            spill_dir: std::env::temp_dir(),
        }
    }
}

/// A path with content in memory: open for writing, or staged (see [`write`]).
#[derive(Debug)]
struct OverlayEntry {
    file: Arc<WriteFile>,
    sink: Sink,
    handles: usize,
    /// Closed with changes not yet committed (write-back mode), since when.
    pending: Option<std::time::Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
}

/// Attributes of a node as the kernel sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    pub size: u64,
    pub mtime: SystemTime,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
}

/// One entry of a directory listing, at position `offset` (the offset to resume after it).
#[derive(Debug, Clone)]
pub struct DirItem {
    pub name: String,
    pub path: String,
    pub offset: u64,
    pub node: Option<Node>,
    pub kind: FileKind,
    /// Known inode (for `.` and `..`).
    pub ino: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

#[derive(Debug)]
pub struct Fs {
    view: View,
    inodes: InodeTable,
    files: HandleTable<FileHandle>,
    dirs: HandleTable<DirHandle>,
    config: FsConfig,
    mounted_at: SystemTime,
    errors: ErrorLog,
    overlay: std::sync::Mutex<std::collections::HashMap<String, OverlayEntry>>,
    counters: Option<Arc<CountingStore>>,
    wire: Option<Arc<WireStats>>,
    writeback: Option<writeback::WriteBack>,
    budget: Arc<buffer::Budget>,
    /// Chunk directories made by mkdir that hold no stored chunk yet (they are implicit).
    made_dirs: std::sync::Mutex<std::collections::HashSet<String>>,
}

fn child_path(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

fn parent_path(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..i])
}

/// Names the kernel may hand us that can never be a child in the view.
fn validate_name(name: &str) -> FsResult<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(FsError::InvalidName);
    }
    Ok(())
}

impl Fs {
    pub fn new(view: View, config: FsConfig) -> Self {
        let writeback = config.write_back_delay.map(writeback::WriteBack::new);
        let budget = buffer::Budget::new(config.write_buffer_bytes, config.spill_dir.clone());
        Fs {
            view,
            inodes: InodeTable::new(),
            files: HandleTable::default(),
            dirs: HandleTable::default(),
            config,
            mounted_at: SystemTime::now(),
            errors: ErrorLog::default(),
            overlay: Default::default(),
            counters: None,
            wire: None,
            writeback,
            budget,
            made_dirs: Default::default(),
        }
    }

    /// Publish these request counters (and, for a remote source, what its client sent over
    /// the wire) as the root's `user.zarrfs.stats` attribute.
    pub fn with_counters(mut self, counters: Arc<CountingStore>, wire: Option<Arc<WireStats>>) -> Self {
        self.counters = Some(counters);
        self.wire = wire;
        self
    }

    pub fn config(&self) -> &FsConfig {
        &self.config
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    /// Log a failed operation (at the level its error deserves) and hand the errno back.
    /// What links, device nodes and extended attributes get: a Zarr store cannot hold them.
    pub fn cannot_represent(&self) -> FsError {
        if self.config.writable {
            FsError::NotPermitted
        } else {
            FsError::ReadOnly
        }
    }

    /// A setattr that changes nothing stored (modes, owners, times): accepted on a writable
    /// mount, the attributes shown as before.
    pub async fn setattr_unchanged(&self, ino: u64) -> FsResult<Attr> {
        if !self.config.writable {
            return Err(FsError::ReadOnly);
        }
        self.getattr(ino).await
    }

    pub fn fail(&self, op: &str, ino: u64, e: &FsError) -> i32 {
        let path = self.inodes.path(ino);
        self.errors.record(op, path.as_deref().unwrap_or("?"), e);
        e.errno()
    }

    fn path_of(&self, ino: u64) -> FsResult<Arc<str>> {
        self.inodes.path(ino).ok_or(FsError::BadHandle)
    }

    pub fn attr(&self, ino: u64, node: &Node) -> Attr {
        let mtime = node
            .mtime_ns
            .and_then(|ns| u64::try_from(ns).ok())
            .map(|ns| UNIX_EPOCH + Duration::from_nanos(ns))
            .unwrap_or(self.mounted_at);
        let w = if self.config.writable { 0o200 } else { 0 };
        let (kind, perm, nlink) = if node.is_dir() {
            (FileKind::Dir, 0o555 | w, 2)
        } else {
            (FileKind::File, 0o444 | w, 1)
        };
        Attr {
            ino,
            kind,
            size: node.size,
            mtime,
            perm,
            nlink,
            uid: self.config.uid,
            gid: self.config.gid,
        }
    }

    /// Look a name up in a directory; counts one kernel lookup of the returned inode.
    pub async fn lookup(&self, parent: u64, name: &str) -> FsResult<Attr> {
        validate_name(name)?;
        let parent_path = self.path_of(parent)?;
        let path = child_path(&parent_path, name);
        if let Some(mut attr) = self.overlay_attr(0, &path).await {
            attr.ino = self.inodes.lookup(&path);
            return Ok(attr);
        }
        let node = self.node(&path).await?;
        let ino = self.inodes.lookup(&path);
        Ok(self.attr(ino, &node))
    }

    /// The node at `path`: the view's, or a directory made by mkdir that is still implicit.
    async fn node(&self, path: &str) -> FsResult<Node> {
        if let Some(node) = self.view.lookup(path).await? {
            return Ok(node);
        }
        if self.unstored_dir(path) {
            return Ok(Node::dir());
        }
        Err(FsError::NotFound)
    }

    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
    }

    pub async fn getattr(&self, ino: u64) -> FsResult<Attr> {
        let path = self.path_of(ino)?;
        if let Some(attr) = self.overlay_attr(ino, &path).await {
            return Ok(attr);
        }
        let node = self.node(&path).await?;
        Ok(self.attr(ino, &node))
    }

    /// Open a file; `write` for any access mode that can write, `truncate` for O_TRUNC.
    pub async fn open(&self, ino: u64, write: bool, truncate: bool) -> FsResult<u64> {
        let path = self.path_of(ino)?;
        if write {
            return self.open_write(path, truncate, true).await;
        }
        // A file being written is read as written so far; metadata being written is read as
        // stored (a refused document never reaches readers) unless none is stored yet.
        if let Some((_, sink)) = self.overlay_get(&path) {
            let metadata = matches!(sink, Sink::Commit(t) if t.is_metadata());
            if !metadata || self.view.lookup(&path).await?.is_none() {
                return self.open_write(path, false, false).await;
            }
        }
        let node = self.node(&path).await?;
        if node.is_dir() {
            return Err(FsError::IsADirectory);
        }
        let node = self.view.current(node).await?.ok_or(FsError::NotFound)?;
        Ok(self.files.insert(FileHandle::reader(node)))
    }

    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Bytes> {
        let handle = self.files.get(fh).ok_or(FsError::BadHandle)?;
        let reader = match &*handle {
            FileHandle::Write(w) => return self.read_writer(&w.file, offset, size).await,
            FileHandle::Read(r) => r,
        };
        let node = &reader.node;
        let len = u64::from(size);
        if let (Source::Stored { key }, ahead @ 1..) = (&node.source, self.view.read_ahead_bytes()) {
            let target = read_ahead::Target {
                store: self.view.store(),
                key,
                size: node.size,
                ahead,
            };
            return reader.read_ahead.read(&target, offset, len).await;
        }
        let snapshotted = matches!(node.source, Source::Chunk { .. }) && node.size <= SNAPSHOT_LIMIT;
        if !snapshotted {
            return Ok(self.view.read(node, offset, len).await?);
        }
        let mut snapshot = reader.snapshot.lock().await;
        if snapshot.is_none() {
            *snapshot = Some(self.view.read(node, 0, SNAPSHOT_LIMIT).await?);
        }
        let whole = snapshot.as_ref().cloned().unwrap_or_default();
        let (start, end) = ByteRange::Range { offset, length: len }.resolve(whole.len() as u64);
        Ok(whole.slice(start as usize..end as usize))
    }

    pub fn statfs(&self) -> StatFs {
        StatFs {
            blocks: 0,
            bfree: 0,
            bavail: 0,
            files: self.inodes.len() as u64,
            ffree: 0,
            bsize: 4096,
            namelen: 255,
            frsize: 4096,
        }
    }
}
