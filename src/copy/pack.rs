//! `zarrfs copy --shard SHAPE`: an unsharded hierarchy (or the unsharded view of a sharded one)
//! packed into shards of SHAPE elements, with the mount's packer (`zarr::shard_pack`).
//!
//! [`decide`] reads every `zarr.json` the outline found: an array that `zarr::reshard::packs`
//! takes (with `--shard auto`: each array in the shape `zarr::shard_shape` chooses for it, from
//! the mean size of its chunk files, found by a walk of its chunk tree that keeps only sums)
//! gets its sharded document, a group its consolidated entries changed alike; then, as the
//! copy walks such an array, every file below it whose name is a chunk key goes to the shard
//! that holds it (`pack_rows`). A unit is one destination shard: its chunk files, read `PACK_READS` at
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
use super::outline::Outline;
use super::sizes::ChunkSizes;
use super::work::read_path;
use crate::view::View;
use crate::zarr::key_encoding::ChunkKeyEncoding;
use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
use crate::zarr::reshard::{packable, packed_group, packs, sharded_doc, sharded_like};
use crate::zarr::shard_index::ShardIndex;
use crate::zarr::shard_pack::packed_layout;
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
    /// Its chunk files' sizes by their entry in the shard's index (`sizes`: 4 bytes a file
    /// when the shard is full). A path is made again from the entry when the chunk is read.
    pub chunks: ChunkSizes,
    /// The array's directory as a prefix of its files' paths.
    pub prefix: Arc<str>,
    /// The shard's coordinates in the shard grid.
    pub shard: Vec<u64>,
    pub encoding: ChunkKeyEncoding,
    pub level: Arc<ShardLevel>,
}

impl PackUnit {
    /// Bytes of its chunks.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunks.total()
    }

    /// The index and size the packed shard will have.
    pub fn layout(&self) -> Result<(ShardIndex, u64)> {
        let sizes: Vec<(u64, u64)> = self.chunks.iter().collect();
        Ok(packed_layout(&sizes, &self.level)?)
    }

    /// The path of the chunk file of entry `index` of the shard.
    pub fn path_of(&self, index: u64) -> Result<String> {
        let per = &self.level.chunks_per_shard;
        let within = self
            .level
            .within_of(index)
            .with_context(|| format!("{}: no chunk at entry {index} of its index", self.key))?;
        let coords: Vec<u64> = self
            .shard
            .iter()
            .zip(per)
            .zip(within)
            .map(|((s, k), w)| s.saturating_mul(*k).saturating_add(w))
            .collect();
        Ok(format!("{}{}", self.prefix, self.encoding.encode(&coords)))
    }

    /// The packed shard: its chunks read through the view, each written where the layout puts
    /// it in one buffer (a shard of 10^6 chunk files held as 10^6 separate buffers took 200 MiB
    /// for 16 MB of chunks).
    pub async fn packed(&self, view: &Arc<View>, budget: &Semaphore) -> Result<Bytes> {
        if self.chunks.is_empty() {
            return Ok(Bytes::new());
        }
        let mib = u32::try_from(self.chunk_bytes().div_ceil(1 << 20)).unwrap_or(u32::MAX);
        let _held = budget.acquire_many(mib.clamp(1, PACKING_MIB)).await?;
        let (index, total) = self.layout()?;
        let mut out = vec![0u8; usize::try_from(total).context("packed shard size")?];
        let encoded = index.encode(self.level.index_codec);
        put(&mut out, self.level.index_offset(total)?, &encoded)?;
        // In index order, each chunk right after the one before (as `packed_layout` lays them).
        let mut at = self.level.data_start();
        let placed: Vec<u64> = self
            .chunks
            .iter()
            .map(|(_, size)| {
                let offset = at;
                at = at.saturating_add(size);
                offset
            })
            .collect();
        let mut reads = std::pin::pin!(futures::stream::iter(self.chunks.iter().zip(placed))
            .map(|((index, size), offset)| async move {
                let path = self.path_of(index)?;
                let bytes = read_path(view, &path).await?;
                if bytes.len() as u64 != size {
                    bail!(
                        "{path}: {} bytes, {size} when it was listed (changed while the copy ran)",
                        bytes.len(),
                    );
                }
                anyhow::Ok((offset, bytes))
            })
            .buffer_unordered(PACK_READS));
        while let Some(read) = reads.next().await {
            let (offset, bytes) = read?;
            put(&mut out, offset, &bytes)?;
        }
        Ok(out.into())
    }
}

