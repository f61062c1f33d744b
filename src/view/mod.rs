//! The virtual namespace: what the mount shows at each path, per view mode.
//!
//! Paths are `/`-separated and relative to the mount root (`""` is the root). In the raw mode
//! every path is the store's own. In the unsharded mode a path is first placed relative to
//! the nearest sharded array above it (found by walking directories from the root through
//! the [`nodes`] cache): the array's `zarr.json` is the rewritten one, chunk keys and chunk
//! directories come from the sharding transformer, and everything else passes through.
//! Outside sharded arrays, a group's `zarr.json` is rewritten too when its consolidated
//! metadata describes sharded arrays, and every `zarr.json` written there is translated back
//! ([`metadata_write`]), so the hierarchy is coherent as a whole, not only array by array.
//! The view knows nothing of inodes or handles; see `fs/` for those and [`inodes`].

pub mod inodes;
mod listing;
pub mod metadata_write;
pub mod nodes;
mod types;

use std::sync::Arc;

use bytes::Bytes;

use crate::shard::{DataCache, IndexCache, ShardOptions, ShardStats, ShardedArray};
use crate::store::key::dir_prefix;
use crate::store::{ByteRange, GetOptions, Store};
use crate::zarr::key_encoding::ChunkPath;
use nodes::{GroupNode, NodeCache, NodeInfo, ShardedNode};
pub use types::{Node, Source, Target, ViewError, ViewMode, ViewOptions};

/// The name of a node's metadata document.
const METADATA: &str = "zarr.json";

/// Where a directory lies, as far as the meaning of paths in it goes.
enum Place {
    /// At or below a sharded array shown unsharded.
    Sharded(Arc<ShardedNode>),
    /// Elsewhere: the store shows through, except the directory's own group document when the
    /// view rewrites it.
    Stored { group: Option<Arc<GroupNode>> },
}

