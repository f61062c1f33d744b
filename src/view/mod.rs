//! The virtual namespace: what the mount shows at each path, per view mode.
//!
//! Paths are `/`-separated and relative to the mount root (`""` is the root). In the raw mode
//! every path is the store's own. In the unsharded mode a path is first placed relative to
//! the nearest sharded array above it ([`locate`]: one walk from the root through the
//! [`nodes`] cache): the array's `zarr.json` is the rewritten one, chunk keys and chunk
//! directories come from the sharding transformer, and everything else passes through.
//! Outside sharded arrays, a group's `zarr.json` is rewritten too when its consolidated
//! metadata describes sharded arrays, and every `zarr.json` written there is translated back
//! ([`metadata_write`]), so the hierarchy is coherent as a whole, not only array by array.
//!
//! Callers hold [`Located`] paths, [`Node`]s and [`Target`]s without looking inside them: the
//! view alone knows which are shards, store keys or rewritten documents, and does all their
//! I/O — reads ([`open_file`]), writes, removals and moves ([`write`]), listings ([`listing`]).
//! It knows nothing of inodes or handles; see `fs/` for those.

mod changes;
mod copy_units;
mod group_doc;
mod listing;
mod locate;
pub mod metadata_write;
mod node_documents;
pub mod nodes;
mod open_file;
mod read_ahead;
mod target;
mod types;
mod v2;
mod warm_up;
mod write;

use std::sync::Arc;

use bytes::Bytes;

use crate::shard::{DataCache, IndexCache, ShardOptions, ShardStats};
use crate::store::key::dir_prefix;
use crate::store::{ByteRange, GetOptions, Store};
pub use changes::ChangedPaths;
pub use copy_units::{CopyListing, ShardUnit};
pub use listing::{listing_order, Listing, PagePosition, Pages};
pub use locate::Located;
use locate::{At, Place};
use nodes::{NodeCache, ShardedNode};
pub use open_file::{OpenFile, SnapshotBudget, SNAPSHOT_LIMIT};
pub use target::{Batch, Target};
use types::Source;
pub use types::{ContentId, Node, ViewError, ViewMode, ViewOptions};
pub use warm_up::{WarmUpLimits, WarmedUp};
pub use write::DirMade;

/// The name of a node's metadata document.
const METADATA: &str = "zarr.json";

#[derive(Debug)]
pub struct View {
    store: Arc<dyn Store>,
    mode: ViewMode,
    nodes: Arc<NodeCache>,
    stats: Arc<ShardStats>,
    read_ahead: u64,
    v2: v2::V2Nodes,
    /// What the snapshots of open files may hold (see [`open_file`]).
    snapshots: Arc<SnapshotBudget>,
    /// The source is remote (see [`ViewOptions::remote`]).
    remote: bool,
}

/// `a/b/c` -> (`a/b`, `c`); `c` -> (`""`, `c`).
fn split_parent(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// `path` relative to the directory `dir` (which is an ancestor or `path` itself).
fn relative<'a>(dir: &str, path: &'a str) -> &'a str {
    if dir.is_empty() {
        path
    } else {
        path.get(dir.len() + 1..).unwrap_or("")
    }
}

impl View {
    pub fn new(store: Arc<dyn Store>, options: &ViewOptions) -> Self {
        let index_cache = Arc::new(IndexCache::new(options.index_cache_bytes));
        let stats = Arc::new(ShardStats::default());
        let data_cache =
            (options.data_cache_bytes > 0).then(|| Arc::new(DataCache::new(options.data_cache_bytes, stats.clone())));
        let shard_options = ShardOptions {
            revalidate_after: options.metadata_ttl,
            prefetch_bytes: if data_cache.is_some() {
                options.prefetch_bytes
            } else {
                0
            },
            revalidate_on_open: !options.remote,
            exact_prefix_dirs: !options.remote,
            max_probe_shards: options.max_probe_shards,
            // Shards decoded from codecs around them: bounded by the whole --cache-size.
            decoded: Arc::new(crate::shard::outer::DecodedShards::new(
                options.index_cache_bytes.saturating_add(options.data_cache_bytes),
            )),
            data_cache,
            stats,
        };
        let stats = shard_options.stats.clone();
        let nodes = Arc::new(NodeCache::new(
            store.clone(),
            index_cache,
            shard_options,
            options.metadata_ttl,
            options.prefetch_stats.clone(),
        ));
        let v2 = v2::V2Nodes::new(options.metadata_ttl, options.v2_compressor, options.index_cache_bytes);
        View {
            store,
            mode: options.mode,
            nodes,
            stats,
            read_ahead: if options.remote { options.prefetch_bytes } else { 0 },
            v2,
            snapshots: SnapshotBudget::new(options.open_snapshot_bytes),
            remote: options.remote,
        }
    }