/// Write `bytes` into `out` at `offset`.
fn put(out: &mut [u8], offset: u64, bytes: &[u8]) -> Result<()> {
    let start = usize::try_from(offset).context("offset in a packed shard")?;
    let end = start.checked_add(bytes.len()).context("offset in a packed shard")?;
    out.get_mut(start..end)
        .context("a chunk beyond the end of its packed shard")?
        .copy_from_slice(bytes);
    Ok(())
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
pub struct Target {
    pub encoding: ChunkKeyEncoding,
    pub ndim: usize,
    pub grid: Vec<u64>,
    pub level: Arc<ShardLevel>,
}

/// What a `--shard` copy packs.
#[derive(Default)]
pub struct Packing {
    /// The arrays packed, by directory.
    pub targets: HashMap<String, Target>,
    /// Metadata documents rewritten (packed arrays', groups' whose consolidated entries
    /// changed), by path.
    pub rewritten: HashMap<String, Bytes>,
    /// The arrays packed (by directory) and their shard shapes.
    pub packed: BTreeMap<String, Vec<u64>>,
}

/// Decide what a `--shard` copy of the outlined hierarchy packs (see the module notes). An
/// array DEST (`dest`: when it holds anything) already holds sharded is packed as it is
/// there; any other as `shaping` says.
pub async fn decide(
    view: &Arc<View>,
    outline: &Outline,
    shaping: &Shaping,
    dest: Option<&Dest>,
    jobs: usize,
) -> Result<Packing> {
    // Every document, with what DEST holds at its path (when DEST holds anything).
    let docs: Vec<(&str, serde_json::Value, Option<Bytes>)> = futures::stream::iter(&outline.docs)
        .map(|(path, bytes)| async move {
            let held = match dest {
                Some(dest) => dest.read(path).await?,
                None => None,
            };
            anyhow::Ok(serde_json::from_slice(bytes).ok().map(|doc| (path.as_str(), doc, held)))
        })
        .buffered(jobs.max(1))
        .try_filter_map(|found| async move { Ok(found) })
        .try_collect()
        .await?;
    let mut out = Packing::default();
    let mut packed: HashMap<String, serde_json::Value> = HashMap::new();
    // Arrays first: each packed as DEST holds it sharded already, else as `shaping` says.
    for (path, doc, held) in &docs {
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
            Shaping::Auto { bytes } => auto_shard_shape(doc, mean_chunk_size(view, dir).await?, *bytes),
        };
        let doc = match (like_dest, shape) {
            (Some(doc), _) => doc,
            (None, Some(shape)) if packs(doc, &shape).map_err(|why| anyhow::anyhow!("{path}: {why}"))? => {
                sharded_doc(doc, &shape)
            }
            _ => continue,
        };
        out.targets.insert(dir.to_string(), target(path, &doc)?);
        out.rewritten.insert(path.to_string(), to_stored_bytes(&doc).into());
        packed.insert(dir.to_string(), doc);
    }
    // Then groups: their consolidated entries of packed arrays packed alike.
    for (path, doc, _) in &docs {
        if out.rewritten.contains_key(*path) {
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
            out.rewritten.insert(path.to_string(), to_stored_bytes(&group).into());
        }
    }
    if out.targets.is_empty() {
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
    out.packed = packed
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
    Ok(out)
}

/// The mean size of the chunk files of the array at `dir`: every file below its directory
/// other than a document (its chunk tree walked, only sums kept).
async fn mean_chunk_size(view: &Arc<View>, dir: &str) -> Result<Option<u64>> {
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut listed = std::pin::pin!(super::walk::listings(view, dir.to_string(), true));
    while let Some(listed) = listed.next().await {
        for (path, node) in listed?.1.files {
            if !is_doc(&path) {
                n += 1;
                bytes = bytes.saturating_add(node.size);
            }
        }
    }
    Ok((n > 0).then(|| bytes / n))
}

/// The directory of the node whose document is at `path`.
fn doc_dir(path: &str) -> &str {
    path.strip_suffix("zarr.json").unwrap_or("").trim_end_matches('/')
}

fn is_doc(path: &str) -> bool {
    path == "zarr.json" || path.ends_with("/zarr.json")
}

pub(super) fn target(path: &str, packed: &serde_json::Value) -> Result<Target> {
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
