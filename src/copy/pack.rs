//! `zarrfs copy --shard SHAPE`: an unsharded hierarchy (or the unsharded view of a sharded one)
//! packed into shards of SHAPE elements, with the mount's packer (`zarr::shard_pack`).
//!
//! Planning reads every `zarr.json` the walk found: an array that `zarr::reshard::packs` takes
//! (with `--shard auto`: each array in the shape `zarr::shard_shape` chooses for it, from the
//! mean size of its chunk files) gets its sharded document, a group its consolidated entries
//! changed alike; then every file below such an array whose name is a chunk key goes to the
//! shard that holds it. A unit is one destination shard: its chunk files, read `PACK_READS` at
//! a time and packed in C order with the index at the end, so its size and index are known
//! from the chunk sizes alone before any byte is read — which lets a rerun skip a shard DEST
//! holds already (same size, same index) without reading its chunks. At most `PACKING_MIB` of
//! chunk bytes are held at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Semaphore;

use super::dest::Dest;
use super::plan::{Plan, Unit};
use super::work::read_whole;
use crate::store::key::dir_prefix;
use crate::view::{Node, View};
use crate::zarr::key_encoding::ChunkKeyEncoding;
use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
use crate::zarr::reshard::{packable, packed_group, packs, sharded_doc, sharded_like};
use crate::zarr::shard_index::ShardIndex;
use crate::zarr::shard_pack::{pack, packed_layout, Packed, ShardContent};
use crate::zarr::shard_shape::auto_shard_shape;
use crate::zarr::sharding::{analyse, ShardLevel, Sharding};
use crate::zarr::translate::to_stored_bytes;

/// Chunk files of one shard read at once.
const PACK_READS: usize = 16;

/// Chunk bytes held at once by all shards being packed (in MiB, a semaphore's permits).
const PACKING_MIB: u32 = 1024;

/// One destination shard.
#[derive(Debug)]
pub struct PackUnit {
    /// The shard's key in DEST.
    pub key: String,
    /// Its chunk files: (index within the shard, path, node), ascending index.
    pub chunks: Vec<(u64, String, Node)>,
    pub level: Arc<ShardLevel>,
}

impl PackUnit {
    /// Bytes of its chunks.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunks.iter().map(|(_, _, n)| n.size).sum()
    }

    /// The index and size the packed shard will have.
    pub fn layout(&self) -> Result<(ShardIndex, u64)> {
        let sizes: Vec<(u64, u64)> = self.chunks.iter().map(|(i, _, n)| (*i, n.size)).collect();
        Ok(packed_layout(&sizes, &self.level)?)
    }

    /// The packed shard: its chunks read through the view and packed.
    pub async fn packed(&self, view: &Arc<View>, budget: &Semaphore) -> Result<Bytes> {
        let mib = u32::try_from(self.chunk_bytes().div_ceil(1 << 20)).unwrap_or(u32::MAX);
        let _held = budget.acquire_many(mib.clamp(1, PACKING_MIB)).await?;
        let chunks: Vec<(u64, Bytes)> = futures::stream::iter(&self.chunks)
            .map(|(index, path, node)| async move { anyhow::Ok((*index, read_whole(view, node, path).await?)) })
            .buffered(PACK_READS)
            .try_collect()
            .await?;
        let content = ShardContent {
            chunks: chunks.into_iter().map(|(i, b)| (i, Packed::Bytes(b))).collect(),
        };
        Ok(pack(&content, std::slice::from_ref(&*self.level))?
            .unwrap_or_default()
            .into())
    }
}

/// The budget of [`PackUnit::packed`].
pub fn budget() -> Semaphore {
    Semaphore::new(PACKING_MIB as usize)
}

/// `--shard auto`'s stored bytes a shard, unless `--shard-size` says otherwise: large enough
/// that an array of millions of small chunks becomes thousands of objects, small enough that a
/// mount's commit (which rewrites a whole shard) stays quick.
pub const DEFAULT_SHARD_BYTES: u64 = 64 << 20;

/// The shards `--shard` packs arrays into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shaping {
    /// Shards of this shape (in elements) for every array of as many dimensions (none: only
    /// the arrays DEST holds sharded).
    Shape(Vec<u64>),
    /// A shape for each array: as many chunks as fit in this many stored bytes.
    Auto { bytes: u64 },
}

/// An array being packed.
struct Target {
    encoding: ChunkKeyEncoding,
    ndim: usize,
    grid: Vec<u64>,
    level: Arc<ShardLevel>,
}

