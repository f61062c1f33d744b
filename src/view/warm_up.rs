//! The metadata warm-up of a remote hierarchy, at mount: what the first lookups and reads
//! need, fetched together instead of one request per lookup step.
//!
//! A lookup of `a/b/arr/c/0/0` walks the path one name at a time (the kernel asks for each),
//! and on a remote store each step waited for its own requests: the parent's `zarr.json`, the
//! name's listing, the chunk directories' shard listings. At a cloud round trip of 20–50 ms
//! that is most of the time a first read takes. The warm-up walks the hierarchy breadth
//! first instead, many directories at once, through the same caches the lookups use (the
//! view's node cache, the store's list cache), so the lookups that follow are answered from
//! them, and a lookup that needs something still in flight waits for it rather than asking
//! again (both caches fly one fetch per name at a time).
//!
//! What it fetches, per directory:
//! - a node (the root, or a directory listed by a node with a document): its `zarr.json`
//!   and its listing. Below a v3 group both go out together (its directories are v3 nodes,
//!   whose directories hold little: `zarr.json`, `c/`); elsewhere (below a root without a
//!   `zarr.json`, whose directories may be Zarr v2 arrays of countless chunk files) the
//!   listing waits for the document, and is not taken for an array shown as stored. A
//!   listing already sent is let finish (dropping it could abandon a request between a
//!   failure and its retry). The directories a v3 group lists are walked in turn;
//! - a sharded array: its chunk root (`c/`) and the shard directories listed there (`c/0/`,
//!   `c/1/`, …): what the lookups of chunk directories (`dir_exists`) and the listings of the
//!   first chunk level read. Deeper levels, and shard indexes, are left to the reads.
//!
//! Bounds: at most [`WarmUpLimits::max_dirs`] directories (nodes and chunk directories),
//! [`WarmUpLimits::max_depth`] levels of the hierarchy, [`WarmUpLimits::in_flight`]
//! directories at once (two requests each at most), so a huge hierarchy costs a bounded
//! number of requests, most useful first. Everything it reads is kept for the metadata TTL,
//! like anything a lookup reads, and revalidated after it the same way. It runs inside
//! [`prefetch::scope`], so the mount's statistics say what it sent and what of it was used.
//! Failures are logged at debug level and end that branch of the walk: the lookups will ask
//! again and report them.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};

use super::nodes::{NodeCache, NodeInfo, ShardedNode};
use super::{View, ViewMode};
use crate::store::key::dir_prefix;
use crate::store::{prefetch, DirEntry, EntryKind, Store, StoreError};

/// How far the warm-up goes.
#[derive(Debug, Clone, Copy)]
pub struct WarmUpLimits {
    /// Directories fetched at most (nodes and chunk directories alike).
    pub max_dirs: usize,
    /// Levels of the hierarchy below the root walked at most.
    pub max_depth: usize,
    /// Directories fetched at once (a node's document and listing are two requests).
    pub in_flight: usize,
}

impl Default for WarmUpLimits {
    fn default() -> Self {
        WarmUpLimits {
            max_dirs: 256,
            max_depth: 6,
            in_flight: 16,
        }
    }
}

/// What a warm-up fetched.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WarmedUp {
    /// Nodes of the hierarchy whose document was read (or found missing).
    pub nodes: usize,
    /// Sharded arrays among them.
    pub sharded_arrays: usize,
    /// Directories listed (nodes and chunk directories).
    pub listings: usize,
    /// Fetches that failed (the walk goes on without them).
    pub failures: usize,
    /// Whether the directory budget stopped the walk.
    pub budget_reached: bool,
}

/// One directory to fetch.
enum Job {
    /// A node at `depth` below the root; `together`: its listing goes out with its document.
    Node { dir: String, depth: usize, together: bool },
    /// A directory of a sharded array's chunk tree: `level` 0 is the chunk root (`c/`), 1 a
    /// shard directory below it.
    Chunks {
        prefix: String,
        array: Arc<ShardedNode>,
        level: usize,
    },
}

/// The walk's state: what it reads through, and what it fetched so far.
struct Walk {
    store: Arc<dyn Store>,
    nodes: Arc<NodeCache>,
    limits: WarmUpLimits,
}

impl View {
    /// Whether this view warms up its metadata at mount: a remote source shown unsharded,
    /// whose metadata is kept for a while (with a TTL of zero nothing fetched ahead is kept).
    pub fn warms_up(&self) -> bool {
        self.remote && self.mode == ViewMode::Unsharded && !self.nodes.ttl().is_zero()
    }

    /// The root's document, read ahead (the first lookup needs it): run while the mount checks
    /// that the source answers, which lists the root.
    pub fn warm_up_root(&self) -> impl Future<Output = ()> + Send + 'static {
        let nodes = self.nodes.clone();
        prefetch::scope(async move {
            if let Err(e) = nodes.info("").await {
                tracing::debug!("metadata warm-up: the root's document: {e}");
            }
        })
    }

    /// The warm-up walk (module notes), to be run once the root has been listed.
    pub fn warm_up(&self, limits: WarmUpLimits) -> impl Future<Output = WarmedUp> + Send + 'static {
        let walk = Walk {
            store: self.store.clone(),
            nodes: self.nodes.clone(),
            limits,
        };
        prefetch::scope(walk.run())
    }
}

