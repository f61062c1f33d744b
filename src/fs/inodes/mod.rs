//! The inode table: the one owner of what the mount knows per name, keyed by inode.
//!
//! Each inode has its name (in its parent: see `tree.rs`, which keeps them compact for
//! mounts of millions of files), the kernel's lookup count, and what the mount holds for it beyond
//! the store ([`Local`]): a file whose content is in memory (being written, staged under a
//! temporary name, or closed and pending write-back) with its open handles, or a chunk
//! directory made by `mkdir` that holds nothing stored yet. Renames move an inode with all of
//! it, so an open handle (which names its inode) always commits to wherever its file is now.
//!
//! Every reply that hands the kernel an inode (lookup, readdirplus) counts one lookup; `forget`
//! gives them back. An inode is dropped when the kernel holds no lookup of it and the mount
//! holds nothing for it (nor for any inode below it). Numbers are never reused (a slot taken again
//! gets a new generation in the number's high half: `slab.rs`), so a generation number of zero is always
//! valid. The root is inode 1 and is never dropped. One mutex guards the table; nothing is
//! awaited while it is held.

mod caching;
mod forgetting;
mod held;
mod inode;
mod sizes;
mod slab;
mod tree;

use std::sync::{Arc, Mutex, MutexGuard};

pub use caching::{ReadMode, Retired};
pub use held::{HeldFile, Local, Written};
pub use sizes::Shown;
use tree::Tables;

pub const ROOT_INO: u64 = 1;

/// Where a name is: a path, or a name in a directory whose inode the caller has (the kernel
/// asks by directory inode; finding the entry from there takes one step, not one per level).
#[derive(Debug, Clone, Copy)]
pub enum Place<'a> {
    Path(&'a str),
    Child { dir_ino: u64, dir: &'a str, name: &'a str },
}

impl<'a> From<&'a str> for Place<'a> {
    fn from(path: &'a str) -> Self {
        Place::Path(path)
    }
}

impl<'a> From<&'a String> for Place<'a> {
    fn from(path: &'a String) -> Self {
        Place::Path(path)
    }
}

/// What names an inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name {
    Path(Arc<str>),
    /// Its name was removed through this mount: only open files reach it.
    Unlinked,
    /// Not in the table (forgotten by the kernel, or never handed to it).
    Unknown,
}

