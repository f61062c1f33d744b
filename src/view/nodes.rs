//! What a directory is, as far as the view cares: a plain directory (or group), a group whose
//! document the view rewrites (its consolidated metadata describes sharded arrays), an array
//! shown as stored, or a sharded array shown unsharded. Found from the directory's `zarr.json`
//! and cached per directory, bounded in entries, revalidated against the metadata's version
//! after a time-to-live. Bad metadata is logged once per version and the node is shown raw.
//!
//! One fetch per directory is in flight at a time ([`Flights`]): a lookup that needs a kind
//! being read (by the metadata warm-up, `warm_up`, or another lookup) waits for it and takes
//! the answer it cached, instead of sending the same request. An answer read while the
//! directory's entry was dropped (its metadata written through the mount) is not cached.
//!
//! Arrays created through the mount with sharding are shown as stored for the rest of the
//! mount's life ([`NodeCache::show_as_stored`]): their client writes whole shards as files, and
//! reinterpreting them as inner chunks once the cache expires would store garbage. The set is
//! consulted before any cached answer, and the entries of every directory above such an array
//! are dropped when it joins the set (their group documents may describe it).

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lru::LruCache;

mod kinds;
mod writes;

pub use super::group_doc::GroupNode;
use super::node_documents::Fetched;
use crate::shard::{IndexCache, ShardOptions, ShardedArray};
use crate::store::key::dir_prefix;
use crate::store::prefetch::{first_use, PrefetchStats};
use crate::store::single_flight::Flights;
use crate::store::{GetResult, ObjectMeta, Store, StoreError, Version};
use crate::zarr::draft::DraftLayout;
pub use writes::NodeWrite;
use writes::NodeWrites;

/// How many directories' node kinds are remembered.
const NODE_CACHE_ENTRIES: usize = 65_536;

/// A sharded array as the view shows it.
#[derive(Debug)]
pub struct ShardedNode {
    /// The array's directory (`""` for the root): where its chunk keys are.
    pub dir: String,
    /// The key of its stored metadata document (`<dir>/zarr.json`, or a draft's
    /// `meta/…array.json`).
    pub meta_key: String,
    /// The draft whose layout it follows, if any.
    pub draft: Option<DraftLayout>,
    pub array: Arc<ShardedArray>,
    /// The view's `zarr.json`.
    pub rewritten: Bytes,
    /// The stored `zarr.json` as parsed (its sharding configuration is what writes restore).
    pub stored: serde_json::Value,
    pub mtime_ns: Option<i128>,
}

#[derive(Debug, Clone)]
pub enum NodeInfo {
    /// A directory or group: arrays may lie below.
    Plain,
    /// The root of a draft hierarchy: its arrays' data directories are placed by
    /// [`NodeCache::draft_info`].
    Draft(DraftLayout),
    /// A group shown with a rewritten document; arrays may lie below.
    Group(Arc<GroupNode>),
    /// An array shown as stored; nothing below it is a node.
    Array,
    Sharded(Arc<ShardedNode>),
}

#[derive(Debug)]
pub(super) struct Cached {
    pub(super) info: NodeInfo,
    /// The metadata document the kind was read from (or the first one looked for).
    key: String,
    version: Option<Version>,
    checked_at: Instant,
    /// Read by the warm-up and not used by anyone else yet.
    prefetched: bool,
}

#[derive(Debug)]
pub struct NodeCache {
    pub(super) store: Arc<dyn Store>,
    pub(super) index_cache: Arc<IndexCache>,
    pub(super) shard_options: ShardOptions,
    ttl: Duration,
    pub(super) entries: Mutex<LruCache<String, Cached>>,
    /// Directories whose arrays are shown as stored whatever they hold (created through the
    /// mount with sharding).
    as_stored: Mutex<HashSet<String>>,
    /// Fetches in flight, by directory.
    flights: Flights,
    /// Bumped whenever entries are dropped: an answer read across it is not cached.
    pub(super) generation: AtomicU64,
    /// Writes of documents through the mount in flight, by directory.
    pub(super) writes: NodeWrites,
    pub(super) stats: Arc<PrefetchStats>,
}

