//! Listing a directory of a source that cannot be listed, by asking for what may be there.
//!
//! - A node's directory: its metadata documents are asked for (`zarr.json`; else `.zarray`,
//!   `.zgroup`, and then a v2 node's `.zattrs` and a v2 group's `.zmetadata`), unless the
//!   documents already read say what it is ([`super::learned_nodes`]).
//! - A directory of an array's chunk keys: every key of the grid below it is asked for with a
//!   HEAD (16 in flight, counted as `key_probes`), when there are at most `--max-probe-shards`
//!   of them. The search is remembered for the metadata TTL: the listing and every directory
//!   below it then answer from what was found, and a chunk key not found is missing without a
//!   request. Beyond the bound, a directory above the last level shows every coordinate of the
//!   grid as a directory (the walk goes on down, where each directory holds fewer keys) and the
//!   last level shows what is known, with a warning naming the option.
//! - A default-encoded array's `c/` is shown when its grid holds any chunk, without asking.
//!
//! The source is read-only (HTTP), so a directory shown that holds nothing costs a client an
//! empty directory, never a wrong write.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lru::LruCache;

use super::learned_nodes::{GridScope, KnownNode, NodeKind};
use super::*;
use crate::zarr::chunk_keys::{KeyDir, KeyGrid};

/// HEAD requests in flight while searching a directory.
const KEY_PROBES: usize = 16;
/// Searches remembered (directories of chunks, and node directories whose documents were
/// asked for).
const SEARCHES_KEPT: usize = 65_536;

/// Most shards whose indexes a listing reads on a store that cannot be listed (and most keys a
/// search asks for there), unless the mount says otherwise (`--max-probe-shards`). Here, in
/// the lowest layer that searches, so that the shard layer above names it and not the reverse.
pub const DEFAULT_MAX_PROBE_SHARDS: u64 = 4096;

/// How far listings search on a source that cannot be listed.
#[derive(Debug, Clone, Copy)]
pub struct SearchOptions {
    /// The most keys one directory's search asks for.
    pub max_keys: u64,
    /// How long a search's results stand (the metadata TTL).
    pub ttl: Duration,
    pub scope: GridScope,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            max_keys: DEFAULT_MAX_PROBE_SHARDS,
            ttl: Duration::from_secs(60),
            scope: GridScope::All,
        }
    }
}

/// Directories searched, and when.
#[derive(Debug)]
pub struct Searches {
    chunk_dirs: Mutex<LruCache<String, Instant>>,
    node_dirs: Mutex<LruCache<String, Instant>>,
    /// What a search's HEADs found, for the lookups that follow a listing.
    found: Mutex<LruCache<String, (ObjectMeta, Instant)>>,
}

impl Default for Searches {
    fn default() -> Self {
        let cap = NonZeroUsize::new(SEARCHES_KEPT).unwrap_or(NonZeroUsize::MIN);
        Searches {
            chunk_dirs: Mutex::new(LruCache::new(cap)),
            node_dirs: Mutex::new(LruCache::new(cap)),
            found: Mutex::new(LruCache::new(cap)),
        }
    }
}

fn fresh(memo: &Mutex<LruCache<String, Instant>>, dir: &str, ttl: Duration) -> bool {
    let mut memo = memo.lock().unwrap_or_else(|e| e.into_inner());
    memo.get(dir).is_some_and(|at| at.elapsed() < ttl)
}

fn mark(memo: &Mutex<LruCache<String, Instant>>, dir: &str) {
    let mut memo = memo.lock().unwrap_or_else(|e| e.into_inner());
    memo.put(dir.to_string(), Instant::now());
}