impl Walk {
    async fn run(self) -> WarmedUp {
        let mut report = WarmedUp::default();
        // A source that cannot be listed is found by asking, name by name: nothing to walk.
        if !self.store.capabilities().listable {
            return report;
        }
        let started = Instant::now();
        let mut queue = VecDeque::from([Job::Node {
            dir: String::new(),
            depth: 0,
            together: true,
        }]);
        let mut queued = 1;
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < self.limits.in_flight.max(1) {
                let Some(job) = queue.pop_front() else { break };
                running.push(self.fetch(job));
            }
            let Some((children, done)) = running.next().await else {
                break;
            };
            report.nodes += done.nodes;
            report.sharded_arrays += done.sharded_arrays;
            report.listings += done.listings;
            report.failures += done.failures;
            for child in children {
                if queued >= self.limits.max_dirs {
                    report.budget_reached = true;
                    break;
                }
                queued += 1;
                queue.push_back(child);
            }
        }
        tracing::info!(
            nodes = report.nodes,
            sharded_arrays = report.sharded_arrays,
            listings = report.listings,
            failures = report.failures,
            budget_reached = report.budget_reached,
            ms = started.elapsed().as_millis() as u64,
            "metadata warmed up"
        );
        report
    }

    /// Fetch one directory: the jobs it leads to, and what was fetched.
    async fn fetch(&self, job: Job) -> (Vec<Job>, WarmedUp) {
        match job {
            Job::Node { dir, depth, together } => self.node(&dir, depth, together).await,
            Job::Chunks { prefix, array, level } => self.chunks(&prefix, &array, level).await,
        }
    }

    async fn node(&self, dir: &str, depth: usize, together: bool) -> (Vec<Job>, WarmedUp) {
        let prefix = dir_prefix(dir);
        let mut done = WarmedUp {
            nodes: 1,
            ..WarmedUp::default()
        };
        let walks = |info: &Result<NodeInfo, StoreError>| info.as_ref().is_ok_and(|i| self.walks_into(dir, depth, i));
        let info = self.nodes.info(dir);
        let (info, listing) = if together {
            let (info, listing) = futures::join!(info, self.store.list_dir(&prefix));
            (info, Some(listing))
        } else {
            let info = info.await;
            let listing = match walks(&info) {
                true => Some(self.store.list_dir(&prefix).await),
                false => None,
            };
            (info, listing)
        };
        let info = match info {
            Ok(info) => info,
            Err(e) => return self.failed(dir, e, done),
        };
        let entries = match listing {
            Some(Ok(entries)) => entries,
            Some(Err(e)) => return self.failed(dir, e, done),
            None => return (Vec::new(), done),
        };
        done.listings = 1;
        if !self.walks_into(dir, depth, &info) {
            return (Vec::new(), done);
        }
        let children = match info {
            NodeInfo::Sharded(array) => {
                done.sharded_arrays = 1;
                Self::chunk_root(&prefix, array, &entries)
            }
            _ => {
                let together = self.nodes.known_dir(dir);
                subdirs(&entries)
                    .map(|name| Job::Node {
                        dir: format!("{prefix}{name}"),
                        depth: depth + 1,
                        together,
                    })
                    .collect()
            }
        };
        (children, done)
    }

    /// Whether the walk goes on below node `dir`: a sharded array (to its chunk tree), a v3
    /// group, or the root, within the depth; not an array shown as stored, a draft's root or a
    /// directory without a document below the root (perhaps a Zarr v2 array).
    fn walks_into(&self, dir: &str, depth: usize, info: &NodeInfo) -> bool {
        match info {
            NodeInfo::Sharded(_) => true,
            NodeInfo::Plain | NodeInfo::Group(_) => {
                depth < self.limits.max_depth && (depth == 0 || self.nodes.known_dir(dir))
            }
            NodeInfo::Array | NodeInfo::Draft(_) => false,
        }
    }

    /// The chunk-tree jobs of a sharded array whose directory `prefix` lists `entries`.
    fn chunk_root(prefix: &str, array: Arc<ShardedNode>, entries: &[DirEntry]) -> Vec<Job> {
        let encoding = array.array.encoding();
        if encoding.separator() != '/' || array.draft.is_some() {
            return Vec::new();
        }
        match encoding.dir_of(&[]) {
            // The chunk tree starts in the array's directory itself (v2 keys): already listed.
            root if root.is_empty() => Self::shard_dirs(prefix, &array, entries),
            root => vec![Job::Chunks {
                prefix: format!("{prefix}{root}"),
                array,
                level: 0,
            }],
        }
    }

    /// The shard directories (first chunk level) that the chunk root at `prefix` lists.
    fn shard_dirs(prefix: &str, array: &Arc<ShardedNode>, entries: &[DirEntry]) -> Vec<Job> {
        if array.array.ndim() < 2 {
            return Vec::new();
        }
        let encoding = array.array.encoding();
        subdirs(entries)
            .filter(|name| encoding.parse_level(0, name).is_some())
            .map(|name| Job::Chunks {
                prefix: format!("{prefix}{name}/"),
                array: array.clone(),
                level: 1,
            })
            .collect()
    }

    async fn chunks(&self, prefix: &str, array: &Arc<ShardedNode>, level: usize) -> (Vec<Job>, WarmedUp) {
        let done = WarmedUp {
            listings: 1,
            ..WarmedUp::default()
        };
        match self.store.list_dir(prefix).await {
            Ok(entries) if level == 0 => (Self::shard_dirs(prefix, array, &entries), done),
            Ok(_) => (Vec::new(), done),
            Err(e) => self.failed(prefix, e, done),
        }
    }

    fn failed(&self, dir: &str, e: StoreError, mut done: WarmedUp) -> (Vec<Job>, WarmedUp) {
        tracing::debug!(dir, "metadata warm-up: {e}");
        done.failures += 1;
        (Vec::new(), done)
    }
}

/// The names of the directories listed, but hidden ones (`.git`, …).
fn subdirs(entries: &[DirEntry]) -> impl Iterator<Item = &str> {
    entries
        .iter()
        .filter(|e| e.kind == EntryKind::Dir && !e.name.starts_with('.'))
        .map(|e| e.name.as_str())
}
