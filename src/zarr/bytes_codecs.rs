//! The bytes-to-bytes codecs that may follow a sharding codec (`gzip`, `zstd`, `crc32c`),
//! decoded and encoded whole, and `blosc`, decoded only (for the v2 view's transcoding: `zarr/blosc.rs`). Compression is the `flate2` and `zstd` crates' (zarr-python's
//! gzip is a gzip member, its zstd a frame with the content size, both of which these read);
//! `crc32c` is a little-endian CRC-32C of the bytes appended to them.
//!
//! Decoding is bounded: an output longer than `max_len` is an error, not an allocation, so a
//! small stored object cannot make the daemon allocate without limit.

use std::io::Read;

use crate::zarr::metadata::CodecSpec;
use crate::zarr::ZarrError;

/// A codec's integer `configuration` member, or `default`.
fn level(codec: &CodecSpec, default: i64) -> i64 {
    codec
        .config("level")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(default)
}

fn too_large(max_len: usize) -> ZarrError {
    ZarrError::TooLarge {
        what: "decoded bytes",
        value: max_len as u64 + 1,
        limit: max_len as u64,
    }
}

/// Read all of `reader`, failing beyond `max_len` bytes.
fn read_bounded(reader: impl Read, max_len: usize, what: &str) -> Result<Vec<u8>, ZarrError> {
    let mut out = Vec::new();
    reader
        .take(max_len as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| ZarrError::invalid(what, format!("cannot be decoded: {e}")))?;
    if out.len() > max_len {
        return Err(too_large(max_len));
    }
    Ok(out)
}

/// Undo `codecs` (applied in order when encoding) on `bytes`.
pub fn decode(codecs: &[CodecSpec], bytes: &[u8], max_len: usize) -> Result<Vec<u8>, ZarrError> {
    let final_len = max_len;
    // What a step decompresses may still be compressed (and larger than the data, for data
    // that does not compress) or carry checksums: steps are bounded more loosely, the result
    // exactly.
    let max_len = max_len.saturating_mul(2).saturating_add(4096);
    let mut data = bytes.to_vec();
    for codec in codecs.iter().rev() {
        data = match codec.name.as_str() {
            "gzip" => read_bounded(flate2::read::MultiGzDecoder::new(&data[..]), max_len, "gzip")?,
            "zstd" => {
                let decoder = zstd::stream::read::Decoder::new(&data[..])
                    .map_err(|e| ZarrError::invalid("zstd", format!("cannot be decoded: {e}")))?;
                read_bounded(decoder, max_len, "zstd")?
            }
            "blosc" => super::blosc::decode(&data, max_len, || too_large(max_len))?,
            "crc32c" => {
                let Some(split) = data.len().checked_sub(4) else {
                    return Err(ZarrError::invalid("crc32c", "fewer than 4 bytes"));
                };
                let (body, stored) = data.split_at(split);
                let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
                if crc32c::crc32c(body) != stored {
                    return Err(ZarrError::invalid("crc32c", "checksum mismatch"));
                }
                body.to_vec()
            }
            other => return Err(ZarrError::unsupported("codec", format!("{other:?} around a shard"))),
        };
    }
    if data.len() > final_len {
        return Err(too_large(final_len));
    }
    Ok(data)
}

/// Apply `codecs` in order to `bytes`.
pub fn encode(codecs: &[CodecSpec], bytes: &[u8]) -> Result<Vec<u8>, ZarrError> {
    let mut data = bytes.to_vec();
    for codec in codecs {
        data = match codec.name.as_str() {
            "gzip" => {
                use std::io::Write;
                let level = level(codec, 5).clamp(0, 9) as u32;
                let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
                encoder
                    .write_all(&data)
                    .and_then(|()| encoder.finish())
                    .map_err(|e| ZarrError::invalid("gzip", e.to_string()))?
            }
            "zstd" => {
                let level = i32::try_from(level(codec, 0)).unwrap_or(0);
                zstd::bulk::compress(&data, level).map_err(|e| ZarrError::invalid("zstd", e.to_string()))?
            }
            "crc32c" => {
                let crc = crc32c::crc32c(&data);
                data.extend_from_slice(&crc.to_le_bytes());
                data
            }
            other => return Err(ZarrError::unsupported("codec", format!("{other:?} around a shard"))),
        };
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codecs(v: serde_json::Value) -> Vec<CodecSpec> {
        crate::zarr::metadata::parse_codecs(&v, "codecs").unwrap()
    }

    #[test]
    fn round_trips_and_refusals() {
        let data: Vec<u8> = (0..5000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for chain in [
            json!([{"name": "gzip", "configuration": {"level": 5}}]),
            json!([{"name": "zstd", "configuration": {"level": 3, "checksum": false}}]),
            json!([{"name": "crc32c"}]),
            json!([{"name": "crc32c"}, {"name": "gzip", "configuration": {"level": 1}}]),
        ] {
            let c = codecs(chain.clone());
            let encoded = encode(&c, &data).unwrap();
            assert_eq!(decode(&c, &encoded, data.len()).unwrap(), data, "{chain}");
            assert!(decode(&c, &encoded, data.len() - 1).is_err(), "{chain}: bounded");
            assert!(decode(&c, &encoded, data.len() / 3).is_err(), "{chain}: bounded");
        }
        let crc = codecs(json!([{"name": "crc32c"}]));
        let mut bad = encode(&crc, &data).unwrap();
        bad[3] ^= 1;
        assert!(decode(&crc, &bad, data.len()).is_err());
        assert!(decode(&crc, b"ab", 10).is_err());
        let gzip = codecs(json!([{"name": "gzip"}]));
        assert!(decode(&gzip, b"not gzip at all", 100).is_err());
        assert!(decode(&codecs(json!([{"name": "blosc"}])), b"x", 10).is_err());
        assert!(decode(
            &codecs(json!([{"name": "blosc"}])),
            &[2, 1, 0x21, 4, 16, 0, 0, 0, 16, 0, 0, 0, 32, 0, 0, 0],
            100
        )
        .is_err());
    }
}