/// Turn a whole walk (every file a unit) into the plan of a `--shard` copy (see the module
/// notes). An array DEST (`dest`: when it holds anything) already holds sharded is packed as
/// it is there; any other as `shaping` says. The directories of packed arrays' chunk trees are
/// left out, as DEST's shards make their own.
pub async fn plan(view: &Arc<View>, walked: Plan, shaping: &Shaping, dest: Option<&Dest>, jobs: usize) -> Result<Plan> {
    let files: Vec<(String, Node)> = walked
        .units
        .into_iter()
        .filter_map(|u| match u {
            Unit::File { path, node } => Some((path, node)),
            _ => None,
        })
        .collect();
    // Every document, with what DEST holds at its path (when DEST holds anything), read
    // together.
    let docs: Vec<(usize, serde_json::Value, Option<Bytes>)> =
        futures::stream::iter(files.iter().enumerate().filter(|(_, (p, _))| is_doc(p)))
            .map(|(i, (path, node))| async move {
                let (bytes, held) = futures::join!(read_whole(view, node, path), async {
                    match dest {
                        Some(dest) => dest.read(path).await,
                        None => Ok(None),
                    }
                });
                anyhow::Ok((i, bytes?, held?))
            })
            .buffered(jobs.max(1))
            .try_filter_map(|(i, bytes, held)| async move {
                Ok(serde_json::from_slice(&bytes).ok().map(|doc| (i, doc, held)))
            })
            .try_collect()
            .await?;
    let means = match shaping {
        Shaping::Auto { .. } => mean_chunk_sizes(&files, &docs),
        Shaping::Shape(_) => HashMap::new(),
    };
    // Arrays first: each packed as DEST holds it sharded already, else as `shaping` says.
    let mut packed: HashMap<String, serde_json::Value> = HashMap::new();
    let mut rewritten: HashMap<usize, Bytes> = HashMap::new();
    let mut targets: HashMap<String, Target> = HashMap::new();
    for (i, doc, held) in &docs {
        let path = &files[*i].0;
        if packable(doc).is_none() {
            continue;
        }
        let like_dest = match held.as_deref().and_then(|b| serde_json::from_slice(b).ok()) {
            Some(there) => sharded_like(doc, &there)
                .map_err(|why| anyhow::anyhow!("{path}: the destination holds this array, but {why}"))?,
            None => None,
        };
        let dir = doc_dir(path);
        let shape = match shaping {
            Shaping::Shape(shape) => Some(shape.clone()),
            Shaping::Auto { bytes } => auto_shard_shape(doc, means.get(dir).copied(), *bytes),
        };
        let doc = match (like_dest, shape) {
            (Some(doc), _) => doc,
            (None, Some(shape)) if packs(doc, &shape).map_err(|why| anyhow::anyhow!("{path}: {why}"))? => {
                sharded_doc(doc, &shape)
            }
            _ => continue,
        };
        targets.insert(dir.to_string(), target(path, &doc)?);
        rewritten.insert(*i, to_stored_bytes(&doc).into());
        packed.insert(dir.to_string(), doc);
    }
    // Then groups: their consolidated entries of packed arrays packed alike.
    for (i, doc, _) in &docs {
        let path = &files[*i].0;
        if rewritten.contains_key(i) {
            continue;
        }
        let dir = doc_dir(path);
        let full = |rel: &str| {
            if dir.is_empty() {
                rel.to_string()
            } else {
                format!("{dir}/{rel}")
            }
        };
        if let Some(group) = packed_group(doc, &|rel| packed.get(&full(rel)).cloned()) {
            rewritten.insert(*i, to_stored_bytes(&group).into());
        }
    }
    if targets.is_empty() {
        let held = if dest.is_some() {
            " or is held sharded by the destination"
        } else {
            ""
        };
        match shaping {
            Shaping::Shape(shape) => bail!(
                "no array to pack: no v3 array without sharding has {} dimensions{held}",
                shape.len()
            ),
            Shaping::Auto { bytes } => bail!(
                "no array to pack: no v3 array without sharding has two chunks or more that fit in \
                 a shard of {bytes} bytes{held}"
            ),
        }
    }
    let mut shards: BTreeMap<String, Vec<(u64, String, Node)>> = BTreeMap::new();
    let mut levels: HashMap<String, Arc<ShardLevel>> = HashMap::new();
    let mut units = Vec::new();
    for (i, (path, node)) in files.into_iter().enumerate() {
        if let Some(bytes) = rewritten.remove(&i) {
            units.push(Unit::Doc { path, bytes });
            continue;
        }
        match place(&targets, &path) {
            Some((key, index, level)) => {
                levels.entry(key.clone()).or_insert(level);
                shards.entry(key).or_default().push((index, path, node));
            }
            None => units.push(Unit::File { path, node }),
        }
    }
    for (key, mut chunks) in shards {
        chunks.sort_by_key(|(i, _, _)| *i);
        let level = levels.remove(&key).context("a shard without its array")?;
        units.push(Unit::Pack(Arc::new(PackUnit { key, chunks, level })));
    }
    let inside = |dir: &str| {
        targets.keys().any(|t| {
            if t.is_empty() {
                !dir.is_empty()
            } else {
                dir.starts_with(&format!("{t}/"))
            }
        })
    };
    let dirs = walked.dirs.into_iter().filter(|d| !inside(d)).collect();
    let packed = packed
        .into_iter()
        .map(|(dir, doc)| {
            let shape = doc
                .pointer("/chunk_grid/configuration/chunk_shape")
                .and_then(serde_json::Value::as_array)
                .map(|dims| dims.iter().filter_map(serde_json::Value::as_u64).collect())
                .unwrap_or_default();
            (dir, shape)
        })
        .collect();
    Ok(Plan { units, dirs, packed })
}