#[derive(Debug)]
pub struct InodeTable {
    tables: Mutex<Tables>,
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl InodeTable {
    pub fn new() -> Self {
        InodeTable {
            tables: Mutex::new(Tables::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The inode of `path`, created if needed, with one more lookup counted.
    pub fn lookup<'a>(&self, place: impl Into<Place<'a>>) -> u64 {
        let mut t = self.lock();
        let ino = t.place(place.into());
        if let Some(inode) = t.inodes.get_mut(&ino) {
            inode.lookups = inode.lookups.saturating_add(1);
            inode.relink();
        }
        ino
    }

    /// The name `path` was removed through this mount: its inode (if the table has one)
    /// keeps no name, so the name is free for a new file or directory at once, while the
    /// kernel's hold of the old inode (an open file) lasts. Returns that inode.
    pub fn unlink(&self, path: &str) -> Option<u64> {
        self.lock().detach(path)
    }

    /// Whether `ino`'s name was removed through this mount: an open of it now raced that
    /// removal (the kernel drops a removed name), where a file missing without that was
    /// removed elsewhere (another mount, another writer of the source).
    pub fn was_unlinked(&self, ino: u64) -> bool {
        self.lock().inodes.get(&ino).is_some_and(|i| i.unlinked())
    }

    /// A rename that unlinked `ino` (the file it replaced) failed after the mount had moved
    /// its file: the kernel keeps its entries when told a rename failed, so an open through
    /// the name still reaches `ino`, ordered after nothing. It must look the name up again
    /// (see [`open_goes_nowhere`](Self::open_goes_nowhere)).
    pub fn kernel_still_names(&self, ino: u64) {
        if let Some(inode) = self.lock().inodes.get_mut(&ino).filter(|i| i.unlinked()) {
            inode.set(inode::STILL_NAMED);
        }
    }

    /// Whether a truncating open of `ino`, which no name leads to any more, is ordered before
    /// the unlink or rename that removed it (it raced it: its writes go nowhere, as on any
    /// filesystem), rather than sent to look again: not when the kernel still names it.
    pub fn open_goes_nowhere(&self, ino: u64) -> bool {
        self.lock()
            .inodes
            .get(&ino)
            .is_some_and(|i| i.unlinked() && !i.has(inode::STILL_NAMED))
    }

    /// The path of `ino`, or why there is none.
    pub fn name(&self, ino: u64) -> Name {
        let t = self.lock();
        match t.inodes.get(&ino) {
            Some(inode) if inode.unlinked() => Name::Unlinked,
            Some(_) => t.path_of(ino).map_or(Name::Unknown, |p| Name::Path(Arc::from(p))),
            None => Name::Unknown,
        }
    }

    /// The inode of `path` if there is one, without counting a lookup.
    pub fn peek(&self, path: &str) -> Option<u64> {
        self.lock().find(path)
    }

    /// The path of `ino` (the one it had, if its name was removed).
    pub fn path(&self, ino: u64) -> Option<Arc<str>> {
        self.lock().path_of(ino).map(Arc::from)
    }

    /// The kernel dropped `n` lookups of `ino`; whether it holds it no more.
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        let mut t = self.lock();
        let mut gone = true;
        if let Some(inode) = t.inodes.get_mut(&ino) {
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            // A count that saturated is never given back (the inode is then kept).
            if inode.lookups != u32::MAX {
                inode.lookups = inode.lookups.saturating_sub(n);
            }
            gone = inode.lookups == 0;
        }
        t.drop_if_unused(ino);
        gone
    }

    /// A name moved: the inode of `from` (with what the mount holds for it) is now at `to`. An
    /// inode that `to` had is no longer reachable by name (the kernel forgets it in its own
    /// time); what the mount held for it is returned.
    pub fn rename(&self, from: &str, to: &str) -> Option<Local> {
        self.lock().rename(from, to)
    }

    /// Inodes in the table.
    pub fn len(&self) -> usize {
        self.lock().inodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Names whose forgetting by the kernel would let about `want` inodes go, oldest first
    /// (see `forgetting.rs`): each a directory inode and a name in it.
    pub fn oldest_names(&self, want: usize) -> Vec<(u64, String)> {
        self.lock().oldest_names(want)
    }

    /// The names of the inodes held in directory `dir`.
    pub fn names_in(&self, dir: u64) -> Vec<String> {
        self.lock().names_in(dir)
    }

    /// The most an inode takes in the table, with the index's free slots (see `tree.rs`).
    pub const MAX_BYTES_PER_INODE: usize = tree::MAX_BYTES_PER_INODE;

    /// Bytes the table's entries take (see `tree.rs`).
    pub fn bytes(&self) -> usize {
        self.lock().bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::buffer::Budget;
    use crate::fs::handles::{Sink, WriteFile};

    fn file() -> Arc<WriteFile> {
        Arc::new(WriteFile::new_empty(Budget::new(1 << 20, std::env::temp_dir())))
    }

    #[test]
    fn lookups_and_forget() {
        let t = InodeTable::new();
        let a = t.lookup("a");
        assert_eq!(t.lookup("a"), a);
        assert_eq!(t.path(a).as_deref(), Some("a"));
        t.forget(a, 1);
        assert_eq!(t.path(a).as_deref(), Some("a"), "dropped while still looked up");
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        let a2 = t.lookup("a");
        assert_ne!(a2, a, "inode number reused");
        t.forget(ROOT_INO, 100);
        let b = t.lookup("b");
        let c = t.lookup("c");
        t.rename("b", "c");
        assert_eq!(t.path(b).as_deref(), Some("c"));
        assert_eq!(t.peek("c"), Some(b));
        assert_eq!(t.peek("b"), None);
        t.forget(c, 1); // the replaced inode goes without disturbing the renamed one
        assert_eq!(t.peek("c"), Some(b));
        assert_eq!(t.path(ROOT_INO).as_deref(), Some(""));
    }

    #[test]
    fn a_million_files_cost_little_and_are_given_back_when_forgotten() {
        let t = InodeTable::new();
        let files: Vec<u64> = (0..1 << 20)
            .map(|i| t.lookup(&format!("arr/c/{}/{}", i >> 10, i & 1023)))
            .collect();
        assert_eq!(t.len(), (1 << 20) + 1024 + 3);
        // What each inode must keep, and what the table takes with its free slots (a hash
        // table is between half and 7/8 full once it has grown).
        const { assert!(tree::BYTES_PER_INODE <= 82) };
        let per_inode = t.bytes() / t.len();
        assert!(
            per_inode <= 2 * tree::BYTES_PER_INODE,
            "{per_inode} bytes per inode with free slots"
        );
        assert_eq!(t.path(files[5000]).as_deref(), Some("arr/c/4/904"));
        // The kernel forgets the files, and a directory it looked up stays.
        let dir = t.lookup("arr/c/4");
        for ino in &files {
            t.forget(*ino, 1);
        }
        assert_eq!(t.len(), 4, "the root, arr, arr/c and arr/c/4 stay");
        assert!(t.bytes() < 1 << 20, "{} bytes kept for {} inodes", t.bytes(), t.len());
        assert_eq!(t.peek("arr/c/4/904"), None);
        assert_eq!(t.peek("arr/c/4"), Some(dir));
        t.forget(dir, 1);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn the_names_to_forget_are_the_oldest_directories_then_files_of_large_ones() {
        let t = InodeTable::new();
        for dir in ["d0", "d1", "d2"] {
            t.lookup(dir);
            for i in 0..100 {
                t.lookup(format!("{dir}/{i}").as_str());
            }
        }
        // 150 inodes: the whole of d0 (100), then of d1, the next oldest.
        let names = t.oldest_names(150);
        let d0 = t.peek("d0").unwrap();
        assert_eq!(names, [(ROOT_INO, "d0".to_string()), (ROOT_INO, "d1".to_string())]);
        assert!(
            !names.iter().any(|(dir, _)| *dir == d0),
            "a file of d0 named besides d0"
        );
        // Files at the root go one by one, oldest first.
        let t = InodeTable::new();
        let first = t.lookup("a");
        t.lookup("b");
        assert_eq!(t.oldest_names(1), [(ROOT_INO, "a".to_string())]);
        t.forget(first, 1);
        assert_eq!(t.oldest_names(5), [(ROOT_INO, "b".to_string())]);
    }

    #[test]
    fn an_inode_keeps_its_directories_while_it_lives() {
        let t = InodeTable::new();
        let dir = t.lookup("a/b");
        let file = t.lookup("a/b/f");
        t.forget(dir, 1);
        assert_eq!(t.peek("a/b"), Some(dir), "a directory went while a file below it lives");
        assert_eq!(t.path(file).as_deref(), Some("a/b/f"));
        t.forget(file, 1);
        assert_eq!(t.len(), 1, "only the root is left: {} inodes", t.len());
        // An unlinked inode keeps the path it had and its directories until forgotten.
        let file = t.lookup("x/y");
        assert_eq!(t.unlink("x/y"), Some(file));
        assert_eq!(t.name(file), Name::Unlinked);
        assert_eq!(t.path(file).as_deref(), Some("x/y"));
        assert_eq!(t.peek("x/y"), None);
        let again = t.lookup("x/y");
        assert_ne!(again, file);
        t.forget(file, 1);
        t.forget(again, 1);
        assert_eq!(t.len(), 1);
        // A rename into a directory the table has not seen makes it; a move of a directory
        // moves what is below it.
        let f = t.lookup("p/q/f");
        t.rename("p/q/f", "r/s/g");
        assert_eq!(t.path(f).as_deref(), Some("r/s/g"));
        assert_eq!(t.peek("p/q"), None, "the old directories stay after the move");
        let s = t.peek("r/s").unwrap();
        t.rename("r/s", "r/t");
        assert_eq!(t.path(f).as_deref(), Some("r/t/g"));
        assert_eq!(t.path(s).as_deref(), Some("r/t"));
        t.rename("r/t", "r/t/u"); // below itself: refused by the kernel, ignored here
        assert_eq!(t.path(f).as_deref(), Some("r/t/g"));
    }

    #[test]
    fn a_file_held_keeps_its_inode_and_moves_with_it() {
        let t = InodeTable::new();
        let f = file();
        let (ino, held) = t.open_file("d/x", f.clone(), Sink::Staged);
        assert!(Arc::ptr_eq(&held, &f));
        t.forget(ino, 5);
        assert_eq!(t.path(ino).as_deref(), Some("d/x"), "kept while the mount holds it");
        assert!(t.is_local_dir("d") && !t.is_local_dir("d/x") && !t.is_local_dir("e"));
        t.close_file(ino, &f);
        assert!(t.file_at("d/x").is_some(), "a staged file stays without handles");
        let other = t.lookup("d/y");
        t.rename("d/x", "d/y");
        assert_eq!(t.peek("d/y"), Some(ino));
        assert_eq!(t.place_of(ino, &f).map(|p| p.0).as_deref(), Some("d/y"));
        assert!(t.file_at("d/x").is_none());
        assert_eq!(t.local_below("d").len(), 1);
        assert_eq!(
            t.path(other).as_deref(),
            Some("d/y"),
            "the replaced inode lives on unnamed"
        );
        assert!(t.take_file("d/y").is_some());
        assert_eq!(t.path(ino), None, "dropped once nothing holds it");
        assert!(!t.is_local_dir("d"));
    }

    #[test]
    fn made_dirs_and_listing_below() {
        let t = InodeTable::new();
        t.make_dir("a/c/0");
        t.put_file("a/c/1/2", Written::new(file(), Sink::Staged));
        t.put_file("ab", Written::new(file(), Sink::Staged));
        assert!(t.is_local_dir("a/c/0") && t.is_local_dir("a/c") && t.is_local_dir("a"));
        let below: Vec<_> = t.local_below("a").into_iter().map(|(p, f)| (p, f.is_some())).collect();
        assert_eq!(below, [("a/c/0".to_string(), false), ("a/c/1/2".to_string(), true)]);
        assert_eq!(t.local_below("").len(), 3);
        t.unmake_dir("a/c/0");
        assert!(!t.is_local_dir("a/c/0") && t.is_local_dir("a/c"));
    }

    #[test]
    fn an_open_joins_the_file_held_at_its_name_even_if_put_there_after_it_looked() {
        // Two opens of one name that each found nothing held: the second to hold gets the
        // first one's file, so both handles write (and commit) the one content readers see.
        let t = InodeTable::new();
        let (a, b) = (file(), file());
        let sink = || Sink::Staged;
        let (ino_a, held_a) = t.open_file("c/0", a.clone(), sink());
        let (ino_b, held_b) = t.open_file_of(ino_a, "c/0", b.clone(), sink()).unwrap().unwrap();
        assert_eq!(ino_a, ino_b);
        assert!(
            Arc::ptr_eq(&held_a, &a) && Arc::ptr_eq(&held_b, &a),
            "the later open got its own file"
        );
        assert_eq!(t.place_of(ino_b, &held_b).map(|p| p.0).as_deref(), Some("c/0"));
        assert!(t.place_of(ino_b, &b).is_none());
    }
}
