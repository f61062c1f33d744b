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

use crate::zarr::consolidated::{declares_sharding, for_each_array_entry};
use crate::zarr::metadata::{parse_node, NodeMetadata};

/// Whether to pack the array `doc` describes into shards of `shard_shape`: `Ok(true)` yes,
/// `Ok(false)` it is left as it is (not a v3 array, already sharded, other dimensions), `Err`
/// the shard shape does not fit its chunks.
pub fn packs(doc: &Value, shard_shape: &[u64]) -> Result<bool, String> {
    let Ok(NodeMetadata::Array(meta)) = parse_node(doc.clone()) else {
        return Ok(false);
    };
    if declares_sharding(doc) || !meta.storage_transformers.is_empty() || meta.ndim() != shard_shape.len() {
        return Ok(false);
    }
    let fits = meta
        .chunk_shape
        .iter()
        .zip(shard_shape)
        .all(|(&c, &s)| c > 0 && s > 0 && s % c == 0);
    if !fits {
        return Err(format!(
            "the shard shape {shard_shape:?} is not a multiple of the chunk shape {:?}",
            meta.chunk_shape
        ));
    }
    Ok(true)
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

/// A group document with every consolidated entry that [`packs`] sharded; `None` when no entry
/// changes. An entry whose chunks do not fit the shard shape is an error naming it.
pub fn sharded_group(doc: &Value, shard_shape: &[u64]) -> Result<Option<Value>, String> {
    let mut out = doc.clone();
    let (mut changed, mut error) = (false, None);
    for_each_array_entry(&mut out, &mut |path, entry| match packs(entry, shard_shape) {
        Ok(true) => {
            *entry = sharded_doc(entry, shard_shape);
            changed = true;
        }
        Ok(false) => {}
        Err(why) => {
            error.get_or_insert_with(|| format!("{path}: {why}"));
        }
    });
    match error {
        Some(e) => Err(e),
        None => Ok(changed.then_some(out)),
    }
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
        let out = sharded_group(&group, &[50, 60]).unwrap().unwrap();
        assert_eq!(
            out["consolidated_metadata"]["metadata"]["a"],
            sharded_doc(&doc(), &[50, 60])
        );
        assert_eq!(
            out["consolidated_metadata"]["metadata"]["v"],
            group["consolidated_metadata"]["metadata"]["v"]
        );
        assert_eq!(sharded_group(&group, &[5]).unwrap(), None);
        assert!(sharded_group(&group, &[50, 50]).unwrap_err().starts_with("a: "));
    }
}
