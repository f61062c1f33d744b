//! How the inode table keeps names: as a tree, each inode holding its parent's number and its
//! own name, as the kernel's dentries do, instead of its whole path.
//!
//! A mount of a dataset with millions of chunk files hands the kernel an inode for every file
//! a walk (`du`, `ls -l`, `rsync`) touches, and the kernel holds them until memory pressure
//! makes it forget them. What each costs here is therefore what a walk costs in memory: an
//! entry of [`Inode`] (72 bytes with its key; a chunk file's name, at most 24 bytes, is held
//! inline, with no allocation of its own) and 8 bytes in the index of names: 82 bytes with the
//! hash tables' control bytes, and up to twice that while the tables have free slots. The rare things
//! (a file held in memory, the content a reader found) live in side tables keyed by inode.
//!
//! The index of names is a `hashbrown` [`HashTable`] of inode numbers, hashed by (parent,
//! name): the name is stored once, in its inode. Paths are put together on demand by walking
//! up to the root (a few steps: a chunk file is at most a few directories deep). An inode keeps
//! its parent alive (it counts as one of its `children`), so a held file's directories stay
//! known while the kernel holds nothing of them.
//!
//! Tables shrink as the kernel forgets: a hash table never gives memory back by itself, so one
//! at less than a quarter of its capacity is shrunk to twice its length (amortized: each
//! shrink follows as many removals as it moves entries), and the C allocator is asked to give
//! freed pages back to the system.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use compact_str::CompactString;
use hashbrown::{DefaultHashBuilder, HashTable};

use super::held::Local;
use super::{Place, ROOT_INO};
use crate::view::ContentId;

/// Flags of an inode.
const ATTACHED: u8 = 1;
/// Its name was removed through this mount (see [`Tables::detach`]).
const UNLINKED: u8 = 2;
/// It holds the attributes the kernel was first given (see `sizes.rs`).
const SHOWN: u8 = 4;
/// A reader was given it with the kernel's page cache (see `caching.rs`).
pub(super) const CACHED: u8 = 8;
/// Written through this mount: every handle of it is direct I/O (see `caching.rs`).
pub(super) const DIRECT: u8 = 16;
/// Its name was given another inode so that its size never changes (see `caching.rs`).
pub(super) const RETIRED: u8 = 32;

/// What one inode takes in the tables: its entry and its slot in the index, each with the
/// hash table's control byte.
pub(super) const BYTES_PER_INODE: usize = std::mem::size_of::<(u64, Inode)>() + std::mem::size_of::<u64>() + 2;

/// Below this many entries a table is never shrunk.
const MIN_SHRINK: usize = 4096;

/// Longest walk up the tree: deeper means a cycle (never made: the kernel refuses to move a
/// directory below itself), so the path is unknown rather than the daemon stuck.
const MAX_DEPTH: usize = 4096;

#[derive(Debug)]
pub(super) struct Inode {
    pub(super) parent: u64,
    pub(super) name: CompactString,
    /// Lookups the kernel holds (saturating: a count that cannot go higher never drops it).
    pub(super) lookups: u32,
    /// Inodes naming this one as their parent (attached or not).
    children: u32,
    /// The size and time (ns since the epoch) the kernel was first shown, if `SHOWN`.
    pub(super) shown_size: u64,
    pub(super) shown_mtime_ns: i64,
    flags: u8,
}

impl Inode {
    pub(super) fn unlinked(&self) -> bool {
        self.flags & UNLINKED != 0
    }

    pub(super) fn shown(&self) -> bool {
        self.flags & SHOWN != 0
    }

    pub(super) fn set_shown(&mut self, size: u64, mtime_ns: i64) {
        if !self.shown() {
            (self.shown_size, self.shown_mtime_ns) = (size, mtime_ns);
            self.flags |= SHOWN;
        }
    }

    pub(super) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    pub(super) fn set(&mut self, flag: u8) {
        self.flags |= flag;
    }

    pub(super) fn is_attached(&self) -> bool {
        self.flags & ATTACHED != 0
    }

    /// No inode names this one as its parent.
    pub(super) fn is_leaf(&self) -> bool {
        self.children == 0
    }

    pub(super) fn children(&self) -> u32 {
        self.children
    }

    pub(super) fn relink(&mut self) {
        self.flags &= !UNLINKED;
    }
}

#[derive(Debug)]
pub(super) struct Tables {
    pub(super) inodes: hashbrown::HashMap<u64, Inode, super::ino_hash::InoHash>,
    index: HashTable<u64>,
    hasher: DefaultHashBuilder,
    /// What the mount holds beyond the store, by inode.
    pub(super) held: HashMap<u64, Local>,
    /// Paths of the inodes in `held` that have one, in order (for listings and the directories
    /// implied above them).
    pub(super) held_paths: BTreeSet<Arc<str>>,
    /// What the last reader to open each inode found (the kernel's cached pages hold these).
    pub(super) content: hashbrown::HashMap<u64, ContentId>,
    /// Handles open through the page cache, by inode (see `caching.rs`).
    pub(super) cached_open: hashbrown::HashMap<u64, u32>,
    next: u64,
}

