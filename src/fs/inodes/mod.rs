//! The inode table: the one owner of what the mount knows per name, keyed by inode.
//!
//! Each inode has its path, the kernel's lookup count, and what the mount holds for it beyond
//! the store ([`Local`]): a file whose content is in memory (being written, staged under a
//! temporary name, or closed and pending write-back) with its open handles, or a chunk
//! directory made by `mkdir` that holds nothing stored yet. Renames move an inode with all of
//! it, so an open handle (which names its inode) always commits to wherever its file is now.
//!
//! Every reply that hands the kernel an inode (lookup, readdirplus) counts one lookup; `forget`
//! gives them back. An inode is dropped when the kernel holds no lookup of it and the mount
//! holds nothing for it. Numbers are never reused, so a generation number of zero is always
//! valid. The root is inode 1 and is never dropped. One mutex guards the table; nothing is
//! awaited while it is held.

mod held;
mod sizes;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::view::ContentId;
pub use held::{HeldFile, Local, Written};

pub const ROOT_INO: u64 = 1;

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
struct Inode {
    path: Arc<str>,
    lookups: u64,
    local: Option<Local>,
    /// What the last reader to open it found (the kernel's cached pages hold these bytes).
    content: Option<ContentId>,
    /// Its name was removed through this mount (unlinked, or replaced by a rename): no path
    /// leads to it any more, and it lives on only while the kernel holds it (open files).
    unlinked: bool,
    /// On a mount that keeps the page cache: the version of the file and the attributes the
    /// kernel was given for this inode, which never change (see `sizes.rs`).
    shown: Option<sizes::Shown>,
}

#[derive(Debug)]
struct Tables {
    by_ino: HashMap<u64, Inode>,
    by_path: HashMap<Arc<str>, u64>,
    /// Paths of inodes holding something local, in order (for listings and the directories
    /// implied above them).
    local: BTreeSet<Arc<str>>,
    next: u64,
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

impl Tables {
    fn rename(&mut self, from: &str, to: &str) -> Option<Local> {
        if from == to {
            return None;
        }
        let replaced = self.by_path.get(to).copied().and_then(|old| {
            let local = self.set_local(old, None);
            self.detach(to);
            local
        });
        if let Some(ino) = self.by_path.remove(from) {
            let to_path: Arc<str> = Arc::from(to);
            if let Some(inode) = self.by_ino.get_mut(&ino) {
                let from_path = std::mem::replace(&mut inode.path, to_path.clone());
                if inode.local.is_some() {
                    self.local.remove(&from_path);
                    self.local.insert(to_path.clone());
                }
            }
            self.by_path.insert(to_path, ino);
        }
        replaced
    }

    /// The inode at `path` loses its name (see [`Inode::unlinked`]); the inode it was.
    fn detach(&mut self, path: &str) -> Option<u64> {
        let ino = self.by_path.remove(path)?;
        if self.local.remove(path) {
            if let Some(inode) = self.by_ino.get_mut(&ino) {
                inode.local = None;
            }
        }
        if let Some(inode) = self.by_ino.get_mut(&ino) {
            inode.unlinked = true;
        }
        self.drop_if_unused(ino);
        Some(ino)
    }

    /// The inode at `path`, created (with no lookup counted) if needed.
    fn at(&mut self, path: &str) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        let path: Arc<str> = Arc::from(path);
        let inode = Inode {
            path: path.clone(),
            lookups: 0,
            local: None,
            content: None,
            unlinked: false,
            shown: None,
        };
        self.by_ino.insert(ino, inode);
        self.by_path.insert(path, ino);
        ino
    }

    fn inode_at(&mut self, path: &str) -> Option<&mut Inode> {
        let ino = *self.by_path.get(path)?;
        self.by_ino.get_mut(&ino)
    }

    fn set_local(&mut self, ino: u64, local: Option<Local>) -> Option<Local> {
        let inode = self.by_ino.get_mut(&ino)?;
        let old = std::mem::replace(&mut inode.local, local);
        let (path, held) = (inode.path.clone(), inode.local.is_some());
        // A name the inode no longer has (replaced by a rename) is not its to index.
        if self.by_path.get(&path) == Some(&ino) {
            if held {
                self.local.insert(path);
            } else {
                self.local.remove(&path);
            }
        }
        if !held {
            self.drop_if_unused(ino);
        }
        old
    }

