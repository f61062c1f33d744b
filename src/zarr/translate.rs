//! Metadata written through the unsharded view, translated back into what the store holds.
//!
//! The view shows a sharded array's `chunk_grid` and `codecs` as those of its inner chunks;
//! every other field may change (shape, attributes, dimension names, fill value, …). A written
//! array document ([`translate_array`]) is stored with the stored document's `chunk_grid` and
//! `codecs` (the sharding configuration) put back; one whose `chunk_grid` or `codecs` differ
//! from the view's asks for something the sharded store cannot express, and is refused.
//!
//! A written group document ([`translate_group`]) gets the same treatment entry by entry in its
//! consolidated metadata: entries of arrays the view shows unsharded are translated back; other
//! entries are stored as written, and those that declare sharding are reported as `created` —
//! the client is about to write those arrays' shards as files, so the caller shows them as
//! stored. Comparisons ignore spelling that means the same (`"bytes"` and `{"name": "bytes"}`,
//! an empty `configuration` and none).

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::zarr::consolidated::{declares_sharding, for_each_array_entry};

/// The members the view replaces in a sharded array's document.
const SHARDING_FIELDS: [&str; 2] = ["chunk_grid", "codecs"];

/// Why a written view document cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotJson(String),
    NotAnObject,
    ChangesSharding(&'static str),
    /// An entry of the consolidated metadata at this path changes this field.
    EntryChangesSharding(String, &'static str),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const WHY: &str = "which a sharded array cannot express through the unsharded view";
        match self {
            Refusal::NotJson(e) => write!(f, "not JSON: {e}"),
            Refusal::NotAnObject => write!(f, "not a JSON object"),
            Refusal::ChangesSharding(field) => write!(f, "changes {field}, {WHY}"),
            Refusal::EntryChangesSharding(path, field) => {
                write!(f, "consolidated entry {path:?} changes {field}, {WHY}")
            }
        }
    }
}

/// How the view shows the array at a path of a group's consolidated block.
#[derive(Debug, Clone, PartialEq)]
pub enum Shown {
    /// Unsharded: the view's document of it and the stored one.
    Unsharded { view: Value, stored: Value },
    /// As stored, or no array is stored there.
    AsStored,
}

/// A written group document, as it is to be stored.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupTranslation {
    /// The document to store; `None` when it is stored exactly as written.
    pub doc: Option<Value>,
    /// Paths of entries shown as stored that declare sharding.
    pub created: Vec<String>,
}

fn parse(bytes: &[u8]) -> Result<Value, Refusal> {
    serde_json::from_slice(bytes).map_err(|e| Refusal::NotJson(e.to_string()))
}

/// Pretty JSON with a trailing newline, as stored documents are written.
pub fn to_stored_bytes(doc: &Value) -> Vec<u8> {
    // Serialising a `Value` cannot fail (all map keys are strings).
    let mut bytes = serde_json::to_vec_pretty(doc).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// A codec or chunk grid in one spelling: a bare name as `{"name": …}`, no empty
/// `configuration`.
fn normalized(v: &Value) -> Value {
    match v {
        Value::String(name) => serde_json::json!({ "name": name }),
        Value::Object(obj) => {
            let mut obj = obj.clone();
            if obj
                .get("configuration")
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                obj.remove("configuration");
            }
            Value::Object(obj)
        }
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

/// Whether a written field means the same as the view's.
fn same(written: Option<&Value>, view: Option<&Value>) -> bool {
    written.map(normalized) == view.map(normalized)
}

/// Put the stored sharding fields into `written` (an object), or say which field the
/// written document changes.
fn restore_sharding(written: &mut Map<String, Value>, view: &Value, stored: &Value) -> Result<(), &'static str> {
    if let Some(field) = SHARDING_FIELDS.iter().find(|f| !same(written.get(**f), view.get(**f))) {
        return Err(field);
    }
    for field in SHARDING_FIELDS {
        if let Some(v) = stored.get(field) {
            written.insert(field.to_string(), v.clone());
        }
    }
    fit_rectilinear(written)
}

/// A document with a stored rectilinear grid: its grid grown to the written shape when that
/// needs more shard edges (`rect_resize`), or "shape" when none can be added.
fn fit_rectilinear(doc: &mut Map<String, Value>) -> Result<(), &'static str> {
    let Some(grid) = doc.get("chunk_grid") else {
        return Ok(());
    };
    if grid.get("name").and_then(Value::as_str) != Some("rectilinear") {
        return Ok(());
    }
    let shape: Vec<u64> = match doc.get("shape").and_then(Value::as_array) {
        Some(dims) => dims.iter().map(Value::as_u64).collect::<Option<_>>().ok_or("shape")?,
        None => return Err("shape"),
    };
    let codecs = doc.get("codecs").cloned().unwrap_or(Value::Null);
    match crate::zarr::rect_resize::fit_grid(grid, &codecs, &shape) {
        Ok(None) => Ok(()),
        Ok(Some(grown)) => {
            doc.insert("chunk_grid".into(), grown);
            Ok(())
        }
        Err(_) => Err("shape"),
    }
}

