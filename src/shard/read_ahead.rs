//! Hiding round trips to the store: shard indexes fetched many at a time, once each, and
//! ahead of a walk.
//!
//! On an object store a request costs a round trip (tens of milliseconds to a cloud region),
//! so what matters is how many go out *one after another*:
//!
//! - **Once each.** Loads of a shard's index are single-flight: a lookup that needs an index
//!   another task is fetching waits for that fetch and then finds it cached, rather than
//!   sending the same request again.
//! - **Many at a time.** A listing needs the index of every shard below its directory. They
//!   are fetched concurrently, before the listing reads them one by one from the cache; the
//!   shard directories it walks are listed concurrently too. At most [`INDEX_FETCHES`] go out
//!   at once, and fewer when each brings a prefetch window: no more windows in flight than
//!   fit in a quarter of the data cache (at least 2), so memory stays near `--cache-size`.
//! - **Ahead of a walk.** Walkers (`find`, `ls -R`, `du`, `cp -r`, `rsync`) list a chunk
//!   directory and then its subdirectories, or its next siblings, in order. Listing a chunk
//!   directory therefore starts a background fetch of the shards the walk reaches next: those
//!   below it (a directory above the last level) and those of the next shard directories at
//!   its level. The walk's own listings and reads then join these fetches.
//! - **Bytes only for readers.** An index can bring its prefetch window of shard bytes along
//!   in the same request (the whole shard when it fits), which saves a copy a request per
//!   shard, and costs a listing walk (`find`, `du`) the bytes of every shard it lists. So each
//!   array watches its walkers: a listing of a last-level directory that follows another with
//!   no read of the array in between means the walk only lists, and its indexes are fetched
//!   alone from then on; a read (or a listing after reads) means it copies, and windows come
//!   along again. Until the array has been walked either way, read-ahead fetches windows
//!   for a sixteenth of the data cache at most. A read of a shard whose bytes were not fetched
//!   with its index gets a window (the whole shard when it fits) in its one request.
//!
//! Read-ahead is bounded: at most [`READ_AHEAD_SHARDS`] shards per listing, and the bytes it
//! holds in flight and unread in the shard-data cache stay under a quarter of that cache, so
//! memory stays within `--cache-size` and a walk's recent shards are not pushed out. Only
//! shards whose index is not cached fresh are fetched; a failed fetch is left for the walk's
//! own reads to meet and report. Its counters (`zarrfs stats`): indexes fetched ahead, shard
//! bytes fetched without a read asking (with listings and ahead), and of those the bytes a
//! read used or that left the cache unread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use futures::StreamExt;

use super::ShardedArray;

/// Requests in flight at once for one listing or one read-ahead, at most.
pub(super) const INDEX_FETCHES: usize = 32;
/// Most shards one listing reads ahead.
pub(super) const READ_AHEAD_SHARDS: usize = 256;
/// Next shard directories at the listed level whose shards are read ahead.
const NEXT_SHARD_DIRS: u64 = 2;

/// What the walkers of an array do with what they list (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Not walked yet.
    Unknown,
    /// Walkers read what they list: windows come with indexes.
    Copying,
    /// Walkers only list: indexes come alone.
    Listing,
}

/// The walk of one array.
#[derive(Debug)]
pub(super) struct Walk {
    /// Reads of the array's chunks so far.
    reads: AtomicU64,
    /// The mode, and `reads` at the last listing of a last-level directory.
    state: Mutex<(Mode, Option<u64>)>,
}

impl Default for Walk {
    fn default() -> Self {
        Walk {
            reads: AtomicU64::new(0),
            state: Mutex::new((Mode::Unknown, None)),
        }
    }
}

impl Walk {
    fn state(&self) -> std::sync::MutexGuard<'_, (Mode, Option<u64>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mode(&self) -> Mode {
        self.state().0
    }
}

/// Per-shard locks that make index loads single-flight.
#[derive(Debug, Default)]
pub(super) struct Loads {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Bytes of windows that listings' loads in flight may bring.
    windows_in_flight: AtomicU64,
    /// The largest window a load of this array brought, or that a listed shard's size
    /// allows (0: none known yet).
    pub(super) window_seen: AtomicU64,
}

/// Room taken for one window in flight (see [`ShardedArray::listing_window`]).
pub(super) struct Room<'a> {
    loads: &'a Loads,
    bytes: u64,
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        self.loads.windows_in_flight.fetch_sub(self.bytes, Relaxed);
    }
}

/// The lock of one shard's load, held while loading it.
pub(super) struct LoadGuard<'a> {
    loads: &'a Loads,
    key: String,
    lock: Arc<tokio::sync::Mutex<()>>,
    _held: tokio::sync::OwnedMutexGuard<()>,
}

