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

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::handles::{Sink, WriteFile};
use crate::view::ContentId;

pub const ROOT_INO: u64 = 1;

/// A held file's content and where it goes.
pub type HeldFile = (Arc<WriteFile>, Sink);

/// What the mount holds for a name beyond the store.
#[derive(Debug)]
pub enum Local {
    File(Written),
    /// A chunk directory made by mkdir that holds no stored chunk yet (they are implicit).
    MadeDir,
}

/// A file whose content the mount holds: where it goes, how many handles have it open, and
/// since when it has been pending (closed with changes, write-back mode).
#[derive(Debug)]
pub struct Written {
    pub file: Arc<WriteFile>,
    pub sink: Sink,
    pub handles: usize,
    pub pending: Option<Instant>,
}

impl Written {
    pub fn new(file: Arc<WriteFile>, sink: Sink) -> Self {
        Written {
            file,
            sink,
            handles: 0,
            pending: None,
        }
    }

    /// Whether it must stay when no handle has it open: staged, or pending write-back.
    fn kept(&self) -> bool {
        matches!(self.sink, Sink::Staged) || self.pending.is_some()
    }
}

#[derive(Debug)]
struct Inode {
    path: Arc<str>,
    lookups: u64,
    local: Option<Local>,
    /// What the last reader to open it found (the kernel's cached pages hold these bytes).
    content: Option<ContentId>,
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

