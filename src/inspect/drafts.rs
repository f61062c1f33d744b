//! A hierarchy in a v3 draft's layout, inspected from its metadata tree (`meta/root/…` in
//! 2020, `meta/…` in 2022): every `.group.json` is a group, every `.array.json` an array whose
//! chunks (shards, with the sharding storage transformer) are in its data directory; for the
//! 2022 layout that is `data/<path>/`, or `data/root/<path>/` when only that one holds chunks
//! (the 2022 text says both).

use std::sync::Arc;

use anyhow::Result;

use super::{inspect_array, Report};
use crate::store::{GetOptions, Store};
use crate::zarr::draft::{parse_draft_array, DraftLayout};
use crate::zarr::sharding::Sharding;

pub(super) async fn inspect_draft(store: &Arc<dyn Store>, layout: DraftLayout, report: &mut Report) -> Result<()> {
    let meta_dir = match layout {
        DraftLayout::Y2020 => "meta/root",
        DraftLayout::Y2022 => "meta/",
    };
    for key in store.list_prefix(meta_dir).await? {
        match node_of(&key, layout) {
            Some((path, false)) => report.add_group(&path, layout.name()),
            Some((path, true)) => inspect_draft_array(store, layout, &key, &path, report).await?,
            None => {}
        }
    }
    Ok(())
}

async fn inspect_draft_array(
    store: &Arc<dyn Store>,
    layout: DraftLayout,
    key: &str,
    path: &str,
    report: &mut Report,
) -> Result<()> {
    let (Some(data_dir), Some(got)) = (
        layout.data_dir_of_array_key(key),
        store.get(key, GetOptions::default()).await?,
    ) else {
        return Ok(());
    };
    let array = match parse_draft_array(&got.bytes) {
        Ok(array) => array,
        Err(e) => {
            report.problems.push(format!("{key}: {e}"));
            return Ok(());
        }
    };
    let data_dir = chunk_dir(store, layout, path, data_dir).await?;
    let sharding = array.sharding.map_or(Sharding::None, Sharding::Sharded);
    let name = layout.name();
    report
        .arrays
        .push(inspect_array(store, path, &data_dir, array.meta, sharding, name).await);
    Ok(())
}

/// The hierarchy path of the node whose metadata key is `key`, and whether it is an array
/// (`meta/root/a/b.array.json` -> `a/b`; the root's own documents -> ``).
fn node_of(key: &str, layout: DraftLayout) -> Option<(String, bool)> {
    let (root_array, root_group, dir) = match layout {
        DraftLayout::Y2020 => ("meta/root.array.json", "meta/root.group.json", "meta/root/"),
        DraftLayout::Y2022 => ("meta/array.json", "meta/group.json", "meta/"),
    };
    if key == root_array || key == root_group {
        return Some((String::new(), key == root_array));
    }
    let rest = key.strip_prefix(dir)?;
    if let Some(path) = rest.strip_suffix(".array.json") {
        return Some((path.to_string(), true));
    }
    rest.strip_suffix(".group.json").map(|path| (path.to_string(), false))
}

/// Where the array at `path` keeps its chunks: its data directory, or for the 2022 layout the
/// `data/root/` one when only that holds any.
async fn chunk_dir(store: &Arc<dyn Store>, layout: DraftLayout, path: &str, data_dir: String) -> Result<String> {
    if layout != DraftLayout::Y2022 {
        return Ok(data_dir);
    }
    let alternative = if path.is_empty() {
        "data/root".to_string()
    } else {
        format!("data/root/{path}")
    };
    let has_chunks = |dir: String| async move { store.list_prefix(&format!("{dir}/c")).await.map(|k| !k.is_empty()) };
    if !has_chunks(data_dir.clone()).await? && has_chunks(alternative.clone()).await? {
        return Ok(alternative);
    }
    Ok(data_dir)
}
