//! A Zarr v3 array described as Zarr v2, for readers that know only v2 (`--view v2`).
//!
//! The v2 document (`.zarray`) describes the array's innermost chunks: the unsharded view's
//! chunk shape and codec chain. Data types get v2's names with their byte order (from the
//! `bytes` codec), fill values v2's encoding (`NaN`, `Infinity`, `-Infinity`; complex as
//! `[re, im]`), and the chunk keys the array's own separator (`dimension_separator` `/` when
//! its v3 keys use `/`, `.` otherwise). Attributes go to `.zattrs`, with `dimension_names` as
//! xarray's `_ARRAY_DIMENSIONS`.
//!
//! A chain of `bytes` and at most one of `gzip`, `zstd`, `blosc` (optionally after a
//! `transpose` that reverses the dimensions, which is v2's `order: "F"`) is what a v2
//! compressor decodes: such chunks are *relayed*, byte for byte. Any other chain needs its
//! chunks transcoded ([`V2Array::relayed`] false). A data type v2 has no name for cannot be
//! shown at all (an error naming it).

use serde_json::{json, Map, Value};

use crate::zarr::key_encoding::Separator;
use crate::zarr::metadata::{ArrayMetadata, CodecSpec};
use crate::zarr::ZarrError;

/// A v3 array as v2 shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct V2Array {
    /// The `.zarray` document.
    pub zarray: Value,
    /// The `.zattrs` document.
    pub zattrs: Value,
    /// The chunk keys' separator.
    pub separator: Separator,
    /// Whether the stored chunk bytes are what the v2 document says (else they need
    /// transcoding).
    pub relayed: bool,
}

/// v2's name of a v3 data type with the given byte order (`<` or `>`).
fn dtype(data_type: &Value, order: char) -> Result<String, ZarrError> {
    let name = data_type
        .as_str()
        .ok_or_else(|| ZarrError::unsupported("data_type", format!("{data_type} has no Zarr v2 name")))?;
    let (kind, size) = match name {
        "bool" => return Ok("|b1".into()),
        "int8" => return Ok("|i1".into()),
        "uint8" => return Ok("|u1".into()),
        "int16" => ("i", 2),
        "int32" => ("i", 4),
        "int64" => ("i", 8),
        "uint16" => ("u", 2),
        "uint32" => ("u", 4),
        "uint64" => ("u", 8),
        "float16" => ("f", 2),
        "float32" => ("f", 4),
        "float64" => ("f", 8),
        "complex64" => ("c", 8),
        "complex128" => ("c", 16),
        other => {
            return Err(ZarrError::unsupported(
                "data_type",
                format!("{other:?} has no Zarr v2 name"),
            ))
        }
    };
    Ok(format!("{order}{kind}{size}"))
}

/// A v3 fill value in v2's encoding.
fn fill_value(v: &Value, data_type: &str) -> Value {
    let float = |v: &Value| -> Value {
        match v {
            Value::String(s) if s.starts_with("0x") => {
                // The bits of the value, as v3 allows: decoded for v2, which has no such form.
                let bits = u64::from_str_radix(&s[2..], 16).unwrap_or(0);
                let x = match s.len() - 2 {
                    4 => half_to_f64(bits as u16),
                    8 => f64::from(f32::from_bits(bits as u32)),
                    _ => f64::from_bits(bits),
                };
                float_value(x)
            }
            other => other.clone(),
        }
    };
    match data_type {
        "float16" | "float32" | "float64" => float(v),
        "complex64" | "complex128" => match v {
            Value::Array(parts) if parts.len() == 2 => Value::Array(parts.iter().map(float).collect()),
            other => other.clone(),
        },
        _ => v.clone(),
    }
}

fn float_value(x: f64) -> Value {
    if x.is_nan() {
        json!("NaN")
    } else if x == f64::INFINITY {
        json!("Infinity")
    } else if x == f64::NEG_INFINITY {
        json!("-Infinity")
    } else {
        json!(x)
    }
}

