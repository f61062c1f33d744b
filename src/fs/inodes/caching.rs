//! Which handles of a writable mount the kernel may serve from its page cache, and why they
//! never return bytes nobody wrote.
//!
//! The hazard (see `sizes.rs`): the kernel fills a cached page from a short answer
//! with zeros and keeps them when an attribute of the inode changed while the read was in
//! flight; a reader copies them out once the inode's size has grown past them. So zeros can
//! only reach a reader through an inode whose size the kernel changes while a handle reads its
//! pages. The rules below make that impossible: an inode is in one of two modes, decided
//! under the table's lock, so a reader and a writer opening one inode at once agree.
//!
//! - Cached (`CACHED`): a reader of stored bytes was given the page cache. Its size is the one
//!   the kernel was first shown and never changes while a handle may read its pages (`sizes.rs`:
//!   another size at its name is another inode, `getattr` keeps answering the shown size). The
//!   table counts its handles open through the page cache. Nobody writes through it while one
//!   is open: an open for writing, or a truncate, of a cached inode then retires it (`RETIRED`:
//!   its name gets a new inode in direct mode) and fails with ESTALE; the kernel then looks the
//!   name up again and writes through the new inode. With no cached handle open, the writer
//!   switches the inode to direct mode in place instead and is answered at once: page reads
//!   only happen through an open handle (the kernel sends a handle's release after its last
//!   read), every handle opened from then on is direct (its open, without `FOPEN_KEEP_CACHE`,
//!   also drops the old pages), so the size changes no page read can see. This keeps ESTALE,
//!   which the kernel retries only once per open, to the rare open that races a cached reader:
//!   under churn the retry could meet another replaced inode and ESTALE reached the writer
//!   (the two-mount model test, about one run in three of some seeds).
//!   A create at its name makes a new inode if a cached handle is open, else switches it too.
//!   A reader that finds other bytes than the cached inode's first reader (the store changed
//!   it without changing its size, a commit repacked its shard, a rename moved it) reads them
//!   with direct I/O, so its pages never mix two versions; so does one that finds another size
//!   (the kernel's next lookup then gives the name a new inode, whose readers cache again). The
//!   inode keeps its name: renames and lookups still reach it.
//! - Direct (`DIRECT`): the inode was opened for writing through this mount (or made by a
//!   create). Every handle of it is `FOPEN_DIRECT_IO`, for as long as the kernel keeps it:
//!   the kernel changes its size as it writes, so it must never have cached pages. Its
//!   attributes are the file's as it is now (never the shown ones), and lookups never replace
//!   it (a writer between its lookup and its open must find it). Direct wins over a `CACHED`
//!   flag left from before the switch.
//!
//! A retired inode that a stale entry still leads to: writers get ESTALE (they look the name
//! up again and find the new inode), readers read with direct I/O (its pages are not used).
//! Direct reads of a cached inode use none of its pages and change none of its attributes.
//!
//! Read-only mounts have no writers: every reader caches, a reader finding other bytes of the
//! same size only drops the pages (`keep_cache` off), as before.

use super::tree::{CACHED, DIRECT, RETIRED};
use super::{InodeTable, Tables};
use crate::view::ContentId;

/// An open for writing reached an inode whose size must not change: the kernel must look the
/// name up again (ESTALE) and write through the inode it then finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired;

/// How a reader's handle may use the kernel's page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Through the page cache; `keep`: the pages cached before are of the same bytes.
    Cached { keep: bool },
    /// Every read answered by the daemon.
    Direct,
}

