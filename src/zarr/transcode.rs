//! Transcoding a chunk for the v2 view: the chunk's v3 codecs undone (bytes-to-bytes codecs,
//! the `bytes` codec's byte order, a `transpose`) and the raw C-order little-endian array
//! data encoded with one v2 compressor. Used where a chunk's v3 codec chain has no v2
//! equivalent (a `crc32c`, two compressors, a `transpose` v2's `order` cannot express).
//! Encoding is deterministic (fixed level, no timestamps), so sizes are stable across mounts.
//!
//! Decodable here: `gzip`, `zstd`, `crc32c`, `blosc` (see [`super::bytes_codecs`]); a chain
//! with another codec cannot be transcoded.

use serde_json::{json, Value};

use crate::zarr::around_sharding::transpose_order;
use crate::zarr::bytes_codecs::{decode, encode};
use crate::zarr::grid::checked_product;
use crate::zarr::metadata::CodecSpec;
use crate::zarr::ZarrError;

/// The v2 compressor transcoded chunks are written with (`--v2-compressor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum V2Compressor {
    /// zstd at level 1 (the default: fast, and read by every v2 reader with numcodecs).
    #[default]
    Zstd,
    /// gzip at level 1 (read by readers without zstd, GDAL builds among them).
    Gzip,
    /// None: raw data.
    None,
}

impl V2Compressor {
    /// Its `.zarray` `compressor` value.
    pub fn v2_json(self) -> Value {
        match self {
            V2Compressor::Zstd => json!({"id": "zstd", "level": 1}),
            V2Compressor::Gzip => json!({"id": "gzip", "level": 1}),
            V2Compressor::None => Value::Null,
        }
    }

    fn codecs(self) -> Vec<CodecSpec> {
        let spec = |v: Value| CodecSpec::from_json(&v, "v2 compressor").ok();
        match self {
            V2Compressor::Zstd => spec(json!({"name": "zstd", "configuration": {"level": 1}}))
                .into_iter()
                .collect(),
            V2Compressor::Gzip => spec(json!({"name": "gzip", "configuration": {"level": 1}}))
                .into_iter()
                .collect(),
            V2Compressor::None => Vec::new(),
        }
    }
}

/// How to transcode the chunks of one array.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcode {
    /// Bytes-to-bytes codecs after `bytes`, undone in reverse.
    after: Vec<CodecSpec>,
    big_endian: bool,
    /// The order of a `transpose` before `bytes`.
    transpose: Option<Vec<usize>>,
    /// Bytes per element, and per byte-swapped component (complex numbers swap each half).
    item_size: usize,
    component_size: usize,
    chunk_shape: Vec<u64>,
    into: V2Compressor,
}

/// Bytes per element and per component of a v3 data type v2 can name.
pub(crate) fn sizes(data_type: &Value) -> Option<(usize, usize)> {
    Some(match data_type.as_str()? {
        "bool" | "int8" | "uint8" => (1, 1),
        "int16" | "uint16" | "float16" => (2, 2),
        "int32" | "uint32" | "float32" => (4, 4),
        "int64" | "uint64" | "float64" => (8, 8),
        "complex64" => (8, 4),
        "complex128" => (16, 8),
        _ => return None,
    })
}

impl Transcode {
    /// The plan for chunks of shape `chunk_shape` and data type `data_type` encoded with
    /// `codecs`; an error says why they cannot be transcoded.
    pub fn plan(
        codecs: &[CodecSpec],
        data_type: &Value,
        chunk_shape: &[u64],
        into: V2Compressor,
    ) -> Result<Self, ZarrError> {
        let (item_size, component_size) = sizes(data_type)
            .ok_or_else(|| ZarrError::unsupported("data_type", format!("{data_type} has no Zarr v2 name")))?;
        let (transpose, rest) = match codecs.split_first() {
            Some((t, rest)) if t.name == "transpose" => (Some(transpose_order(t, chunk_shape.len())?), rest),
            _ => (None, codecs),
        };
        let Some((bytes, after)) = rest.split_first().filter(|(b, _)| b.name == "bytes") else {
            return Err(ZarrError::unsupported("codecs", "no bytes codec where one is expected"));
        };
        if let Some(c) = after
            .iter()
            .find(|c| !matches!(c.name.as_str(), "gzip" | "zstd" | "crc32c" | "blosc"))
        {
            return Err(ZarrError::unsupported(
                "codecs",
                format!("{:?} cannot be decoded here", c.name),
            ));
        }
        checked_product(chunk_shape)?;
        Ok(Transcode {
            after: after.to_vec(),
            big_endian: bytes.config("endian").and_then(Value::as_str) == Some("big"),
            transpose,
            item_size,
            component_size,
            chunk_shape: chunk_shape.to_vec(),
            into,
        })
    }

