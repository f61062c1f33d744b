//! Packing unsharded arrays into shards (`zarrfs copy --shard SHAPE`): the sharded document of
//! an array stored unsharded — the inverse of the view's rewrite ([`unsharded_doc`]).
//!
//! `chunk_grid` becomes the shard shape and `codecs` one `sharding_indexed` codec whose inner
//! chunks are the array's chunks with the array's codecs, the index at the end with a CRC-32C
//! (the layout zarr-python and tensorstore write by default). Everything else — attributes,
//! dimension names, fill value, chunk key encoding, unknown fields — and the key order are
//! kept, so that the view of the result is the source again. Only v3 arrays with a regular grid,
//! no sharding and no storage transformer, of as many dimensions as the shard shape, are
//! packed; others are left as they are. A group's consolidated metadata gets the same change
//! entry by entry.
//!
//! [`unsharded_doc`]: crate::zarr::rewrite::unsharded_doc

use serde_json::{json, Value};

use crate::zarr::consolidated::{declares_sharding, for_each_array_entry, unsharded_entry};
use crate::zarr::metadata::{parse_node, NodeMetadata};
use crate::zarr::translate::{translate_array, Refusal};

/// Whether `doc` is an array [`sharded_doc`] can pack: a v3 array with a regular grid (not a
/// rectilinear one: its chunks have no one shape to pack), no sharding and no storage
/// transformer; its dimensions if so.
pub fn packable(doc: &Value) -> Option<usize> {
    let Ok(NodeMetadata::Array(meta)) = parse_node(doc.clone()) else {
        return None;
    };
    let regular = meta.rectilinear.is_none();
    (!declares_sharding(doc) && meta.storage_transformers.is_empty() && regular).then(|| meta.ndim())
}

