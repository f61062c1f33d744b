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
        // O_TRUNC arrives with OPEN instead of as a separate SETATTR.
        let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
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
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let truncate = flags.0 & libc::O_TRUNC != 0;
        let fs = self.fs.clone();
        self.run("open", async move {
            match fs.open(ino.0, write, truncate).await {
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
        let fs = self.fs.clone();
        self.run("release", async move {
            fs.release(fh.0).await;
            reply.ok();
        });
    }

    fn flush(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        if !self.fs.config().writable {
            // Nothing is ever dirty in a read-only mount. ENOSYS tells the kernel to stop sending
            // FLUSH at all, which saves a round trip on every close().
            return reply.error(Errno::ENOSYS);
        }
        let fs = self.fs.clone();
        self.run("flush", async move {
            match fs.flush(fh.0).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(fs.fail("flush", ino.0, &e))),
            }
        });
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let fs = self.fs.clone();
        self.run("fsync", async move {
            match fs.fsync(fh.0).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(fs.fail("fsync", ino.0, &e))),
            }
        });
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

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // Files here are not terminals or devices (Python asks, to decide on line buffering).
        reply.error(Errno::ENOTTY);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) && !self.fs.config().writable {
            return reply.error(errno(FsError::ReadOnly.errno()));
        }
        reply.ok();
    }

    // Mutations: performed by `Fs`, which refuses them with EROFS on a read-only mount.

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if !self.fs.config().writable {
            return reply.error(Errno::EROFS);
        }
        let (fs, ttl) = (self.fs.clone(), self.ttl());
        self.run("setattr", async move {
            // Modes, owners and times are not stored: they are accepted and shown as before.
            let result = match size {
                Some(size) => fs.truncate(ino.0, size, fh.map(|f| f.0)).await,
                None => fs.getattr(ino.0).await,
            };
            match result {
                Ok(attr) => reply.attr(&ttl, &file_attr(&attr)),
                Err(e) => reply.error(errno(fs.fail("setattr", ino.0, &e))),
            }
        });
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let Some(name) = name_str(name).map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        let (fs, ttl) = (self.fs.clone(), self.ttl());
        let truncate = flags & libc::O_EXCL == 0;
        self.run("create", async move {
            match fs.create(parent.0, &name, truncate).await {
                Ok((attr, fh)) => reply.created(
                    &ttl,
                    &file_attr(&attr),
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::empty(),
                ),
                Err(e) => reply.error(errno(fs.fail("create", parent.0, &e))),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wf: WriteFlags,
        _f: OpenFlags,
        _lo: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let (fs, data) = (self.fs.clone(), data.to_vec());
        self.run("write", async move {
            match fs.write(fh.0, offset, &data).await {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(fs.fail("write", ino.0, &e))),
            }
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = name_str(name).map(str::to_string) else {
            return reply.error(Errno::ENOENT);
        };
        let fs = self.fs.clone();
        self.run("unlink", async move {
            match fs.unlink(parent.0, &name).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(fs.fail("unlink", parent.0, &e))),
            }
        });
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        let Some(name) = name_str(name).map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        let (fs, ttl) = (self.fs.clone(), self.ttl());
        self.run("mkdir", async move {
            match fs.mkdir(parent.0, &name).await {
                Ok(attr) => reply.entry(&ttl, &file_attr(&attr), Generation(0)),
                Err(e) => reply.error(errno(fs.fail("mkdir", parent.0, &e))),
            }
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = name_str(name).map(str::to_string) else {
            return reply.error(Errno::ENOENT);
        };
        let fs = self.fs.clone();
        self.run("rmdir", async move {
            match fs.rmdir(parent.0, &name).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(fs.fail("rmdir", parent.0, &e))),
            }
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (Some(name), Some(new_name)) = (
            name_str(name).map(str::to_string),
            name_str(new_name).map(str::to_string),
        ) else {
            return reply.error(Errno::EINVAL);
        };
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return reply.error(Errno::EINVAL);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let fs = self.fs.clone();
        self.run("rename", async move {
            match fs.rename(parent.0, &name, new_parent.0, &new_name, no_replace).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(fs.fail("rename", parent.0, &e))),
            }
        });
    }

    fn mknod(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _r: u32, reply: ReplyEntry) {
        reply.error(self.unsupported());
    }

    fn symlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _l: &std::path::Path, reply: ReplyEntry) {
        reply.error(self.unsupported());
    }

    fn link(&self, _req: &Request, _i: INodeNo, _np: INodeNo, _nn: &OsStr, reply: ReplyEntry) {
        reply.error(self.unsupported());
    }

    fn setxattr(&self, _req: &Request, _i: INodeNo, _n: &OsStr, _v: &[u8], _f: i32, _p: u32, reply: ReplyEmpty) {
        reply.error(self.unsupported());
    }

    fn removexattr(&self, _req: &Request, _i: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(self.unsupported());
    }
}

impl ZarrFuse {
    /// For operations a Zarr store cannot represent (links, device nodes, extended attributes).
    fn unsupported(&self) -> Errno {
        if self.fs.config().writable {
            Errno::EPERM
        } else {
            Errno::EROFS
        }
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