    /// Drop an inode nobody holds: no kernel lookup, nothing local (never the root).
    fn drop_if_unused(&mut self, ino: u64) {
        let unused = self
            .by_ino
            .get(&ino)
            .is_some_and(|i| i.lookups == 0 && i.local.is_none() && ino != ROOT_INO);
        if let Some(inode) = unused.then(|| self.by_ino.remove(&ino)).flatten() {
            if self.by_path.get(&inode.path) == Some(&ino) {
                self.by_path.remove(&inode.path);
            }
        }
    }
}

impl InodeTable {
    pub fn new() -> Self {
        let root: Arc<str> = Arc::from("");
        let mut by_ino = HashMap::new();
        let inode = Inode {
            path: root.clone(),
            lookups: 1,
            local: None,
            content: None,
            unlinked: false,
            shown: None,
        };
        by_ino.insert(ROOT_INO, inode);
        let mut by_path = HashMap::new();
        by_path.insert(root, ROOT_INO);
        InodeTable {
            tables: Mutex::new(Tables {
                by_ino,
                by_path,
                local: BTreeSet::new(),
                next: ROOT_INO + 1,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The inode of `path`, created if needed, with one more lookup counted.
    pub fn lookup(&self, path: &str) -> u64 {
        let mut t = self.lock();
        let ino = t.at(path);
        if let Some(inode) = t.by_ino.get_mut(&ino) {
            inode.lookups += 1;
            inode.unlinked = false;
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
        self.lock().by_ino.get(&ino).is_some_and(|i| i.unlinked)
    }

    /// The path of `ino`, or why there is none.
    pub fn name(&self, ino: u64) -> Name {
        match self.lock().by_ino.get(&ino) {
            Some(inode) if inode.unlinked => Name::Unlinked,
            Some(inode) => Name::Path(inode.path.clone()),
            None => Name::Unknown,
        }
    }

    /// The inode of `path` if there is one, without counting a lookup.
    pub fn peek(&self, path: &str) -> Option<u64> {
        self.lock().by_path.get(path).copied()
    }

    pub fn path(&self, ino: u64) -> Option<Arc<str>> {
        self.lock().by_ino.get(&ino).map(|e| e.path.clone())
    }

    /// The kernel dropped `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut t = self.lock();
        if let Some(inode) = t.by_ino.get_mut(&ino) {
            inode.lookups = inode.lookups.saturating_sub(n);
        }
        t.drop_if_unused(ino);
    }

    /// A name moved: the inode of `from` (with what the mount holds for it) is now at `to`. An
    /// inode that `to` had is no longer reachable by name (the kernel forgets it in its own
    /// time); what the mount held for it is returned.
    pub fn rename(&self, from: &str, to: &str) -> Option<Local> {
        self.lock().rename(from, to)
    }

    /// A reader opened `ino` and found `content`: whether the last reader found the same bytes
    /// (so the kernel may keep the pages it cached of them). Remembers it; unknown content
    /// never matches.
    pub fn reopened(&self, ino: u64, content: Option<ContentId>) -> bool {
        let mut t = self.lock();
        let Some(inode) = t.by_ino.get_mut(&ino) else {
            return false;
        };
        let same = content.is_some() && inode.content == content;
        inode.content = content;
        same
    }

    pub fn len(&self) -> usize {
        self.lock().by_ino.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        let (ino_b, held_b) = t.open_file_of(ino_a, "c/0", b.clone(), sink()).unwrap();
        assert_eq!(ino_a, ino_b);
        assert!(
            Arc::ptr_eq(&held_a, &a) && Arc::ptr_eq(&held_b, &a),
            "the later open got its own file"
        );
        assert_eq!(t.place_of(ino_b, &held_b).map(|p| p.0).as_deref(), Some("c/0"));
        assert!(t.place_of(ino_b, &b).is_none());
    }
}
