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
//! (`head`, `get`) and whether a directory exists (`dir_exists`): the lookups of a directory
//! walk. Over plain HTTP, where listings come from a web server's index pages or WebDAV and may
//! leave names out (dot files), only the names a listing shows are answered from it: a name
//! listed as a directory is no file, and is a directory. `dir_exists` of a listable store is
//! answered by listing the directory (one request either way), so the listing is kept too.
//!
//! One listing per directory is in flight at a time ([`single_flight`](super::single_flight)):
//! a caller that needs a listing being taken (by the metadata warm-up, or another lookup)
//! waits for it and is answered from what it kept, instead of sending the same request.
//! Listings taken by the warm-up are counted and marked ([`prefetch`](super::prefetch)).
//!
//! Writes through the mount never meet a stale listing: an erase or rename of a key drops the
//! listings of every directory above it and every prefix listing that covers it; a value
//! written drops its directory's listing and those above that do not show the way down to it
//! yet (the others are unchanged by it); a listing that was in flight while anything was
//! written is not kept. A kept complete listing also says that nothing lies below a directory
//! it does not show. Other writers' changes show once the TTL has passed, as for metadata.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::invalidating::invalidating_store;
use super::prefetch::PrefetchStats;
use super::single_flight::Flights;
use super::{Capabilities, DirEntry, EntryKind, GetOptions, GetResult, ObjectMeta, Store, StoreResult, Version};

mod kept;
use kept::{Listings, State};

/// Entries (names) held across all listings kept.
const MAX_ENTRIES: usize = 1 << 18;

