//! Filesystem operations, without fuser types: what each FUSE request does.
//!
//! [`Fs`] turns inode numbers into view paths (through the [`inodes`] table, which also owns
//! everything the mount holds per name), has the view place each path once and act on it, and
//! returns plain attributes, bytes and listings. It never names a shard, a store key or a
//! store operation: those are the view's. Mutations ([`write`]) are refused with EROFS unless
//! the mount is writable. Errors are [`FsError`]s; the errno mapping and its logging live in
//! [`error`]. The FUSE adapter in `fuse/` only translates requests and replies.

pub mod buffer;
mod counters;
mod dirs;
pub mod error;
pub mod handles;
#[cfg(test)]
mod hooks;
pub mod inodes;
pub mod journal;
mod journaling;
mod kernel_holds;
pub mod kernel_listings;
pub mod latency;
mod metrics;
pub mod missing;
pub use metrics::Timings;
mod link;
mod overlay;
mod readdir;
mod rename;
pub mod source_changes;
mod types;
mod unlinked;
mod unopened;
mod walkers;
mod write;
pub mod writeback;
mod xattr;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

pub use error::{ErrorLog, FsError};
use handles::{DirHandle, FileHandle, HandleTable, Sink, WriteFile};
use inodes::{InodeTable, Name, ReadMode, ROOT_INO};

use crate::view::{ContentId, Located, Node, View};

pub type FsResult<T> = Result<T, FsError>;

pub use counters::Counters;
use counters::OpCounts;
pub use journaling::Replayed;
pub use readdir::{ENTRY_BYTES, KEPT_ENTRIES};
pub use types::{Attr, DirItem, FileKind, FsConfig, Opened, OpenedDir, StatFs, INDEFINITE_TTL};
pub use xattr::{STATS_IOCTL, STATS_IOCTL_SIZE};

/// The name of the extended attribute that tells where a file's bytes are stored.
pub const XATTR_SOURCE: &str = "user.zarrfs.source";
/// The extended attribute of the mount's root that holds the store request counters (JSON).
pub const XATTR_STATS: &str = "user.zarrfs.stats";

#[derive(Debug)]
pub struct Fs {
    view: View,
    inodes: InodeTable,
    files: HandleTable<FileHandle>,
    dirs: HandleTable<DirHandle>,
    config: FsConfig,
    mounted_at: SystemTime,
    errors: ErrorLog,
    counters: Option<Arc<dyn Counters>>,
    ops: OpCounts,
    latencies: latency::Latencies,
    /// Whole chunks read without a handle, for the later reads of the same file.
    unopened: unopened::Snapshots,
    writeback: Option<writeback::WriteBack>,
    /// Closed files made durable on local disk until committed (`journaling.rs`).
    journal: Option<Arc<journal::Journal>>,
    /// What the kernel keeps of directory listings, when it may (`FsConfig::kernel_listings`).
    kernel_listings: Option<kernel_listings::KernelListings>,
    /// What programs walking the tree do with the names they list (`walkers.rs`).
    walkers: walkers::Walkers,
    /// The entries the open directories' listings keep (`readdir/listing.rs`).
    listed: readdir::EntriesKept,
    budget: Arc<buffer::Budget>,
    /// Bumped at the end of every operation that may change a name, size or content: open
    /// directory handles take their listing again when it moved (see `readdir.rs`).
    changes: std::sync::atomic::AtomicU64,
    /// Changes of the source the mount was told of (`source_changes.rs`).
    source: source_changes::SourceChanges,
    /// Names the kernel was told are missing and may keep so (`missing.rs`).
    missing: missing::KeptMisses,
}

/// Bumps the change generation when dropped: at the end of the operation holding it, after
/// its change took effect, whatever the outcome.
pub(crate) struct Changing<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
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

/// What a reader of stored bytes opened: their content id (if known) and size.
type Stored = (Option<ContentId>, u64);

