//! A file's inode never changes size: the kernel keeps its page cache of files read through
//! every mount (writable ones too, see `caching.rs`).
//!
//! The kernel reads a cached file a page at a time, and takes a short answer as its end: it
//! zero-fills the rest of the page and lowers the file's size, unless an attribute of the file
//! changed while the read was in flight, in which case the zeros stay. If the file is larger by
//! the time the reader copies the page out, the reader gets zeros nobody wrote. A read-only
//! mount whose source is rewritten by someone else did exactly that when a lookup told the
//! kernel the new, larger size of an inode it was reading (145 to 179 of ~350,000 reads with
//! `--metadata-ttl 0`, values of 16 to 64 bytes rewritten by another mount).
//!
//! So each file's inode remembers the attributes the kernel was first given for it, and its
//! size is never changed: when a lookup (or a directory entry with attributes) finds the file
//! at the name with another size, the name gets a new inode. The kernel drops its entry for
//! the old inode and reads the new version through the new one, with pages of its own. The old
//! inode keeps answering `getattr` with its own attributes; a read or an open of it that would
//! find the other size fails with ESTALE (the kernel then looks the name up again for an open).
//! A rewrite that keeps the size keeps the inode: its time changes, and the kernel drops the
//! pages (it cannot zero-fill past a size that did not grow).
//!
//! Writable mounts keep the page cache the same way, except for inodes written through the
//! mount, which are direct I/O and follow their file's size (see `caching.rs`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::tree::DIRECT;
use super::{InodeTable, Place, ROOT_INO};
use crate::fs::types::Attr;

/// What the kernel was first given for a file's inode: its size and time (the rest of its
/// attributes are the mount's and never change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown {
    pub size: u64,
    pub mtime: SystemTime,
}

fn to_ns(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |ns| -ns),
    }
}

fn from_ns(ns: i64) -> SystemTime {
    let magnitude = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

impl InodeTable {
    /// The inode of `path` for a file of `size` bytes (`None`: a directory), with one more
    /// lookup counted: the inode the name has unless it was shown with another size, else a
    /// new one.
    pub fn lookup_sized<'a>(&self, place: impl Into<Place<'a>>, size: Option<u64>) -> u64 {
        let mut t = self.lock();
        Self::lookup_sized_in(&mut t, place.into(), size)
    }

    /// [`lookup_sized`](Self::lookup_sized) a file and remember the attributes `attr_of` gives
    /// its inode as shown, in one step: two lookups of one name at once (the kernel sends them
    /// in parallel) cannot both take the same inode for two sizes. Returns the attributes (of
    /// `size`, and the time they have now: a newer time is how the kernel learns to drop pages).
    pub fn lookup_shown<'a>(&self, place: impl Into<Place<'a>>, size: u64, attr_of: impl FnOnce(u64) -> Attr) -> Attr {
        let mut t = self.lock();
        let ino = Self::lookup_sized_in(&mut t, place.into(), Some(size));
        let attr = attr_of(ino);
        if let Some(inode) = t.inodes.get_mut(&ino) {
            inode.set_shown(attr.size, to_ns(attr.mtime));
        }
        attr
    }

    fn lookup_sized_in(t: &mut super::Tables, place: Place, size: Option<u64>) -> u64 {
        let mut ino = t.place(place);
        let replace = t.inodes.get(&ino).is_some_and(|i| {
            let other = i.shown() && size.is_some_and(|size| i.shown_size != size);
            other && ino != ROOT_INO && !i.has(DIRECT)
        }) && !t.held.contains_key(&ino);
        if replace {
            t.retire(ino);
            t.drop_if_unused(ino);
            ino = t.place(place);
        }
        if let Some(inode) = t.inodes.get_mut(&ino) {
            inode.lookups = inode.lookups.saturating_add(1);
            inode.relink();
        }
        ino
    }

    /// Remember that the kernel was given `attr` for the file `ino`, unless it was given some
    /// before (then `attr` has the same size). Lookups do this with
    /// [`lookup_shown`](Self::lookup_shown).
    #[cfg(test)]
    pub fn show(&self, ino: u64, attr: Attr) {
        if let Some(inode) = self.lock().inodes.get_mut(&ino) {
            inode.set_shown(attr.size, to_ns(attr.mtime));
        }
    }

    /// What the file `ino` was shown with, if its size was not `size`: the kernel must keep
    /// seeing it, and the bytes of that other size are not this inode's.
    pub fn shown_if_resized(&self, ino: u64, size: u64) -> Option<Shown> {
        let t = self.lock();
        let inode = t.inodes.get(&ino).filter(|i| i.shown() && !i.has(DIRECT))?;
        (inode.shown_size != size).then(|| Shown {
            size: inode.shown_size,
            mtime: from_ns(inode.shown_mtime_ns),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::types::FileKind;
    use std::time::UNIX_EPOCH;

    fn attr(ino: u64, size: u64) -> Attr {
        Attr {
            ino,
            kind: FileKind::File,
            size,
            mtime: UNIX_EPOCH,
            perm: 0o444,
            nlink: 1,
            uid: 0,
            gid: 0,
        }
    }

    #[test]
    fn another_size_gets_a_new_inode_and_the_old_keeps_its_attributes() {
        let t = InodeTable::new();
        let first = t.lookup_sized("a/c/0", Some(16));
        t.show(first, attr(first, 16));
        // The same size: the same inode.
        assert_eq!(t.lookup_sized("a/c/0", Some(16)), first);
        assert!(t.shown_if_resized(first, 16).is_none());
        // Another size: a new inode at the name; the old one keeps its size.
        let second = t.lookup_sized("a/c/0", Some(24));
        assert_ne!(second, first);
        t.show(second, attr(second, 24));
        assert_eq!(t.shown_if_resized(first, 24).map(|a| a.size), Some(16));
        assert_eq!(t.peek("a/c/0"), Some(second));
        assert_eq!(t.path(first).as_deref(), Some("a/c/0"), "the old inode keeps its path");
        // Shown once: a later show does not change what the kernel was given.
        t.show(second, attr(second, 99));
        assert_eq!(t.shown_if_resized(second, 99).map(|a| a.size), Some(24));
        // The old inode goes once the kernel forgets it; the new one stays.
        t.forget(first, 2);
        assert!(t.path(first).is_none());
        assert!(t.path(second).is_some());
    }

    #[test]
    fn a_lookup_takes_its_inode_and_shows_its_size_in_one_step() {
        let t = InodeTable::new();
        // Two lookups of one name, one after the other as two parallel ones may land: the
        // second, of another size, never shares the first's inode.
        let first = t.lookup_shown("a/c/0", 16, |ino| attr(ino, 16));
        let second = t.lookup_shown("a/c/0", 24, |ino| attr(ino, 24));
        assert_ne!(first.ino, second.ino);
        assert_eq!(t.shown_if_resized(first.ino, 24).map(|a| a.size), Some(16));
        // The same size again: the same inode, with the time it has now.
        let mut later = attr(0, 24);
        later.mtime = UNIX_EPOCH + std::time::Duration::from_secs(5);
        let again = t.lookup_shown("a/c/0", 24, |ino| Attr { ino, ..later });
        assert_eq!((again.ino, again.mtime), (second.ino, later.mtime));
    }

    #[test]
    fn directories_keep_their_inode() {
        let t = InodeTable::new();
        let dir = t.lookup_sized("a", None);
        assert_eq!(t.lookup_sized("a", None), dir);
        assert!(t.shown_if_resized(dir, 4096).is_none(), "a directory is never shown");
    }
}
