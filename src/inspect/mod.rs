//! `zarrfs inspect`: walk a hierarchy and report every array, its sharding, how many shards and
//! non-empty inner chunks it has, and the problems found on the way (unreadable metadata,
//! sharding that cannot be unsharded, corrupt shards). It reads every shard index, so it is
//! also a health check. Groups' consolidated metadata is checked against the arrays it
//! describes: a stale or dangling entry is a problem, since readers that trust consolidated
//! metadata (xarray and zarr-python by default) would act on it.
//!
//! Each node's layout is reported: final Zarr v3, the v3 drafts of 2020 and 2022 (walked
//! from their metadata trees, [`drafts`]), Zarr v2 and v1 ([`legacy`]).
//!
//! It only reads, through the store it is given and the sharding transformer over it; it never
//! writes, never goes through the view or the filesystem (it reports the hierarchy as stored,
//! not as mounted), and never names the command line, which opens the store and prints the
//! report.

mod drafts;
mod legacy;

use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};

use crate::shard::{IndexCache, ShardOptions, ShardedArray};
use crate::store::key::dir_prefix;
use crate::store::{EntryKind, GetOptions, Store};
use crate::zarr::consolidated::{disagreement, for_each_array_entry};
use crate::zarr::draft::DraftLayout;
use crate::zarr::key_encoding::Separator;
use crate::zarr::metadata::CodecSpec;
use crate::zarr::metadata::{parse_zarr_json, ArrayMetadata, NodeMetadata};
use crate::zarr::sharding::{analyse, Sharding};
use crate::zarr::transcode::{Transcode, V2Compressor};
use crate::zarr::v2_meta::v2_array;

#[derive(Debug, Default)]
pub struct Report {
    pub groups: Vec<String>,
    /// The layout of each group (final v3, a draft's, v2).
    pub group_layouts: std::collections::BTreeMap<String, &'static str>,
    pub arrays: Vec<ArrayReport>,
    /// Problems not tied to a readable array (e.g. malformed metadata).
    pub problems: Vec<String>,
}

#[derive(Debug)]
pub struct ArrayReport {
    pub path: String,
    /// "v3", "draft 2020", "draft 2022", "v2" or "v1".
    pub layout: &'static str,
    pub meta: ArrayMetadata,
    /// Stored chunk (shard) shape when sharded and shown unsharded.
    pub shard_shape: Option<Vec<u64>>,
    /// The chunk shape and codec names of the view.
    pub chunk_shape: Vec<u64>,
    pub codecs: Vec<String>,
    pub shards: u64,
    pub inner_chunks: u64,
    pub problems: Vec<String>,
}

pub async fn inspect(store: Arc<dyn Store>) -> Result<Report> {
    let mut report = Report::default();
    if let Some(got) = store.get("zarr.json", GetOptions::default()).await? {
        if let Some(layout) = DraftLayout::of_entry_point(&got.bytes) {
            drafts::inspect_draft(&store, layout, &mut report).await?;
            return Ok(finish(report, Vec::new()));
        }
    }
    let mut pending = vec![String::new()];
    let mut consolidated = Vec::new();
    while let Some(dir) = pending.pop() {
        let key = format!("{}zarr.json", dir_prefix(&dir));
        if let Some(got) = store.get(&key, GetOptions::default()).await? {
            match parse_zarr_json(&got.bytes) {
                Ok(NodeMetadata::Array(meta)) => {
                    let sharding = analyse(&meta);
                    report
                        .arrays
                        .push(inspect_array(&store, &dir, &dir, meta, sharding, V3).await);
                    continue; // nothing below an array is a node
                }
                Ok(NodeMetadata::Group { raw }) => {
                    report.add_group(&dir, V3);
                    consolidated.push((dir.clone(), raw));
                }
                Err(e) => report.problems.push(format!("{key}: {e}")),
            }
        } else if legacy::inspect_legacy_node(&store, &dir, &mut report).await? {
            continue; // an array
        }
        for entry in store.list_dir(&dir_prefix(&dir)).await? {
            if entry.kind == EntryKind::Dir {
                pending.push(format!("{}{}", dir_prefix(&dir), entry.name));
            }
        }
    }
    if !store.capabilities().listable {
        report.problems.push(
            "the source cannot be listed (a web server with neither WebDAV nor directory index pages): \
             groups come from the root's consolidated metadata and chunks from reading every shard index \
             of each grid, so what is not named there is missing from this report"
                .to_string(),
        );
    }
    Ok(finish(report, consolidated))
}