fn half_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let frac = f64::from(bits & 0x3ff);
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// The v2 compressor of one v3 bytes-to-bytes codec, if v2 has it.
fn compressor(c: &CodecSpec) -> Option<Value> {
    let level = |default: i64| c.config("level").and_then(Value::as_i64).unwrap_or(default);
    match c.name.as_str() {
        "gzip" => Some(json!({"id": "gzip", "level": level(5)})),
        "zstd" => Some(json!({"id": "zstd", "level": level(0)})),
        "blosc" => {
            let shuffle = match c.config("shuffle").and_then(Value::as_str) {
                Some("noshuffle") => 0,
                Some("bitshuffle") => 2,
                _ => 1,
            };
            Some(json!({
                "id": "blosc",
                "cname": c.config("cname").and_then(Value::as_str).unwrap_or("lz4"),
                "clevel": c.config("clevel").and_then(Value::as_i64).unwrap_or(5),
                "shuffle": shuffle,
                "blocksize": c.config("blocksize").and_then(Value::as_i64).unwrap_or(0),
            }))
        }
        _ => None,
    }
}

/// The layout a chain relays as: (byte order, `order`, compressor), if it maps onto v2.
fn relay_form(codecs: &[CodecSpec], ndim: usize) -> Option<(char, &'static str, Value)> {
    let (order, rest) = match codecs.split_first() {
        Some((t, rest)) if t.name == "transpose" => {
            let reversed: Vec<u64> = (0..ndim as u64).rev().collect();
            let f = match t.config("order") {
                Some(Value::String(s)) => s == "F",
                Some(Value::Array(items)) => {
                    items.iter().map(Value::as_u64).collect::<Option<Vec<_>>>() == Some(reversed)
                }
                _ => false,
            };
            (if f || ndim < 2 { "F" } else { return None }, rest)
        }
        _ => ("C", codecs),
    };
    let (bytes, after) = rest.split_first()?;
    if bytes.name != "bytes" {
        return None;
    }
    let endian = match bytes.config("endian").and_then(Value::as_str) {
        Some("big") => '>',
        _ => '<',
    };
    let compressor = match after {
        [] => Value::Null,
        [c] => compressor(c)?,
        _ => return None,
    };
    Some((endian, order, compressor))
}

/// The v2 form of an array whose view has chunk shape `chunk_shape` and codecs `codecs` (the
/// innermost ones when it is sharded). When the chain does not relay, the document names
/// `transcoded_with` as its compressor, byte order little, order C.
pub fn v2_array(
    meta: &ArrayMetadata,
    chunk_shape: &[u64],
    codecs: &[CodecSpec],
    separator: Separator,
    transcoded_with: &Value,
) -> Result<V2Array, ZarrError> {
    let ndim = meta.shape.len();
    let form = relay_form(codecs, ndim);
    let relayed = form.is_some();
    let (endian, order, compressor) = form.unwrap_or(('<', "C", transcoded_with.clone()));
    let data_type = meta.data_type.as_str().unwrap_or_default();
    let mut zarray = Map::new();
    zarray.insert("zarr_format".into(), json!(2));
    zarray.insert("shape".into(), json!(meta.shape));
    zarray.insert("chunks".into(), json!(chunk_shape));
    zarray.insert("dtype".into(), json!(dtype(&meta.data_type, endian)?));
    zarray.insert("compressor".into(), compressor);
    zarray.insert("fill_value".into(), fill_value(&meta.fill_value, data_type));
    zarray.insert("order".into(), json!(order));
    zarray.insert("filters".into(), Value::Null);
    zarray.insert("dimension_separator".into(), json!(separator.as_char().to_string()));
    let mut zattrs = meta
        .raw
        .get("attributes")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(names) = meta.raw.get("dimension_names").and_then(Value::as_array) {
        if names.iter().all(Value::is_string) && !zattrs.contains_key("_ARRAY_DIMENSIONS") {
            zattrs.insert("_ARRAY_DIMENSIONS".into(), Value::Array(names.clone()));
        }
    }
    Ok(V2Array {
        zarray: Value::Object(zarray),
        zattrs: Value::Object(zattrs),
        separator,
        relayed,
    })
}