    fn written(&mut self, path: &str) -> Option<&mut Written> {
        match self.inode_at(path)?.local.as_mut()? {
            Local::File(w) => Some(w),
            Local::MadeDir => None,
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
        }
        ino
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
        let mut t = self.lock();
        if from == to {
            return None;
        }
        let replaced = t.by_path.get(to).copied().and_then(|old| {
            let local = t.set_local(old, None);
            if t.by_path.get(to) == Some(&old) {
                t.by_path.remove(to);
            }
            local
        });
        if let Some(ino) = t.by_path.remove(from) {
            let to_path: Arc<str> = Arc::from(to);
            if let Some(inode) = t.by_ino.get_mut(&ino) {
                let from_path = std::mem::replace(&mut inode.path, to_path.clone());
                if inode.local.is_some() {
                    t.local.remove(&from_path);
                    t.local.insert(to_path.clone());
                }
            }
            t.by_path.insert(to_path, ino);
        }
        replaced
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

    /// The file the mount holds at `path`, and where it goes.
    pub fn file_at(&self, path: &str) -> Option<HeldFile> {
        self.lock().written(path).map(|w| (w.file.clone(), w.sink.clone()))
    }

    /// The path and destination of the file a handle of inode `ino` has open: `None` once the
    /// file has been unlinked or replaced (its content then goes nowhere).
    pub fn place_of(&self, ino: u64, file: &Arc<WriteFile>) -> Option<(String, Sink)> {
        let t = self.lock();
        let inode = t.by_ino.get(&ino)?;
        match &inode.local {
            Some(Local::File(w)) if Arc::ptr_eq(&w.file, file) => Some((inode.path.to_string(), w.sink.clone())),
            _ => None,
        }
    }

    /// One more handle of `path` on its file (this `file` going to `sink` if it has none yet);
    /// returns the inode.
    pub fn open_file(&self, path: &str, file: Arc<WriteFile>, sink: Sink) -> u64 {
        let mut t = self.lock();
        let ino = t.at(path);
        if t.written(path).is_none() {
            t.set_local(ino, Some(Local::File(Written::new(file, sink))));
        }
        if let Some(w) = t.written(path) {
            w.handles += 1;
        }
        ino
    }

    /// A handle of `file` at inode `ino` is gone; a committed file goes with its last handle.
    pub fn close_file(&self, ino: u64, file: &Arc<WriteFile>) {
        let mut t = self.lock();
        let Some(Some(Local::File(w))) = t.by_ino.get_mut(&ino).map(|i| &mut i.local) else {
            return;
        };
        if !Arc::ptr_eq(&w.file, file) {
            return;
        }
        w.handles = w.handles.saturating_sub(1);
        if w.handles == 0 && !w.kept() {
            t.set_local(ino, None);
        }
    }

    /// Take the file held at `path` away from it (unlinked, replaced, or committed).
    pub fn take_file(&self, path: &str) -> Option<Written> {
        let mut t = self.lock();
        let ino = *t.by_path.get(path)?;
        t.written(path)?;
        match t.set_local(ino, None) {
            Some(Local::File(w)) => Some(w),
            _ => None,
        }
    }

    /// Hold `written` at `path` (replacing whatever file was there).
    pub fn put_file(&self, path: &str, written: Written) {
        let mut t = self.lock();
        let ino = t.at(path);
        t.set_local(ino, Some(Local::File(written)));
    }

    /// Change the file held at `path` in place; `None` if there is none.
    pub fn with_file<T>(&self, path: &str, f: impl FnOnce(&mut Written) -> T) -> Option<T> {
        self.lock().written(path).map(f)
    }

    /// Drop the file held at `path` if it is still `file`, no handle has it open and it is
    /// not staged (a pending file that was just committed). Returns whether it was dropped.
    pub fn drop_committed(&self, path: &str, file: &Arc<WriteFile>) -> bool {
        let mut t = self.lock();
        let done = t
            .written(path)
            .is_some_and(|w| w.handles == 0 && Arc::ptr_eq(&w.file, file) && !matches!(w.sink, Sink::Staged));
        if let (true, Some(&ino)) = (done, t.by_path.get(path)) {
            t.set_local(ino, None);
        }
        done
    }

    /// Every file the mount holds, with its path, sink and pending time.
    pub fn files(&self) -> Vec<(String, Arc<WriteFile>, Sink, Option<Instant>)> {
        let t = self.lock();
        t.by_ino
            .values()
            .filter_map(|i| match &i.local {
                Some(Local::File(w)) => Some((i.path.to_string(), w.file.clone(), w.sink.clone(), w.pending)),
                _ => None,
            })
            .collect()
    }

    /// Record a chunk directory made by mkdir (nothing stored for it yet).
    pub fn make_dir(&self, path: &str) {
        let mut t = self.lock();
        let ino = t.at(path);
        if t.by_ino.get(&ino).is_some_and(|i| i.local.is_none()) {
            t.set_local(ino, Some(Local::MadeDir));
        }
    }

    /// Forget a directory made by mkdir (it was removed).
    pub fn unmake_dir(&self, path: &str) {
        let mut t = self.lock();
        let made = t
            .inode_at(path)
            .is_some_and(|i| matches!(i.local, Some(Local::MadeDir)));
        if let (true, Some(&ino)) = (made, t.by_path.get(path)) {
            t.set_local(ino, None);
        }
    }

    /// Whether `path` is a directory only the mount knows of: made by mkdir, or above
    /// something the mount holds.
    pub fn is_local_dir(&self, path: &str) -> bool {
        let t = self.lock();
        let made = t
            .by_path
            .get(path)
            .and_then(|ino| t.by_ino.get(ino))
            .is_some_and(|i| matches!(i.local, Some(Local::MadeDir)));
        made || !Self::below(&t, path).is_empty()
    }

    /// Paths held locally below directory `dir` (`""`: the root), in order.
    fn below(t: &Tables, dir: &str) -> Vec<Arc<str>> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        t.local
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|p| p.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// What the mount holds below directory `dir`: for each path, its file and sink (`None`
    /// for a directory made by mkdir).
    pub fn local_below(&self, dir: &str) -> Vec<(String, Option<HeldFile>)> {
        let t = self.lock();
        Self::below(&t, dir)
            .into_iter()
            .filter_map(|p| {
                let inode = t.by_ino.get(t.by_path.get(&p)?)?;
                let file = match inode.local.as_ref()? {
                    Local::File(w) => Some((w.file.clone(), w.sink.clone())),
                    Local::MadeDir => None,
                };
                Some((p.to_string(), file))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::buffer::Budget;

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
        let ino = t.open_file("d/x", f.clone(), Sink::Staged);
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
}
