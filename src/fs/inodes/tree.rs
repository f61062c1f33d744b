//! How the inode table keeps names: as a tree, each inode holding its parent and its own
//! name, as the kernel's dentries do, instead of its whole path.
//!
//! A mount of a dataset with millions of chunk files hands the kernel an inode for every file
//! a walk (`du`, `ls -l`, `rsync`) touches, and the kernel holds them until memory pressure
//! makes it forget them (or `fuse/pruning.rs` asks it to). What each costs here is therefore
//! what a walk costs in memory: an [`Inode`] of 64 bytes in a slot of the slab (`slab.rs`: as
//! many slots as the most inodes held at once; a chunk file's name, at most 24 bytes, is held
//! inline, with no allocation of its own) and a 4-byte slot number in the index of names: about
//! 70 bytes, at most 76 while the index has free slots. The rare things (a file held in memory,
//! the content a reader found) live in side tables keyed by inode.
//!
//! The index of names is a `hashbrown` [`HashTable`] of slots, hashed by (parent, name): the
//! name is stored once, in its inode. Paths are put together on demand by walking up to the
//! root (a few steps: a chunk file is at most a few directories deep). An inode keeps its
//! parent alive (it counts as one of its `children`), so a held file's directories stay known
//! while the kernel holds nothing of them, and a parent is named by its slot alone.
//!
//! Tables shrink as the kernel forgets: a hash table never gives memory back by itself, so one
//! at less than a quarter of its capacity is shrunk to twice its length (amortized: each
//! shrink follows as many removals as it moves entries), the slab gives back its free end, and
//! the C allocator is asked to give freed pages back to the system.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use compact_str::CompactString;
use hashbrown::{DefaultHashBuilder, HashTable};

use super::held::Local;
pub(super) use super::inode::*;
use super::slab::Slab;
use super::{Place, ROOT_INO};
use crate::view::ContentId;

/// Below this many entries a table is never shrunk.
const MIN_SHRINK: usize = 4096;
/// Longest walk up the tree: deeper means a cycle (never made: the kernel refuses to move a
/// directory below itself), so the path is unknown rather than the daemon stuck.
const MAX_DEPTH: usize = 4096;

#[derive(Debug)]
pub(super) struct Tables {
    pub(super) inodes: Slab,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// What the mount holds beyond the store, by inode.
    pub(super) held: HashMap<u64, Local>,
    /// Paths of the inodes in `held` that have one, in order (for listings and the directories
    /// implied above them).
    pub(super) held_paths: BTreeSet<Arc<str>>,
    /// What the last reader to open each inode found (the kernel's cached pages hold these).
    pub(super) content: hashbrown::HashMap<u64, ContentId>,
    /// Inodes made so far (wrapping; see [`Inode::born`]).
    made: u32,
    /// Handles open through the page cache, by inode (see `caching.rs`).
    pub(super) cached_open: hashbrown::HashMap<u64, u32>,
}

impl Tables {
    pub(super) fn new() -> Self {
        let mut root = Inode::new(ROOT_INO, "");
        root.lookups = 1;
        root.flags = ATTACHED;
        let inodes = Slab::new(root);
        Tables {
            inodes,
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            held: HashMap::new(),
            held_paths: BTreeSet::new(),
            content: hashbrown::HashMap::new(),
            made: 0,
            cached_open: hashbrown::HashMap::new(),
        }
    }

    fn hash(hasher: &DefaultHashBuilder, parent: u32, name: &str) -> u64 {
        use std::hash::BuildHasher;
        hasher.hash_one((parent, name))
    }

    /// The number of `inode`'s parent.
    pub(super) fn parent_of(&self, inode: &Inode) -> u64 {
        self.inodes.number_at(inode.parent).unwrap_or(ROOT_INO)
    }

    /// The attached inode named `name` in `parent`.
    fn child(&self, parent: u64, name: &str) -> Option<u64> {
        self.inodes.get(&parent)?;
        let parent = Slab::slot_of(parent);
        let hash = Self::hash(&self.hasher, parent, name);
        let inodes = &self.inodes;
        let named = |slot: &u32| {
            inodes
                .at_slot(*slot)
                .is_some_and(|i| i.parent == parent && i.name == name)
        };
        let slot = *self.index.find(hash, named)?;
        self.inodes.number_at(slot)
    }