/// The final v3 layout's name.
const V3: &str = "v3";

fn finish(mut report: Report, consolidated: Vec<(String, Value)>) -> Report {
    report.groups.sort();
    report.arrays.sort_by(|a, b| a.path.cmp(&b.path));
    for (dir, mut doc) in consolidated {
        check_consolidated(&mut report, &dir, &mut doc);
    }
    report
}

/// Problems of a group's consolidated entries: arrays not stored, or described otherwise.
fn check_consolidated(report: &mut Report, dir: &str, doc: &mut Value) {
    let group = if dir.is_empty() {
        "/".to_string()
    } else {
        format!("/{dir}")
    };
    for_each_array_entry(doc, &mut |path, entry| {
        let array_path = format!("{}{path}", dir_prefix(dir));
        match report.arrays.iter_mut().find(|a| a.path == array_path) {
            Some(array) => {
                if let Some(why) = disagreement(entry, &array.meta.raw) {
                    array
                        .problems
                        .push(format!("stale consolidated metadata in group {group}: {why}"));
                }
            }
            None => report.problems.push(format!(
                "consolidated metadata of group {group} describes array {path:?}, which is not stored"
            )),
        }
    });
}

/// The report of the array at hierarchy path `path` whose chunk keys are in `dir`.
async fn inspect_array(
    store: &Arc<dyn Store>,
    path: &str,
    dir: &str,
    meta: ArrayMetadata,
    sharding: Sharding,
    layout_name: &'static str,
) -> ArrayReport {
    let mut r = ArrayReport {
        path: path.to_string(),
        layout: layout_name,
        chunk_shape: meta.chunk_shape.clone(),
        codecs: meta.codecs.iter().map(|c| c.name.clone()).collect(),
        shard_shape: None,
        shards: 0,
        inner_chunks: 0,
        problems: Vec::new(),
        meta,
    };
    let layout = match sharding {
        Sharding::None => {
            if layout_name == V3 {
                let (shape, codecs) = (r.meta.chunk_shape.clone(), r.meta.codecs.clone());
                r.problems.extend(v2_problem(&r.meta, &shape, &codecs));
            }
            count_unsharded(store, dir, &mut r).await;
            return r;
        }
        Sharding::Unsupported(reason) => {
            r.problems.push(format!("shown as stored, not unsharded: {reason}"));
            count_unsharded(store, dir, &mut r).await;
            return r;
        }
        Sharding::Sharded(layout) => layout,
    };
    r.shard_shape = Some(r.meta.chunk_shape.clone());
    r.chunk_shape = layout.inner_chunk_shape.clone();
    r.codecs = layout.inner_codecs.iter().map(|c| c.name.clone()).collect();
    if layout_name == V3 {
        r.problems
            .extend(v2_problem(&r.meta, &layout.inner_chunk_shape, &layout.inner_codecs));
    }
    let cache = Arc::new(IndexCache::new(16 << 20));
    let array = match ShardedArray::new(
        store.clone(),
        dir_prefix(dir),
        &r.meta,
        layout,
        cache,
        ShardOptions::default(),
    ) {
        Ok(a) => a,
        Err(e) => {
            r.problems.push(e.to_string());
            return r;
        }
    };
    let shards = match array.stored_shards().await {
        Ok(s) => s,
        Err(e) => {
            r.problems.push(e.to_string());
            return r;
        }
    };
    r.shards = shards.len() as u64;
    for shard in shards {
        match array.chunks_of_shard(&shard).await {
            Ok(chunks) => r.inner_chunks += chunks.len() as u64,
            Err(e) => r.problems.push(e.to_string()),
        }
    }
    r
}

/// Why `--view v2` leaves the array out, if it does: a data type v2 has no name for, or
/// chunk codecs that can be neither relayed nor transcoded.
fn v2_problem(meta: &ArrayMetadata, chunk_shape: &[u64], codecs: &[CodecSpec]) -> Option<String> {
    let into = V2Compressor::default();
    match v2_array(meta, chunk_shape, codecs, Separator::Dot, &into.v2_json()) {
        Err(e) => Some(format!("left out of --view v2: {e}")),
        Ok(a) if a.relayed => None,
        Ok(_) => Transcode::plan(codecs, &meta.data_type, chunk_shape, into)
            .err()
            .map(|e| format!("left out of --view v2: its chunks cannot be transcoded: {e}")),
    }
}

