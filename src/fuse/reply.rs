//! fuser's reply types as the adapter uses them: any reply can carry an error (so one helper
//! answers every request), `fs` values become fuser's attribute and file-type types, and a
//! directory's items fill a (plus) directory reply as far as they fit.

use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileType, FopenFlags, Generation, INodeNo, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
};

use crate::fs::{Attr, DirItem, FileKind, Fs, FsError, Opened, OpenedDir};

/// A reply that can carry an error.
pub trait ErrorReply: Send + 'static {
    fn fail(self, e: &FsError);
}

macro_rules! error_replies {
    ($($reply:ty),* $(,)?) => {
        $(impl ErrorReply for $reply {
            fn fail(self, e: &FsError) {
                self.error(Errno::from_i32(e.errno()));
            }
        })*
    };
}

error_replies!(
    ReplyAttr,
    ReplyCreate,
    ReplyData,
    ReplyDirectory,
    ReplyDirectoryPlus,
    ReplyEmpty,
    ReplyEntry,
    ReplyIoctl,
    ReplyOpen,
    ReplyStatfs,
    ReplyWrite,
    ReplyXattr,
);

/// What a directory reports as its block size: the C library sizes its buffer for reading
/// a directory by it (glibc: up to 1 MiB), and the kernel sizes its READDIR(PLUS) requests by
/// that buffer (up to the connection's largest request, 1 MiB). A chunk directory of a few
/// thousand files is then listed, with attributes, in one request instead of one per 4 KiB.
const DIR_BLKSIZE: u32 = 1 << 20;

pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: match a.kind {
            FileKind::Dir => DIR_BLKSIZE,
            _ => 4096,
        },
        flags: 0,
    }
}

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
    }
}

/// Answer a lookup-like request with an entry.
pub fn entry(reply: ReplyEntry, ttl: &Duration, attr: &Attr) {
    handed(attr);
    reply.entry(ttl, &file_attr(attr), Generation(0));
}

/// Answer a lookup of a missing name: ENOENT, or with a TTL a negative entry (inode 0) the
/// kernel keeps that long (see `fs/missing.rs`).
pub fn missing(reply: ReplyEntry, ttl: &Duration) {
    if ttl.is_zero() {
        return reply.fail(&FsError::NotFound);
    }
    let none = Attr {
        ino: 0,
        kind: FileKind::File,
        size: 0,
        mtime: std::time::UNIX_EPOCH,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
    };
    reply.entry_with_ttls(&Duration::ZERO, ttl, &file_attr(&none), Generation(0));
}

/// What the kernel is told of an inode's size and time (`RUST_LOG=zarrfs=trace`): with
/// `FUSE_AUTO_INVAL_DATA` another time than it holds drops the file's cached pages.
pub(super) fn handed(attr: &Attr) {
    tracing::trace!(ino = attr.ino, size = attr.size, mtime = ?attr.mtime, "attributes handed");
}

/// Answer a getxattr/listxattr: the size when asked for it, ERANGE when the buffer is short.
pub fn xattr(reply: ReplyXattr, size: u32, value: &[u8]) {
    let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    if size == 0 {
        reply.size(len);
    } else if size < len {
        reply.fail(&FsError::BufferTooSmall);
    } else {
        reply.data(value);
    }
}

/// The kernel's flags for an opened handle.
pub fn open_flags(opened: &Opened) -> FopenFlags {
    let mut flags = FopenFlags::empty();
    flags.set(FopenFlags::FOPEN_KEEP_CACHE, opened.keep_cache);
    // close() of a handle that cannot write needs no round trip.
    flags.set(FopenFlags::FOPEN_NOFLUSH, opened.no_flush);
    flags.set(FopenFlags::FOPEN_DIRECT_IO, opened.direct_io);
    flags
}

/// The kernel's flags for an opened directory (see `fs/kernel_listings.rs`).
pub fn dir_open_flags(opened: &OpenedDir) -> FopenFlags {
    let mut flags = FopenFlags::empty();
    flags.set(FopenFlags::FOPEN_CACHE_DIR, opened.cache);
    flags.set(FopenFlags::FOPEN_KEEP_CACHE, opened.cache && opened.keep_cache);
    flags
}

/// Fill a directory reply with `items` as far as they fit.
pub fn directory(fs: &Fs, mut reply: ReplyDirectory, items: impl Iterator<Item = DirItem>) {
    for item in items {
        let child = fs.entry_ino(&item);
        if reply.add(INodeNo(child), item.offset, file_type(item.kind), &item.name) {
            break;
        }
    }
    reply.ok();
}

/// Fill a plus directory reply (entries with their attributes, each a counted lookup) with
/// `items` as far as they fit.
pub fn directory_plus(fs: &Fs, mut reply: ReplyDirectoryPlus, ttl: &Duration, items: impl Iterator<Item = DirItem>) {
    for item in items {
        let attr = match (&item.node, item.ino) {
            (_, Some(ino)) => fs.attr(ino, item.node.as_ref().unwrap_or(&crate::view::Node::dir())),
            (Some(node), None) => fs.entry_attr(item.dir_ino, &item.dir, &item.name, node),
            (None, None) => fs.entry_attr(item.dir_ino, &item.dir, &item.name, &crate::view::Node::dir()),
        };
        let child = attr.ino;
        handed(&attr);
        if reply.add(
            INodeNo(child),
            item.offset,
            &item.name,
            ttl,
            &file_attr(&attr),
            Generation(0),
        ) {
            // Did not fit: the kernel never saw it, so take the counted lookup back.
            if item.ino.is_none() {
                fs.forget(child, 1);
            }
            break;
        }
    }
    reply.ok();
}
