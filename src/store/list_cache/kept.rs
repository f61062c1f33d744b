//! The listings a [`super::ListCache`] keeps: by prefix, least recently used first out, with
//! the entries they hold counted against the bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::store::prefetch::{first_use, prefetching, PrefetchStats};
use crate::store::{DirEntry, EntryKind};

#[derive(Debug)]
pub(super) struct Kept<T> {
    at: Instant,
    pub(super) value: Arc<Vec<T>>,
    /// Taken by the warm-up and not used by anyone else yet.
    prefetched: bool,
}

/// Listings of one kind, least recently used first out, with the entries they hold.
#[derive(Debug)]
pub(super) struct Listings<T> {
    pub(super) kept: LruCache<String, Kept<T>>,
    entries: usize,
}

impl<T> Listings<T> {
    pub(super) fn new() -> Self {
        Listings {
            kept: LruCache::unbounded(),
            entries: 0,
        }
    }

    /// The listing of `prefix` if it was taken less than `ttl` ago (an older one is dropped).
    pub(super) fn fresh(&mut self, prefix: &str, ttl: Duration, stats: &PrefetchStats) -> Option<Arc<Vec<T>>> {
        self.fresh_at(prefix, ttl, stats).map(|(value, _)| value)
    }

    /// [`fresh`](Self::fresh), and when it was taken.
    pub(super) fn fresh_at(
        &mut self,
        prefix: &str,
        ttl: Duration,
        stats: &PrefetchStats,
    ) -> Option<(Arc<Vec<T>>, Instant)> {
        let kept = self.kept.get_mut(prefix)?;
        if kept.at.elapsed() < ttl {
            first_use(&mut kept.prefetched, stats);
            return Some((kept.value.clone(), kept.at));
        }
        self.drop(prefix);
        None
    }

    pub(super) fn put(&mut self, prefix: &str, at: Instant, value: Vec<T>) {
        self.entries += value.len();
        let kept = Kept {
            at,
            value: Arc::new(value),
            prefetched: prefetching(),
        };
        if let Some(old) = self.kept.put(prefix.to_string(), kept) {
            self.entries -= old.value.len();
        }
    }

    pub(super) fn drop(&mut self, prefix: &str) {
        if let Some(old) = self.kept.pop(prefix) {
            self.entries -= old.value.len();
        }
    }

    /// Drop every listing of a prefix that starts with `prefix` (everything below it).
    pub(super) fn drop_below(&mut self, prefix: &str) {
        for p in crate::store::key::keys_under(&self.kept, prefix) {
            self.drop(&p);
        }
    }

    /// Drop the least recently used listing; false when there is none.
    pub(super) fn drop_oldest(&mut self) -> bool {
        match self.kept.pop_lru() {
            Some((_, old)) => {
                self.entries -= old.value.len();
                true
            }
            None => false,
        }
    }
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) dirs: Listings<DirEntry>,
    pub(super) prefixes: Listings<String>,
    /// Bumped by every write: a listing that started before it is not kept.
    pub(super) generation: u64,
}

impl State {
    /// Drop the kept prefix listings that would list `key`.
    pub(super) fn drop_prefixes_covering(&mut self, key: &str) {
        let covering: Vec<String> = self
            .prefixes
            .kept
            .iter()
            .filter(|(p, _)| key.starts_with(p.as_str()))
            .map(|(p, _)| p.clone())
            .collect();
        for p in covering {
            self.prefixes.drop(&p);
        }
    }

    pub(super) fn entries(&self) -> usize {
        self.dirs.entries + self.prefixes.entries
    }
}

impl Listings<DirEntry> {
    /// Show file `name` of `size` bytes, written now, in the kept listing of `prefix`, if one
    /// is kept (in name order; in place of an entry of the file it replaces).
    pub(super) fn add_file(&mut self, prefix: &str, name: &str, size: u64) {
        let Some(kept) = self.kept.peek_mut(prefix) else { return };
        let entry = DirEntry::file(name, size, crate::store::now_ns());
        let entries = Arc::make_mut(&mut kept.value);
        match entries.iter().position(|e| e.name == name && e.kind != EntryKind::Dir) {
            Some(at) => entries[at] = entry,
            None => {
                let at = entries.partition_point(|e| e.name.as_str() < name);
                entries.insert(at, entry);
                self.entries += 1;
            }
        }
    }

    /// Take `name` (a directory if `dir`, else a file) out of the listing of `prefix` if one
    /// taken less than `ttl` ago is kept: then whether it is left empty (an older one is
    /// dropped: `None`).
    pub(super) fn remove(&mut self, prefix: &str, name: &str, dir: bool, ttl: Duration) -> Option<bool> {
        let kept = self.kept.peek_mut(prefix)?;
        if kept.at.elapsed() >= ttl {
            self.drop(prefix);
            return None;
        }
        let entries = Arc::make_mut(&mut kept.value);
        let before = entries.len();
        entries.retain(|e| !(e.name == name && (e.kind == EntryKind::Dir) == dir));
        let left = entries.len();
        self.entries -= before - left;
        Some(left == 0)
    }

    /// Show directory `name` in the kept listing of `prefix`, if one is kept (in name order).
    /// Returns when that listing was taken if it did not show the directory: nothing lay below
    /// it then.
    pub(super) fn add_dir(&mut self, prefix: &str, name: &str) -> Option<Instant> {
        let kept = self.kept.peek_mut(prefix)?;
        if kept.value.iter().any(|e| e.name == name && e.kind == EntryKind::Dir) {
            return None;
        }
        let at = kept.value.partition_point(|e| e.name.as_str() < name);
        Arc::make_mut(&mut kept.value).insert(at, DirEntry::dir(name));
        self.entries += 1;
        Some(kept.at)
    }
}