#[derive(Debug)]
pub struct ListCache {
    inner: Arc<dyn Store>,
    ttl: Duration,
    max_entries: usize,
    /// Whether listings hold every key, so that a key not listed is missing (not so over plain
    /// HTTP, whose servers' directory listings may leave out dot files).
    complete: bool,
    state: Mutex<State>,
    /// Listings in flight, by directory.
    flights: Flights,
    stats: Arc<PrefetchStats>,
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
            flights: Flights::default(),
            stats: Arc::default(),
        }
    }

    /// Count prefetched listings, their uses and joined requests in `stats`.
    pub fn with_prefetch_stats(mut self, stats: Arc<PrefetchStats>) -> Self {
        self.stats = stats;
        self
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
        self.state().dirs.fresh(prefix, self.ttl, &self.stats)
    }

    fn kept_prefix(&self, prefix: &str) -> Option<Arc<Vec<String>>> {
        self.state().prefixes.fresh(prefix, self.ttl, &self.stats)
    }

    /// Whether the kept listing of the directory holding `key` lists it: a file, or for a
    /// directory prefix (ending in `/`) a directory. `None` when that listing is not kept, or
    /// when it may leave names out and does not show this one (as either kind). Without that
    /// listing, a complete listing of a directory further up that does not show the next one
    /// down says `key` is missing too (the shards of an empty array: one listing of its chunk
    /// root, not a request per shard).
    fn listed(&self, key: &str) -> Option<bool> {
        let (path, want_dir) = match key.strip_suffix('/') {
            Some(dir) => (dir, true),
            None => (key, false),
        };
        if path.is_empty() {
            return None;
        }
        let (parent, name) = match path.rfind('/') {
            Some(i) => (&path[..=i], &path[i + 1..]),
            None => ("", path),
        };
        let Some(kept) = self.kept_dir(parent) else {
            return self.missing_above(parent).map(|_| false);
        };
        let mut named = kept.iter().filter(|e| e.name == name).peekable();
        if !self.complete && named.peek().is_none() {
            return None;
        }
        Some(named.any(|e| (e.kind == EntryKind::Dir) == want_dir))
    }

    /// Whether a kept complete listing of a directory above `dir` (ending in `/`) does not
    /// show the directory that leads down to it: when that listing was taken, if so.
    fn missing_above(&self, dir: &str) -> Option<Instant> {
        if !self.complete {
            return None;
        }
        let mut below = dir.trim_end_matches('/');
        loop {
            let (parent, name) = match below.rfind('/') {
                Some(i) => (&below[..=i], &below[i + 1..]),
                None if !below.is_empty() => ("", below),
                None => return None,
            };
            let kept = self.state().dirs.fresh_at(parent, self.ttl, &self.stats);
            if let Some((kept, at)) = kept {
                let shown = kept.iter().any(|e| e.name == name && e.kind == EntryKind::Dir);
                return (!shown).then_some(at);
            }
            below = parent.trim_end_matches('/');
        }
    }

    /// [`listed`](Self::listed), after waiting for a listing of the directory holding `key`
    /// that is in flight (its answer may say).
    async fn listed_soon(&self, key: &str) -> Option<bool> {
        if let Some(listed) = self.listed(key) {
            return Some(listed);
        }
        let path = key.strip_suffix('/').unwrap_or(key);
        let parent = path.rfind('/').map_or("", |i| &path[..=i]);
        if path.is_empty() || !self.flights.wait(parent).await {
            return None;
        }
        let listed = self.listed(key);
        if listed.is_some() {
            self.stats.joined();
        }
        listed
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

    /// A value is about to be written at `key`: what is kept changes when it is written.
    fn writing(&self, _key: &str) {}

    /// A value of `stored` bytes is written at `key` (`None`: the write failed, and may have
    /// changed anything: as [`changed`](Self::changed)). Kept listings are brought up to date
    /// in place rather than dropped: its directory's shows it (with this size, and now for its
    /// time), each directory above shows the next one down. So the listing of an empty array's
    /// chunk root stays true while its shards are written, and (see `listed`) a shard not
    /// written yet costs no request, nor does a commit's read of it. A directory that a kept
    /// complete listing did not show holds only what is written there since: its listing is
    /// kept as of that one, so the lookups of names not written there yet (a client's
    /// temporary files, the documents it probes for) cost no request either.
    fn created(&self, key: &str, stored: Option<(&bytes::Bytes, &Version)>) {
        let Some(size) = stored
            .filter(|_| !key.is_empty() && !key.ends_with('/'))
            .map(|(v, _)| v.len() as u64)
        else {
            return self.changed(key);
        };
        let mut state = self.state();
        state.generation += 1;
        let dirs: Vec<&str> = std::iter::once("")
            .chain(key.match_indices('/').map(|(i, _)| &key[..=i]))
            .collect();
        for (i, dir) in dirs.iter().enumerate() {
            match dirs.get(i + 1) {
                Some(next) => {
                    let new_dir = state.dirs.add_dir(dir, next[dir.len()..].trim_end_matches('/'));
                    if let Some(listed_at) = new_dir.filter(|_| self.complete) {
                        if state.dirs.kept.peek(*next).is_none() {
                            state.dirs.put(next, listed_at, Vec::new());
                        }
                    }
                }
                None => state.dirs.add_file(dir, &key[dir.len()..], size),
            }
        }
        state.drop_prefixes_covering(key);
    }

    /// The value at `key` is erased, or the empty directory prefix `key` (ending in `/`)
    /// removed (`gone`: it succeeded; a failed one may have changed anything: as
    /// [`changed`](Self::changed)). Kept listings are brought up to date in place: its
    /// directory's no longer shows it, and a directory whose kept listing is left empty no
    /// longer shows in the one above (an object store keeps no directories), and so on up.
    /// Where a directory's listing is not kept, whether it is left empty is not known: the
    /// listings above it are dropped. So a client removing a tree file by file (`rm -r`,
    /// zarr-python's `rmtree`) is answered from what it listed, not by requests per name.
    fn erased(&self, key: &str, gone: bool) {
        // A directory whose kept listing still shows something is not known to be gone (the
        // store erased below it by itself, or the caller did not find it empty).
        if !gone || key.is_empty() || (key.ends_with('/') && self.kept_dir(key).is_some_and(|k| !k.is_empty())) {
            return self.changed(key);
        }
        let mut state = self.state();
        state.generation += 1;
        if key.ends_with('/') {
            state.dirs.drop_below(key);
            state.prefixes.drop_below(key);
        }
        let (mut path, mut dir) = (key.trim_end_matches('/'), key.ends_with('/'));
        loop {
            let (parent, name) = match path.rfind('/') {
                Some(i) => (&path[..=i], &path[i + 1..]),
                None => ("", path),
            };
            match state.dirs.remove(parent, name, dir, self.ttl) {
                Some(true) if !parent.is_empty() => (path, dir) = (parent.trim_end_matches('/'), true),
                Some(_) => break,
                None => {
                    for above in std::iter::once("").chain(path.match_indices('/').map(|(i, _)| &path[..=i])) {
                        state.dirs.drop(above);
                    }
                    break;
                }
            }
        }
        state.drop_prefixes_covering(key);
    }

    /// A key changes (or a directory prefix, ending in `/`): drop what listed it.
    fn changed(&self, key: &str) {
        let mut state = self.state();
        state.generation += 1;
        // Every directory above the key, and the key itself when it is a directory prefix.
        for dir in std::iter::once("").chain(key.match_indices('/').map(|(i, _)| &key[..=i])) {
            state.dirs.drop(dir);
        }
        state.drop_prefixes_covering(key);
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

    /// A key its directory's kept listing does not hold is missing: no request (unless the
    /// read is pinned to a version, which the store answers itself). Unlike a lookup, a read
    /// does not wait for a listing in flight: what is read is there more often than not.
    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        if opts.if_version.is_none() && self.listed(key) == Some(false) {
            return Ok(None);
        }
        self.inner.get(key, opts).await
    }

    /// A key its directory's kept listing does not hold is missing: no request.
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if self.listed_soon(key).await == Some(false) {
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

    /// One listing of a directory in flight at a time: a caller that finds one waits for it.
    /// A directory a kept listing further up does not show is empty: no request.
    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        if let Some(kept) = self.kept_dir(prefix) {
            return Ok(kept.as_ref().clone());
        }
        if let Some(at) = self.missing_above(prefix) {
            // Kept as listed when the listing above was: writes below update it in place.
            self.keep_dir(prefix, (at, self.generation()), Vec::new());
            return Ok(Vec::new());
        }
        // A TTL of zero keeps nothing that a waiter could be answered from.
        let _flight = if self.ttl.is_zero() {
            None
        } else {
            let (flight, waited) = self.flights.board(prefix).await;
            if waited {
                self.stats.joined();
                if let Some(kept) = self.kept_dir(prefix) {
                    return Ok(kept.as_ref().clone());
                }
            }
            Some(flight)
        };
        let started = (Instant::now(), self.generation());
        self.stats.listing_sent();
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
        if let Some(listed) = self.listed_soon(prefix).await {
            return Ok(listed);
        }
        // A listable store answers by listing: the same one request, and then it is kept.
        if !prefix.is_empty() && self.inner.capabilities().listable {
            let listed = self.list_dir(prefix).await?;
            if !listed.is_empty() || self.inner.capabilities().listable {
                return Ok(!listed.is_empty());
            }
        }
        self.inner.dir_exists(prefix).await
    }

    async fn list(&self) -> StoreResult<Vec<String>> {
        self.list_prefix("").await
    }
}
}

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
