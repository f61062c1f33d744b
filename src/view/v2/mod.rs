//! The v2 view (`--view v2`): every Zarr v3 array shown as a Zarr v2 array, for readers that
//! know only v2. Read-only.
//!
//! A group's directory shows `.zgroup` and `.zattrs` instead of `zarr.json`; an array's shows
//! `.zarray`, `.zattrs` and one file per innermost chunk under its v2 key (`0.1`, or `0/1`
//! when the array's v3 keys use `/`), made by [`crate::zarr::v2_meta`]; the root also shows a
//! consolidated `.zmetadata` of the whole hierarchy. Chunk bytes are relayed: an inner chunk
//! of a sharded array, or the stored chunk of an unsharded one. Arrays whose chunks would need
//! transcoding (a codec chain v2 cannot name) or whose data type v2 has no name for are left
//! out, with a warning. Non-Zarr files pass through.
//!
//! Arrays whose chunks' codecs v2 cannot name are transcoded ([`crate::zarr::transcode`]):
//! a chunk is decoded and encoded with `--v2-compressor` when it is looked up (so `stat`
//! sizes are exact), and the result is kept by shard version in a cache bounded in bytes, so a
//! listing costs at most one transcode per chunk.
//!
//! What each directory is comes from its `zarr.json`, read through the node cache for sharded
//! arrays and kept here for the metadata TTL otherwise.

mod listing;

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lru::LruCache;
use serde_json::Value;

use super::nodes::{NodeInfo, ShardedNode};
use super::{relative, split_parent, Node, Source, View, ViewError, METADATA};
use crate::shard::outer::DecodedShards;
use crate::store::key::dir_prefix;
use crate::store::GetOptions;
use crate::zarr::key_encoding::{ChunkKeyEncoding, ChunkPath, Separator};
use crate::zarr::metadata::{parse_zarr_json, ArrayMetadata, NodeMetadata};
use crate::zarr::transcode::{Transcode, V2Compressor};
use crate::zarr::v2_meta::{v2_array, v2_group, V2Array};

/// What a directory is in the v2 view.
#[derive(Debug)]
pub(in crate::view) enum V2Node {
    Plain,
    Group {
        zgroup: Bytes,
        zattrs: Bytes,
    },
    Array(V2ArrayNode),
    /// An array v2 cannot show (left out).
    Hidden,
}

#[derive(Debug)]
pub(in crate::view) struct V2ArrayNode {
    dir: String,
    zarray: Bytes,
    zattrs: Bytes,
    separator: Separator,
    ndim: usize,
    source: ChunkSource,
    /// How its chunks are transcoded, when they are not relayed.
    transcode: Option<Transcode>,
}

/// Where an array's chunks are.
#[derive(Debug)]
enum ChunkSource {
    Sharded(Arc<ShardedNode>),
    /// Stored as chunks under the array's own v3 keys.
    Stored {
        encoding: ChunkKeyEncoding,
    },
}

/// The v2 view's per-directory cache.
#[derive(Debug)]
pub(in crate::view) struct V2Nodes {
    ttl: Duration,
    pub(in crate::view) entries: Mutex<LruCache<String, (Instant, Arc<V2Node>)>>,
    compressor: V2Compressor,
    /// Transcoded chunks by path and stored version.
    transcoded: DecodedShards,
    /// The root's `.zmetadata` (a walk of the hierarchy), kept for the TTL like the nodes.
    pub(in crate::view) zmetadata: Mutex<Option<(Instant, Bytes)>>,
}

impl V2Nodes {
    pub fn new(ttl: Duration, compressor: V2Compressor, cache_bytes: usize) -> Self {
        let cap = NonZeroUsize::new(16_384).unwrap_or(NonZeroUsize::MIN);
        V2Nodes {
            ttl,
            entries: Mutex::new(LruCache::new(cap)),
            compressor,
            transcoded: DecodedShards::new(cache_bytes),
            zmetadata: Mutex::default(),
        }
    }
}

/// What a path of the v2 view is.
#[derive(Debug, Clone)]
pub(in crate::view) enum V2At {
    Doc {
        bytes: Bytes,
        dir: String,
        key: String,
    },
    Chunk {
        node: Arc<V2Node>,
        coords: Vec<u64>,
    },
    ChunkDir {
        node: Arc<V2Node>,
        prefix: Vec<u64>,
    },
    /// Passes through (a non-Zarr file or a directory).
    Stored {
        key: String,
    },
    Nothing,
}

fn doc(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec_pretty(value).unwrap_or_default())
}

fn v2_key(coords: &[u64], separator: Separator) -> String {
    ChunkKeyEncoding::V2(separator).encode(coords)
}