    /// Bytes the cache of shard indexes may still take before it is full.
    pub fn cache_room(&self) -> usize {
        self.nodes.index_cache.room()
    }

    /// The store the view reads through.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Cache and commit counters of the sharding layer.
    pub fn shard_stats(&self) -> &ShardStats {
        &self.stats
    }

    /// Whether the root is a big group of which only the end of its document was read: a
    /// listing of the root (which shows that document, rewritten) fetches the rest.
    pub async fn root_read_by_its_end(&self) -> bool {
        matches!(self.nodes.info("").await, Ok(nodes::NodeInfo::Group(g)) if g.read_by_its_end())
    }

    /// The node at `path`, or `None` if there is none.
    pub async fn lookup(&self, path: &str) -> Result<Option<Node>, ViewError> {
        let at = self.locate(path).await?;
        self.node(&at).await
    }

    /// What exists at a placed path now, or `None`.
    pub async fn node(&self, at: &Located) -> Result<Option<Node>, ViewError> {
        let path = at.path();
        match &at.at {
            At::Root => Ok(Some(Node::dir())),
            At::NodeDoc { group: Some(group) } => {
                let dir = split_parent(path).0;
                match group.rewritten().await? {
                    Some(bytes) => Ok(Some(Self::group_node(dir, bytes, group.mtime_ns))),
                    // A big document, gone since its end was read.
                    None => {
                        self.nodes.forget(dir);
                        Ok(None)
                    }
                }
            }
            At::NodeDoc { group: None } | At::Stored { .. } => self.lookup_stored(path).await,
            At::ArrayDoc(node) => Ok(Some(Self::array_doc_node(node))),
            At::Chunk { node, coords } => Ok(node.array.locate(coords).await?.map(|loc| Node {
                size: loc.nbytes,
                mtime_ns: loc.mtime_ns,
                source: Source::Chunk {
                    array: node.array.clone(),
                    coords: coords.as_slice().into(),
                    at: None,
                },
            })),
            At::ChunkDir { node, prefix } => Ok(node.array.dir_exists(prefix).await?.then(Node::dir)),
            At::NotAChunk(_) => Ok(None),
            At::V2(v2) => self.v2_node_at(v2).await,
        }
    }

    /// What writing a file at a placed path does: `Some` target in the store, or `None` for a
    /// name the mount keeps until it is renamed or removed (staged), when nothing is stored
    /// there: a name inside a sharded array's directory that is neither a chunk key nor
    /// stored (the temporary files clients write before renaming them into place), and
    /// elsewhere zarr-python's temporary names ([`locate::is_client_temporary`]) given to a
    /// `new` file: storing one only to copy and delete it at the rename cost an object store
    /// two more requests a file. A file already stored that is renamed there is not new: it
    /// moves as to any name.
    pub async fn write_target(&self, at: &Located, new: bool) -> Result<Option<Target>, ViewError> {
        let staged_if_unstored = match &at.at {
            At::Stored { within: Some(_) } => true,
            At::Stored { within: None } => new && locate::is_client_temporary(at.path()),
            _ => false,
        };
        if staged_if_unstored && self.lookup_stored(at.path()).await?.is_none() {
            return Ok(None);
        }
        Ok(at.dest())
    }

    /// The node of the rewritten group document (`shown`) of directory `dir`.
    fn group_node(dir: &str, shown: Bytes, mtime_ns: Option<i128>) -> Node {
        let key = format!("{}{METADATA}", dir_prefix(dir));
        Node::rewritten(shown, dir, &key, mtime_ns)
    }

    /// The node of a sharded array's rewritten metadata document.
    fn array_doc_node(node: &ShardedNode) -> Node {
        Node::rewritten(node.rewritten.clone(), &node.dir, &node.meta_key, node.mtime_ns)
    }