/// Chunks of an array shown as stored: the keys its chunk key encoding decodes.
async fn count_unsharded(store: &Arc<dyn Store>, dir: &str, r: &mut ArrayReport) {
    let prefix = dir_prefix(dir);
    match store.list_prefix(&prefix).await {
        Ok(keys) => {
            let ndim = r.meta.ndim();
            let encoding = r.meta.chunk_key_encoding;
            r.inner_chunks = keys
                .iter()
                .filter_map(|k| k.strip_prefix(&prefix))
                .filter(|rel| encoding.decode(rel, ndim).is_some())
                .count() as u64;
        }
        Err(e) => r.problems.push(e.to_string()),
    }
}

impl ArrayReport {
    /// The stored grid's edges when they vary (a rectilinear grid, whose `shard_shape` or, not
    /// sharded, `chunk_shape` is then its first chunk's): its `chunk_shapes` as stored.
    fn stored_edges(&self) -> Option<&Value> {
        self.meta.rectilinear.as_ref()?;
        self.meta.raw.pointer("/chunk_grid/configuration/chunk_shapes")
    }

    /// The stored shards' edges of a sharded array on a rectilinear grid.
    fn shard_edges(&self) -> Option<&Value> {
        self.shard_shape.as_ref().and(self.stored_edges())
    }

    /// The stored chunks' edges of an array on a rectilinear grid shown as stored.
    fn chunk_edges(&self) -> Option<&Value> {
        self.shard_shape.is_none().then(|| self.stored_edges()).flatten()
    }
}

impl Report {
    fn add_group(&mut self, path: &str, layout: &'static str) {
        self.groups.push(path.to_string());
        self.group_layouts.insert(path.to_string(), layout);
    }

    pub fn to_json(&self) -> Value {
        let arrays: Vec<Value> = self
            .arrays
            .iter()
            .map(|a| {
                json!({
                    "path": a.path,
                    "layout": a.layout,
                    "shape": a.meta.shape,
                    "data_type": a.meta.data_type,
                    "chunk_shape": a.chunk_shape,
                    "shard_shape": a.shard_shape,
                    "shard_edges": a.shard_edges(),
                    "chunk_edges": a.chunk_edges(),
                    "codecs": a.codecs,
                    "sharded": a.shard_shape.is_some(),
                    "shards": a.shards,
                    "inner_chunks": a.inner_chunks,
                    "problems": a.problems,
                })
            })
            .collect();
        json!({ "arrays": arrays, "groups": self.groups, "group_layouts": self.group_layouts,
                "problems": self.problems })
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let name = |p: &str| {
            if p.is_empty() {
                "/".to_string()
            } else {
                format!("/{p}")
            }
        };
        for g in &self.groups {
            let layout = self.group_layouts.get(g).copied().unwrap_or(V3);
            out.push_str(&format!("group {}  ({layout})\n", name(g)));
        }
        for a in &self.arrays {
            out.push_str(&format!("array {}  ({})\n", name(&a.path), a.layout));
            out.push_str(&format!("  shape       {:?}  {}\n", a.meta.shape, a.meta.data_type));
            match &a.shard_shape {
                Some(shard) => {
                    let shard = match a.shard_edges() {
                        Some(edges) => format!("rectilinear {edges}"),
                        None => format!("{shard:?}"),
                    };
                    out.push_str(&format!("  shards      {shard}  ({} stored)\n", a.shards));
                    out.push_str(&format!(
                        "  chunks      {:?}  ({} non-empty)\n",
                        a.chunk_shape, a.inner_chunks
                    ));
                }
                None => {
                    let chunks = match a.chunk_edges() {
                        Some(edges) => format!("rectilinear {edges}"),
                        None => format!("{:?}", a.chunk_shape),
                    };
                    out.push_str(&format!(
                        "  chunks      {chunks}  ({} stored, not sharded)\n",
                        a.inner_chunks
                    ))
                }
            }
            out.push_str(&format!("  codecs      {}\n", a.codecs.join(", ")));
            for p in &a.problems {
                out.push_str(&format!("  PROBLEM     {p}\n"));
            }
        }
        for p in &self.problems {
            out.push_str(&format!("PROBLEM {p}\n"));
        }
        out
    }
}