impl Tables {
    /// The name of `ino` leads to a new inode from now on; `ino` lives on for its handles.
    pub(super) fn retire(&mut self, ino: u64) {
        self.unindex(ino);
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.set(RETIRED);
        }
    }

    /// Whether `ino` may be written through (it is then direct for good): a cached inode is
    /// switched in place when no handle reads it through the page cache, else retired.
    pub(super) fn begin_write(&mut self, ino: u64) -> Result<(), Retired> {
        let read_cached = self.cached_open.get(&ino).is_some_and(|n| *n > 0);
        let Some(inode) = self.inodes.get_mut(&ino) else {
            return Ok(());
        };
        if inode.has(RETIRED) {
            return Err(Retired);
        }
        if inode.has(CACHED) && read_cached {
            self.retire(ino);
            return Err(Retired);
        }
        inode.set(DIRECT);
        Ok(())
    }

    /// The inode a file held at `path` is written through: the name's, unless that one is
    /// cached (then retired for a new one); direct from now on.
    pub(super) fn write_inode(&mut self, path: &str) -> u64 {
        let mut ino = self.at(path);
        if self.begin_write(ino).is_err() {
            ino = self.at(path);
            let _ = self.begin_write(ino);
        }
        ino
    }

    /// [`begin_write`](Self::begin_write) of the kernel's inode `ino` at `path`; when it is
    /// refused, the name's inode is made ready for writing, so the kernel's second look finds
    /// an inode no reader can make cached meanwhile (its open is not refused again).
    pub(super) fn begin_write_at(&mut self, ino: u64, path: &str) -> Result<(), Retired> {
        let result = self.begin_write(ino);
        if result.is_err() {
            self.write_inode(path);
        }
        result
    }

    /// Whether `ino` is direct: its size follows the file, it is never cached.
    pub(super) fn is_direct(&self, ino: u64) -> bool {
        self.inodes.get(&ino).is_some_and(|i| i.has(DIRECT))
    }
}

impl InodeTable {
    /// A reader opened `ino` and found stored bytes of `size` identified by `content` (`None`:
    /// unknown): how it may use the page cache. A `Cached` handle is counted until
    /// [`cached_reader_closed`](Self::cached_reader_closed). `writable`: the mount can write (see the module
    /// notes for both). There, bytes of another size than the inode's, or unknown bytes, are
    /// read direct, never refused: only writers are sent to look a name up again.
    pub fn open_reader(&self, ino: u64, content: Option<ContentId>, size: u64, writable: bool) -> ReadMode {
        let mut t = self.lock();
        let Some(inode) = t.inodes.get_mut(&ino) else {
            return ReadMode::Direct;
        };
        let cached = inode.has(CACHED);
        if writable {
            if inode.has(DIRECT | RETIRED) || !inode.shown() || content.is_none() {
                return ReadMode::Direct;
            }
            if inode.shown_size != size {
                return ReadMode::Direct;
            }
        }
        inode.set(CACHED);
        let same = content.is_some() && t.content.get(&ino) == content.as_ref();
        if writable && cached && !same {
            return ReadMode::Direct;
        }
        match content {
            Some(content) => t.content.insert(ino, content),
            None => t.content.remove(&ino),
        };
        *t.cached_open.entry(ino).or_insert(0) += 1;
        ReadMode::Cached { keep: same }
    }