impl Tables {
    pub(super) fn new() -> Self {
        let mut inodes = hashbrown::HashMap::with_hasher(super::ino_hash::InoHash);
        let root = Inode {
            parent: ROOT_INO,
            name: CompactString::default(),
            lookups: 1,
            children: 0,
            shown_size: 0,
            shown_mtime_ns: 0,
            flags: ATTACHED,
        };
        inodes.insert(ROOT_INO, root);
        Tables {
            inodes,
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            held: HashMap::new(),
            held_paths: BTreeSet::new(),
            content: hashbrown::HashMap::new(),
            cached_open: hashbrown::HashMap::new(),
            next: ROOT_INO + 1,
        }
    }

    fn hash(hasher: &DefaultHashBuilder, parent: u64, name: &str) -> u64 {
        use std::hash::BuildHasher;
        hasher.hash_one((parent, name))
    }

    /// The attached inode named `name` in `parent`.
    fn child(&self, parent: u64, name: &str) -> Option<u64> {
        let hash = Self::hash(&self.hasher, parent, name);
        let inodes = &self.inodes;
        let named = |ino: &u64| inodes.get(ino).is_some_and(|i| i.parent == parent && i.name == name);
        self.index.find(hash, named).copied()
    }

    /// The names of the attached inodes in `dir` (a look at every inode: for rare events).
    pub(super) fn names_in(&self, dir: u64) -> Vec<String> {
        let in_dir = |(&ino, i): (&u64, &Inode)| ino != ROOT_INO && i.parent == dir && i.is_attached();
        self.inodes
            .iter()
            .filter(|e| in_dir(*e))
            .map(|(_, i)| i.name.to_string())
            .collect()
    }

    /// The inode at `path`, if it has one.
    pub(super) fn find(&self, path: &str) -> Option<u64> {
        if path.is_empty() {
            return Some(ROOT_INO);
        }
        path.split('/').try_fold(ROOT_INO, |dir, name| self.child(dir, name))
    }

    /// The inode at `path`, created (with no lookup counted), and the directories above it, if
    /// needed.
    pub(super) fn at(&mut self, path: &str) -> u64 {
        if path.is_empty() {
            return ROOT_INO;
        }
        let mut ino = ROOT_INO;
        for name in path.split('/') {
            ino = match self.child(ino, name) {
                Some(child) => child,
                None => self.create(ino, name),
            };
        }
        ino
    }

    /// The inode at `place`, created if needed (see [`at`](Self::at)). A directory inode that
    /// no longer has its name is not looked into: its path is.
    pub(super) fn place(&mut self, place: Place) -> u64 {
        match place {
            Place::Path(path) => self.at(path),
            Place::Child { dir_ino, dir, name } if !self.names_children(dir_ino) => {
                self.at(&crate::fs::child_path(dir, name))
            }
            Place::Child { dir_ino, name, .. } => match self.child(dir_ino, name) {
                Some(ino) => ino,
                None => self.create(dir_ino, name),
            },
        }
    }

    /// Whether the children of `dir_ino` are found by it: it has its name, so they have theirs.
    fn names_children(&self, dir_ino: u64) -> bool {
        self.inodes
            .get(&dir_ino)
            .is_some_and(|i| i.is_attached() && !i.unlinked())
    }

    fn create(&mut self, parent: u64, name: &str) -> u64 {
        let ino = self.next;
        self.next += 1;
        let inode = Inode {
            parent,
            name: CompactString::from(name),
            lookups: 0,
            children: 0,
            shown_size: 0,
            shown_mtime_ns: 0,
            flags: 0,
        };
        self.inodes.insert(ino, inode);
        if let Some(p) = self.inodes.get_mut(&parent) {
            p.children = p.children.saturating_add(1);
        }
        self.attach(ino);
        ino
    }

    /// Put `ino` in the index under its (parent, name).
    fn attach(&mut self, ino: u64) {
        let Some(inode) = self.inodes.get_mut(&ino) else {
            return;
        };
        inode.flags |= ATTACHED;
        let hash = Self::hash(&self.hasher, inode.parent, &inode.name);
        let (inodes, hasher) = (&self.inodes, &self.hasher);
        let rehash = |i: &u64| inodes.get(i).map_or(0, |n| Self::hash(hasher, n.parent, &n.name));
        self.index.insert_unique(hash, ino, rehash);
    }