impl Loads {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.locks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until no other task loads `key`'s index, and hold it: the caller checks the cache
    /// again (the other task's load is there now) and loads it only if it is still missing.
    pub(super) async fn lock(&self, key: &str) -> LoadGuard<'_> {
        let lock = self.map().entry(key.to_string()).or_default().clone();
        let held = lock.clone().lock_owned().await;
        LoadGuard {
            loads: self,
            key: key.to_string(),
            lock,
            _held: held,
        }
    }
}

impl Drop for LoadGuard<'_> {
    fn drop(&mut self) {
        let mut map = self.loads.map();
        // Ours and the map's: nobody else waits (a waiter clones under this same map lock).
        if Arc::strong_count(&self.lock) == 2 {
            map.remove(&self.key);
        }
    }
}

impl ShardedArray {
    /// How many index loads go out at once: [`INDEX_FETCHES`], or as many prefetch windows as
    /// fit in the room the walk's mode leaves (see [`ahead_budget`](Self::ahead_budget)), but
    /// at least 2.
    fn index_fetches(&self) -> usize {
        let mode = self.walk.mode();
        match &self.options.data_cache {
            Some(_) if self.options.prefetch_bytes > 0 && mode != Mode::Listing => {
                let windows = self.ahead_budget(mode) / self.window_estimate().max(1);
                usize::try_from(windows).unwrap_or(usize::MAX).clamp(2, INDEX_FETCHES)
            }
            _ => INDEX_FETCHES,
        }
    }

    /// A chunk of the array is read.
    pub(super) fn note_read(&self) {
        self.walk.reads.fetch_add(1, Relaxed);
        let mut state = self.walk.state();
        state.0 = Mode::Copying;
    }

    /// A last-level chunk directory is listed: if another was listed before with no read in
    /// between, the walk only lists.
    pub(super) fn note_leaf_listing(&self) {
        let reads = self.walk.reads.load(Relaxed);
        let mut state = self.walk.state();
        if state.1 == Some(reads) {
            state.0 = Mode::Listing;
        }
        state.1 = Some(reads);
    }

    /// Whether indexes fetched for a listing bring their prefetch windows.
    /// Bytes fetched before a read asks that may be held unread, by what walkers do: a
    /// quarter of the data cache for a copy, a sixteenth before the walk shows itself.
    fn ahead_budget(&self, mode: Mode) -> u64 {
        let capacity = self.options.data_cache.as_ref().map_or(0, |d| d.capacity() as u64);
        match mode {
            Mode::Copying => capacity / 4,
            Mode::Unknown => capacity / 16,
            Mode::Listing => 0,
        }
    }

