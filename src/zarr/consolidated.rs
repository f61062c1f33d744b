//! Inline consolidated metadata: a group's `zarr.json` that carries the documents of the nodes
//! below it (`"consolidated_metadata": {"kind": "inline", "metadata": {"<path>": {…}}}`), as
//! zarr-python and xarray write it by default and trust over the nodes' own documents.
//!
//! zarr-python flattens every descendant into the block of the group it consolidates
//! (`"a"`, `"a/b"`), and a child group's entry may carry a block of its own whose paths are
//! relative to that child. [`for_each_array_entry`] visits every array entry at any depth with
//! its path relative to the outer group, so a path seen twice is the same array both times.
//!
//! [`rewrite_group`] makes the view's document of a group: each entry of a sharded array that
//! the view shows unsharded becomes exactly what the view shows as that array's own
//! `zarr.json` ([`unsharded_doc`](crate::zarr::rewrite::unsharded_doc)), and nothing else
//! changes. It rewrites what is stored, in place, and never rebuilds the block, so wherever
//! the store agrees with itself, the view does too.

use serde_json::Value;

use crate::zarr::metadata::{parse_node, NodeMetadata};
use crate::zarr::rewrite::unshard;
use crate::zarr::sharding::{analyse, Sharding, SHARDING_CODEC};

/// Call `f(path, entry)` for every array entry of `doc`'s consolidated metadata, at any depth;
/// `path` is relative to the group `doc` describes. Entries whose path is not a plain relative
/// path (empty components, `.` or `..`) are skipped: they name no node of this group.
pub fn for_each_array_entry(doc: &mut Value, f: &mut dyn FnMut(&str, &mut Value)) {
    visit(doc, "", f);
}