    /// Take `ino` out of the index: no name leads to it any more.
    pub(super) fn unindex(&mut self, ino: u64) {
        let Some(inode) = self.inodes.get_mut(&ino).filter(|i| i.flags & ATTACHED != 0) else {
            return;
        };
        inode.flags &= !ATTACHED;
        let hash = Self::hash(&self.hasher, inode.parent, &inode.name);
        if let Ok(entry) = self.index.find_entry(hash, |i| *i == ino) {
            entry.remove();
        }
    }

    pub(super) fn attached(&self, ino: u64) -> bool {
        self.inodes.get(&ino).is_some_and(|i| i.flags & ATTACHED != 0)
    }

    /// The path of `ino` (the one it had, if its name was removed).
    pub(super) fn path_of(&self, ino: u64) -> Option<String> {
        let mut names = Vec::new();
        let mut at = ino;
        while at != ROOT_INO {
            let inode = self.inodes.get(&at)?;
            names.push(inode.name.as_str());
            at = inode.parent;
            if names.len() > MAX_DEPTH {
                return None;
            }
        }
        let mut path = String::with_capacity(names.iter().map(|n| n.len() + 1).sum());
        for (i, name) in names.iter().rev().enumerate() {
            if i > 0 {
                path.push('/');
            }
            path.push_str(name);
        }
        Some(path)
    }

    /// Drop an inode nobody holds (no kernel lookup, nothing local, no child; never the root),
    /// and then its parent if that was all that held it.
    pub(super) fn drop_if_unused(&mut self, mut ino: u64) {
        loop {
            let unused = self.inodes.get(&ino).is_some_and(|i| i.lookups == 0 && i.children == 0);
            if !unused || ino == ROOT_INO || self.held.contains_key(&ino) {
                return;
            }
            self.unindex(ino);
            let Some(inode) = self.inodes.remove(&ino) else {
                return;
            };
            self.content.remove(&ino);
            if let Some(parent) = self.inodes.get_mut(&inode.parent) {
                parent.children = parent.children.saturating_sub(1);
            }
            self.shrink();
            ino = inode.parent;
        }
    }

    /// The inode at `path` loses its name (it is `UNLINKED`): no path leads to it any more,
    /// and it lives on only while the kernel holds it (open files). Returns it.
    pub(super) fn detach(&mut self, path: &str) -> Option<u64> {
        let ino = self.find(path).filter(|ino| *ino != ROOT_INO)?;
        if self.held.remove(&ino).is_some() {
            self.held_paths.remove(path);
        }
        self.unindex(ino);
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.flags |= UNLINKED;
        }
        self.drop_if_unused(ino);
        Some(ino)
    }

    /// Move the inode at `from` to `to`; an inode that `to` had loses its name, and what the
    /// mount held for it is returned.
    pub(super) fn rename(&mut self, from: &str, to: &str) -> Option<Local> {
        if from == to || to.strip_prefix(from).is_some_and(|rest| rest.starts_with('/')) {
            return None;
        }
        let replaced = self.find(to).filter(|ino| *ino != ROOT_INO).and_then(|old| {
            let local = self.set_local(old, None);
            self.detach(to);
            local
        });
        let Some(ino) = self.find(from).filter(|ino| *ino != ROOT_INO) else {
            return replaced;
        };
        let (dir, name) = to.rsplit_once('/').unwrap_or(("", to));
        let new_parent = self.at(dir);
        self.unindex(ino);
        let Some(inode) = self.inodes.get_mut(&ino) else {
            return replaced;
        };
        let old_parent = std::mem::replace(&mut inode.parent, new_parent);
        inode.name = CompactString::from(name);
        if let Some(p) = self.inodes.get_mut(&new_parent) {
            p.children = p.children.saturating_add(1);
        }
        if let Some(p) = self.inodes.get_mut(&old_parent) {
            p.children = p.children.saturating_sub(1);
        }
        self.attach(ino);
        if self.held.contains_key(&ino) {
            self.held_paths.remove(from);
            self.held_paths.insert(Arc::from(to));
        }
        self.drop_if_unused(old_parent);
        replaced
    }

    /// Give memory back once the tables are mostly empty (see the module's documentation).
    fn shrink(&mut self) {
        let (len, capacity) = (self.inodes.len(), self.inodes.capacity());
        if capacity < MIN_SHRINK || len * 4 > capacity {
            return;
        }
        self.inodes.shrink_to(len * 2);
        let (inodes, hasher) = (&self.inodes, &self.hasher);
        let rehash = |i: &u64| inodes.get(i).map_or(0, |n| Self::hash(hasher, n.parent, &n.name));
        self.index.shrink_to(self.index.len() * 2, rehash);
        self.content.shrink_to(self.content.len() * 2);
        crate::allocator::give_back_freed_memory();
    }

    /// Memory held by the tables' entries, in bytes (not counting names too long to be inline,
    /// nor what the mount holds for files).
    pub(super) fn bytes(&self) -> usize {
        let slots = self.inodes.capacity().max(self.index.capacity());
        slots * BYTES_PER_INODE
    }
}