/// The stored document for a written view document of a sharded array, or `None` when nothing
/// changes.
pub fn translate_array(stored: &[u8], view: &[u8], written: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
    let (stored, view, written) = (parse(stored)?, parse(view)?, parse(written)?);
    if written == view {
        return Ok(None);
    }
    let Value::Object(mut out) = written else {
        return Err(Refusal::NotAnObject);
    };
    restore_sharding(&mut out, &view, &stored).map_err(Refusal::ChangesSharding)?;
    Ok(Some(to_stored_bytes(&Value::Object(out))))
}

/// A written group document, translated entry by entry; `shown` tells how the view shows the
/// array at each entry's path (paths it lacks are shown as stored).
pub fn translate_group(written: &Value, shown: &HashMap<String, Shown>) -> Result<GroupTranslation, Refusal> {
    let mut doc = written.clone();
    let (mut changed, mut created, mut refused) = (false, Vec::new(), None);
    for_each_array_entry(&mut doc, &mut |path, entry| match shown.get(path) {
        Some(Shown::Unsharded { view, stored }) => {
            let restored = match entry.as_object_mut() {
                Some(obj) => restore_sharding(obj, view, stored),
                None => Err("chunk_grid"),
            };
            match restored {
                Ok(()) => changed = true,
                Err(field) => {
                    refused.get_or_insert(Refusal::EntryChangesSharding(path.to_string(), field));
                }
            }
        }
        Some(Shown::AsStored) | None => {
            if declares_sharding(entry) && !created.iter().any(|p| p == path) {
                created.push(path.to_string());
            }
        }
    });
    if let Some(refusal) = refused {
        return Err(refusal);
    }
    Ok(GroupTranslation {
        doc: changed.then_some(doc),
        created,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::consolidated::tests::{group, plain_entry, rewritten, sharded_entry};
    use crate::zarr::consolidated::unsharded_entry;
    use serde_json::json;

    fn doc(shape: u64, chunk: u64, codecs: Value, attrs: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "zarr_format": 3, "node_type": "array", "shape": [shape], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
            "codecs": codecs, "fill_value": 0, "attributes": attrs,
        }))
        .unwrap()
    }

    #[test]
    fn resize_and_attributes_keep_sharding() {
        let sharding = json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [4]}}]);
        let inner = json!([{"name": "bytes"}]);
        let stored = doc(16, 8, sharding.clone(), json!({}));
        let view = doc(16, 4, inner.clone(), json!({}));
        assert_eq!(translate_array(&stored, &view, &view).unwrap(), None);
        let written = doc(32, 4, inner.clone(), json!({"a": 1}));
        let out: Value = serde_json::from_slice(&translate_array(&stored, &view, &written).unwrap().unwrap()).unwrap();
        assert_eq!(out["shape"], json!([32]));
        assert_eq!(out["attributes"], json!({"a": 1}));
        assert_eq!(out["codecs"], sharding);
        assert_eq!(out["chunk_grid"]["configuration"]["chunk_shape"], json!([8]));
        // The same codecs spelled another way are the same codecs.
        let respelled = doc(32, 4, json!(["bytes"]), json!({}));
        assert!(translate_array(&stored, &view, &respelled).unwrap().is_some());
        let empty_config = doc(32, 4, json!([{"name": "bytes", "configuration": {}}]), json!({}));
        assert!(translate_array(&stored, &view, &empty_config).unwrap().is_some());
    }

    #[test]
    fn a_rectilinear_grid_is_kept_or_grown_never_lost() {
        let grid =
            |shapes: Value| json!({"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": shapes}});
        let sharding = json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [8]}}]);
        let inner = json!([{"name": "bytes"}]);
        let doc = |shape: u64, chunk_grid: Value, codecs: &Value| {
            serde_json::to_vec(&json!({"zarr_format": 3, "node_type": "array", "shape": [shape],
                "data_type": "uint8", "chunk_grid": chunk_grid, "codecs": codecs, "fill_value": 0}))
            .unwrap()
        };
        let regular = json!({"name": "regular", "configuration": {"chunk_shape": [8]}});
        let stored = doc(64, grid(json!([[16, [24, 2]]])), &sharding);
        let view = doc(64, regular.clone(), &inner);
        let out = |written: &[u8]| -> Value {
            serde_json::from_slice(&translate_array(&stored, &view, written).unwrap().unwrap()).unwrap()
        };
        assert_eq!(
            out(&doc(40, regular.clone(), &inner))["chunk_grid"],
            grid(json!([[16, [24, 2]]]))
        );
        assert_eq!(
            out(&doc(70, regular.clone(), &inner))["chunk_grid"],
            grid(json!([[16, [24, 2], 8]]))
        );
        // No inner chunk shape to align a new edge to: the resize cannot be expressed.
        let stored = doc(64, grid(json!([[16, [24, 2]]])), &json!([{"name": "sharding_indexed"}]));
        assert_eq!(
            translate_array(&stored, &view, &doc(70, regular, &inner)),
            Err(Refusal::ChangesSharding("shape"))
        );
    }

    #[test]
    fn other_chunk_shapes_or_codecs_are_refused() {
        let stored = doc(16, 8, json!([{"name": "sharding_indexed"}]), json!({}));
        let view = doc(16, 4, json!([{"name": "bytes"}]), json!({}));
        let other_chunks = doc(16, 2, json!([{"name": "bytes"}]), json!({}));
        assert_eq!(
            translate_array(&stored, &view, &other_chunks),
            Err(Refusal::ChangesSharding("chunk_grid"))
        );
        let other_codecs = doc(16, 4, json!([{"name": "bytes"}, {"name": "gzip"}]), json!({}));
        assert_eq!(
            translate_array(&stored, &view, &other_codecs),
            Err(Refusal::ChangesSharding("codecs"))
        );
        assert!(matches!(
            translate_array(&stored, &view, b"{not json"),
            Err(Refusal::NotJson(_))
        ));
        assert_eq!(translate_array(&stored, &view, b"[1]"), Err(Refusal::NotAnObject));
    }

    fn unsharded(stored: &Value) -> Shown {
        Shown::Unsharded {
            view: unsharded_entry(stored).unwrap(),
            stored: stored.clone(),
        }
    }

    #[test]
    fn view_of_a_group_translates_back_to_the_stored_group() {
        let (q, deep) = (sharded_entry(64, 32, 8), sharded_entry(16, 8, 4));
        let stored = group(json!({"q": q, "sub": group(json!({"deep": deep})), "sub/deep": deep, "x": plain_entry()}));
        let shown = HashMap::from([
            ("q".to_string(), unsharded(&q)),
            ("sub/deep".to_string(), unsharded(&deep)),
        ]);
        let view = rewritten(&stored, &|_| false).unwrap();
        let back = translate_group(&view, &shown).unwrap();
        assert_eq!(back.doc, Some(stored.clone()));
        assert!(back.created.is_empty());

        // A re-consolidation after a resize: the new shape is kept, the sharding comes back.
        let mut resized = view.clone();
        resized["consolidated_metadata"]["metadata"]["q"]["shape"] = json!([96]);
        let back = translate_group(&resized, &shown).unwrap().doc.unwrap();
        assert_eq!(back["consolidated_metadata"]["metadata"]["q"]["shape"], json!([96]));
        assert_eq!(back["consolidated_metadata"]["metadata"]["q"]["codecs"], q["codecs"]);
    }

    #[test]
    fn entries_the_store_cannot_express_are_refused() {
        let q = sharded_entry(64, 32, 8);
        let shown = HashMap::from([("q".to_string(), unsharded(&q))]);
        let mut other_chunks = unsharded_entry(&q).unwrap();
        other_chunks["chunk_grid"]["configuration"]["chunk_shape"] = json!([16]);
        assert_eq!(
            translate_group(&group(json!({"q": other_chunks})), &shown),
            Err(Refusal::EntryChangesSharding("q".into(), "chunk_grid"))
        );
        // The stored (sharded) form contradicts the view of that array.
        assert_eq!(
            translate_group(&group(json!({"q": q.clone()})), &shown),
            Err(Refusal::EntryChangesSharding("q".into(), "chunk_grid"))
        );
        let refusal = Refusal::EntryChangesSharding("q".into(), "codecs").to_string();
        assert!(refusal.contains("\"q\"") && refusal.contains("codecs"), "{refusal}");
    }

    #[test]
    fn entries_shown_as_stored_are_kept_and_sharded_ones_reported() {
        let new = sharded_entry(16, 8, 4);
        let written = group(json!({"new": new, "sub": group(json!({"new": new})), "x": plain_entry()}));
        let shown = HashMap::from([("x".to_string(), Shown::AsStored)]);
        let out = translate_group(&written, &shown).unwrap();
        assert_eq!(out.doc, None);
        assert_eq!(out.created, ["new", "sub/new"]);
    }
}
