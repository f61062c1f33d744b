//! Listings of a remote store kept for the metadata TTL.
//!
//! Every chunk directory of the view is found from listings of shard directories, so a walk
//! of a remote array (a `cp -r`, an `ls -R`, a client probing directories) asks the service for
//! the same few listings again and again. This decorator keeps each `list_dir` and
//! `list_prefix` answer for the TTL (the same `--metadata-ttl` that bounds how long metadata
//! and shard indexes are trusted), bounded by the number of entries held, least recently used
//! first out.
//!
//! A kept listing also answers, without a request, that a key it does not hold is missing
//! (`head`) and whether a directory exists (`dir_exists`): the lookups of a directory walk.
//! Not over plain HTTP, where listings come from a web server's index pages and may be partial.
//!
//! Writes through the mount never meet a stale listing: a write, erase or rename of a key
//! drops the listings of every directory above it and every prefix listing that covers it,
//! and a listing that was in flight while anything was written is not kept. Other writers'
//! changes show once the TTL has passed, as for metadata.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;

use super::invalidating::invalidating_store;

use super::{Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Store, StoreResult};

/// Entries (names) held across all listings kept.
const MAX_ENTRIES: usize = 1 << 18;

#[derive(Debug)]
struct Kept<T> {
    at: Instant,
    value: Arc<Vec<T>>,
}

/// Listings of one kind, least recently used first out, with the entries they hold.
#[derive(Debug)]
struct Listings<T> {
    kept: LruCache<String, Kept<T>>,
    entries: usize,
}

impl<T> Listings<T> {
    fn new() -> Self {
        Listings {
            kept: LruCache::unbounded(),
            entries: 0,
        }
    }

    /// The listing of `prefix` if it was taken less than `ttl` ago (an older one is dropped).
    fn fresh(&mut self, prefix: &str, ttl: Duration) -> Option<Arc<Vec<T>>> {
        let kept = self.kept.get(prefix)?;
        if kept.at.elapsed() < ttl {
            return Some(kept.value.clone());
        }
        self.drop(prefix);
        None
    }

    fn put(&mut self, prefix: &str, at: Instant, value: Vec<T>) {
        self.entries += value.len();
        let kept = Kept {
            at,
            value: Arc::new(value),
        };
        if let Some(old) = self.kept.put(prefix.to_string(), kept) {
            self.entries -= old.value.len();
        }
    }

    fn drop(&mut self, prefix: &str) {
        if let Some(old) = self.kept.pop(prefix) {
            self.entries -= old.value.len();
        }
    }

    /// Drop every listing of a prefix that starts with `prefix` (everything below it).
    fn drop_below(&mut self, prefix: &str) {
        let below: Vec<String> = self
            .kept
            .iter()
            .filter(|(p, _)| p.starts_with(prefix))
            .map(|(p, _)| p.clone())
            .collect();
        for p in below {
            self.drop(&p);
        }
    }

