//! Zarr v2 and v1 nodes in an inspected hierarchy: a directory without `zarr.json` holding
//! `.zarray` (a v2 array), `.zgroup` (a v2 group) or a v1 `meta` document. Shown as stored by
//! the mount (nothing to unshard); reported with their chunk counts.

use std::sync::Arc;

use anyhow::Result;

use super::{inspect_array, Report};
use crate::store::key::dir_prefix;
use crate::store::{GetOptions, Store};
use crate::zarr::legacy::parse_legacy_array;
use crate::zarr::sharding::Sharding;

/// Report the v2 or v1 node at `dir`, if it is one; whether it is an array (nothing below it
/// is then a node).
pub(super) async fn inspect_legacy_node(store: &Arc<dyn Store>, dir: &str, report: &mut Report) -> Result<bool> {
    let prefix = dir_prefix(dir);
    for (name, v1) in [(".zarray", false), ("meta", true)] {
        let key = format!("{prefix}{name}");
        let Some(got) = store.get(&key, GetOptions::default()).await? else {
            continue;
        };
        match parse_legacy_array(&got.bytes, v1) {
            Ok(meta) => {
                let layout = if v1 { "v1" } else { "v2" };
                let array = inspect_array(store, dir, dir, meta, Sharding::None, layout).await;
                report.arrays.push(array);
                return Ok(true);
            }
            // A file named `meta` need not be Zarr v1's.
            Err(_) if v1 => {}
            Err(e) => report.problems.push(format!("{key}: {e}")),
        }
    }
    if store.head(&format!("{prefix}.zgroup")).await?.is_some() {
        report.add_group(dir, "v2");
    }
    Ok(false)
}
