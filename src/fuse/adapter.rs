//! The fuser adapter: one small method per FUSE operation. Each converts the request into a
//! call of [`Fs`] and hands it to `answer` (see `request`), which runs it in a tracing span and
//! replies, or replies with the errno `fs/error.rs` chose. No behaviour and no errno choice
//! lives here.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, FileHandle, Filesystem, Generation, INodeNo, KernelConfig, LockOwner, OpenAccMode, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use tokio::runtime::Handle;

use super::reply::{self, file_attr, ErrorReply};
use super::request::op;
use crate::fs::missing::Looked;
use crate::fs::source_changes::TtlTicket;
use crate::fs::{Fs, FsError};

pub struct ZarrFuse {
    pub(super) fs: Arc<Fs>,
    pub(super) rt: Handle,
    /// The kernel agreed to read files without opening them (see `FsConfig::no_open`).
    no_open: bool,
}

impl ZarrFuse {
    pub fn new(fs: Arc<Fs>, rt: Handle) -> Self {
        ZarrFuse { fs, rt, no_open: false }
    }

    /// The TTL of an answer, taken as its request arrives (see `TtlTicket`).
    fn ttl(&self) -> TtlTicket {
        self.fs.ttl_ticket()
    }
}

impl Filesystem for ZarrFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.no_open = super::capabilities::negotiate(config, self.fs.config());
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ttl = self.ttl();
        self.answer_named(
            op(req, "lookup", parent),
            name,
            FsError::NotFound,
            reply,
            |fs, name| async move { fs.lookup_kept(parent.0, &name, &ttl).await },
            |r, looked| match looked {
                Looked::Found(attr, ttl) => reply::entry(r, &ttl, &attr),
                Looked::Missing(ttl) => reply::missing(r, &ttl),
            },
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let (fs, ttl) = (self.fs.clone(), self.ttl());
        let request = async move { fs.getattr(ino.0).await };
        self.answer(op(req, "getattr", ino), reply, request, move |r, attr| {
            reply::handed(&attr);
            r.attr(&ttl.ttl(), &file_attr(&attr))
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY;
        if self.no_open && !write {
            // The kernel takes ENOSYS as "open every file without asking" from now on.
            return reply.fail(&FsError::NotImplemented);
        }
        let truncate = flags.0 & libc::O_TRUNC != 0;
        let fs = self.fs.clone();
        let request = async move { fs.open_file(ino.0, write, truncate).await };
        self.answer(op(req, "open", ino), reply, request, |r, opened| {
            r.opened(FileHandle(opened.fh), reply::open_flags(&opened))
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let fs = self.fs.clone();
        let request = async move { fs.read_file(ino.0, fh.0, offset, size).await };
        self.answer(op(req, "read", ino).fh(fh), reply, request, |r, bytes| r.data(&bytes));
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let fs = self.fs.clone();
        let request = async move {
            fs.release(fh.0).await;
            Ok(())
        };
        self.answer(op(req, "release", ino).fh(fh), reply, request, |r, ()| r.ok());
    }

    fn flush(&self, req: &Request, ino: INodeNo, fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        if !self.fs.config().writable {
            // Nothing is ever dirty in a read-only mount. ENOSYS tells the kernel to stop sending
            // FLUSH at all, which saves a round trip on every close().
            return reply.fail(&FsError::NotImplemented);
        }
        let fs = self.fs.clone();
        let request = async move { fs.flush_request(fh.0).await };
        self.answer(op(req, "flush", ino).fh(fh), reply, request, |r, ()| r.ok());
    }

    fn fsync(&self, req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let fs = self.fs.clone();
        let request = async move { fs.fsync(fh.0).await };
        self.answer(op(req, "fsync", ino).fh(fh), reply, request, |r, ()| r.ok());
    }

    fn fsyncdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let fs = self.fs.clone();
        let request = async move { fs.fsyncdir().await };
        self.answer(op(req, "fsyncdir", ino).fh(fh), reply, request, |r, ()| r.ok());
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fs = self.fs.clone();
        let request = async move { fs.open_dir(ino.0).await };
        self.answer(op(req, "opendir", ino), reply, request, |r, opened| {
            tracing::trace!(
                fh = opened.fh,
                cache = opened.cache,
                keep_cache = opened.keep_cache,
                "directory opened"
            );
            r.opened(FileHandle(opened.fh), reply::dir_open_flags(&opened))
        });
    }

    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        let fs = self.fs.clone();
        let request = async move { fs.dir_items(ino.0, fh.0, offset).await };
        let fs = self.fs.clone();
        self.answer(op(req, "readdir", ino).fh(fh), reply, request, move |r, items| {
            reply::directory(&fs, r, items)
        });
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectoryPlus) {
        let (fs, ttl) = (self.fs.clone(), self.ttl());
        let request = async move { fs.dir_items_plus(ino.0, fh.0, offset).await };
        let fs = self.fs.clone();
        self.answer(op(req, "readdirplus", ino).fh(fh), reply, request, move |r, items| {
            reply::directory_plus(&fs, r, &ttl.ttl(), items)
        });
    }

    fn releasedir(&self, req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let _span = op(req, "releasedir", ino).fh(fh).span().entered();
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let _span = op(req, "statfs", ino).span().entered();
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
        );
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.answer_named(
            op(req, "getxattr", ino),
            name,
            FsError::NoAttribute,
            reply,
            |fs, name| async move { fs.getxattr(ino.0, &name).await },
            move |r, value| reply::xattr(r, size, &value),
        );
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let fs = self.fs.clone();
        let request = async move { fs.listxattr(ino.0).await };
        self.answer(op(req, "listxattr", ino), reply, request, move |r, value| {
            reply::xattr(r, size, &value)
        });
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        let _span = op(req, "ioctl", ino).span().entered();
        match self.fs.ioctl(cmd, out_size) {
            Ok(data) => reply.ioctl(i32::try_from(data.len()).unwrap_or(i32::MAX), &data),
            Err(e) => reply.fail(&e),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) && !self.fs.config().writable {
            return reply.fail(&FsError::ReadOnly);
        }
        reply.ok();
    }

    // Mutations: performed by `Fs`, which refuses them with EROFS on a read-only mount.

    fn setattr(
        &self,
        req: &Request,
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
        let (fs, ttl) = (self.fs.clone(), self.ttl());
        let request = async move {
            // Modes, owners and times are not stored: they are accepted and shown as before.
            match size {
                Some(size) => fs.truncate(ino.0, size, fh.map(|f| f.0)).await,
                None => fs.setattr_unchanged(ino.0).await,
            }
        };
        self.answer(op(req, "setattr", ino), reply, request, move |r, attr| {
            reply::handed(&attr);
            r.attr(&ttl.ttl(), &file_attr(&attr))
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (ttl, fs) = (self.ttl(), self.fs.clone());
        let truncate = flags & libc::O_EXCL == 0;
        self.answer_named(
            op(req, "create", parent),
            name,
            FsError::InvalidName,
            reply,
            |fs, name| async move { fs.create(parent.0, &name, truncate).await },
            move |r, (attr, fh)| {
                let flags = reply::open_flags(&fs.created(fh));
                r.created(&ttl.ttl(), &file_attr(&attr), Generation(0), FileHandle(fh), flags)
            },
        );
    }

    fn write(
        &self,
        req: &Request,
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
        let request = async move { fs.write(fh.0, offset, &data).await };
        self.answer(op(req, "write", ino).fh(fh), reply, request, |r, n| r.written(n));
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.answer_named(
            op(req, "unlink", parent),
            name,
            FsError::NotFound,
            reply,
            |fs, name| async move { fs.unlink(parent.0, &name).await },
            |r, ()| r.ok(),
        );
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        let ttl = self.ttl();
        self.answer_named(
            op(req, "mkdir", parent),
            name,
            FsError::InvalidName,
            reply,
            |fs, name| async move { fs.mkdir(parent.0, &name).await },
            move |r, attr| reply::entry(r, &ttl.ttl(), &attr),
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.answer_named(
            op(req, "rmdir", parent),
            name,
            FsError::NotFound,
            reply,
            |fs, name| async move { fs.rmdir(parent.0, &name).await },
            |r, ()| r.ok(),
        );
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let Some(new_name) = new_name.to_str().map(str::to_string) else {
            return reply.fail(&FsError::InvalidName);
        };
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return reply.fail(&FsError::InvalidArgument);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        self.answer_named(
            op(req, "rename", parent),
            name,
            FsError::InvalidName,
            reply,
            move |fs, name| async move { fs.rename(parent.0, &name, new_parent.0, &new_name, no_replace).await },
            |r, ()| r.ok(),
        );
    }

    fn mknod(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _r: u32, reply: ReplyEntry) {
        reply.fail(&self.fs.cannot_represent());
    }

    fn symlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _l: &std::path::Path, reply: ReplyEntry) {
        reply.fail(&self.fs.cannot_represent());
    }

    fn link(&self, req: &Request, ino: INodeNo, new_parent: INodeNo, new_name: &OsStr, reply: ReplyEntry) {
        let ttl = self.ttl();
        self.answer_named(
            op(req, "link", ino),
            new_name,
            FsError::InvalidName,
            reply,
            |fs, name| async move { fs.link(ino.0, new_parent.0, &name).await },
            move |r, attr| reply::entry(r, &ttl.ttl(), &attr),
        );
    }

    fn setxattr(&self, _req: &Request, _i: INodeNo, _n: &OsStr, _v: &[u8], _f: i32, _p: u32, reply: ReplyEmpty) {
        reply.fail(&self.fs.cannot_represent());
    }

    fn removexattr(&self, _req: &Request, _i: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.fail(&self.fs.cannot_represent());
    }
}