/// The mean size of the chunk files of each array that could be packed (by its directory):
/// every file below an array's directory other than a document.
fn mean_chunk_sizes(
    files: &[(String, Node)],
    docs: &[(usize, serde_json::Value, Option<Bytes>)],
) -> HashMap<String, u64> {
    let arrays: std::collections::HashSet<&str> = docs
        .iter()
        .filter(|(_, doc, _)| packable(doc).is_some())
        .map(|(i, _, _)| doc_dir(&files[*i].0))
        .collect();
    let mut sums: HashMap<String, (u64, u64)> = HashMap::new();
    for (path, node) in files.iter().filter(|(p, _)| !is_doc(p)) {
        if let Some((dir, _)) = dirs_above(path).find(|(d, _)| arrays.contains(d)) {
            let sum = sums.entry(dir.to_string()).or_default();
            *sum = (sum.0 + 1, sum.1 + node.size);
        }
    }
    sums.into_iter()
        .map(|(dir, (n, bytes))| (dir, bytes / n.max(1)))
        .collect()
}

/// The directory of the node whose document is at `path`.
fn doc_dir(path: &str) -> &str {
    path.strip_suffix("zarr.json").unwrap_or("").trim_end_matches('/')
}

/// Every directory above `path` with the rest of the path below it, deepest first, then the
/// root.
fn dirs_above(path: &str) -> impl Iterator<Item = (&str, &str)> {
    let cuts = path.match_indices('/').map(|(i, _)| Some(i)).rev().chain([None]);
    cuts.map(move |cut| match cut {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    })
}

fn is_doc(path: &str) -> bool {
    path == "zarr.json" || path.ends_with("/zarr.json")
}

fn target(path: &str, packed: &serde_json::Value) -> Result<Target> {
    let bytes = serde_json::to_vec(packed)?;
    let NodeMetadata::Array(meta) = parse_zarr_json(&bytes).with_context(|| format!("{path}: packed document"))? else {
        bail!("{path}: not an array");
    };
    let layout = match analyse(&meta) {
        Sharding::Sharded(layout) => layout,
        Sharding::Unsupported(why) => bail!("{path}: cannot be packed so: {why}"),
        Sharding::None => bail!("{path}: the packed document declares no sharding"),
    };
    let level = layout.levels.first().context("no sharding level")?.clone();
    Ok(Target {
        encoding: meta.chunk_key_encoding,
        ndim: meta.ndim(),
        grid: crate::zarr::grid::grid_shape(&meta.shape, &level.chunk_shape)?,
        level: Arc::new(level),
    })
}

/// The shard (its key), index within it and level of the chunk file at `path`, if it is one.
fn place(targets: &HashMap<String, Target>, path: &str) -> Option<(String, u64, Arc<ShardLevel>)> {
    for (dir, rel) in dirs_above(path) {
        let Some(t) = targets.get(dir) else {
            continue;
        };
        let coords = t.encoding.decode(rel, t.ndim)?;
        if coords.iter().zip(&t.grid).any(|(c, g)| c >= g) {
            return None;
        }
        let per = &t.level.chunks_per_shard;
        let shard: Vec<u64> = coords.iter().zip(per).map(|(c, k)| c / k).collect();
        let within: Vec<u64> = coords.iter().zip(per).map(|(c, k)| c % k).collect();
        let index = t.level.index_of(&within)?;
        return Some((
            format!("{}{}", dir_prefix(dir), t.encoding.encode(&shard)),
            index,
            t.level.clone(),
        ));
    }
    None
}