impl ObjectBackend {
    /// The entries of directory `prefix` of a source that cannot be listed (module docs).
    pub(super) async fn list_by_asking(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        let around = self.nodes.array_around(prefix);
        let unread = |n: &KnownNode| n.grid.is_none() && !n.read;
        match &around {
            // The node's own directory, or an array whose grid its document will tell.
            None => self.ask_node_documents(prefix).await?,
            Some((dir, node)) if dir == prefix || unread(node) => self.ask_node_documents(dir).await?,
            Some(_) => {}
        }
        let mut shown = Vec::new();
        if let Some((array_dir, KnownNode { grid: Some(grid), .. })) = self.nodes.array_around(prefix) {
            shown = self
                .search_chunks(&array_dir, &grid, &prefix[array_dir.len()..])
                .await?;
        }
        let mut entries = self.known_children(prefix);
        for entry in shown {
            if !entries.iter().any(|e| e.name == entry.name) {
                entries.push(entry);
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Whether a directory inside an array with a known grid exists: `None` when `prefix` is
    /// not inside one. A chunk directory is searched (within the bound; beyond it, taken to
    /// exist); nothing else inside an array is looked for.
    pub(super) async fn chunk_dir_exists(&self, prefix: &str) -> StoreResult<Option<bool>> {
        let Some((array_dir, KnownNode { grid: Some(grid), .. })) = self.nodes.array_around(prefix) else {
            return Ok(None);
        };
        if array_dir == prefix {
            return Ok(None);
        }
        let rel = prefix[array_dir.len()..].trim_end_matches('/');
        let KeyDir::Chunks(coords) = grid.place(rel) else {
            return Ok(Some(false));
        };
        if grid.count_below(&coords) > self.search.max_keys {
            return Ok(Some(true));
        }
        self.search_below(&array_dir, &grid, &coords).await?;
        Ok(Some(self.discovered.has_below(prefix)))
    }

    /// What a search found at `key` within the TTL (a lookup that follows a listing sends
    /// nothing).
    pub(super) fn found_by_search(&self, key: &str) -> Option<ObjectMeta> {
        let mut found = self.searches.found.lock().unwrap_or_else(|e| e.into_inner());
        match found.get(key) {
            Some((meta, at)) if at.elapsed() < self.search.ttl => Some(meta.clone()),
            _ => None,
        }
    }

    /// Whether `key` is a chunk key of a directory searched within the TTL that was not found:
    /// missing, without a request.
    pub(super) fn searched_and_missing(&self, key: &str) -> bool {
        let dir = key.rfind('/').map_or("", |i| &key[..=i]);
        let Some((array_dir, KnownNode { grid: Some(grid), .. })) = self.nodes.array_around(dir) else {
            return false;
        };
        let Some(coords) = grid.chunk_of(&key[array_dir.len()..]) else {
            return false;
        };
        self.searched(&array_dir, &grid, &coords[..coords.len().saturating_sub(1)]) && !self.discovered.knows(key)
    }

    /// Whether the chunks with leading coordinates `coords` (or fewer of them) were searched
    /// within the TTL.
    fn searched(&self, array_dir: &str, grid: &KeyGrid, coords: &[u64]) -> bool {
        (0..=coords.len()).any(|k| {
            let dir = format!("{array_dir}{}", grid.dir_of(&coords[..k]));
            fresh(&self.searches.chunk_dirs, &dir, self.search.ttl)
        })
    }

    /// Search the chunk keys of the array directory `rel` (relative to the array at
    /// `array_dir`); returns directories shown without a search (module docs).
    async fn search_chunks(&self, array_dir: &str, grid: &KeyGrid, rel: &str) -> StoreResult<Vec<DirEntry>> {
        let coords = match grid.place(rel.trim_end_matches('/')) {
            KeyDir::Array if grid.flat() => Vec::new(),
            KeyDir::Array => match grid.encoding.top_dir() {
                Some(top) => {
                    let any = grid.count_below(&[]) > 0;
                    return Ok(any.then(|| DirEntry::dir(top)).into_iter().collect());
                }
                None => Vec::new(),
            },
            KeyDir::Chunks(coords) => coords,
            KeyDir::Other => return Ok(Vec::new()),
        };
        let count = grid.count_below(&coords);
        if count <= self.search.max_keys {
            self.search_below(array_dir, grid, &coords).await?;
            return Ok(Vec::new());
        }
        let limit = self.search.max_keys;
        let next = grid.grid.get(coords.len()).copied().unwrap_or(0);
        if !grid.flat() && coords.len() + 1 < grid.ndim() && next <= limit {
            let name = |i| grid.encoding.level_name(coords.len(), i);
            return Ok((0..next).map(|i| DirEntry::dir(name(i))).collect());
        }
        tracing::warn!(
            source = %self.name,
            directory = %format!("{array_dir}{rel}"),
            keys = count,
            "the source cannot be listed and this directory may hold more than --max-probe-shards {limit} chunk keys: \
             not asking for them, so it lists only those already found (its chunks can still be opened by name)"
        );
        Ok(Vec::new())
    }

    /// Ask for every chunk key with leading coordinates `coords` not known yet, unless that was
    /// done within the TTL.
    async fn search_below(&self, array_dir: &str, grid: &KeyGrid, coords: &[u64]) -> StoreResult<()> {
        if self.searched(array_dir, grid, coords) {
            return Ok(());
        }
        let keys: Vec<String> = grid
            .keys_below(coords)
            .into_iter()
            .map(|rel| format!("{array_dir}{rel}"))
            .filter(|key| !self.discovered.knows(key))
            .collect();
        let mut probes = futures::stream::iter(keys)
            .map(|key| async move {
                if let Some(wire) = &self.wire {
                    wire.probed_key();
                }
                let found = self.head(&key).await;
                (key, found)
            })
            .buffer_unordered(KEY_PROBES);
        while let Some((key, probe)) = probes.next().await {
            if let Some(meta) = probe? {
                let mut found = self.searches.found.lock().unwrap_or_else(|e| e.into_inner());
                found.put(key, (meta, Instant::now()));
            }
        }
        mark(
            &self.searches.chunk_dirs,
            &format!("{array_dir}{}", grid.dir_of(coords)),
        );
        Ok(())
    }

    /// Ask for the metadata documents of the node at directory `dir` that are not known yet,
    /// unless that was done within the TTL (module docs).
    async fn ask_node_documents(&self, dir: &str) -> StoreResult<()> {
        if fresh(&self.searches.node_dirs, dir, self.search.ttl) {
            return Ok(());
        }
        let node = self.nodes.get(dir);
        let kind = match node {
            Some(KnownNode { kind, read: true, .. }) => Some(kind),
            Some(KnownNode { kind, .. }) => {
                // Read it: it may tell the grid, and its size is then known exactly.
                self.get(&format!("{dir}{}", kind.document()), GetOptions::default())
                    .await?;
                Some(kind)
            }
            None => self.read_some_node_document(dir).await?,
        };
        let others: &[&str] = match kind {
            Some(NodeKind::V2Array) => &[".zattrs"],
            Some(NodeKind::V2Group) => &[".zgroup", ".zattrs", ".zmetadata"],
            _ => &[],
        };
        for name in others {
            let key = format!("{dir}{name}");
            if !self.discovered.knows(&key) {
                if *name == ".zmetadata" {
                    self.get(&key, GetOptions::default()).await?;
                } else {
                    self.head(&key).await?;
                }
            }
        }
        mark(&self.searches.node_dirs, dir);
        Ok(())
    }

    /// Read the first node document found in `dir` (learning from it); its kind.
    async fn read_some_node_document(&self, dir: &str) -> StoreResult<Option<NodeKind>> {
        for kind in [NodeKind::V3Group, NodeKind::V2Array, NodeKind::V2Group] {
            if self
                .get(&format!("{dir}{}", kind.document()), GetOptions::default())
                .await?
                .is_some()
            {
                return Ok(self.nodes.get(dir).map(|n| n.kind).or(Some(kind)));
            }
        }
        Ok(None)
    }
}