    /// The names of the attached inodes in `dir` (a look at every inode: for rare events).
    pub(super) fn names_in(&self, dir: u64) -> Vec<String> {
        let slot = Slab::slot_of(dir);
        let in_dir = |(ino, i): &(u64, &Inode)| *ino != ROOT_INO && i.parent == slot && i.is_attached();
        if !self.inodes.contains_key(&dir) {
            return Vec::new();
        }
        self.inodes
            .iter()
            .filter(in_dir)
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
        let mut inode = Inode::new(parent, name);
        inode.born = self.made;
        self.made = self.made.wrapping_add(1);
        // Every slot taken would be 2^32 inodes held, 256 GiB: never so; the name is then
        // the root's, as a lookup that finds nothing new.
        let Some(ino) = self.inodes.insert(inode) else {
            return ROOT_INO;
        };
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
        let rehash = |s: &u32| inodes.at_slot(*s).map_or(0, |n| Self::hash(hasher, n.parent, &n.name));
        self.index.insert_unique(hash, Slab::slot_of(ino), rehash);
    }

    /// Take `ino` out of the index: no name leads to it any more.
    pub(super) fn unindex(&mut self, ino: u64) {
        let Some(inode) = self.inodes.get_mut(&ino).filter(|i| i.flags & ATTACHED != 0) else {
            return;
        };
        inode.flags &= !ATTACHED;
        let hash = Self::hash(&self.hasher, inode.parent, &inode.name);
        let slot = Slab::slot_of(ino);
        if let Ok(entry) = self.index.find_entry(hash, |s| *s == slot) {
            entry.remove();
        }
    }

    /// Inodes made so far (wrapping: see [`Inode::born`]).
    pub(super) fn made(&self) -> u32 {
        self.made
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
            at = self.parent_of(inode);
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
            let parent_ino = self.inodes.number_at(inode.parent).unwrap_or(ROOT_INO);
            if let Some(parent) = self.inodes.get_mut(&parent_ino) {
                parent.children = parent.children.saturating_sub(1);
            }
            self.shrink();
            ino = parent_ino;
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
        let old_parent = std::mem::replace(&mut inode.parent, Slab::slot_of(new_parent));
        inode.name = CompactString::from(name);
        let old_parent = self.inodes.number_at(old_parent).unwrap_or(ROOT_INO);
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
        let (len, capacity) = (self.index.len(), self.index.capacity());
        let index = capacity >= MIN_SHRINK && len * 4 <= capacity;
        if index {
            let (inodes, hasher) = (&self.inodes, &self.hasher);
            let rehash = |s: &u32| inodes.at_slot(*s).map_or(0, |n| Self::hash(hasher, n.parent, &n.name));
            self.index.shrink_to(len * 2, rehash);
            self.content.shrink_to(self.content.len() * 2);
        }
        if self.inodes.shrink(MIN_SHRINK) || index {
            crate::sys::allocator::give_back_freed_memory();
        }
    }

    /// Memory held by the tables' entries, in bytes (not counting names too long to be inline,
    /// nor what the mount holds for files): the slab's slots (used or free) and the index's
    /// (with their control bytes).
    pub(super) fn bytes(&self) -> usize {
        let index = self.index.capacity() * 8 / 7 * (std::mem::size_of::<u32>() + 1);
        self.inodes.slots() * std::mem::size_of::<Inode>() + self.inodes.free_bytes() + index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn churn_of_three_times_the_inodes_held_keeps_the_tables_within_their_bound() {
        // A walk of 300,000 files while the kernel holds the last 100,000 (pruning): the
        // tables take what 100,000 inodes take, at every moment.
        const HELD: usize = 100_000;
        let mut t = Tables::new();
        let mut held = std::collections::VecDeque::new();
        let mut peak = 0;
        for i in 0..3 * HELD {
            let ino = t.at(&format!("c/{}/{}", i / 1000, i % 1000));
            t.inodes.get_mut(&ino).expect("just made").lookups = 1;
            held.push_back(ino);
            if held.len() > HELD {
                let old = held.pop_front().expect("held");
                t.inodes.get_mut(&old).expect("held").lookups = 0;
                t.drop_if_unused(old);
            }
            peak = peak.max(t.bytes());
        }
        assert_eq!(
            t.inodes.len(),
            HELD + 1 + 1 + 100,
            "the files, the root, c and their 100 directories"
        );
        let bound = (HELD + 200) * MAX_BYTES_PER_INODE;
        assert!(peak <= bound, "{peak} bytes at most for {HELD} inodes, bound {bound}");
        assert!(t.inodes.slots() <= HELD + 300, "{} slots", t.inodes.slots());
        // Every name still finds its inode, and only its own.
        let last = *held.back().expect("held");
        assert_eq!(
            t.find(&format!("c/{}/{}", (3 * HELD - 1) / 1000, (3 * HELD - 1) % 1000)),
            Some(last)
        );
        assert_eq!(t.find("c/0/0"), None);
        // The kernel forgets everything: the tables go back to almost nothing.
        for ino in held.drain(..) {
            t.inodes.get_mut(&ino).expect("held").lookups = 0;
            t.drop_if_unused(ino);
        }
        assert_eq!(t.inodes.len(), 1);
        assert!(t.bytes() < 64 << 10, "{} bytes kept for the root", t.bytes());
    }
}
