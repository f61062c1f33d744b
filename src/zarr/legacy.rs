//! Zarr v2 (`.zarray`) and v1 (`meta`) array documents in the form the rest of zarrfs reads
//! arrays: shape, data type, chunk shape and chunk key encoding (v2's `dimension_separator`,
//! `.` when absent; v1 keys are v2's with `.`), and the compressor and filters as codec names.
//! zarrfs shows these arrays as stored (they have no sharding); `inspect` reports them.

use serde_json::Value;

use crate::zarr::json;
use crate::zarr::key_encoding::{ChunkKeyEncoding, Separator};
use crate::zarr::metadata::{ArrayMetadata, CodecSpec};
use crate::zarr::ZarrError;

/// The codec name of a v2 `compressor`/`filters` entry (its `id`), or v1's `compression`.
fn codec(v: &Value) -> Option<CodecSpec> {
    let name = match v {
        Value::Object(o) => o.get("id")?.as_str()?,
        Value::String(s) => s.as_str(),
        _ => return None,
    };
    Some(CodecSpec {
        name: name.to_string(),
        configuration: Value::Null,
        raw: v.clone(),
    })
}

/// A v2 `.zarray` (`v1: false`) or v1 `meta` (`v1: true`) document.
pub fn parse_legacy_array(bytes: &[u8], v1: bool) -> Result<ArrayMetadata, ZarrError> {
    let raw: Value = serde_json::from_slice(bytes).map_err(|e| ZarrError::Json { reason: e.to_string() })?;
    let doc = json::object(&raw, "array metadata")?;
    let format = doc.get("zarr_format").and_then(Value::as_u64);
    if format != Some(if v1 { 1 } else { 2 }) {
        return Err(ZarrError::invalid(
            "zarr_format",
            format!("{format:?} is not this document's version"),
        ));
    }
    let shape = json::u64_array(json::required(doc, "shape", "shape")?, "shape")?;
    let chunk_shape = json::positive_u64_array(json::required(doc, "chunks", "chunks")?, "chunks")?;
    if chunk_shape.len() != shape.len() {
        return Err(ZarrError::invalid("chunks", "must have one entry per dimension"));
    }
    let separator = match doc.get("dimension_separator") {
        None | Some(Value::Null) => Separator::Dot,
        Some(s) => Separator::from_json(s, "dimension_separator")?,
    };
    let mut codecs: Vec<CodecSpec> = doc
        .get("filters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(codec)
        .collect();
    codecs.extend(doc.get(if v1 { "compression" } else { "compressor" }).and_then(codec));
    Ok(ArrayMetadata {
        shape,
        data_type: doc.get("dtype").cloned().unwrap_or(Value::Null),
        chunk_shape,
        rectilinear: None,
        chunk_key_encoding: ChunkKeyEncoding::V2(separator),
        codecs,
        fill_value: doc.get("fill_value").cloned().unwrap_or(Value::Null),
        storage_transformers: Vec::new(),
        raw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v2_and_v1_documents() {
        let v2 = json!({"zarr_format": 2, "shape": [6, 5], "chunks": [4, 4], "dtype": "<i4",
                        "compressor": {"id": "blosc", "cname": "lz4"}, "filters": [{"id": "delta"}],
                        "dimension_separator": "/", "fill_value": 0, "order": "C"});
        let a = parse_legacy_array(v2.to_string().as_bytes(), false).unwrap();
        assert_eq!((a.shape.clone(), a.chunk_shape.clone()), (vec![6, 5], vec![4, 4]));
        assert_eq!(a.chunk_key_encoding, ChunkKeyEncoding::V2(Separator::Slash));
        assert_eq!(
            a.codecs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["delta", "blosc"]
        );
        assert!(parse_legacy_array(v2.to_string().as_bytes(), true).is_err(), "not v1");
        let v1 = json!({"zarr_format": 1, "shape": [4], "chunks": [4], "dtype": "<u1", "compression": null});
        let a = parse_legacy_array(v1.to_string().as_bytes(), true).unwrap();
        assert_eq!(a.chunk_key_encoding, ChunkKeyEncoding::V2(Separator::Dot));
        assert!(a.codecs.is_empty());
        assert!(parse_legacy_array(b"[1]", false).is_err());
    }
}
