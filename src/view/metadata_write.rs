//! Writing the view's `zarr.json` of a sharded array: the view shows chunk_grid and codecs of
//! the inner chunks; every other field may change (shape, attributes, dimension names, fill
//! value, ...). A written document is translated back: its fields are stored with the stored
//! document's chunk_grid and codecs (the sharding configuration) put back. A document whose
//! chunk_grid or codecs differ from the view's asks for something the sharded store cannot
//! express, and is refused.

use serde_json::Value;

/// Why a written view document cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotJson(String),
    NotAnObject,
    ChangesSharding(&'static str),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotJson(e) => write!(f, "not JSON: {e}"),
            Refusal::NotAnObject => write!(f, "not a JSON object"),
            Refusal::ChangesSharding(field) => {
                write!(
                    f,
                    "changes {field}, which a sharded array cannot express through the unsharded view"
                )
            }
        }
    }
}

/// The stored document for a written view document, or `None` when nothing changes.
pub fn translate(stored: &[u8], view: &[u8], written: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
    let parse = |b: &[u8]| serde_json::from_slice::<Value>(b).map_err(|e| Refusal::NotJson(e.to_string()));
    let (stored, view, written) = (parse(stored)?, parse(view)?, parse(written)?);
    if written == view {
        return Ok(None);
    }
    let (Some(stored), Some(view), Some(written)) = (stored.as_object(), view.as_object(), written.as_object()) else {
        return Err(Refusal::NotAnObject);
    };
    for field in ["chunk_grid", "codecs"] {
        if written.get(field) != view.get(field) {
            return Err(Refusal::ChangesSharding(field));
        }
    }
    let mut out = written.clone();
    for field in ["chunk_grid", "codecs"] {
        if let Some(v) = stored.get(field) {
            out.insert(field.to_string(), v.clone());
        }
    }
    let mut bytes = serde_json::to_vec_pretty(&Value::Object(out)).map_err(|e| Refusal::NotJson(e.to_string()))?;
    bytes.push(b'\n');
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(translate(&stored, &view, &view).unwrap(), None);
        let written = doc(32, 4, inner.clone(), json!({"a": 1}));
        let out: Value = serde_json::from_slice(&translate(&stored, &view, &written).unwrap().unwrap()).unwrap();
        assert_eq!(out["shape"], json!([32]));
        assert_eq!(out["attributes"], json!({"a": 1}));
        assert_eq!(out["codecs"], sharding);
        assert_eq!(out["chunk_grid"]["configuration"]["chunk_shape"], json!([8]));
    }

    #[test]
    fn other_chunk_shapes_or_codecs_are_refused() {
        let stored = doc(16, 8, json!([{"name": "sharding_indexed"}]), json!({}));
        let view = doc(16, 4, json!([{"name": "bytes"}]), json!({}));
        let other_chunks = doc(16, 2, json!([{"name": "bytes"}]), json!({}));
        assert_eq!(
            translate(&stored, &view, &other_chunks),
            Err(Refusal::ChangesSharding("chunk_grid"))
        );
        let other_codecs = doc(16, 4, json!([{"name": "bytes"}, {"name": "gzip"}]), json!({}));
        assert_eq!(
            translate(&stored, &view, &other_codecs),
            Err(Refusal::ChangesSharding("codecs"))
        );
        assert!(matches!(
            translate(&stored, &view, b"{not json"),
            Err(Refusal::NotJson(_))
        ));
    }
}