impl NodeCache {
    pub fn new(
        store: Arc<dyn Store>,
        index_cache: Arc<IndexCache>,
        shard_options: ShardOptions,
        ttl: Duration,
        stats: Arc<PrefetchStats>,
    ) -> Self {
        let cap = NonZeroUsize::new(NODE_CACHE_ENTRIES).unwrap_or(NonZeroUsize::MIN);
        NodeCache {
            store,
            index_cache,
            shard_options,
            ttl,
            entries: Mutex::new(LruCache::new(cap)),
            as_stored: Mutex::default(),
            flights: Flights::default(),
            generation: AtomicU64::new(0),
            writes: NodeWrites::default(),
            stats,
        }
    }

    /// How long a kind is trusted before its document's version is checked again.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether arrays at `dir` are shown as stored for the rest of the mount's life.
    pub fn is_shown_as_stored(&self, dir: &str) -> bool {
        self.as_stored.lock().unwrap_or_else(|e| e.into_inner()).contains(dir)
    }

    /// Show any array at `dir` as stored for the rest of the mount's life. Returns whether it
    /// was not so already.
    pub fn show_as_stored(&self, dir: &str) -> bool {
        let added = self
            .as_stored
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dir.to_string());
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        entries.pop(dir);
        for (i, _) in dir.match_indices('/') {
            entries.pop(&dir[..i]);
        }
        entries.pop("");
        added
    }

    fn cached(&self, dir: &str) -> Option<(NodeInfo, Option<Version>, Duration)> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let c = entries.get_mut(dir)?;
        let age = c.checked_at.elapsed();
        if age < self.ttl {
            first_use(&mut c.prefetched, &self.stats);
        }
        Some((c.info.clone(), c.version.clone(), age))
    }

    /// The cached kind of `dir` if it was checked less than the TTL ago.
    fn fresh(&self, dir: &str) -> Option<NodeInfo> {
        self.cached(dir)
            .filter(|(_, _, age)| *age < self.ttl)
            .map(|(info, ..)| info)
    }

    /// Whether `dir` was seen holding a metadata document less than the TTL ago: a directory.
    pub fn known_dir(&self, dir: &str) -> bool {
        matches!(self.cached(dir), Some((_, Some(_), age)) if age < self.ttl)
    }

    /// Whether `dir` was seen holding a `zarr.json` longer than the TTL ago: [`info`](Self::info)
    /// checks whether it still does with one request.
    pub fn known_dir_to_revalidate(&self, dir: &str) -> bool {
        let key = format!("{}zarr.json", dir_prefix(dir));
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .peek(dir)
            .is_some_and(|c| c.version.is_some() && c.key == key && c.checked_at.elapsed() >= self.ttl)
    }

    /// Cache what was read of `dir`, unless entries were dropped since generation `started`.
    fn remember(&self, dir: &str, info: NodeInfo, key: String, version: Option<Version>, started: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation.load(Ordering::SeqCst) != started {
            return;
        }
        entries.put(
            dir.to_string(),
            Cached {
                info,
                key,
                version,
                checked_at: Instant::now(),
                prefetched: crate::store::prefetch::prefetching(),
            },
        );
    }

    /// A write of `dir`'s document through the mount is starting; its answer goes to
    /// [`stored`](Self::stored).
    pub fn writing(&self, dir: &str) -> NodeWrite<'_> {
        self.writes.begin(dir)
    }

    /// The document `key` of `write`'s directory was just stored as `bytes`, at `version`: its
    /// kind is what they say, cached as if read (a client writing a node and then its chunks
    /// would otherwise make the view read back each document it wrote). Unless the write was
    /// disturbed (see [`writes`]): then the directory is forgotten, and read when next needed.
    pub fn stored(&self, write: NodeWrite<'_>, key: &str, bytes: Bytes, version: Version) {
        let dir = write.dir.clone();
        let meta = ObjectMeta {
            size: bytes.len() as u64,
            version: version.clone(),
            mtime_ns: crate::store::now_ns(),
        };
        let info = self.load(&dir, key, &GetResult { bytes, offset: 0, meta });
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        // Answers read before it are of the document it replaced: not cached.
        self.generation.fetch_add(1, Ordering::SeqCst);
        // Checked under the entries' lock, which a forget holds while it disturbs writes.
        if write.disturbed() {
            entries.pop(&dir);
            return;
        }
        entries.put(
            dir,
            Cached {
                info,
                key: key.to_string(),
                version: Some(version),
                checked_at: Instant::now(),
                prefetched: false,
            },
        );
    }

    /// Forget what is known of `dir` (its metadata was just written).
    pub fn forget(&self, dir: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        entries.pop(dir);
        self.writes.disturb(dir);
    }

    /// The kind of the directory `dir` (of a final hierarchy, or the root of any).
    pub async fn info(&self, dir: &str) -> Result<NodeInfo, StoreError> {
        let key = format!("{}zarr.json", dir_prefix(dir));
        self.info_from(dir, std::slice::from_ref(&key), None).await
    }

    /// The kind of the directory `dir` of a draft hierarchy: a sharded array when its
    /// metadata document (`meta/…array.json`) says so, else plain. Outside the data tree no
    /// document is looked for.
    pub async fn draft_info(&self, dir: &str, layout: DraftLayout) -> Result<NodeInfo, StoreError> {
        let keys = layout.array_keys_for_data_dir(dir);
        if keys.is_empty() {
            return Ok(NodeInfo::Plain);
        }
        self.info_from(dir, &keys, Some(layout)).await
    }

    /// The kind of `dir` from the first of `keys` that is stored (cached for the TTL, then
    /// revalidated by the document's version). One fetch per directory at a time.
    async fn info_from(&self, dir: &str, keys: &[String], draft: Option<DraftLayout>) -> Result<NodeInfo, StoreError> {
        if let Some(info) = self.fresh(dir) {
            return Ok(info);
        }
        // A TTL of zero caches nothing that a waiter could take.
        let _flight = if self.ttl.is_zero() {
            None
        } else {
            let (flight, waited) = self.flights.board(dir).await;
            if waited {
                self.stats.joined();
                if let Some(info) = self.fresh(dir) {
                    return Ok(info);
                }
            }
            Some(flight)
        };
        let started = self.generation.load(Ordering::SeqCst);
        if let Some((info, version, _)) = self.cached(dir) {
            let key = self.cached_key(dir).unwrap_or_default();
            self.stats.document_sent();
            let current = self.store.head(&key).await?.map(|m| m.version);
            if current == version && (version.is_some() || keys.len() == 1) {
                self.remember(dir, info.clone(), key, version, started);
                return Ok(info);
            }
        }
        for key in keys {
            let got = match draft {
                Some(_) => self.document(key).await?.map(Fetched::Whole),
                None => self.document_or_group(dir, key).await?,
            };
            let Some(got) = got else { continue };
            let (info, version) = match got {
                Fetched::BigGroup(node, version) => (NodeInfo::Group(node), version),
                Fetched::Whole(got) => {
                    let info = match draft {
                        Some(layout) => self.load_draft(dir, key, &got, layout),
                        None => self.load(dir, key, &got),
                    };
                    (info, got.meta.version)
                }
            };
            self.remember(dir, info.clone(), key.clone(), Some(version), started);
            return Ok(info);
        }
        let first = keys.first().cloned().unwrap_or_default();
        self.remember(dir, NodeInfo::Plain, first, None, started);
        Ok(NodeInfo::Plain)
    }

    fn cached_key(&self, dir: &str) -> Option<String> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(dir).map(|c| c.key.clone())
    }

    /// The arrays below `dir` shown as stored, by their paths relative to it.
    pub(super) fn shown_as_stored_below(&self, dir: &str) -> Vec<String> {
        let prefix = dir_prefix(dir);
        let as_stored = self.as_stored.lock().unwrap_or_else(|e| e.into_inner());
        as_stored
            .iter()
            .filter_map(|d| d.strip_prefix(&prefix))
            .map(str::to_string)
            .collect()
    }
}
