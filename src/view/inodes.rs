//! The inode table: inode numbers for view paths, with the kernel's lookup counts.
//!
//! Every reply that hands the kernel an inode (lookup, readdirplus) counts one lookup; `forget`
//! gives them back and an inode whose count reaches zero is dropped. Numbers are never reused,
//! so a generation number of zero is always valid. The root is inode 1 and is never dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

pub const ROOT_INO: u64 = 1;

#[derive(Debug)]
struct Entry {
    path: Arc<str>,
    lookups: u64,
}

#[derive(Debug)]
struct Tables {
    by_ino: HashMap<u64, Entry>,
    by_path: HashMap<Arc<str>, u64>,
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

impl InodeTable {
    pub fn new() -> Self {
        let root: Arc<str> = Arc::from("");
        let mut by_ino = HashMap::new();
        by_ino.insert(
            ROOT_INO,
            Entry {
                path: root.clone(),
                lookups: 1,
            },
        );
        let mut by_path = HashMap::new();
        by_path.insert(root, ROOT_INO);
        InodeTable {
            tables: Mutex::new(Tables {
                by_ino,
                by_path,
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
        if let Some(&ino) = t.by_path.get(path) {
            if let Some(e) = t.by_ino.get_mut(&ino) {
                e.lookups += 1;
            }
            return ino;
        }
        let ino = t.next;
        t.next += 1;
        let path: Arc<str> = Arc::from(path);
        t.by_ino.insert(
            ino,
            Entry {
                path: path.clone(),
                lookups: 1,
            },
        );
        t.by_path.insert(path, ino);
        ino
    }

    /// The inode of `path` if the kernel knows it, without counting a lookup.
    pub fn peek(&self, path: &str) -> Option<u64> {
        self.lock().by_path.get(path).copied()
    }

    pub fn path(&self, ino: u64) -> Option<Arc<str>> {
        self.lock().by_ino.get(&ino).map(|e| e.path.clone())
    }

    /// The kernel dropped `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut t = self.lock();
        let Some(e) = t.by_ino.get_mut(&ino) else {
            return;
        };
        e.lookups = e.lookups.saturating_sub(n);
        if e.lookups == 0 {
            if let Some(e) = t.by_ino.remove(&ino) {
                if t.by_path.get(&e.path) == Some(&ino) {
                    t.by_path.remove(&e.path);
                }
            }
        }
    }

    /// A name moved: the kernel keeps using the inode of `from` for `to`. An inode that `to`
    /// had is no longer reachable by name (the kernel forgets it in its own time).
    pub fn rename(&self, from: &str, to: &str) {
        let mut t = self.lock();
        let to_path: Arc<str> = Arc::from(to);
        t.by_path.remove(to);
        if let Some(ino) = t.by_path.remove(from) {
            if let Some(e) = t.by_ino.get_mut(&ino) {
                e.path = to_path.clone();
            }
            t.by_path.insert(to_path, ino);
        }
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
}