    async fn lookup_stored(&self, path: &str) -> Result<Option<Node>, ViewError> {
        // A group or array seen within the TTL needs no request (a directory holding a
        // metadata document wins over an object of the same name, which no Zarr client makes).
        if self.nodes.known_dir(path) {
            return Ok(Some(Node::dir()));
        }
        // One seen longer ago: asking whether its document is still there (which the next
        // lookup below it needs anyway) answers, where a HEAD and a listing of the name would.
        if self.nodes.known_dir_to_revalidate(path) {
            self.nodes.info(path).await?;
            if self.nodes.known_dir(path) {
                return Ok(Some(Node::dir()));
            }
        }
        if let Some(meta) = self.store.head(path).await? {
            let source = Source::Stored {
                key: path.to_string(),
                version: Some(meta.version),
            };
            return Ok(Some(Node {
                size: meta.size,
                mtime_ns: meta.mtime_ns,
                source,
            }));
        }
        // Zarr's document names are files: a missing one is no directory either (clients probe
        // them all when they open a node; over HTTP a listing cannot answer for dot files).
        if is_document_name(split_parent(path).1) {
            return Ok(None);
        }
        Ok(self.store.dir_exists(&dir_prefix(path)).await?.then(Node::dir))
    }

    /// Read `len` bytes at `offset` of a file node (short at the end of the file). A file that
    /// has disappeared from the store is an error, not an empty read. A chunk located at open
    /// is read where it was found; if its shard changed since, it is located again.
    pub async fn read(&self, node: &Node, offset: u64, len: u64) -> Result<Bytes, ViewError> {
        let bytes = match &node.source {
            Source::Dir => return Err(ViewError::IsADirectory),
            Source::Rewritten { bytes, .. } => {
                let (start, end) = ByteRange::Range { offset, length: len }.resolve(bytes.len() as u64);
                return Ok(bytes.slice(start as usize..end as usize));
            }
            Source::Stored { key, .. } => {
                let range = GetOptions::range(ByteRange::Range { offset, length: len });
                self.store.get(key, range).await?.map(|g| g.bytes)
            }
            Source::Chunk {
                array,
                coords,
                at: Some(loc),
            } => match array.read_at(loc, offset, len).await {
                Err(crate::store::StoreError::VersionMismatch { .. }) => {
                    array.forget_shard(&loc.shard_key);
                    array.read_chunk(coords, offset, len).await?.map(|(_, b)| b)
                }
                other => Some(other?),
            },
            Source::Chunk {
                array,
                coords,
                at: None,
            } => array.read_chunk(coords, offset, len).await?.map(|(_, b)| b),
            Source::Unstored => None,
        };
        bytes.ok_or_else(|| ViewError::Vanished(self.describe_key(node)))
    }

    fn describe_key(&self, node: &Node) -> String {
        match &node.source {
            Source::Stored { key, .. } => key.clone(),
            // Chunk keys of the view are spelled like shard keys of the store.
            Source::Chunk { array, coords, .. } => array.shard_key(coords),
            Source::Rewritten { key, .. } => key.clone(),
            Source::Dir | Source::Unstored => String::new(),
        }
    }

    /// Where a file's bytes are stored, in words (`user.zarrfs.source`); `None` for
    /// directories.
    pub async fn describe(&self, node: &Node) -> Result<Option<String>, ViewError> {
        Ok(Some(match &node.source {
            Source::Dir => return Ok(None),
            Source::Stored { key, .. } => format!("stored {key}"),
            Source::Rewritten { .. } => "rewritten metadata".to_string(),
            Source::Unstored => "being written".to_string(),
            Source::Chunk { array, coords, .. } => {
                let loc = array
                    .locate(coords)
                    .await?
                    .ok_or_else(|| ViewError::NotFound(self.describe_key(node)))?;
                format!("shard {} offset {} length {}", loc.shard_key, loc.offset, loc.nbytes)
            }
        }))
    }
}

/// Names of Zarr metadata documents (v3 and v2), never directories.
fn is_document_name(name: &str) -> bool {
    matches!(name, "zarr.json" | ".zgroup" | ".zarray" | ".zattrs" | ".zmetadata")
}