    /// The raw size of a chunk.
    fn raw_len(&self) -> usize {
        let n = checked_product(&self.chunk_shape).unwrap_or(0);
        usize::try_from(n).unwrap_or(usize::MAX).saturating_mul(self.item_size)
    }

    /// A stored chunk in its v2 form.
    pub fn run(&self, stored: &[u8]) -> Result<Vec<u8>, ZarrError> {
        let raw_len = self.raw_len();
        let mut raw = decode(&self.after, stored, raw_len)?;
        if raw.len() != raw_len {
            return Err(ZarrError::Length {
                what: "decoded chunk",
                expected: raw_len as u64,
                actual: raw.len() as u64,
            });
        }
        if self.big_endian && self.component_size > 1 {
            for component in raw.chunks_exact_mut(self.component_size) {
                component.reverse();
            }
        }
        if let Some(order) = &self.transpose {
            raw = untranspose(&raw, &self.chunk_shape, order, self.item_size);
        }
        encode(&self.into.codecs(), &raw)
    }
}

/// Elements stored in the order of the array transposed by `order` (the transposed shape is
/// `shape[order[i]]`), put back in C order of `shape`.
fn untranspose(data: &[u8], shape: &[u64], order: &[usize], item: usize) -> Vec<u8> {
    let ndim = shape.len();
    let t_shape: Vec<usize> = order.iter().map(|&d| shape[d] as usize).collect();
    // Strides of the transposed (stored) layout, in elements.
    let mut t_strides = vec![1usize; ndim];
    for i in (0..ndim.saturating_sub(1)).rev() {
        t_strides[i] = t_strides[i + 1] * t_shape[i + 1];
    }
    // Array dimension d is transposed dimension i where order[i] == d.
    let mut stride_of = vec![0usize; ndim];
    for (i, &d) in order.iter().enumerate() {
        stride_of[d] = t_strides[i];
    }
    let mut out = Vec::with_capacity(data.len());
    let mut index = vec![0usize; ndim];
    let total = data.len() / item.max(1);
    for _ in 0..total {
        let at: usize = index.iter().zip(&stride_of).map(|(i, s)| i * s).sum();
        out.extend_from_slice(&data[at * item..(at + 1) * item]);
        for d in (0..ndim).rev() {
            index[d] += 1;
            if index[d] < shape[d] as usize {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codecs(v: Value) -> Vec<CodecSpec> {
        crate::zarr::metadata::parse_codecs(&v, "codecs").unwrap()
    }

    #[test]
    fn crc32c_and_big_endian_chunks_become_plain_little_endian_zstd() {
        let values: Vec<i16> = (0..12).map(|i| i * 300 - 7).collect();
        let big: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        let chain = codecs(json!([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "crc32c"}]));
        let stored = encode(&chain[1..], &big).unwrap();
        let plan = Transcode::plan(&chain, &json!("int16"), &[3, 4], V2Compressor::Zstd).unwrap();
        let out = plan.run(&stored).unwrap();
        let raw = zstd::decode_all(&out[..]).unwrap();
        let little: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(raw, little);
        assert_eq!(plan.run(&stored).unwrap(), out, "deterministic");
        let none = Transcode::plan(&chain, &json!("int16"), &[3, 4], V2Compressor::None).unwrap();
        assert_eq!(none.run(&stored).unwrap(), little);
        assert!(plan.run(&stored[1..]).is_err());
    }

    #[test]
    fn a_transposed_chunk_is_put_back_in_c_order() {
        // A 2x3 chunk [[0,1,2],[3,4,5]] stored transposed (order [1, 0]): 0,3,1,4,2,5.
        let stored: Vec<u8> = [0u8, 3, 1, 4, 2, 5].to_vec();
        let chain = codecs(json!([{"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]));
        let stored = encode(&chain[2..], &stored).unwrap();
        let plan = Transcode::plan(&chain, &json!("uint8"), &[2, 3], V2Compressor::None).unwrap();
        assert_eq!(plan.run(&stored).unwrap(), [0, 1, 2, 3, 4, 5]);
        // 3-D, order [2, 0, 1]: stored shape (4, 2, 3) for an array chunk of (2, 3, 4).
        let shape = [2u64, 3, 4];
        let a: Vec<u8> = (0..24).collect();
        let mut t = vec![0u8; 24];
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    // transposed index (k, i, j) in shape (4, 2, 3)
                    t[k * 6 + i * 3 + j] = a[i * 12 + j * 4 + k];
                }
            }
        }
        assert_eq!(untranspose(&t, &shape, &[2, 0, 1], 1), a);
    }

    #[test]
    fn what_cannot_be_transcoded() {
        let other = codecs(
            json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "lz4"}, {"name": "crc32c"}]),
        );
        assert!(Transcode::plan(&other, &json!("int16"), &[4], V2Compressor::Zstd).is_err());
        let bytes = codecs(json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
        assert!(Transcode::plan(&bytes, &json!("string"), &[4], V2Compressor::Zstd).is_err());
    }
}
