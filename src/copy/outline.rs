//! The first pass of a copy: the hierarchy outside its arrays — groups' directories and files,
//! every metadata document, and where the arrays are — walked before any byte is written.
//!
//! It is small whatever the number of chunks (a listing of each group's and each array's
//! directory, the `zarr.json` documents read to tell arrays from groups), and it is what must
//! be known before writing: every metadata document, to refuse a DEST holding another
//! hierarchy, and with `--shard` which arrays are packed and how. An array's directory is
//! listed here for its metadata only: the rest of it (its chunk tree, or its stored shards, and
//! anything else below it) is left to the second pass (`walk`), an array at a time.
//!
//! An array is a directory whose `zarr.json` says `"node_type": "array"`, or that holds a
//! `.zarray` (a v2 view).

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::plan::is_metadata_path;
use super::work::read_whole;
use crate::store::key::dir_prefix;
use crate::view::{Node, View};

/// Directories listed at once while walking.
pub const WALK_LISTINGS: usize = 16;

/// The hierarchy outside its arrays (see the module notes).
#[derive(Debug, Default)]
pub struct Outline {
    /// Directories outside arrays, arrays' own included, parents first.
    pub dirs: Vec<String>,
    /// Files outside arrays' directories, and arrays' metadata documents, by path.
    pub files: Vec<(String, Node)>,
    /// The `zarr.json` documents among them, as the view shows them.
    pub docs: Vec<(String, Bytes)>,
    /// Arrays' directories, in name order.
    pub arrays: Vec<String>,
}

/// One directory of the first pass.
struct Listed {
    entries: Vec<(String, Node)>,
    doc: Option<Bytes>,
    array: bool,
}

/// List `dir` and read its `zarr.json`, if any, to tell an array.
async fn list(view: Arc<View>, dir: String) -> Result<Listed> {
    let shown = if dir.is_empty() { "the root" } else { dir.as_str() };
    let entries = view.list(&dir).await.with_context(|| format!("cannot list {shown}"))?;
    let prefix = dir_prefix(&dir);
    let mut doc = None;
    let mut array = false;
    for (name, node) in &entries {
        if node.is_dir() {
            continue;
        }
        if name == "zarr.json" {
            let bytes = read_whole(&view, node, &format!("{prefix}{name}")).await?;
            let parsed: Option<serde_json::Value> = serde_json::from_slice(&bytes).ok();
            array |= parsed
                .as_ref()
                .and_then(|d| d.get("node_type"))
                .and_then(|t| t.as_str())
                == Some("array");
            doc = Some(bytes);
        } else if name == ".zarray" {
            array = true;
        }
    }
    Ok(Listed { entries, doc, array })
}

/// Walk the hierarchy outside its arrays, a level at a time, the directories of a level listed
/// together (parents before children).
pub async fn outline(view: &Arc<View>) -> Result<Outline> {
    let mut out = Outline::default();
    let mut level = vec![String::new()];
    while !level.is_empty() {
        let listed: Vec<(String, Listed)> = futures::stream::iter(level)
            .map(|dir| {
                let view = view.clone();
                super::on_task(async move { Ok((dir.clone(), list(view, dir).await?)) })
            })
            .buffered(WALK_LISTINGS)
            .try_collect()
            .await?;
        level = Vec::new();
        for (dir, listed) in listed {
            let prefix = dir_prefix(&dir);
            if let Some(doc) = listed.doc {
                out.docs.push((format!("{prefix}zarr.json"), doc));
            }
            if listed.array {
                out.arrays.push(dir);
            }
            for (name, node) in listed.entries {
                let path = format!("{prefix}{name}");
                if node.is_dir() {
                    if !listed.array {
                        out.dirs.push(path.clone());
                        level.push(path);
                    }
                } else if !listed.array || is_metadata_path(&path) {
                    out.files.push((path, node));
                }
            }
        }
    }
    if out.files.is_empty() && out.dirs.is_empty() && out.arrays.is_empty() {
        bail!("nothing to copy: the source shows no file or directory");
    }
    out.arrays.sort();
    Ok(out)
}