fn visit(doc: &mut Value, prefix: &str, f: &mut dyn FnMut(&str, &mut Value)) {
    let Some(metadata) = doc
        .get_mut("consolidated_metadata")
        .and_then(|c| c.get_mut("metadata"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (path, entry) in metadata.iter_mut() {
        if !is_relative_path(path) {
            continue;
        }
        let full = format!("{prefix}{path}");
        match entry.get("node_type").and_then(Value::as_str) {
            Some("array") => f(&full, entry),
            Some("group") => visit(entry, &format!("{full}/"), f),
            _ => {}
        }
    }
}

/// `a` or `a/b`: no empty, `.` or `..` component.
fn is_relative_path(path: &str) -> bool {
    !path.is_empty() && path.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// The paths of every array entry of `doc`'s consolidated metadata (see
/// [`for_each_array_entry`]), each once, in document order.
pub fn array_entry_paths(doc: &Value) -> Vec<String> {
    let mut doc = doc.clone();
    let mut paths: Vec<String> = Vec::new();
    for_each_array_entry(&mut doc, &mut |path, _| {
        if !paths.iter().any(|p| p == path) {
            paths.push(path.to_string());
        }
    });
    paths
}

/// Whether an array document declares sharding (a `sharding_indexed` codec at its top level),
/// whether or not the view could unshard it.
pub fn declares_sharding(entry: &Value) -> bool {
    let codecs = entry.get("codecs").and_then(Value::as_array);
    codecs.is_some_and(|codecs| {
        codecs.iter().any(|c| {
            let name = c.as_str().or_else(|| c.get("name").and_then(Value::as_str));
            name == Some(SHARDING_CODEC)
        })
    })
}

/// The view's form of one array document: unsharded when the view can unshard it. An entry
/// that declares no sharding is not parsed (nor copied) at all.
pub fn unsharded_entry(entry: &Value) -> Option<Value> {
    if !declares_sharding(entry) {
        return None;
    }
    let Ok(NodeMetadata::Array(meta)) = parse_node(entry.clone()) else {
        return None;
    };
    match analyse(&meta) {
        Sharding::Sharded(layout) => Some(unshard(meta.raw, &layout)),
        Sharding::None | Sharding::Unsupported(_) => None,
    }
}

/// Turn the stored document of a group into the view's, in place: every array entry that is
/// not `as_stored(path)` and that the view can unshard is replaced by its unsharded form.
/// Returns whether anything changed (if not, the view shows the stored document). In place,
/// because the document may describe ten thousand arrays: its parsed tree takes about five
/// times its size, and a copy of it would double that.
pub fn rewrite_group(doc: &mut Value, as_stored: &dyn Fn(&str) -> bool) -> bool {
    let mut changed = false;
    for_each_array_entry(doc, &mut |path, entry| {
        if as_stored(path) {
            return;
        }
        if let Some(view) = unsharded_entry(entry) {
            *entry = view;
            changed = true;
        }
    });
    changed
}

/// Reads one field of an array document, for comparing two of them.
type FieldOf = fn(&Value) -> Option<Value>;

/// How a consolidated entry contradicts the array's own stored document, if it does: in its
/// shape, data type, chunk shape or sharding (what readers trusting the entry would get wrong;
/// spelling and other fields are not compared).
pub fn disagreement(entry: &Value, stored: &Value) -> Option<String> {
    let fields: [(&str, FieldOf); 4] = [
        ("shape", |v| v.get("shape").cloned()),
        ("data_type", |v| v.get("data_type").cloned()),
        ("chunk shape", |v| {
            v.pointer("/chunk_grid/configuration/chunk_shape").cloned()
        }),
        ("sharding", |v| Some(Value::Bool(declares_sharding(v)))),
    ];
    fields.iter().find_map(|(name, get)| {
        let (there, here) = (get(entry), get(stored));
        (there != here).then(|| {
            let show = |v: Option<Value>| v.map_or("nothing".to_string(), |v| v.to_string());
            format!(
                "{name} {} in the consolidated entry, {} in its zarr.json",
                show(there),
                show(here)
            )
        })
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::zarr::sharding::tests::{bytes_zstd, sharding};
    use serde_json::json;

    pub(crate) fn sharded_entry(shape: u64, shard: u64, inner: u64) -> Value {
        json!({
            "shape": [shape], "data_type": "int16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [shard]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [sharding(json!([inner]), bytes_zstd())],
            "attributes": {"units": "K"}, "dimension_names": ["y"],
            "zarr_format": 3, "node_type": "array", "storage_transformers": []
        })
    }

    pub(crate) fn plain_entry() -> Value {
        json!({
            "shape": [4], "data_type": "int64",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "zarr_format": 3, "node_type": "array"
        })
    }

    pub(crate) fn group(metadata: Value) -> Value {
        json!({
            "attributes": {"title": "t"}, "zarr_format": 3,
            "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": metadata},
            "node_type": "group"
        })
    }

    /// The view's document of a stored group document, or `None` when it is the stored one.
    pub(crate) fn rewritten(doc: &Value, as_stored: &dyn Fn(&str) -> bool) -> Option<Value> {
        let mut out = doc.clone();
        rewrite_group(&mut out, as_stored).then_some(out)
    }

    /// The block zarr-python 3 writes: descendants flattened, a child group with an empty
    /// block of its own, plus a nested block as other writers make it.
    fn hierarchy() -> Value {
        group(json!({
            "q": sharded_entry(64, 32, 8),
            "sub": group(json!({"deep": sharded_entry(16, 8, 4), "x": plain_entry()})),
            "sub/deep": sharded_entry(16, 8, 4),
            "x": plain_entry(),
        }))
    }

    #[test]
    fn entries_at_every_depth_with_their_paths() {
        assert_eq!(array_entry_paths(&hierarchy()), ["q", "sub/deep", "sub/x", "x"]);
        let odd = group(json!({"../up": plain_entry(), "a//b": plain_entry(), "": plain_entry(), "ok": 3}));
        assert!(array_entry_paths(&odd).is_empty());
        assert!(array_entry_paths(&json!({"node_type": "group"})).is_empty());
        assert!(array_entry_paths(&json!({"consolidated_metadata": null})).is_empty());
    }

    #[test]
    fn sharded_entries_rewritten_like_the_arrays_own_documents() {
        let doc = hierarchy();
        let view = rewritten(&doc, &|_| false).unwrap();
        let entries = &view["consolidated_metadata"]["metadata"];
        for entry in [
            &entries["q"],
            &entries["sub/deep"],
            &entries["sub"]["consolidated_metadata"]["metadata"]["deep"],
        ] {
            assert_eq!(entry["codecs"], bytes_zstd());
            assert_eq!(entry["attributes"], json!({"units": "K"}));
        }
        assert_eq!(entries["q"]["chunk_grid"]["configuration"]["chunk_shape"], json!([8]));
        assert_eq!(
            entries["sub/deep"]["chunk_grid"]["configuration"]["chunk_shape"],
            json!([4])
        );
        // Equal to the array's own view document, key order included.
        let own = unsharded_entry(&sharded_entry(64, 32, 8)).unwrap();
        assert_eq!(
            serde_json::to_string(&entries["q"]).unwrap(),
            serde_json::to_string(&own).unwrap()
        );
        // Everything else as stored, in order.
        assert_eq!(entries["x"], plain_entry());
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&view), keys(&doc));
        assert_eq!(keys(entries), keys(&doc["consolidated_metadata"]["metadata"]));
    }

    #[test]
    fn arrays_shown_as_stored_and_unshardable_entries_stay() {
        let doc = hierarchy();
        let view = rewritten(&doc, &|p| p == "sub/deep").unwrap();
        let entries = &view["consolidated_metadata"]["metadata"];
        assert_eq!(entries["sub/deep"], sharded_entry(16, 8, 4));
        assert_eq!(
            entries["sub"]["consolidated_metadata"]["metadata"]["deep"],
            sharded_entry(16, 8, 4)
        );
        assert_ne!(entries["q"], sharded_entry(64, 32, 8));
        // 5 does not divide 32: cannot be unsharded, so shown as stored.
        let odd = group(json!({"a": sharded_entry(64, 32, 5), "b": plain_entry(), "c": {"node_type": "array"}}));
        assert_eq!(rewritten(&odd, &|_| false), None);
        assert_eq!(
            rewritten(&json!({"zarr_format": 3, "node_type": "group"}), &|_| false),
            None
        );
        // Nothing to rewrite leaves the document as it was.
        let mut same = odd.clone();
        assert!(!rewrite_group(&mut same, &|_| false));
        assert_eq!(same, odd);
    }

    #[test]
    fn disagreements_in_what_readers_use() {
        let stored = sharded_entry(64, 32, 8);
        assert_eq!(disagreement(&stored, &stored), None);
        let mut respelled = stored.clone();
        respelled["codecs"][0]["configuration"]["codecs"] = json!(["bytes"]);
        respelled["attributes"] = json!({});
        assert_eq!(disagreement(&respelled, &stored), None);
        let stale = sharded_entry(48, 32, 8);
        let why = disagreement(&stale, &stored).unwrap();
        assert!(why.contains("shape [48]") && why.contains("[64]"), "{why}");
        assert!(disagreement(&unsharded_entry(&stored).unwrap(), &stored)
            .unwrap()
            .starts_with("chunk shape"));
        assert!(disagreement(&plain_entry(), &json!({"node_type": "array"})).is_some());
    }

    #[test]
    fn sharding_declared_by_name() {
        assert!(declares_sharding(&sharded_entry(64, 32, 5)));
        assert!(declares_sharding(&json!({"codecs": ["sharding_indexed"]})));
        assert!(!declares_sharding(&plain_entry()));
        assert!(!declares_sharding(&json!({"codecs": 7})));
    }
}