    /// A handle of `ino` that [`open_reader`](Self::open_reader) gave the page cache was
    /// released: the kernel reads no more pages through it.
    pub fn cached_reader_closed(&self, ino: u64) {
        let mut t = self.lock();
        if let Some(n) = t.cached_open.get_mut(&ino) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                t.cached_open.remove(&ino);
            }
        }
    }

    /// Whether `ino`, at `path`, may be written through (truncated by path); see
    /// [`Tables::begin_write_at`].
    pub fn begin_write(&self, ino: u64, path: &str) -> Result<(), Retired> {
        self.lock().begin_write_at(ino, path)
    }

    /// Whether every handle of `ino` is direct I/O (written through this mount).
    pub fn is_direct(&self, ino: u64) -> bool {
        self.lock().is_direct(ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::buffer::Budget;
    use crate::fs::handles::{Sink, WriteFile};
    use std::sync::Arc;

    fn content(n: u64) -> Option<ContentId> {
        Some(ContentId::for_test(n))
    }

    /// A lookup of a 16-byte file, its size shown to the kernel.
    fn looked_up(t: &InodeTable, path: &str) -> u64 {
        let attr = |ino| crate::fs::types::Attr {
            ino,
            kind: crate::fs::types::FileKind::File,
            size: 16,
            mtime: std::time::UNIX_EPOCH,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
        };
        t.lookup_shown(path, 16, attr).ino
    }

    fn file() -> Arc<WriteFile> {
        Arc::new(WriteFile::new_empty(Budget::new(1 << 20, std::env::temp_dir())))
    }

    #[test]
    fn readers_of_unchanged_bytes_keep_the_cache() {
        let t = InodeTable::new();
        let ino = looked_up(&t, "a/c/0");
        assert_eq!(
            t.open_reader(ino, content(1), 16, true),
            ReadMode::Cached { keep: false }
        );
        assert_eq!(
            t.open_reader(ino, content(1), 16, true),
            ReadMode::Cached { keep: true }
        );
    }

    #[test]
    fn a_writer_of_a_cached_inode_is_sent_to_a_new_direct_one() {
        let t = InodeTable::new();
        let ino = looked_up(&t, "a/c/0");
        t.open_reader(ino, content(1), 16, true);
        assert!(matches!(
            t.open_file_of(ino, "a/c/0", file(), Sink::Staged),
            Err(Retired)
        ));
        // Again through the stale inode: still refused.
        assert!(matches!(
            t.open_file_of(ino, "a/c/0", file(), Sink::Staged),
            Err(Retired)
        ));
        let new = t.lookup("a/c/0");
        assert_ne!(new, ino);
        let (held, _) = t.open_file_of(new, "a/c/0", file(), Sink::Staged).unwrap().unwrap();
        assert_eq!(held, new);
        assert!(t.is_direct(new));
        // Readers of the written inode, and of the retired one, never cache.
        assert_eq!(t.open_reader(new, content(2), 16, true), ReadMode::Direct);
        assert_eq!(t.open_reader(ino, content(1), 16, true), ReadMode::Direct);
    }

    #[test]
    fn a_written_inode_is_never_cached_and_never_retired() {
        let t = InodeTable::new();
        let ino = looked_up(&t, "a/c/0");
        let (held, f) = t.open_file_of(ino, "a/c/0", file(), Sink::Staged).unwrap().unwrap();
        assert_eq!(held, ino);
        assert_eq!(t.open_reader(ino, content(1), 16, true), ReadMode::Direct);
        t.close_file(ino, &f);
        assert!(t.open_file_of(ino, "a/c/0", file(), Sink::Staged).unwrap().is_some());
    }

    #[test]
    fn a_create_at_a_cached_name_makes_a_new_inode() {
        let t = InodeTable::new();
        let ino = looked_up(&t, "a/c/0");
        t.open_reader(ino, content(1), 16, true);
        let (held, _) = t.open_file("a/c/0", file(), Sink::Staged);
        assert_ne!(held, ino);
        assert_eq!(t.lookup("a/c/0"), held);
        assert!(t.is_direct(held));
    }

    #[test]
    fn other_bytes_of_a_cached_inode_are_read_direct_on_a_writable_mount() {
        let t = InodeTable::new();
        let ino = looked_up(&t, "a/c/0");
        t.open_reader(ino, content(1), 16, true);
        assert_eq!(t.open_reader(ino, content(2), 16, true), ReadMode::Direct);
        assert_eq!(t.open_reader(ino, content(1), 24, true), ReadMode::Direct);
        assert_eq!(
            t.open_reader(ino, content(1), 16, true),
            ReadMode::Cached { keep: true }
        );
        assert_eq!(t.lookup("a/c/0"), ino);

        let ro = InodeTable::new();
        let ino = looked_up(&ro, "a/c/0");
        ro.open_reader(ino, content(1), 16, false);
        assert_eq!(
            ro.open_reader(ino, content(2), 16, false),
            ReadMode::Cached { keep: false }
        );
        assert_eq!(ro.lookup("a/c/0"), ino);
    }
}