/// A v3 group as v2 shows it: `.zgroup` and `.zattrs`.
pub fn v2_group(raw: &Value) -> (Value, Value) {
    let attrs = raw.get("attributes").cloned().unwrap_or_else(|| json!({}));
    (json!({"zarr_format": 2}), attrs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::{parse_codecs, parse_zarr_json, NodeMetadata};

    fn meta(data_type: &str, fill: Value, extra: Value) -> ArrayMetadata {
        let mut doc = json!({"zarr_format": 3, "node_type": "array", "shape": [10, 8], "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 4]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": fill,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": {"units": "m"}});
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        match parse_zarr_json(doc.to_string().as_bytes()).unwrap() {
            NodeMetadata::Array(a) => a,
            NodeMetadata::Group { .. } => unreachable!(),
        }
    }

    fn chain(v: Value) -> Vec<CodecSpec> {
        parse_codecs(&v, "codecs").unwrap()
    }

    const ZSTD1: &str = r#"{"id": "zstd", "level": 1}"#;

    #[test]
    fn relayed_chains() {
        let fallback: Value = serde_json::from_str(ZSTD1).unwrap();
        let m = meta("int16", json!(0), json!({"dimension_names": ["y", "x"]}));
        let a = v2_array(&m, &[5, 4], &chain(json!([{"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle", "typesize": 2, "blocksize": 0}}])),
            Separator::Slash, &fallback).unwrap();
        assert!(a.relayed);
        assert_eq!(a.zarray["dtype"], "<i2");
        assert_eq!(
            a.zarray["compressor"],
            json!({"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0})
        );
        assert_eq!(a.zarray["dimension_separator"], "/");
        assert_eq!(a.zarray["order"], "C");
        assert_eq!(a.zattrs, json!({"units": "m", "_ARRAY_DIMENSIONS": ["y", "x"]}));
        let big = v2_array(
            &m,
            &[5, 4],
            &chain(json!([{"name": "bytes", "configuration": {"endian": "big"}},
            {"name": "gzip", "configuration": {"level": 1}}])),
            Separator::Dot,
            &fallback,
        )
        .unwrap();
        assert!(big.relayed);
        assert_eq!(
            (big.zarray["dtype"].clone(), big.zarray["compressor"].clone()),
            (json!(">i2"), json!({"id": "gzip", "level": 1}))
        );
        let f = v2_array(
            &m,
            &[5, 4],
            &chain(json!([{"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "little"}}])),
            Separator::Dot,
            &fallback,
        )
        .unwrap();
        assert!(f.relayed && f.zarray["order"] == "F" && f.zarray["compressor"].is_null());
    }

    #[test]
    fn transcoded_chains() {
        let fallback: Value = serde_json::from_str(ZSTD1).unwrap();
        let m = meta("float64", json!("NaN"), json!({}));
        for c in [
            json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]),
            json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}, {"name": "gzip", "configuration": {"level": 1}}]),
        ] {
            let a = v2_array(&m, &[5, 4], &chain(c.clone()), Separator::Dot, &fallback).unwrap();
            assert!(!a.relayed, "{c}");
            assert_eq!(a.zarray["compressor"], fallback);
            assert_eq!(a.zarray["dtype"], "<f8");
            assert_eq!(a.zarray["fill_value"], "NaN");
        }
    }

    #[test]
    fn data_types_and_fill_values() {
        let bytes = chain(json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
        let v = |dt: &str, fill: Value| {
            v2_array(
                &meta(dt, fill, json!({})),
                &[5, 4],
                &bytes,
                Separator::Dot,
                &Value::Null,
            )
            .map(|a| (a.zarray["dtype"].clone(), a.zarray["fill_value"].clone()))
        };
        assert_eq!(v("bool", json!(false)).unwrap(), (json!("|b1"), json!(false)));
        assert_eq!(v("uint8", json!(7)).unwrap(), (json!("|u1"), json!(7)));
        assert_eq!(
            v("float32", json!("-Infinity")).unwrap(),
            (json!("<f4"), json!("-Infinity"))
        );
        assert_eq!(v("float32", json!("0x7fc00000")).unwrap().1, json!("NaN"));
        assert_eq!(v("float64", json!("0x3ff0000000000000")).unwrap().1, json!(1.0));
        assert_eq!(v("float16", json!("0x3c00")).unwrap().1, json!(1.0));
        assert_eq!(
            v("complex128", json!([1.5, "NaN"])).unwrap(),
            (json!("<c16"), json!([1.5, "NaN"]))
        );
        assert!(v("string", json!("")).is_err());
        assert_eq!(
            v2_group(&json!({"attributes": {"a": 1}})),
            (json!({"zarr_format": 2}), json!({"a": 1}))
        );
    }
}