impl View {
    /// The v2 node of directory `dir`.
    pub(in crate::view) async fn v2_node(&self, dir: &str) -> Result<Arc<V2Node>, ViewError> {
        {
            let mut entries = self.v2.entries.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, node)) = entries.get(dir) {
                if at.elapsed() < self.v2.ttl {
                    return Ok(node.clone());
                }
            }
        }
        let node = Arc::new(self.load_v2_node(dir).await?);
        let mut entries = self.v2.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.put(dir.to_string(), (Instant::now(), node.clone()));
        Ok(node)
    }

    async fn load_v2_node(&self, dir: &str) -> Result<V2Node, ViewError> {
        let key = format!("{}{METADATA}", dir_prefix(dir));
        let sharded = match self.nodes.info(dir).await? {
            NodeInfo::Sharded(node) => Some(node),
            _ => None,
        };
        let Some(got) = self.store.get(&key, GetOptions::default()).await? else {
            return Ok(V2Node::Plain);
        };
        let meta = match parse_zarr_json(&got.bytes) {
            Ok(NodeMetadata::Group { raw }) => {
                let (zgroup, zattrs) = v2_group(&raw);
                return Ok(V2Node::Group {
                    zgroup: doc(&zgroup),
                    zattrs: doc(&zattrs),
                });
            }
            Ok(NodeMetadata::Array(meta)) => meta,
            Err(_) => return Ok(V2Node::Plain),
        };
        let (chunk_shape, codecs, source) = match sharded {
            Some(node) => {
                let layout = node.array.layout();
                let shown = (layout.inner_chunk_shape.clone(), layout.inner_codecs.clone());
                (shown.0, shown.1, ChunkSource::Sharded(node))
            }
            None if crate::zarr::sharding::analyse(&meta) == crate::zarr::sharding::Sharding::None => (
                meta.chunk_shape.clone(),
                meta.codecs.clone(),
                ChunkSource::Stored {
                    encoding: meta.chunk_key_encoding,
                },
            ),
            None => {
                tracing::warn!(
                    key,
                    "a sharded array that cannot be unsharded is left out of the v2 view"
                );
                return Ok(V2Node::Hidden);
            }
        };
        Ok(self.v2_array_node(dir, &key, &meta, &chunk_shape, &codecs, source))
    }

    fn v2_array_node(
        &self,
        dir: &str,
        key: &str,
        meta: &ArrayMetadata,
        chunk_shape: &[u64],
        codecs: &[crate::zarr::metadata::CodecSpec],
        source: ChunkSource,
    ) -> V2Node {
        let separator = match meta.chunk_key_encoding.separator() {
            '/' => Separator::Slash,
            _ => Separator::Dot,
        };
        let compressor = self.v2.compressor;
        let shown: V2Array = match v2_array(meta, chunk_shape, codecs, separator, &compressor.v2_json()) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(key, reason = %e, "left out of the v2 view");
                return V2Node::Hidden;
            }
        };
        let transcode = match shown.relayed {
            true => None,
            false => match Transcode::plan(codecs, &meta.data_type, chunk_shape, compressor) {
                Ok(plan) => Some(plan),
                Err(e) => {
                    let names: Vec<&str> = codecs.iter().map(|c| c.name.as_str()).collect();
                    tracing::warn!(key, ?names, reason = %e, "left out of the v2 view: its chunks cannot be transcoded");
                    return V2Node::Hidden;
                }
            },
        };
        V2Node::Array(V2ArrayNode {
            dir: dir.to_string(),
            zarray: doc(&shown.zarray),
            zattrs: doc(&shown.zattrs),
            separator: shown.separator,
            ndim: meta.shape.len(),
            source,
            transcode,
        })
    }

    /// The nearest array at or above `dir`, walking from the root (nothing below an array is a
    /// node).
    async fn v2_array_above(&self, dir: &str) -> Result<Option<Arc<V2Node>>, ViewError> {
        let ends = std::iter::once(0)
            .chain(dir.match_indices('/').map(|(i, _)| i))
            .chain((!dir.is_empty()).then_some(dir.len()));
        for end in ends {
            let node = self.v2_node(&dir[..end]).await?;
            if matches!(*node, V2Node::Array(_) | V2Node::Hidden) {
                return Ok(Some(node));
            }
        }
        Ok(None)
    }

    /// A transcoded chunk (module docs), held whole.
    async fn v2_transcoded(
        &self,
        array: &V2ArrayNode,
        plan: &Transcode,
        coords: &[u64],
    ) -> Result<Option<Node>, ViewError> {
        let name = format!("{}{}", dir_prefix(&array.dir), v2_key(coords, array.separator));
        let (stored, version, mtime_ns) = match &array.source {
            ChunkSource::Sharded(sharded) => {
                let Some(loc) = sharded.array.locate(coords).await? else {
                    return Ok(None);
                };
                if let Some(bytes) = self.v2.transcoded.get(&name, &loc.version) {
                    return Ok(Some(Node::rewritten(bytes, &array.dir, &name, loc.mtime_ns)));
                }
                let bytes = sharded.array.read_at(&loc, 0, loc.nbytes).await?;
                (bytes, loc.version, loc.mtime_ns)
            }
            ChunkSource::Stored { encoding } => {
                let key = format!("{}{}", dir_prefix(&array.dir), encoding.encode(coords));
                let Some(got) = self.store.get(&key, GetOptions::default()).await? else {
                    return Ok(None);
                };
                if let Some(bytes) = self.v2.transcoded.get(&name, &got.meta.version) {
                    return Ok(Some(Node::rewritten(bytes, &array.dir, &name, got.meta.mtime_ns)));
                }
                (got.bytes, got.meta.version, got.meta.mtime_ns)
            }
        };
        let bytes = match plan.run(&stored) {
            Ok(bytes) => Bytes::from(bytes),
            Err(e) => {
                tracing::warn!(chunk = name, reason = %e, "cannot transcode the chunk");
                let why = std::io::Error::new(std::io::ErrorKind::InvalidData, format!("cannot transcode: {e}"));
                return Err(ViewError::Store(crate::store::StoreError::io(&name, why)));
            }
        };
        self.v2.transcoded.put(&name, version, bytes.clone());
        Ok(Some(Node::rewritten(bytes, &array.dir, &name, mtime_ns)))
    }

    /// What `path` is in the v2 view.
    pub(in crate::view) async fn v2_locate(&self, path: &str) -> Result<V2At, ViewError> {
        let (parent, name) = split_parent(path);
        if let Some(node) = self.v2_array_above(parent).await? {
            let V2Node::Array(array) = &*node else {
                return Ok(V2At::Nothing);
            };
            let rel = relative(&array.dir, path);
            let key = |n: &str| format!("{}{n}", dir_prefix(&array.dir));
            return Ok(match rel {
                ".zarray" => V2At::Doc {
                    bytes: array.zarray.clone(),
                    dir: array.dir.clone(),
                    key: key(METADATA),
                },
                ".zattrs" => V2At::Doc {
                    bytes: array.zattrs.clone(),
                    dir: array.dir.clone(),
                    key: key(METADATA),
                },
                _ => match ChunkKeyEncoding::V2(array.separator).classify(rel, array.ndim) {
                    ChunkPath::Chunk(coords) => V2At::Chunk {
                        node: node.clone(),
                        coords,
                    },
                    ChunkPath::Dir(prefix) => V2At::ChunkDir {
                        node: node.clone(),
                        prefix,
                    },
                    ChunkPath::Other => V2At::Nothing,
                },
            });
        }
        if self.v2_node(path).await.is_ok_and(|n| matches!(*n, V2Node::Hidden)) {
            return Ok(V2At::Nothing);
        }
        let group = self.v2_node(parent).await?;
        Ok(match (name, &*group) {
            (".zgroup", V2Node::Group { zgroup, .. }) => V2At::Doc {
                bytes: zgroup.clone(),
                dir: parent.to_string(),
                key: format!("{}{METADATA}", dir_prefix(parent)),
            },
            (".zattrs", V2Node::Group { zattrs, .. }) => V2At::Doc {
                bytes: zattrs.clone(),
                dir: parent.to_string(),
                key: format!("{}{METADATA}", dir_prefix(parent)),
            },
            (".zmetadata", _) if parent.is_empty() => V2At::Doc {
                bytes: self.v2_zmetadata().await?,
                dir: String::new(),
                key: METADATA.to_string(),
            },
            (METADATA, _) => V2At::Nothing,
            _ => V2At::Stored { key: path.to_string() },
        })
    }

    /// The node at a v2 path, if anything is there.
    pub(in crate::view) async fn v2_node_at(&self, at: &V2At) -> Result<Option<Node>, ViewError> {
        Ok(match at {
            V2At::Doc { bytes, dir, key } => Some(Node::rewritten(bytes.clone(), dir, key, None)),
            V2At::Stored { key } => self.lookup_stored(key).await?,
            V2At::Nothing => None,
            V2At::Chunk { node, coords } => match &**node {
                V2Node::Array(array) => self.v2_chunk_node(array, coords).await?,
                _ => None,
            },
            V2At::ChunkDir { node, prefix } => {
                let V2Node::Array(array) = &**node else { return Ok(None) };
                let exists = match &array.source {
                    ChunkSource::Sharded(sharded) => sharded.array.dir_exists(prefix).await?,
                    ChunkSource::Stored { encoding } => {
                        let dir = format!("{}{}", dir_prefix(&array.dir), encoding.dir_of(prefix));
                        self.store.dir_exists(&dir).await?
                    }
                };
                exists.then(Node::dir)
            }
        })
    }

    /// The chunk file at `coords` of an array, if stored.
    pub(super) async fn v2_chunk_node(&self, array: &V2ArrayNode, coords: &[u64]) -> Result<Option<Node>, ViewError> {
        if let Some(plan) = &array.transcode {
            return self.v2_transcoded(array, plan, coords).await;
        }
        Ok(match &array.source {
            // Where it was found is kept: reads go straight to its bytes.
            ChunkSource::Sharded(sharded) => sharded.array.locate(coords).await?.map(|loc| Node {
                size: loc.nbytes,
                mtime_ns: loc.mtime_ns,
                source: Source::Chunk {
                    array: sharded.array.clone(),
                    coords: coords.into(),
                    at: Some(loc),
                },
            }),
            ChunkSource::Stored { encoding } => {
                let key = format!("{}{}", dir_prefix(&array.dir), encoding.encode(coords));
                self.lookup_stored(&key).await?.filter(|n| !n.is_dir())
            }
        })
    }
}
