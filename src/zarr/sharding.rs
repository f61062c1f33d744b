//! Interpretation of the `sharding_indexed` codec and of (nested) sharded layouts.
//!
//! [`ShardingConfig::from_codec`] validates one sharding codec's configuration.
//! [`analyse`] decides whether an array can be shown unsharded: only when the
//! array's codec chain is exactly one `sharding_indexed` codec (anything
//! before or after it would transform the shard bytes as a whole). Nested
//! sharding (inner codecs again exactly one `sharding_indexed`) is unwrapped
//! level by level, so the view exposes the innermost chunks. Any problem found
//! here yields `Sharding::Unsupported(reason)` rather than an error: the
//! array's metadata is still valid, it is just shown as stored.
//!
//! Index codecs are supported in the two forms writers use: `bytes` (little
//! or big endian), optionally followed by `crc32c`.

use crate::zarr::grid::{c_order_coords, c_order_index, checked_product};
use crate::zarr::json;
use crate::zarr::metadata::{parse_codecs, ArrayMetadata, CodecSpec};
use crate::zarr::rectilinear::RectilinearGrid;
use crate::zarr::shard_index::{ShardIndex, MAX_CHUNKS_PER_SHARD};
use crate::zarr::ZarrError;

pub use crate::zarr::rewrite::rewrite_unsharded;

/// Name of the sharding codec.
pub const SHARDING_CODEC: &str = "sharding_indexed";

/// Where the index sits in a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexLocation {
    Start,
    End,
}

/// Byte order of the index entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    Little,
    Big,
}

/// The supported `index_codecs` chains: `bytes` [+ `crc32c`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexCodec {
    pub endian: Endian,
    pub crc32c: bool,
}

/// The configuration of one `sharding_indexed` codec.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardingConfig {
    pub chunk_shape: Vec<u64>,
    pub codecs: Vec<CodecSpec>,
    pub index_codec: IndexCodec,
    pub index_location: IndexLocation,
}

impl ShardingConfig {
    /// Validate a `sharding_indexed` codec spec.
    pub fn from_codec(c: &CodecSpec) -> Result<Self, ZarrError> {
        if c.name != SHARDING_CODEC {
            return Err(ZarrError::invalid(
                "codec",
                format!("expected {SHARDING_CODEC:?}, got {:?}", c.name),
            ));
        }
        let config = json::object(&c.configuration, "sharding_indexed.configuration")?;
        let field = |k: &str| format!("sharding_indexed.configuration.{k}");
        let chunk_shape = json::positive_u64_array(
            json::required(config, "chunk_shape", &field("chunk_shape"))?,
            &field("chunk_shape"),
        )?;
        let codecs = parse_codecs(json::required(config, "codecs", &field("codecs"))?, &field("codecs"))?;
        let index_codecs = parse_codecs(
            json::required(config, "index_codecs", &field("index_codecs"))?,
            &field("index_codecs"),
        )?;
        let index_codec = index_codec(&index_codecs)?;
        let index_location = match config.get("index_location") {
            None => IndexLocation::End,
            Some(v) => match json::string(v, &field("index_location"))? {
                "start" => IndexLocation::Start,
                "end" => IndexLocation::End,
                other => {
                    return Err(ZarrError::invalid(
                        field("index_location"),
                        format!("must be \"start\" or \"end\", got {other:?}"),
                    ))
                }
            },
        };
        Ok(ShardingConfig {
            chunk_shape,
            codecs,
            index_codec,
            index_location,
        })
    }
}

/// Recognise `[bytes]` or `[bytes, crc32c]`.
fn index_codec(codecs: &[CodecSpec]) -> Result<IndexCodec, ZarrError> {
    let (bytes, crc32c) = match codecs {
        [b] => (b, false),
        [b, c] if c.name == "crc32c" => (b, true),
        _ => {
            let names: Vec<&str> = codecs.iter().map(|c| c.name.as_str()).collect();
            return Err(ZarrError::unsupported(
                "index_codecs",
                format!("{names:?}; only [bytes] or [bytes, crc32c] are supported"),
            ));
        }
    };
    if bytes.name != "bytes" {
        return Err(ZarrError::unsupported(
            "index_codecs",
            format!("index array codec {:?}, only \"bytes\"", bytes.name),
        ));
    }
    let field = "sharding_indexed.configuration.index_codecs[0].configuration.endian";
    let endian = match bytes.config("endian") {
        None => return Err(ZarrError::invalid(field, "required for the uint64 index")),
        Some(v) => match json::string(v, field)? {
            "little" => Endian::Little,
            "big" => Endian::Big,
            other => {
                return Err(ZarrError::invalid(
                    field,
                    format!("must be \"little\" or \"big\", got {other:?}"),
                ))
            }
        },
    };
    Ok(IndexCodec { endian, crc32c })
}

