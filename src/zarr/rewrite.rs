//! The unsharded view's `zarr.json`.
//!
//! The view must describe the same array as the stored document, only with
//! the inner chunks as the array's chunks. So the rewrite starts from the raw
//! stored document and replaces exactly two members in place: `chunk_grid`
//! (a regular grid of the innermost chunk shape) and `codecs` (the innermost
//! codecs, copied as their raw JSON). Everything else — attributes, dimension
//! names, fill value, unknown extension fields — and the key order are kept,
//! which `serde_json`'s `preserve_order` map guarantees for in-place inserts.

use serde_json::{json, Value};

use crate::zarr::metadata::ArrayMetadata;
use crate::zarr::sharding::ShardLayout;

/// The view's `zarr.json`, pretty-printed with a 2-space indent.
pub fn rewrite_unsharded(meta: &ArrayMetadata, layout: &ShardLayout) -> Vec<u8> {
    // Serialising a `Value` cannot fail (all map keys are strings).
    serde_json::to_vec_pretty(&unsharded_doc(meta, layout)).unwrap_or_default()
}

/// The view's document of a sharded array as a JSON value (also the form of the array's entry
/// in a group's consolidated metadata).
pub fn unsharded_doc(meta: &ArrayMetadata, layout: &ShardLayout) -> Value {
    unshard(meta.raw.clone(), layout)
}

/// [`unsharded_doc`] of a stored document the caller owns (no copy of it is made).
pub fn unshard(mut doc: Value, layout: &ShardLayout) -> Value {
    if let Some(obj) = doc.as_object_mut() {
        obj.insert(
            "chunk_grid".into(),
            json!({"name": "regular", "configuration": {"chunk_shape": layout.inner_chunk_shape}}),
        );
        obj.insert(
            "codecs".into(),
            Value::Array(layout.inner_codecs.iter().map(|c| c.raw.clone()).collect()),
        );
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
    use crate::zarr::sharding::tests::{array_meta, bytes_zstd, sharding};
    use crate::zarr::sharding::{analyse, Sharding};

    const DOC: &str = r#"{"zarr_format":3,"node_type":"array","shape":[100,100],"data_type":"float32","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[50,50]}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0.0,"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[10,10],"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":0,"checksum":false}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}],"attributes":{"a":1,"z":{"nested":[1,2.5,"x"]},"b":null},"dimension_names":["y","x"],"storage_transformers":[],"zz_unknown_extension":{"must_understand":false}}"#;

    fn parse(bytes: &[u8]) -> ArrayMetadata {
        match parse_zarr_json(bytes).unwrap() {
            NodeMetadata::Array(a) => a,
            NodeMetadata::Group { .. } => panic!(),
        }
    }

    fn layout(meta: &ArrayMetadata) -> ShardLayout {
        match analyse(meta) {
            Sharding::Sharded(l) => l,
            other => panic!("{other:?}"),
        }
    }

    fn strip(mut v: Value) -> Value {
        let obj = v.as_object_mut().unwrap();
        obj.remove("chunk_grid");
        obj.remove("codecs");
        v
    }

    /// Key order of an object, recursively, for an order-sensitive comparison.
    fn order(v: &Value) -> String {
        serde_json::to_string(v).unwrap()
    }

    #[test]
    fn keeps_every_other_field_in_order() {
        let meta = parse(DOC.as_bytes());
        let out = rewrite_unsharded(&meta, &layout(&meta));
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.starts_with("{\n  \"zarr_format\": 3,\n  \"node_type\""), "{text}");

        let view = parse(&out);
        assert_eq!(order(&strip(view.raw.clone())), order(&strip(meta.raw.clone())));
        // Same key positions at the top level, including the replaced ones.
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&view.raw), keys(&meta.raw));

        assert_eq!(
            view.raw["chunk_grid"],
            json!({"name":"regular","configuration":{"chunk_shape":[10,10]}})
        );
        assert_eq!(view.raw["codecs"], bytes_zstd());
        assert_eq!(view.chunk_shape, vec![10, 10]);
        assert_eq!(analyse(&view), Sharding::None);
    }

    #[test]
    fn nested_sharding_rewrites_to_innermost() {
        let inner = sharding(
            json!([2, 5]),
            json!(["bytes_shorthand_is_kept", {"name":"gzip","configuration":{"level":1}}]),
        );
        let mid = sharding(json!([10, 10]), json!([inner]));
        let meta = array_meta(json!([100, 100]), json!([50, 50]), json!([mid]));
        let view = parse(&rewrite_unsharded(&meta, &layout(&meta)));
        assert_eq!(view.chunk_shape, vec![2, 5]);
        assert_eq!(
            view.raw["codecs"],
            json!(["bytes_shorthand_is_kept", {"name":"gzip","configuration":{"level":1}}])
        );
        assert_eq!(order(&strip(view.raw.clone())), order(&strip(meta.raw.clone())));
    }
}
