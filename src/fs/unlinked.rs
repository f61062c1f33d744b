//! Open files whose name goes away. On a local filesystem a file unlinked (or replaced by a
//! rename) while open stays readable, writable and `fstat`-able through its descriptors until
//! the last close; temporary files (`tmpfile(3)`, Python's `TemporaryFile`) are made that way.
//!
//! Here the name's inode is detached from its path by the inode table (a new file at the name
//! is another inode at once), and what its handles need outlives the name:
//! - a handle of a file being written keeps its content in memory (a [`WriteFile`] no name
//!   holds any more: its writes and closes then go nowhere);
//! - a reader keeps the whole file it had open, read before the name's stored bytes go (see
//!   [`View::keep_whole`](crate::view::View::keep_whole));
//! - the kernel's GETATTR of such an inode (which carries no handle) is answered from one of
//!   its open handles, with no link (`st_nlink` 0); once none is open it is ESTALE, as every
//!   request naming the inode is (see `Fs::path_of`): the kernel looks the path up again.
//!
//! [`WriteFile`]: super::handles::WriteFile

use super::handles::FileHandle;
use super::{Attr, FileKind, Fs, FsError, FsResult};

impl Fs {
    /// Readers of the inode at `path` keep what they read, before the name is removed or
    /// replaced. Costs a look at the open handles only when the kernel has the name's inode.
    pub(super) async fn keep_readers(&self, path: &str) -> FsResult<()> {
        let Some(ino) = self.inodes.peek(path) else {
            return Ok(());
        };
        let readers = self.files.find(|h| matches!(h, FileHandle::Read(r) if r.ino == ino));
        for handle in readers {
            if let FileHandle::Read(r) = &*handle {
                self.view.keep_whole(&r.file, self.config.max_file_size as u64).await?;
            }
        }
        Ok(())
    }

    /// Attributes of an inode whose name was removed, from a handle still open on it.
    pub(super) async fn unlinked_attr(&self, ino: u64) -> FsResult<Attr> {
        let open = self.files.find(|h| h.ino() == ino);
        let handle = open.first().ok_or(FsError::Replaced)?;
        let mut attr = match &**handle {
            FileHandle::Read(r) => self.attr(ino, r.file.node()),
            FileHandle::Write(w) => {
                let state = w.file.state.lock().await;
                Attr {
                    ino,
                    kind: FileKind::File,
                    size: if state.loaded {
                        state.data.len()
                    } else {
                        state.size_hint
                    },
                    mtime: state.mtime,
                    perm: 0o644,
                    nlink: 0,
                    uid: self.config.uid,
                    gid: self.config.gid,
                }
            }
        };
        attr.nlink = 0;
        Ok(attr)
    }
}