/// One level of (possibly nested) sharding. Level 0 is the stored shard.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardLevel {
    pub shard_shape: Vec<u64>,
    pub chunk_shape: Vec<u64>,
    pub chunks_per_shard: Vec<u64>,
    pub index_codec: IndexCodec,
    pub index_location: IndexLocation,
    /// When a `transpose` codec precedes the sharding codec, the index lists the chunks in C
    /// order of the transposed shard: entry order is over the dimensions in this order.
    pub index_order: Option<Vec<usize>>,
}

impl ShardLevel {
    /// Build a level, checking that `chunk_shape` divides `shard_shape` and
    /// that the index size is sane.
    pub fn new(shard_shape: &[u64], config: &ShardingConfig) -> Result<Self, ZarrError> {
        let chunk_shape = &config.chunk_shape;
        if chunk_shape.len() != shard_shape.len() {
            return Err(ZarrError::unsupported(
                "sharding_indexed",
                format!(
                    "inner chunk shape {chunk_shape:?} has a different number of dimensions than shard shape {shard_shape:?}"
                ),
            ));
        }
        let chunks_per_shard = shard_shape
            .iter()
            .zip(chunk_shape)
            .map(|(&s, &c)| match (s.checked_rem(c), s.checked_div(c)) {
                (Some(0), Some(n)) => Ok(n),
                _ => Err(ZarrError::unsupported(
                    "sharding_indexed",
                    format!("inner chunk shape {chunk_shape:?} does not evenly divide shard shape {shard_shape:?}"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let n = checked_product(&chunks_per_shard)?;
        if n > MAX_CHUNKS_PER_SHARD {
            return Err(ZarrError::TooLarge {
                what: "chunks per shard",
                value: n,
                limit: MAX_CHUNKS_PER_SHARD,
            });
        }
        Ok(ShardLevel {
            shard_shape: shard_shape.to_vec(),
            chunk_shape: chunk_shape.clone(),
            chunks_per_shard,
            index_codec: config.index_codec,
            index_location: config.index_location,
            index_order: None,
        })
    }

    /// The index entry of the chunk at `within` (its coordinates within the shard).
    pub fn index_of(&self, within: &[u64]) -> Option<u64> {
        match &self.index_order {
            None => c_order_index(within, &self.chunks_per_shard),
            Some(order) => {
                let t: Vec<u64> = order.iter().map(|&d| within.get(d).copied()).collect::<Option<_>>()?;
                let dims: Vec<u64> = order
                    .iter()
                    .map(|&d| self.chunks_per_shard.get(d).copied())
                    .collect::<Option<_>>()?;
                c_order_index(&t, &dims)
            }
        }
    }

    /// Inverse of [`index_of`](Self::index_of).
    pub fn within_of(&self, index: u64) -> Option<Vec<u64>> {
        match &self.index_order {
            None => c_order_coords(index, &self.chunks_per_shard),
            Some(order) => {
                let dims: Vec<u64> = order
                    .iter()
                    .map(|&d| self.chunks_per_shard.get(d).copied())
                    .collect::<Option<_>>()?;
                let t = c_order_coords(index, &dims)?;
                let mut within = vec![0; order.len()];
                for (i, &d) in order.iter().enumerate() {
                    *within.get_mut(d)? = t[i];
                }
                Some(within)
            }
        }
    }

    /// Inner chunks per shard. Exact for levels built by [`ShardLevel::new`];
    /// saturates at `u64::MAX` for hand-built absurd levels.
    pub fn num_chunks(&self) -> u64 {
        checked_product(&self.chunks_per_shard).unwrap_or(u64::MAX)
    }

    /// Encoded index size in bytes (saturating like [`num_chunks`](Self::num_chunks)).
    pub fn index_size(&self) -> u64 {
        ShardIndex::encoded_size(self.num_chunks(), self.index_codec).unwrap_or(u64::MAX)
    }

    /// Where chunks start in a shard this level packs: after an index at the start, else at 0.
    pub fn data_start(&self) -> u64 {
        match self.index_location {
            IndexLocation::Start => self.index_size(),
            IndexLocation::End => 0,
        }
    }

    /// Decode this level's index of a shard of `shard_len` bytes (`index_bytes`: the bytes at
    /// [`index_offset`](Self::index_offset)). Every entry must lie inside the shard and outside
    /// its index: before an index at the end, after an index at the start. The one place these
    /// rules live, for reading chunks and for unpacking shards alike.
    pub fn decode_index(&self, index_bytes: &[u8], shard_len: u64) -> Result<ShardIndex, ZarrError> {
        let index_size = self.index_size();
        let data_len = match self.index_location {
            IndexLocation::End => self.index_offset(shard_len)?,
            IndexLocation::Start => shard_len,
        };
        let index = ShardIndex::decode(index_bytes, self.num_chunks(), self.index_codec, data_len)?;
        if self.index_location == IndexLocation::Start {
            let into_index = index
                .iter()
                .find_map(|(chunk, r)| r.filter(|r| r.offset < index_size).map(|r| (chunk, r)));
            if let Some((chunk, range)) = into_index {
                return Err(ZarrError::invalid(
                    "shard index",
                    format!(
                        "entry of chunk {chunk} at offset {} points into the {index_size}-byte index at the start of the shard",
                        range.offset
                    ),
                ));
            }
        }
        Ok(index)
    }

    /// Byte offset of the index within a shard of `shard_len` bytes; an error
    /// if the shard is too short to hold it.
    pub fn index_offset(&self, shard_len: u64) -> Result<u64, ZarrError> {
        let size = self.index_size();
        match self.index_location {
            _ if shard_len < size => Err(ZarrError::Length {
                what: "shard shorter than its index",
                expected: size,
                actual: shard_len,
            }),
            IndexLocation::Start => Ok(0),
            IndexLocation::End => Ok(shard_len - size),
        }
    }
}

/// The unwrapped sharding levels and what the view exposes.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardLayout {
    pub levels: Vec<ShardLevel>,
    /// Bytes-to-bytes codecs after the sharding codec: a stored shard is these codecs'
    /// encoding of the shard (see `shard::outer`).
    pub outer_codecs: Vec<CodecSpec>,
    /// The innermost chunk shape: the view's chunk grid.
    pub inner_chunk_shape: Vec<u64>,
    /// The innermost codecs: the view's codec chain.
    pub inner_codecs: Vec<CodecSpec>,
    /// The stored shards' edges (in elements) when the array's grid is rectilinear; then
    /// `levels[0]` is the first shard's level and [`ShardLayout::level0`] gives each shard's.
    pub rectilinear: Option<RectilinearGrid>,
}

/// Outcome of [`analyse`].
#[derive(Debug, Clone, PartialEq)]
pub enum Sharding {
    /// No sharding codec: the array is shown as stored.
    None,
    Sharded(ShardLayout),
    /// Sharded in a way the view cannot unwrap; shown as stored. Carries why.
    Unsupported(String),
}

/// Decide how (and whether) to unshard an array. See the module docs.
///
/// A non-empty `storage_transformers` list is `Unsupported` even without a
/// sharding codec, since the stored keys then need not be chunk keys. Inner
/// chunk shapes that do not divide the shard shape, malformed sharding
/// configurations and unsupported index codecs are `Unsupported` too.
pub fn analyse(meta: &ArrayMetadata) -> Sharding {
    if !meta.storage_transformers.is_empty() {
        return Sharding::Unsupported("array uses storage transformers".into());
    }
    if let Some(grid) = &meta.rectilinear {
        return crate::zarr::rect_layout::analyse_rectilinear(meta, grid);
    }
    let sharding_at = meta.codecs.iter().position(|c| c.name == SHARDING_CODEC);
    match (sharding_at, meta.codecs.as_slice()) {
        (None, _) => Sharding::None,
        (Some(_), [only]) => match unwrap_levels(&meta.chunk_shape, only) {
            Ok(layout) => Sharding::Sharded(layout),
            Err(e) => Sharding::Unsupported(e.to_string()),
        },
        (Some(i), codecs) => crate::zarr::around_sharding::unwrap_around(&meta.chunk_shape, codecs, i),
    }
}

pub(crate) fn unwrap_levels(shard_shape: &[u64], codec: &CodecSpec) -> Result<ShardLayout, ZarrError> {
    let mut levels = Vec::new();
    let mut shard_shape = shard_shape.to_vec();
    let mut codec = codec.clone();
    loop {
        let config = ShardingConfig::from_codec(&codec)?;
        levels.push(ShardLevel::new(&shard_shape, &config)?);
        match config.codecs.as_slice() {
            [inner] if inner.name == SHARDING_CODEC => {
                codec = inner.clone();
                shard_shape = config.chunk_shape;
            }
            _ => {
                return Ok(ShardLayout {
                    levels,
                    outer_codecs: Vec::new(),
                    inner_chunk_shape: config.chunk_shape,
                    inner_codecs: config.codecs,
                    rectilinear: None,
                })
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
    use serde_json::{json, Value};

    pub(crate) fn sharding(chunk_shape: Value, codecs: Value) -> Value {
        json!({"name": "sharding_indexed", "configuration": {
            "chunk_shape": chunk_shape,
            "codecs": codecs,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"
        }})
    }

    pub(crate) fn bytes_zstd() -> Value {
        json!([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":0,"checksum":false}}])
    }

    pub(crate) fn array_meta(shape: Value, chunk_shape: Value, codecs: Value) -> ArrayMetadata {
        let doc = json!({
            "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk_shape}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0.0, "codecs": codecs, "attributes": {"a": 1}
        });
        match parse_zarr_json(&serde_json::to_vec(&doc).unwrap()).unwrap() {
            NodeMetadata::Array(a) => a,
            NodeMetadata::Group { .. } => panic!(),
        }
    }

    fn codec(v: Value) -> CodecSpec {
        CodecSpec::from_json(&v, "codec").unwrap()
    }

    #[test]
    fn config_parsing() {
        let c = ShardingConfig::from_codec(&codec(sharding(json!([10, 10]), bytes_zstd()))).unwrap();
        assert_eq!(c.chunk_shape, vec![10, 10]);
        assert_eq!(c.codecs.len(), 2);
        assert_eq!(
            c.index_codec,
            IndexCodec {
                endian: Endian::Little,
                crc32c: true
            }
        );
        assert_eq!(c.index_location, IndexLocation::End);

        let mut v = sharding(json!([4]), bytes_zstd());
        v["configuration"]["index_codecs"] = json!([{"name":"bytes","configuration":{"endian":"big"}}]);
        v["configuration"]["index_location"] = json!("start");
        let c = ShardingConfig::from_codec(&codec(v.clone())).unwrap();
        assert_eq!(
            c.index_codec,
            IndexCodec {
                endian: Endian::Big,
                crc32c: false
            }
        );
        assert_eq!(c.index_location, IndexLocation::Start);

        v["configuration"].as_object_mut().unwrap().remove("index_location");
        let c = ShardingConfig::from_codec(&codec(v)).unwrap();
        assert_eq!(c.index_location, IndexLocation::End);
    }

    #[test]
    fn bad_configs() {
        let bad = |edit: &dyn Fn(&mut Value)| {
            let mut v = sharding(json!([10, 10]), bytes_zstd());
            edit(&mut v);
            ShardingConfig::from_codec(&codec(v)).unwrap_err()
        };
        bad(&|v| v["configuration"]["chunk_shape"] = json!([0, 10]));
        bad(&|v| v["configuration"]["chunk_shape"] = json!("10"));
        bad(&|v| v["configuration"]["codecs"] = json!([]));
        bad(&|v| {
            v["configuration"].as_object_mut().unwrap().remove("index_codecs");
        });
        bad(&|v| v["configuration"]["index_location"] = json!("middle"));
        bad(&|v| v["configuration"]["index_codecs"] = json!(["bytes"]));
        bad(&|v| v["configuration"]["index_codecs"] = json!([{"name":"bytes","configuration":{"endian":"middle"}}]));
        assert!(matches!(
            bad(
                &|v| v["configuration"]["index_codecs"] = json!([{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":1}}])
            ),
            ZarrError::Unsupported { .. }
        ));
        assert!(matches!(
            bad(&|v| v["configuration"]["index_codecs"] = json!(["crc32c", "crc32c"])),
            ZarrError::Unsupported { .. }
        ));
        bad(&|v| *v = json!({"name": "sharding_indexed"}));
        assert!(ShardingConfig::from_codec(&codec(json!("bytes"))).is_err());
    }

    #[test]
    fn plain_sharding() {
        let meta = array_meta(
            json!([100, 100]),
            json!([50, 50]),
            json!([sharding(json!([10, 10]), bytes_zstd())]),
        );
        let Sharding::Sharded(layout) = analyse(&meta) else {
            panic!("{:?}", analyse(&meta))
        };
        assert_eq!(layout.levels.len(), 1);
        let l = &layout.levels[0];
        assert_eq!(l.shard_shape, vec![50, 50]);
        assert_eq!(l.chunk_shape, vec![10, 10]);
        assert_eq!(l.chunks_per_shard, vec![5, 5]);
        assert_eq!(l.num_chunks(), 25);
        assert_eq!(l.index_size(), 25 * 16 + 4);
        assert_eq!(layout.inner_chunk_shape, vec![10, 10]);
        assert_eq!(layout.inner_codecs.len(), 2);
        assert_eq!(layout.inner_codecs[1].name, "zstd");
        assert_eq!(l.index_offset(1000).unwrap(), 1000 - 404);
        assert!(l.index_offset(403).is_err());
        let start = ShardLevel {
            index_location: IndexLocation::Start,
            ..l.clone()
        };
        assert_eq!(start.index_offset(404).unwrap(), 0);
    }

    #[test]
    fn nested_sharding_unwraps_to_innermost() {
        let inner = sharding(json!([2, 5]), bytes_zstd());
        let mid = sharding(json!([10, 10]), json!([inner]));
        let meta = array_meta(json!([100, 100]), json!([50, 50]), json!([mid]));
        let Sharding::Sharded(layout) = analyse(&meta) else {
            panic!("{:?}", analyse(&meta))
        };
        assert_eq!(layout.levels.len(), 2);
        assert_eq!(layout.levels[0].chunks_per_shard, vec![5, 5]);
        assert_eq!(layout.levels[1].shard_shape, vec![10, 10]);
        assert_eq!(layout.levels[1].chunks_per_shard, vec![5, 2]);
        assert_eq!(layout.inner_chunk_shape, vec![2, 5]);
        assert_eq!(layout.inner_codecs[0].name, "bytes");
    }

    #[test]
    fn nested_sharding_with_other_codecs_stops_unwrapping() {
        let inner = sharding(json!([5, 5]), bytes_zstd());
        let mid = sharding(json!([10, 10]), json!([inner, "crc32c"]));
        let meta = array_meta(json!([100, 100]), json!([50, 50]), json!([mid]));
        let Sharding::Sharded(layout) = analyse(&meta) else {
            panic!()
        };
        assert_eq!(layout.levels.len(), 1);
        assert_eq!(layout.inner_chunk_shape, vec![10, 10]);
        let names: Vec<&str> = layout.inner_codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["sharding_indexed", "crc32c"]);
    }

    #[test]
    fn unsupported_and_none() {
        let shard = sharding(json!([10, 10]), bytes_zstd());
        // Codecs around the sharding codec: see `around_sharding`.
        let cases = [
            json!([shard.clone(), {"name":"blosc"}]),
            json!([sharding(json!([15, 10]), bytes_zstd())]),
            json!([sharding(json!([10]), bytes_zstd())]),
            json!([sharding(
                json!([10, 10]),
                json!([sharding(json!([3, 3]), bytes_zstd())])
            )]),
            json!([sharding(json!([1, 1]), bytes_zstd())]),
        ];
        for codecs in cases {
            let shape = if codecs[0]["configuration"]["chunk_shape"] == json!([1, 1]) {
                json!([16384, 8192])
            } else {
                json!([50, 50])
            };
            let meta = array_meta(json!([100, 100]), shape, codecs.clone());
            assert!(
                matches!(analyse(&meta), Sharding::Unsupported(_)),
                "{codecs}: {:?}",
                analyse(&meta)
            );
        }
        let plain = array_meta(json!([100, 100]), json!([50, 50]), bytes_zstd());
        assert_eq!(analyse(&plain), Sharding::None);

        let mut with_st = array_meta(json!([100, 100]), json!([50, 50]), json!([shard]));
        with_st.storage_transformers = vec![json!({"name": "x"})];
        assert!(matches!(analyse(&with_st), Sharding::Unsupported(_)));
    }

    #[test]
    fn zero_dimensional_sharding() {
        let meta = array_meta(json!([]), json!([]), json!([sharding(json!([]), bytes_zstd())]));
        let Sharding::Sharded(layout) = analyse(&meta) else {
            panic!()
        };
        assert_eq!(layout.levels[0].num_chunks(), 1);
    }
}