#[derive(Debug)]
pub struct View {
    store: Arc<dyn Store>,
    mode: ViewMode,
    nodes: NodeCache,
    stats: Arc<ShardStats>,
    read_ahead: u64,
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
        let data_cache = (options.data_cache_bytes > 0).then(|| Arc::new(DataCache::new(options.data_cache_bytes)));
        let shard_options = ShardOptions {
            revalidate_after: options.metadata_ttl,
            prefetch_bytes: if data_cache.is_some() {
                options.prefetch_bytes
            } else {
                0
            },
            revalidate_on_open: !options.remote,
            exact_prefix_dirs: !options.remote,
            data_cache,
            stats: Arc::new(ShardStats::default()),
        };
        let stats = shard_options.stats.clone();
        let nodes = NodeCache::new(store.clone(), index_cache, shard_options, options.metadata_ttl);
        View {
            store,
            mode: options.mode,
            nodes,
            stats,
            read_ahead: if options.remote { options.prefetch_bytes } else { 0 },
        }
    }

    /// Bytes to read ahead on stored files (remote sources), 0 for none.
    pub fn read_ahead_bytes(&self) -> u64 {
        self.read_ahead
    }

    /// Cache and commit counters of the sharding layer.
    pub fn shard_stats(&self) -> &ShardStats {
        &self.stats
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Where directory `dir` lies: the nearest sharded array at or above it, walking from the
    /// root, or else `dir`'s own rewritten group document. Nothing below an array is a node, so
    /// the walk stops at the first array of any kind.
    async fn place(&self, dir: &str) -> Result<Place, ViewError> {
        if self.mode == ViewMode::Raw {
            return Ok(Place::Stored { group: None });
        }
        let components = dir.match_indices('/').map(|(i, _)| i);
        let ends = std::iter::once(0)
            .chain(components)
            .chain((!dir.is_empty()).then_some(dir.len()));
        let mut group = None;
        for end in ends {
            match self.nodes.info(&dir[..end]).await? {
                NodeInfo::Sharded(node) => return Ok(Place::Sharded(node)),
                NodeInfo::Array => return Ok(Place::Stored { group: None }),
                NodeInfo::Group(node) if end == dir.len() => group = Some(node),
                NodeInfo::Plain | NodeInfo::Group(_) => {}
            }
        }
        Ok(Place::Stored { group })
    }

    /// The nearest sharded array at or above directory `dir`.
    async fn sharded_at_or_above(&self, dir: &str) -> Result<Option<Arc<ShardedNode>>, ViewError> {
        Ok(match self.place(dir).await? {
            Place::Sharded(node) => Some(node),
            Place::Stored { .. } => None,
        })
    }

    /// The node of a rewritten group document.
    fn group_node(group: &GroupNode) -> Node {
        Node {
            size: group.rewritten.len() as u64,
            mtime_ns: group.mtime_ns,
            source: Source::Memory(group.rewritten.clone()),
        }
    }

    /// The node at `path`, or `None` if there is none.
    pub async fn lookup(&self, path: &str) -> Result<Option<Node>, ViewError> {
        if path.is_empty() {
            return Ok(Some(Node::dir()));
        }
        let (parent, name) = split_parent(path);
        let node = match self.place(parent).await? {
            Place::Sharded(node) => node,
            Place::Stored { group: Some(group) } if name == METADATA => return Ok(Some(Self::group_node(&group))),
            Place::Stored { .. } => return self.lookup_stored(path).await,
        };
        let rel = relative(&node.dir, path);
        if rel == METADATA {
            let bytes = node.rewritten.clone();
            return Ok(Some(Node {
                size: bytes.len() as u64,
                mtime_ns: node.mtime_ns,
                source: Source::Memory(bytes),
            }));
        }
        let array = &node.array;
        match array.encoding().classify(rel, array.ndim()) {
            ChunkPath::Chunk(coords) => Ok(array.locate(&coords).await?.map(|loc| Node {
                size: loc.nbytes,
                mtime_ns: loc.mtime_ns,
                source: Source::Chunk {
                    array: array.clone(),
                    coords,
                },
            })),
            ChunkPath::Dir(prefix) => Ok(array.dir_exists(&prefix).await?.then(Node::dir)),
            ChunkPath::Other => {
                // Inside the chunk tree only chunk keys exist; elsewhere the store shows through.
                let (rel_parent, _) = split_parent(rel);
                match array.encoding().classify(rel_parent, array.ndim()) {
                    ChunkPath::Dir(_) | ChunkPath::Chunk(_) => Ok(None),
                    ChunkPath::Other => self.lookup_stored(path).await,
                }
            }
        }
    }

    /// Forget cached knowledge of directory `dir` (after its metadata was written).
    pub fn forget_dir(&self, dir: &str) {
        self.nodes.forget(dir);
    }

    /// Whether `path` lies inside a sharded array's directory (where names that are not chunk
    /// keys or `zarr.json` are staged, not stored).
    pub async fn inside_sharded(&self, path: &str) -> Result<bool, ViewError> {
        Ok(self.sharded_array_of(path).await?.is_some())
    }

    /// The sharded array whose directory holds `path`, if any.
    pub async fn sharded_array_of(&self, path: &str) -> Result<Option<Arc<ShardedArray>>, ViewError> {
        Ok(self
            .sharded_at_or_above(split_parent(path).0)
            .await?
            .map(|node| node.array.clone()))
    }

    /// What a file written at `path` becomes.
    pub async fn target(&self, path: &str) -> Result<Target, ViewError> {
        let (parent, name) = split_parent(path);
        let Some(node) = self.sharded_at_or_above(parent).await? else {
            if name == METADATA && self.mode != ViewMode::Raw {
                return Ok(Target::NodeMetadata {
                    dir: parent.to_string(),
                });
            }
            return Ok(Target::Stored { key: path.to_string() });
        };
        let rel = relative(&node.dir, path);
        if rel == METADATA {
            return Ok(Target::Metadata(node));
        }
        let array = &node.array;
        match array.encoding().classify(rel, array.ndim()) {
            ChunkPath::Chunk(coords) => Ok(Target::Chunk {
                array: array.clone(),
                coords,
            }),
            ChunkPath::Dir(_) => Ok(Target::Refused("a chunk directory")),
            ChunkPath::Other => match array.encoding().classify(split_parent(rel).0, array.ndim()) {
                ChunkPath::Dir(_) | ChunkPath::Chunk(_) => Ok(Target::Refused("not a chunk key of this array")),
                ChunkPath::Other => Ok(Target::Stored { key: path.to_string() }),
            },
        }
    }

    /// Whether `path` is a directory of some sharded array's chunk tree (implicit: it exists
    /// as soon as a chunk below it does, and needs no storing).
    pub async fn is_chunk_dir(&self, path: &str) -> Result<bool, ViewError> {
        let Some(node) = self.sharded_at_or_above(split_parent(path).0).await? else {
            return Ok(false);
        };
        let rel = relative(&node.dir, path);
        Ok(matches!(
            node.array.encoding().classify(rel, node.array.ndim()),
            ChunkPath::Dir(_)
        ))
    }

    async fn lookup_stored(&self, path: &str) -> Result<Option<Node>, ViewError> {
        // A group or array seen within the TTL needs no request (a directory holding a
        // metadata document wins over an object of the same name, which no Zarr client makes).
        if self.nodes.known_dir(path) {
            return Ok(Some(Node::dir()));
        }
        if let Some(meta) = self.store.head(path).await? {
            let source = Source::Stored { key: path.to_string() };
            return Ok(Some(Node {
                size: meta.size,
                mtime_ns: meta.mtime_ns,
                source,
            }));
        }
        Ok(self.store.dir_exists(&dir_prefix(path)).await?.then(Node::dir))
    }

    /// The node as the store holds it now: a chunk's shard version is confirmed first (a file
    /// about to be opened must not come from a stale index). `None` if it is gone.
    pub async fn current(&self, node: Node) -> Result<Option<Node>, ViewError> {
        let Source::Chunk { array, coords } = &node.source else {
            return Ok(Some(node));
        };
        let Some(loc) = array.locate_current(coords).await? else {
            return Ok(None);
        };
        Ok(Some(Node {
            size: loc.nbytes,
            mtime_ns: loc.mtime_ns,
            ..node
        }))
    }

    /// Read `len` bytes at `offset` of a file node (short at the end of the file). A file that
    /// has disappeared from the store is an error, not an empty read.
    pub async fn read(&self, node: &Node, offset: u64, len: u64) -> Result<Bytes, ViewError> {
        let bytes = match &node.source {
            Source::Dir => return Err(ViewError::IsADirectory),
            Source::Memory(bytes) => {
                let (start, end) = ByteRange::Range { offset, length: len }.resolve(bytes.len() as u64);
                return Ok(bytes.slice(start as usize..end as usize));
            }
            Source::Stored { key } => {
                let range = GetOptions::range(ByteRange::Range { offset, length: len });
                self.store.get(key, range).await?.map(|g| g.bytes)
            }
            Source::Chunk { array, coords } => array.read_chunk(coords, offset, len).await?.map(|(_, b)| b),
        };
        bytes.ok_or_else(|| ViewError::Vanished(self.describe(node)))
    }

    fn describe(&self, node: &Node) -> String {
        match &node.source {
            Source::Stored { key } => key.clone(),
            // Chunk keys of the view are spelled like shard keys of the store.
            Source::Chunk { array, coords } => array.shard_key(coords),
            Source::Dir | Source::Memory(_) => String::new(),
        }
    }
}