/// Whether to pack the array `doc` describes into shards of `shard_shape`: `Ok(true)` yes,
/// `Ok(false)` it is left as it is (not [`packable`], other dimensions), `Err` the shard shape
/// does not fit its chunks.
pub fn packs(doc: &Value, shard_shape: &[u64]) -> Result<bool, String> {
    if packable(doc) != Some(shard_shape.len()) || shard_shape.is_empty() {
        return Ok(false);
    }
    let chunk_shape: Vec<u64> = doc
        .pointer("/chunk_grid/configuration/chunk_shape")
        .and_then(Value::as_array)
        .map(|dims| dims.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let fits = chunk_shape.len() == shard_shape.len()
        && chunk_shape
            .iter()
            .zip(shard_shape)
            .all(|(&c, &s)| c > 0 && s > 0 && s % c == 0);
    if !fits {
        return Err(format!(
            "the shard shape {shard_shape:?} is not a multiple of the chunk shape {chunk_shape:?}"
        ));
    }
    Ok(true)
}

/// The document of `doc` (an unsharded array) packed as `sharded` packs the same array
/// (`--shard` into a DEST that holds the array sharded already): `doc` with `sharded`'s grid and
/// codecs. `None` when `sharded` declares no sharding; an error when its inner chunks or codecs
/// are not `doc`'s.
pub fn sharded_like(doc: &Value, sharded: &Value) -> Result<Option<Value>, String> {
    if !declares_sharding(sharded) {
        return Ok(None);
    }
    let Some(inner) = unsharded_entry(sharded) else {
        return Err("it is sharded there in a way zarrfs cannot pack into".into());
    };
    let bytes = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
    match translate_array(&bytes(sharded), &bytes(&inner), &bytes(doc)) {
        Ok(None) => Ok(Some(sharded.clone())),
        Ok(Some(stored)) => serde_json::from_slice(&stored).map(Some).map_err(|e| e.to_string()),
        Err(Refusal::ChangesSharding(field)) => Err(format!(
            "it is sharded there with inner {field} other than the source's {field}"
        )),
        Err(other) => Err(other.to_string()),
    }
}

/// A group document whose consolidated entries of packed arrays carry the packed grid and
/// codecs: `packed(path)` is the packed document of the array at `path` (relative to the
/// group), if it is packed. `None` when no entry changes.
pub fn packed_group(doc: &Value, packed: &dyn Fn(&str) -> Option<Value>) -> Option<Value> {
    let mut out = doc.clone();
    let mut changed = false;
    for_each_array_entry(&mut out, &mut |path, entry| {
        let (Some(array), Some(obj)) = (packed(path), entry.as_object_mut()) else {
            return;
        };
        if declares_sharding(&Value::Object(obj.clone())) {
            return;
        }
        for field in ["chunk_grid", "codecs"] {
            if let Some(v) = array.get(field) {
                obj.insert(field.into(), v.clone());
            }
        }
        changed = true;
    });
    changed.then_some(out)
}

/// The sharded document of an unsharded array document (see the module notes); call
/// [`packs`] first.
pub fn sharded_doc(doc: &Value, shard_shape: &[u64]) -> Value {
    let mut out = doc.clone();
    let (Some(chunk_shape), Some(codecs)) = (
        doc.pointer("/chunk_grid/configuration/chunk_shape").cloned(),
        doc.get("codecs").cloned(),
    ) else {
        return out;
    };
    if let Some(obj) = out.as_object_mut() {
        obj.insert(
            "chunk_grid".into(),
            json!({"name": "regular", "configuration": {"chunk_shape": shard_shape}}),
        );
        obj.insert(
            "codecs".into(),
            json!([{
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": chunk_shape,
                    "codecs": codecs,
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"}
                    ],
                    "index_location": "end"
                }
            }]),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::parse_zarr_json;
    use crate::zarr::rewrite::unsharded_doc;
    use crate::zarr::sharding::{analyse, Sharding};

    const DOC: &str = r#"{"zarr_format":3,"node_type":"array","shape":[100,60],"data_type":"float32","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[10,20]}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0.0,"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":0,"checksum":false}}],"attributes":{"a":1},"dimension_names":["y","x"],"zz":{"must_understand":false}}"#;

    fn doc() -> Value {
        serde_json::from_str(DOC).unwrap()
    }

    #[test]
    fn the_view_of_the_packed_document_is_the_source() {
        let packed = sharded_doc(&doc(), &[50, 60]);
        let bytes = serde_json::to_vec(&packed).unwrap();
        let NodeMetadata::Array(meta) = parse_zarr_json(&bytes).unwrap() else {
            panic!()
        };
        let Sharding::Sharded(layout) = analyse(&meta) else {
            panic!("{:?}", analyse(&meta))
        };
        assert_eq!(layout.levels[0].chunks_per_shard, vec![5, 3]);
        assert_eq!(unsharded_doc(&meta, &layout), doc());
        let keys: Vec<_> = packed.as_object().unwrap().keys().collect();
        let want: Vec<_> = doc().as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, want.iter().collect::<Vec<_>>());
    }

    #[test]
    fn what_is_packed_and_what_is_refused() {
        assert_eq!(packs(&doc(), &[50, 60]), Ok(true));
        assert_eq!(packs(&doc(), &[10, 20]), Ok(true));
        assert_eq!(packs(&doc(), &[50]), Ok(false));
        assert!(packs(&doc(), &[50, 50]).unwrap_err().contains("[10, 20]"));
        assert!(packs(&doc(), &[0, 20]).is_err());
        let sharded = sharded_doc(&doc(), &[50, 60]);
        assert_eq!(packs(&sharded, &[100, 60]), Ok(false));
        assert_eq!(packs(&json!({"zarr_format": 3, "node_type": "group"}), &[1]), Ok(false));
    }

    #[test]
    fn consolidated_entries_are_packed() {
        let group = json!({"zarr_format": 3, "node_type": "group", "consolidated_metadata": {
            "kind": "inline", "must_understand": false,
            "metadata": {"a": doc(), "b": {"zarr_format": 3, "node_type": "group"}, "v": sharded_doc(&doc(), &[20, 20])}}});
        let packed = |path: &str| (path == "a" || path == "v").then(|| sharded_doc(&doc(), &[50, 60]));
        let out = packed_group(&group, &packed).unwrap();
        assert_eq!(
            out["consolidated_metadata"]["metadata"]["a"],
            sharded_doc(&doc(), &[50, 60])
        );
        assert_eq!(
            out["consolidated_metadata"]["metadata"]["v"],
            group["consolidated_metadata"]["metadata"]["v"]
        );
        assert_eq!(packed_group(&group, &|_| None), None);
    }

    #[test]
    fn packed_like_the_destination() {
        let there = sharded_doc(&doc(), &[100, 60]);
        assert_eq!(sharded_like(&doc(), &there), Ok(Some(there.clone())));
        let mut other_attrs = doc();
        other_attrs["attributes"] = json!({"b": 2});
        let got = sharded_like(&other_attrs, &there).unwrap().unwrap();
        assert_eq!(got["attributes"], json!({"b": 2}));
        assert_eq!(got["codecs"], there["codecs"]);
        assert_eq!(sharded_like(&doc(), &doc()), Ok(None));
        let mut other_chunks = doc();
        other_chunks["chunk_grid"]["configuration"]["chunk_shape"] = json!([5, 20]);
        assert!(sharded_like(&other_chunks, &there).unwrap_err().contains("chunk_grid"));
    }
}