    /// Whether an index fetched for a listing brings its prefetch window: not for a walk that
    /// only lists, and only while the unread bytes fetched ahead leave room for it (a listing
    /// spanning more shards than the cache holds would push its own windows out unread).
    /// Room is taken for the window until the returned guard is dropped (the load is done and
    /// its bytes counted as unread), so listings loading many shards at once stay within it.
    pub(super) fn listing_window(&self) -> Option<Room<'_>> {
        let mode = self.walk.mode();
        if mode == Mode::Listing {
            return None;
        }
        self.room(self.window_estimate(), self.ahead_budget(mode))
    }

    /// Room for a window of `window` bytes, if the unread bytes fetched ahead and the windows
    /// in flight leave it within `budget`; taken until the guard is dropped.
    fn room(&self, window: u64, budget: u64) -> Option<Room<'_>> {
        let unread = self.options.data_cache.as_ref().map_or(0, |d| d.unread_ahead());
        let taken = self.loads.windows_in_flight.fetch_add(window, Relaxed);
        let room = Room {
            loads: &self.loads,
            bytes: window,
        };
        (unread.saturating_add(taken).saturating_add(window) <= budget).then_some(room)
    }

    /// A shard of this size was listed: a window of its shard brings as much, at most.
    pub(super) fn listed_shard_size(&self, kind: &crate::store::EntryKind) {
        if let crate::store::EntryKind::File { size } = kind {
            let window = (*size).min(self.options.prefetch_bytes);
            self.loads.window_seen.fetch_max(window, Relaxed);
        }
    }

    /// The bytes a window is expected to bring: the largest one seen so far (the shards of
    /// an array are alike), or the whole prefetch window before any.
    fn window_estimate(&self) -> u64 {
        match self.loads.window_seen.load(Relaxed) {
            0 => self.options.prefetch_bytes,
            seen => seen.min(self.options.prefetch_bytes),
        }
    }

    /// Whether a read of a shard none of whose bytes are cached fetches a window: when the
    /// shard's window is small beside the cache (a sixteenth), so that the shards a reader
    /// goes through together stay; otherwise the read fetches its own bytes, and a reader
    /// walking the shard gets it whole after a few misses.
    pub(super) fn window_for_first_read(&self, shard_size: Option<u64>) -> bool {
        let capacity = self.options.data_cache.as_ref().map_or(0, |d| d.capacity() as u64);
        let window = match shard_size {
            Some(size) => size.min(self.options.prefetch_bytes),
            None => self.options.prefetch_bytes,
        };
        self.options.prefetch_bytes > 0 && window <= capacity / 16
    }

    /// Fetch the indexes of `shards` that are not cached fresh, [`index_fetches`](Self::index_fetches)
    /// at a time, for a listing. Failures are not reported here: the caller's own look at each
    /// shard meets them.
    pub(super) async fn fetch_indexes(&self, shards: &[Vec<u64>]) {
        let keys: Vec<String> = shards
            .iter()
            .map(|s| self.shard_key(s))
            .filter(|k| !self.index_is_fresh(k))
            .collect();
        if keys.len() < 2 {
            return; // one is fetched by the caller's own look, with nothing to overlap
        }
        let mut keys = keys.into_iter();
        if self.walk.mode() != Mode::Listing && self.loads.window_seen.load(Relaxed) == 0 {
            // How large a window is, before many are fetched at once within the room left.
            if let Some(first) = keys.next() {
                let _ = self.top_index_listed(&first).await;
            }
        }
        futures::stream::iter(keys)
            .for_each_concurrent(self.index_fetches(), |key| async move {
                let _ = self.top_index_listed(&key).await;
            })
            .await;
    }

    /// A walk listed the chunk directory `prefix` (`/` separators): fetch, in the background,
    /// the shards it reaches next (see the module's documentation).
    pub(super) fn read_ahead_after(&self, prefix: &[u64]) {
        if self.options.data_cache.is_none() || !self.store.capabilities().listable {
            return; // local stores (nothing to hide), and stores that cannot be listed
        }
        let Some(me) = self.me.get().and_then(|w| w.upgrade()) else {
            return;
        };
        let prefix = prefix.to_vec();
        tokio::spawn(async move { me.read_ahead(prefix).await });
    }

    async fn read_ahead(&self, prefix: Vec<u64>) {
        let shard_prefix = self.shard_prefix_of(&prefix);
        let mut dirs = Vec::new();
        if prefix.len() + 1 < self.ndim() {
            dirs.push(shard_prefix.clone());
        }
        if let Some((last, lead)) = shard_prefix.split_last() {
            let shards_along = self.shards_along(lead.len());
            for next in (last + 1..shards_along).take(NEXT_SHARD_DIRS as usize) {
                let mut dir = lead.to_vec();
                dir.push(next);
                dirs.push(dir);
            }
        }
        let mut shards = Vec::new();
        for dir in dirs {
            match self.shards_under(&dir).await {
                Ok(found) => shards.extend(found),
                Err(_) => return, // the walk's own listing meets it
            }
            if shards.len() >= READ_AHEAD_SHARDS {
                break;
            }
        }
        shards.truncate(READ_AHEAD_SHARDS);
        self.fetch_ahead(shards).await;
    }

    /// Load `shards`' indexes not cached fresh: with their prefetch windows within the byte
    /// budget of the walk's mode, or alone for a walk that only lists.
    pub(super) async fn fetch_ahead(&self, shards: Vec<Vec<u64>>) {
        if self.options.data_cache.is_none() {
            return;
        }
        let mode = self.walk.mode();
        let budget = match mode {
            Mode::Listing => u64::MAX, // indexes alone
            _ => self.ahead_budget(mode),
        };
        let window = match mode {
            Mode::Listing => 0,
            _ => self.window_estimate().max(1),
        };
        let keys: Vec<String> = shards
            .iter()
            .map(|s| self.shard_key(s))
            .filter(|k| !self.index_is_fresh(k))
            .collect();
        // Windows in flight count against the budget as the unread bytes do (as a listing's):
        // loads stop once they fill it (a window may bring less than the whole window).
        let fetches = match budget.checked_div(window) {
            None => INDEX_FETCHES,
            Some(windows) => usize::try_from(windows).unwrap_or(usize::MAX).clamp(1, INDEX_FETCHES),
        };
        let full = std::sync::atomic::AtomicBool::new(false);
        futures::stream::iter(keys)
            .for_each_concurrent(fetches, |key| {
                let full = &full;
                async move {
                    if window == 0 {
                        let _ = self.top_index_ahead(&key, false).await;
                        return;
                    }
                    if full.load(Relaxed) {
                        return;
                    }
                    match self.room(window, budget) {
                        Some(_room) => drop(self.top_index_ahead(&key, true).await),
                        None => full.store(true, Relaxed),
                    }
                }
            })
            .await;
    }
}