impl Fs {
    pub fn new(view: View, config: FsConfig) -> Self {
        let writeback = config.write_back_delay.map(writeback::WriteBack::new);
        let budget = buffer::Budget::new(config.write_buffer_bytes, config.spill_dir.clone());
        let kernel_listings = config
            .kernel_listings
            .then(|| kernel_listings::KernelListings::new(config.attr_ttl));
        Fs {
            view,
            inodes: InodeTable::new(),
            files: HandleTable::default(),
            dirs: HandleTable::default(),
            config,
            mounted_at: SystemTime::now(),
            errors: ErrorLog::default(),
            counters: None,
            ops: OpCounts::default(),
            latencies: latency::Latencies::default(),
            unopened: unopened::Snapshots::default(),
            writeback,
            journal: None,
            kernel_listings,
            walkers: walkers::Walkers::default(),
            listed: readdir::EntriesKept::default(),
            budget,
            changes: std::sync::atomic::AtomicU64::new(0),
            source: Default::default(),
            missing: Default::default(),
        }
    }

    /// Held for the length of an operation that changes the tree (see [`Changing`]).
    pub(crate) fn changing(&self) -> Changing<'_> {
        Changing(&self.changes)
    }

    fn generation(&self) -> u64 {
        self.changes.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Publish these counters (the store's requests, and what a remote source's client sent
    /// over the wire), with the view's, as the mount's counters (`zarrfs stats`).
    pub fn with_counters(mut self, counters: Arc<dyn Counters>) -> Self {
        self.counters = Some(counters);
        self
    }

    pub fn config(&self) -> &FsConfig {
        &self.config
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    /// The path of `ino`; none once its name was removed through this mount (the name now
    /// leads to another inode, or none): ESTALE, on which the kernel looks the path up again
    /// (an open or a stat that raced a rename onto the name then finds the new file, one that
    /// raced an unlink ENOENT).
    fn path_of(&self, ino: u64) -> FsResult<Arc<str>> {
        match self.inodes.name(ino) {
            Name::Path(path) => Ok(path),
            Name::Unlinked => Err(FsError::Replaced),
            Name::Unknown => Err(FsError::BadHandle),
        }
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
        self.ops.count(&self.ops.lookups);
        validate_name(name)?;
        let dir = self.path_of(parent)?;
        let path = child_path(&dir, name);
        let at = self.view.locate(&path).await?;
        if let Some(mut attr) = self.local_attr(0, &at).await {
            attr.ino = self.inodes.lookup(&path);
            return Ok(attr);
        }
        let node = self.node(&at).await?;
        if !node.is_dir() {
            self.file_looked_up(parent, &dir);
        }
        Ok(self.entry_attr(parent, &dir, name, &node))
    }

    /// The node at a placed path: the view's, or a directory only the mount knows of.
    async fn node(&self, at: &Located) -> FsResult<Node> {
        if let Some(node) = self.view.node(at).await? {
            return Ok(node);
        }
        if self.inodes.is_local_dir(at.path()) {
            return Ok(Node::dir());
        }
        Err(FsError::NotFound)
    }

    /// The kernel asks for a file's attributes (counted as its GETATTR requests).
    pub async fn getattr(&self, ino: u64) -> FsResult<Attr> {
        self.ops.count(&self.ops.getattrs);
        self.attr_now(ino).await
    }

    /// A file's attributes as they are now.
    pub(crate) async fn attr_now(&self, ino: u64) -> FsResult<Attr> {
        if self.inodes.name(ino) == Name::Unlinked {
            return self.unlinked_attr(ino).await;
        }
        let at = self.view.locate(&self.path_of(ino)?).await?;
        let attr = match self.local_attr(ino, &at).await {
            Some(attr) => attr,
            None => self.attr(ino, &self.node(&at).await?),
        };
        // An inode the kernel may cache never changes size (see `fs/inodes/caching.rs`): a
        // file held at its name is another inode's.
        if attr.kind == FileKind::File {
            if let Some(shown) = self.inodes.shown_if_resized(ino, attr.size) {
                return Ok(Attr {
                    size: shown.size,
                    mtime: shown.mtime,
                    ..attr
                });
            }
        }
        Ok(attr)
    }

    /// Open a file; `write` for any access mode that can write, `truncate` for O_TRUNC.
    pub async fn open(&self, ino: u64, write: bool, truncate: bool) -> FsResult<u64> {
        Ok(self.open_file(ino, write, truncate).await?.fh)
    }

    /// Open a file, and say how the kernel may cache it (see `fs/inodes/caching.rs`). A
    /// reader of stored bytes reads through the page cache, and keeps the pages only if it
    /// finds exactly the bytes the previous reader of this inode found (same shard version and
    /// place for a chunk, same version for a stored file). Handles that can write, readers of a
    /// file being written, and readers of an inode written through this mount or retired are
    /// direct I/O (see `fs/inodes/caching.rs`).
    pub async fn open_file(&self, ino: u64, write: bool, truncate: bool) -> FsResult<Opened> {
        self.ops.count(&self.ops.opens);
        let (fh, stored) = self.open_handle(ino, write, truncate).await?;
        let mode = match stored {
            Some((content, size)) => self.inodes.open_reader(ino, content, size, self.config.writable),
            _ => ReadMode::Direct,
        };
        // Counted until its release (which the kernel cannot send before this reply).
        if matches!(mode, ReadMode::Cached { .. }) && !self.files.get(fh).is_some_and(|h| h.mark_cached()) {
            self.inodes.cached_reader_closed(ino);
        }
        Ok(Opened {
            fh,
            keep_cache: mode == ReadMode::Cached { keep: true },
            no_flush: !write,
            direct_io: mode == ReadMode::Direct,
        })
    }

    /// How the kernel treats a handle made by [`create`](Self::create): direct I/O, as every
    /// handle that can write.
    pub fn created(&self, fh: u64) -> Opened {
        Opened {
            fh,
            keep_cache: false,
            no_flush: false,
            direct_io: true,
        }
    }

    /// A handle, and for a reader of stored bytes the content id of what it opened and its
    /// size (a file being written has none: it is read direct).
    async fn open_handle(&self, ino: u64, write: bool, truncate: bool) -> FsResult<(u64, Option<Stored>)> {
        let path = match self.path_of(ino) {
            // Its name was removed or replaced through this mount after the kernel looked it
            // up: a truncating writer gets the removed file (see `open_replaced`), not ESTALE.
            Err(FsError::Replaced) if write && self.inodes.open_goes_nowhere(ino) => {
                return Ok((self.open_replaced(ino, truncate)?, None));
            }
            path => path?,
        };
        let at = self.view.locate(&path).await?;
        if write {
            return Ok((self.open_write(Some(ino), &at, truncate, true).await?, None));
        }
        // A file being written is read as written so far; metadata being written is read as
        // stored (a refused document never reaches readers) unless none is stored yet.
        if let Some((_, sink)) = self.inodes.file_at(at.path()) {
            let metadata = matches!(sink, Sink::Commit(t) if t.is_metadata());
            if !metadata || self.view.node(&at).await?.is_none() {
                return Ok((self.open_write(Some(ino), &at, false, false).await?, None));
            }
        }
        match self.view.current(&at).await? {
            Some(node) if node.is_dir() => Err(FsError::IsADirectory),
            Some(node) => {
                // A writable mount reads another size through a stale inode direct (see
                // `fs/inodes/caching.rs`); a read-only one sends the kernel to the new inode.
                if !self.config.writable {
                    self.check_size(ino, &node)?;
                }
                let stored = (node.content_id(), node.size);
                Ok((
                    self.files.insert(FileHandle::reader(ino, self.view.open(node))),
                    Some(stored),
                ))
            }
            None if self.inodes.is_local_dir(at.path()) => Err(FsError::IsADirectory),
            None => Err(FsError::NotFound),
        }
    }

    /// Read through a handle; handle 0 (none: the kernel does not open files, see
    /// [`FsConfig::no_open`]) reads inode `ino` directly.
    pub async fn read_file(&self, ino: u64, fh: u64, offset: u64, size: u32) -> FsResult<Bytes> {
        if fh == unopened::NO_HANDLE {
            self.ops.count(&self.ops.reads);
            return self.read_unopened(ino, offset, size).await;
        }
        self.read(fh, offset, size).await
    }

    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Bytes> {
        self.ops.count(&self.ops.reads);
        let handle = self.files.get(fh).ok_or(FsError::BadHandle)?;
        match &*handle {
            FileHandle::Write(w) => self.read_writer(&w.file, offset, size).await,
            FileHandle::Read(r) => Ok(self.view.read_open(&r.file, offset, u64::from(size)).await?),
        }
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