    /// Drop the least recently used listing; false when there is none.
    fn drop_oldest(&mut self) -> bool {
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
struct State {
    dirs: Listings<DirEntry>,
    prefixes: Listings<String>,
    /// Bumped by every write: a listing that started before it is not kept.
    generation: u64,
}

impl State {
    fn entries(&self) -> usize {
        self.dirs.entries + self.prefixes.entries
    }
}

#[derive(Debug)]
pub struct ListCache {
    inner: Arc<dyn Store>,
    ttl: Duration,
    max_entries: usize,
    /// Whether listings hold every key, so that a key not listed is missing (not so over plain
    /// HTTP, whose servers' directory listings may leave out dot files).
    complete: bool,
    state: Mutex<State>,
}

impl ListCache {
    /// `ttl` as `--metadata-ttl` gives it (`Duration::MAX` for indefinite).
    pub fn new(inner: Arc<dyn Store>, ttl: Duration) -> Self {
        Self::with_capacity(inner, ttl, MAX_ENTRIES)
    }

    fn with_capacity(inner: Arc<dyn Store>, ttl: Duration, max_entries: usize) -> Self {
        ListCache {
            inner,
            ttl,
            max_entries,
            complete: true,
            state: Mutex::new(State {
                dirs: Listings::new(),
                prefixes: Listings::new(),
                generation: 0,
            }),
        }
    }

    /// Listings may leave keys out: never answer a lookup from them.
    pub fn incomplete_listings(mut self) -> Self {
        self.complete = false;
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn kept_dir(&self, prefix: &str) -> Option<Arc<Vec<DirEntry>>> {
        self.state().dirs.fresh(prefix, self.ttl)
    }

    fn kept_prefix(&self, prefix: &str) -> Option<Arc<Vec<String>>> {
        self.state().prefixes.fresh(prefix, self.ttl)
    }

    /// Whether the kept listing of the directory holding `key` lists it: a file, or for a
    /// directory prefix (ending in `/`) a directory. `None` when that listing is not kept.
    fn listed(&self, key: &str) -> Option<bool> {
        let (path, want_dir) = match key.strip_suffix('/') {
            Some(dir) => (dir, true),
            None => (key, false),
        };
        if path.is_empty() || !self.complete {
            return None;
        }
        let (parent, name) = match path.rfind('/') {
            Some(i) => (&path[..=i], &path[i + 1..]),
            None => ("", path),
        };
        let kept = self.kept_dir(parent)?;
        Some(
            kept.iter()
                .any(|e| e.name == name && (e.kind == super::EntryKind::Dir) == want_dir),
        )
    }

    fn generation(&self) -> u64 {
        self.state().generation
    }

    fn keep_dir(&self, prefix: &str, started: (Instant, u64), value: Vec<DirEntry>) {
        // A source that cannot be listed answers with what it has found so far, which grows.
        if !self.inner.capabilities().listable {
            return;
        }
        self.keep(started, value.len(), |state| state.dirs.put(prefix, started.0, value));
    }

    fn keep_prefix(&self, prefix: &str, started: (Instant, u64), value: Vec<String>) {
        self.keep(started, value.len(), |state| {
            state.prefixes.put(prefix, started.0, value)
        });
    }

    /// Keep a listing of `len` entries (by `put`) unless a write came since it `started`,
    /// then drop the least recently used listings until the entries fit (directory listings
    /// first: they are the many small ones).
    fn keep(&self, started: (Instant, u64), len: usize, put: impl FnOnce(&mut State)) {
        let mut state = self.state();
        if state.generation != started.1 || len > self.max_entries {
            return;
        }
        put(&mut state);
        while state.entries() > self.max_entries && (state.dirs.drop_oldest() || state.prefixes.drop_oldest()) {}
    }

    /// A key changes (or a directory prefix, ending in `/`): drop what listed it.
    fn changed(&self, key: &str) {
        let mut state = self.state();
        state.generation += 1;
        // Every directory above the key, and the key itself when it is a directory prefix.
        for dir in std::iter::once("").chain(key.match_indices('/').map(|(i, _)| &key[..=i])) {
            state.dirs.drop(dir);
        }
        let covering: Vec<String> = state
            .prefixes
            .kept
            .iter()
            .filter(|(p, _)| key.starts_with(p.as_str()))
            .map(|(p, _)| p.clone())
            .collect();
        for p in covering {
            state.prefixes.drop(&p);
        }
        // A directory prefix changed as a whole (erased): nothing listed below it holds.
        if key.is_empty() || key.ends_with('/') {
            state.dirs.drop_below(key);
            state.prefixes.drop_below(key);
        }
    }
}

invalidating_store! {
#[deny(clippy::missing_trait_methods)]
impl Store for ListCache {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        self.inner.get(key, opts).await
    }

    /// A key its directory's kept listing does not hold is missing: no request.
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if self.listed(key) == Some(false) {
            return Ok(None);
        }
        self.inner.head(key).await
    }

    async fn get_partial_values(&self, requests: &[(String, super::ByteRange)]) -> StoreResult<Vec<Option<GetResult>>> {
        self.inner.get_partial_values(requests).await
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        if let Some(kept) = self.kept_prefix(prefix) {
            return Ok(kept.as_ref().clone());
        }
        let started = (Instant::now(), self.generation());
        let listed = self.inner.list_prefix(prefix).await?;
        self.keep_prefix(prefix, started, listed.clone());
        Ok(listed)
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        if let Some(kept) = self.kept_dir(prefix) {
            return Ok(kept.as_ref().clone());
        }
        let started = (Instant::now(), self.generation());
        let listed = self.inner.list_dir(prefix).await?;
        self.keep_dir(prefix, started, listed.clone());
        Ok(listed)
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        if let Some(kept) = self.kept_dir(prefix) {
            // An empty listing of an incomplete source does not say the directory is missing.
            if self.complete || !kept.is_empty() {
                return Ok(!kept.is_empty());
            }
        }
        if let Some(listed) = self.listed(prefix) {
            return Ok(listed);
        }
        self.inner.dir_exists(prefix).await
    }

    async fn list(&self) -> StoreResult<Vec<String>> {
        self.list_prefix("").await
    }
}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counting::CountingStore;
    use crate::store::memory::MemoryStore;
    use crate::store::Precondition;
    use bytes::Bytes;

    async fn setup(ttl: Duration, max_entries: usize) -> (Arc<CountingStore>, ListCache) {
        let memory = Arc::new(MemoryStore::new());
        for key in ["a/b/0", "a/b/1", "a/c", "x/0"] {
            memory.set(key, Bytes::from_static(b"v")).await.unwrap();
        }
        let counting = Arc::new(CountingStore::new(memory));
        let cache = ListCache::with_capacity(counting.clone(), ttl, max_entries);
        (counting, cache)
    }

    fn names(entries: &[DirEntry]) -> Vec<&str> {
        entries.iter().map(|e| e.name.as_str()).collect()
    }

    #[tokio::test]
    async fn listings_are_kept_for_the_ttl() {
        let (counting, cache) = setup(Duration::from_millis(200), MAX_ENTRIES).await;
        assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["b", "c"]);
        assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["b", "c"]);
        assert!(cache.dir_exists("a/").await.unwrap());
        assert_eq!(cache.list_prefix("a/b").await.unwrap(), ["a/b/0", "a/b/1"]);
        assert_eq!(cache.list_prefix("a/b").await.unwrap(), ["a/b/0", "a/b/1"]);
        let counts = counting.counts();
        assert_eq!((counts.list_dir, counts.list, counts.head), (1, 1, 0));
        tokio::time::sleep(Duration::from_millis(250)).await;
        cache.list_dir("a/").await.unwrap();
        cache.list_prefix("a/b").await.unwrap();
        assert_eq!((counting.counts().list_dir, counting.counts().list), (2, 2));
    }

    #[tokio::test]
    async fn a_zero_ttl_keeps_nothing() {
        let (counting, cache) = setup(Duration::ZERO, MAX_ENTRIES).await;
        cache.list_dir("a/").await.unwrap();
        cache.list_dir("a/").await.unwrap();
        assert_eq!(counting.counts().list_dir, 2);
    }

    #[tokio::test]
    async fn writes_drop_the_listings_above_them() {
        let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
        for dir in ["", "a/", "a/b/", "x/"] {
            cache.list_dir(dir).await.unwrap();
        }
        cache.list_prefix("a/").await.unwrap();
        cache.list_prefix("x").await.unwrap();
        let before = counting.counts();
        cache.set("a/b/2", Bytes::from_static(b"new")).await.unwrap();
        assert_eq!(names(&cache.list_dir("a/b/").await.unwrap()), ["0", "1", "2"]);
        cache.list_dir("a/").await.unwrap();
        cache.list_dir("").await.unwrap();
        cache.list_dir("x/").await.unwrap(); // untouched: still kept
        assert_eq!(
            cache.list_prefix("a/").await.unwrap(),
            ["a/b/0", "a/b/1", "a/b/2", "a/c"]
        );
        cache.list_prefix("x").await.unwrap(); // untouched
        let after = counting.counts();
        assert_eq!((after.list_dir - before.list_dir, after.list - before.list), (3, 1));

        cache.erase_if("a/b/0", Precondition::Any).await.unwrap();
        cache.rename("a/c", "x/1").await.unwrap();
        assert_eq!(names(&cache.list_dir("a/b/").await.unwrap()), ["1", "2"]);
        assert_eq!(names(&cache.list_dir("a/").await.unwrap()), ["b"]);
        assert_eq!(names(&cache.list_dir("x/").await.unwrap()), ["0", "1"]);
        assert!(!cache.dir_exists("q/").await.unwrap());
    }

    #[tokio::test]
    async fn a_kept_listing_answers_lookups() {
        let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
        cache.list_dir("a/").await.unwrap();
        let before = counting.counts();
        assert!(cache.head("a/nothing").await.unwrap().is_none());
        assert!(cache.head("a/b").await.unwrap().is_none(), "a directory is not a key");
        assert!(cache.dir_exists("a/b/").await.unwrap());
        assert!(!cache.dir_exists("a/c/").await.unwrap(), "a key is not a directory");
        assert!(!cache.dir_exists("a/zz/").await.unwrap());
        assert_eq!(counting.counts(), before, "answered from the listing");
        assert_eq!(cache.head("a/c").await.unwrap().map(|m| m.size), Some(1));
        assert!(cache.head("x/0").await.unwrap().is_some(), "not listed: asked");
        assert_eq!(counting.counts().head - before.head, 2);
        cache.set("a/new", Bytes::from_static(b"n")).await.unwrap();
        assert!(
            cache.head("a/new").await.unwrap().is_some(),
            "written through the cache"
        );

        let cache = cache.incomplete_listings();
        assert!(cache.head("a/nothing").await.unwrap().is_none());
        assert!(cache.dir_exists("a/b/").await.unwrap());
        // Asked: "a/c", "x/0", "a/new" (its listing was dropped by the write), then these two.
        assert_eq!(counting.counts().head - before.head, 5, "incomplete listings: asked");
    }

    #[tokio::test]
    async fn a_listing_that_raced_a_write_is_not_kept() {
        let (counting, cache) = setup(Duration::from_secs(600), MAX_ENTRIES).await;
        let started = (Instant::now(), cache.generation());
        let listed = counting.list_dir("a/b/").await.unwrap(); // read before the write landed
        cache.set("a/b/2", Bytes::from_static(b"new")).await.unwrap();
        cache.keep_dir("a/b/", started, listed);
        assert_eq!(names(&cache.list_dir("a/b/").await.unwrap()), ["0", "1", "2"]);
    }

    #[tokio::test]
    async fn entries_held_are_bounded() {
        let (counting, cache) = setup(Duration::from_secs(600), 3).await;
        cache.list_dir("a/b/").await.unwrap(); // 2 entries
        cache.list_dir("a/").await.unwrap(); // 2 more: "a/b/" is dropped
        assert!(cache.state().entries() <= 3);
        cache.list_dir("a/").await.unwrap();
        assert_eq!(counting.counts().list_dir, 2, "the most recent listing stays");
        cache.list_dir("a/b/").await.unwrap();
        assert_eq!(counting.counts().list_dir, 3, "the oldest was dropped");
        assert_eq!(cache.list_prefix("").await.unwrap().len(), 4); // more than fit: not kept
        assert!(cache.state().entries() <= 3);
    }
}
