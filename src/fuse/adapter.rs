//! The fuser adapter: one small method per FUSE operation. Each converts the request into a
//! call of [`Fs`] and replies, or maps the error to its errno. No behaviour lives here.
//!
//! A request's future is first polled once, inline, on the FUSE worker thread that received it:
//! a request answered from caches or the local disk completes right there, without handing
//! the work to another thread (a handoff costs as much as a page-cache read). A request that
//! has to wait (a remote read) returns pending and is moved onto the tokio runtime, so it never
//! holds a FUSE worker thread and never stalls the others.

use std::ffi::OsStr;
use std::future::Future;
use std::sync::Arc;
use std::task::Context;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use tokio::runtime::Handle;

use crate::fs::{Attr, FileKind, Fs, FsError};

/// Requests the kernel may have in flight at once (reads are asynchronous).
const MAX_BACKGROUND: u16 = 64;

pub struct ZarrFuse {
    fs: Arc<Fs>,
    rt: Handle,
}

impl ZarrFuse {
    pub fn new(fs: Arc<Fs>, rt: Handle) -> Self {
        ZarrFuse { fs, rt }
    }

    fn ttl(&self) -> Duration {
        self.fs.config().attr_ttl
    }

    /// Run a request: inline if it completes at once, else as a task on the runtime.
    fn run(&self, op: &'static str, request: impl Future<Output = ()> + Send + 'static) {
        let _context = self.rt.enter();
        let mut request = Box::pin(request);
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        if request.as_mut().poll(&mut cx).is_pending() {
            // Whatever it waits on is registered again with the task's real waker when the
            // runtime polls it, so the no-op waker of the first poll is never relied upon.
            tracing::trace!(op, "request waits; continued on the runtime");
            self.rt.spawn(request);
        }
    }
}

fn errno(code: i32) -> Errno {
    Errno::from_i32(code)
}

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
        blksize: 4096,
        flags: 0,
    }
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
    }
}

fn name_str(name: &OsStr) -> Option<&str> {
    name.to_str()
}

impl Filesystem for ZarrFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Both are optional: an older kernel without them still works, only slower.
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        let _ = config.set_max_background(MAX_BACKGROUND);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name_str(name).map(str::to_string) else {
            return reply.error(Errno::ENOENT);
        };
        let (fs, ttl) = (self.fs.clone(), self.ttl());
        self.run("lookup", async move {
            match fs.lookup(parent.0, &name).await {
                Ok(attr) => reply.entry(&ttl, &file_attr(&attr), Generation(0)),
                Err(e) => reply.error(errno(fs.fail("lookup", parent.0, &e))),
            }
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let (fs, ttl) = (self.fs.clone(), self.ttl());
        self.run("getattr", async move {
            match fs.getattr(ino.0).await {
                Ok(attr) => reply.attr(&ttl, &file_attr(&attr)),
                Err(e) => reply.error(errno(fs.fail("getattr", ino.0, &e))),
            }
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0;
        let fs = self.fs.clone();
        self.run("open", async move {
            match fs.open(ino.0, write).await {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(errno(fs.fail("open", ino.0, &e))),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let fs = self.fs.clone();
        self.run("read", async move {
            match fs.read(fh.0, offset, size).await {
                Ok(bytes) => reply.data(&bytes),
                Err(e) => reply.error(errno(fs.fail("read", ino.0, &e))),
            }
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.fs.release(fh.0);
        reply.ok();
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Nothing is ever dirty in a read-only mount. ENOSYS tells the kernel to stop sending
        // FLUSH at all, which saves a round trip on every close().
        reply.error(Errno::ENOSYS);
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fs = self.fs.clone();
        self.run("opendir", async move {
            match fs.opendir(ino.0).await {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(errno(fs.fail("opendir", ino.0, &e))),
            }
        });
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        match self.fs.readdir(ino.0, fh.0, offset) {
            Ok(items) => {
                for item in items {
                    let child = self.fs.entry_ino(&item, false);
                    if reply.add(INodeNo(child), item.offset, file_type(item.kind), &item.name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(self.fs.fail("readdir", ino.0, &e))),
        }
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let ttl = self.ttl();
        match self.fs.readdir(ino.0, fh.0, offset) {
            Ok(items) => {
                for item in items {
                    let child = self.fs.entry_ino(&item, true);
                    let attr = match &item.node {
                        Some(node) => self.fs.attr(child, node),
                        None => dir_attr(&self.fs, child),
                    };
                    if reply.add(
                        INodeNo(child),
                        item.offset,
                        &item.name,
                        &ttl,
                        &file_attr(&attr),
                        Generation(0),
                    ) {
                        // Did not fit: the kernel never saw it, so take the counted lookup back.
                        if item.ino.is_none() {
                            self.fs.forget(child, 1);
                        }
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(self.fs.fail("readdirplus", ino.0, &e))),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let Some(name) = name_str(name).map(str::to_string) else {
            return reply.error(Errno::ENODATA);
        };
        let fs = self.fs.clone();
        self.run("getxattr", async move {
            match fs.getxattr(ino.0, &name).await {
                Ok(value) => xattr_reply(reply, size, &value),
                Err(e) => reply.error(errno(fs.fail("getxattr", ino.0, &e))),
            }
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let fs = self.fs.clone();
        self.run("listxattr", async move {
            match fs.listxattr(ino.0).await {
                Ok(value) => xattr_reply(reply, size, &value),
                Err(e) => reply.error(errno(fs.fail("listxattr", ino.0, &e))),
            }
        });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) {
            return reply.error(errno(FsError::ReadOnly.errno()));
        }
        reply.ok();
    }

    // Every mutation: refused, the mount being read-only.

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _r: u32, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _l: &std::path::Path, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn rename(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _np: INodeNo,
        _nn: &OsStr,
        _f: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn link(&self, _req: &Request, _i: INodeNo, _np: INodeNo, _nn: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _wf: WriteFlags,
        _f: OpenFlags,
        _lo: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }

    fn create(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _f: i32, reply: ReplyCreate) {
        reply.error(Errno::EROFS);
    }

    fn setxattr(&self, _req: &Request, _i: INodeNo, _n: &OsStr, _v: &[u8], _f: i32, _p: u32, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn removexattr(&self, _req: &Request, _i: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }
}

fn dir_attr(fs: &Fs, ino: u64) -> Attr {
    fs.attr(
        ino,
        &crate::view::Node {
            size: 0,
            mtime_ns: None,
            source: crate::view::Source::Dir,
        },
    )
}

/// Answer a getxattr/listxattr: the size when asked for it, ERANGE when the buffer is short.
fn xattr_reply(reply: ReplyXattr, size: u32, value: &[u8]) {
    let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    if size == 0 {
        reply.size(len);
    } else if size < len {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}
