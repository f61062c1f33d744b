//! Sharding that is not the array's only codec, and how the view still unshards it.
//!
//! - A `transpose` before the sharding codec: the sharding codec sees the transposed shard, so
//!   its inner chunk shape `I` is in transposed space. The view's chunk is the region of the
//!   array one inner chunk covers: shape `V[d] = I[inv[d]]` (`inv` the inverse of `order`),
//!   encoded by `transpose` followed by the inner codecs — which is exactly what the stored
//!   inner chunk holds. The index lists chunks in C order of the transposed shard
//!   ([`ShardLevel::index_order`]). Nested sharding below a transpose is not unwrapped.
//! - Bytes-to-bytes codecs after the sharding codec (`gzip`, `zstd`, `crc32c`): each stored
//!   shard is their encoding of an ordinary shard; the sharding layer decodes it whole before
//!   reading its index ([`ShardLayout::outer_codecs`], `shard::outer`) and encodes it again on
//!   commit.
//!
//! Anything else around the sharding codec is `Unsupported` (shown as stored, with a reason).

use serde_json::Value;

use crate::zarr::metadata::CodecSpec;
use crate::zarr::sharding::{unwrap_levels, ShardLayout, ShardLevel, Sharding, ShardingConfig, SHARDING_CODEC};
use crate::zarr::ZarrError;

/// Bytes-to-bytes codecs the sharding layer can decode around a shard.
pub const OUTER_CODECS: [&str; 3] = ["gzip", "zstd", "crc32c"];

/// `analyse` for codecs `codecs` whose sharding codec is at `at` and not alone.
pub(crate) fn unwrap_around(shard_shape: &[u64], codecs: &[CodecSpec], at: usize) -> Sharding {
    let (before, rest) = codecs.split_at(at);
    let Some((shard, after)) = rest.split_first() else {
        return Sharding::Unsupported("no sharding codec".into());
    };
    if let Some(c) = after.iter().find(|c| !OUTER_CODECS.contains(&c.name.as_str())) {
        return Sharding::Unsupported(format!(
            "codec {:?} after {SHARDING_CODEC}; only {} can be decoded around a shard",
            c.name,
            OUTER_CODECS.join(", ")
        ));
    }
    let layout = match before {
        [] => unwrap_levels(shard_shape, shard),
        [t] if t.name == "transpose" => transposed(shard_shape, t, shard),
        _ => {
            let names: Vec<&str> = before.iter().map(|c| c.name.as_str()).collect();
            return Sharding::Unsupported(format!(
                "codecs {names:?} before {SHARDING_CODEC}; only one transpose can be unsharded"
            ));
        }
    };
    match layout {
        Ok(mut layout) => {
            layout.outer_codecs = after.to_vec();
            Sharding::Sharded(layout)
        }
        Err(e) => Sharding::Unsupported(e.to_string()),
    }
}

/// A transpose codec's `order` as a permutation of `0..ndim` (`"C"` is the identity and `"F"`
/// the reversal, as older writers spell them).
pub fn transpose_order(t: &CodecSpec, ndim: usize) -> Result<Vec<usize>, ZarrError> {
    const FIELD: &str = "transpose.configuration.order";
    let order: Vec<usize> = match t.config("order") {
        Some(Value::String(s)) if s == "C" => (0..ndim).collect(),
        Some(Value::String(s)) if s == "F" => (0..ndim).rev().collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_u64().and_then(|n| usize::try_from(n).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| ZarrError::invalid(FIELD, "must hold non-negative integers"))?,
        _ => return Err(ZarrError::invalid(FIELD, "must be a permutation of the dimensions")),
    };
    let mut seen = vec![false; ndim];
    for &d in &order {
        match seen.get_mut(d) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(ZarrError::invalid(
                    FIELD,
                    format!("{order:?} is not a permutation of 0..{ndim}"),
                ))
            }
        }
    }
    if order.len() != ndim {
        return Err(ZarrError::invalid(
            FIELD,
            format!("{order:?} is not a permutation of 0..{ndim}"),
        ));
    }
    Ok(order)
}

/// The layout of `[transpose, sharding_indexed]` (module docs).
fn transposed(shard_shape: &[u64], t: &CodecSpec, shard: &CodecSpec) -> Result<ShardLayout, ZarrError> {
    let ndim = shard_shape.len();
    let order = transpose_order(t, ndim)?;
    let config = ShardingConfig::from_codec(shard)?;
    if config.codecs.iter().any(|c| c.name == SHARDING_CODEC) {
        return Err(ZarrError::unsupported(
            SHARDING_CODEC,
            "nested sharding below a transpose cannot be unsharded",
        ));
    }
    // Checked in the space the sharding codec sees: the transposed shard.
    let transposed_shard: Vec<u64> = order.iter().map(|&d| shard_shape[d]).collect();
    let level = ShardLevel::new(&transposed_shard, &config)?;
    let mut view_chunk = vec![0; ndim];
    let mut per_shard = vec![0; ndim];
    for (i, &d) in order.iter().enumerate() {
        view_chunk[d] = config.chunk_shape[i];
        per_shard[d] = level.chunks_per_shard[i];
    }
    let mut inner_codecs = vec![t.clone()];
    inner_codecs.extend(config.codecs);
    Ok(ShardLayout {
        levels: vec![ShardLevel {
            shard_shape: shard_shape.to_vec(),
            chunk_shape: view_chunk.clone(),
            chunks_per_shard: per_shard,
            index_order: Some(order),
            ..level
        }],
        outer_codecs: Vec::new(),
        inner_chunk_shape: view_chunk,
        inner_codecs,
        rectilinear: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::sharding::analyse;
    use crate::zarr::sharding::tests::{array_meta, bytes_zstd, sharding};
    use serde_json::json;

    fn layout(chunk: Value, codecs: Value) -> Result<ShardLayout, String> {
        match analyse(&array_meta(json!([8, 6]), chunk, codecs)) {
            Sharding::Sharded(l) => Ok(l),
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn a_transpose_before_sharding() {
        // tensorstore's [transpose [1, 0], sharding inner [3, 2]] with shards of [4, 6]: the
        // transposed shard is [6, 4]; each inner chunk covers [2, 3] of the array.
        let t = json!({"name": "transpose", "configuration": {"order": [1, 0]}});
        let l = layout(json!([4, 6]), json!([t, sharding(json!([3, 2]), bytes_zstd())])).unwrap();
        assert_eq!(l.inner_chunk_shape, [2, 3]);
        let level = &l.levels[0];
        assert_eq!(
            (level.chunk_shape.clone(), level.chunks_per_shard.clone()),
            (vec![2, 3], vec![2, 2])
        );
        assert_eq!(l.inner_codecs[0].name, "transpose");
        assert_eq!(l.inner_codecs.len(), 3);
        // Index entries run over the transposed shard: (col block, row block) in C order.
        assert_eq!(level.index_of(&[0, 0]), Some(0));
        assert_eq!(level.index_of(&[1, 0]), Some(1));
        assert_eq!(level.index_of(&[0, 1]), Some(2));
        for i in 0..4 {
            assert_eq!(level.index_of(&level.within_of(i).unwrap()), Some(i));
        }
        let loc = l.locate(&[3, 1]).unwrap();
        assert_eq!((loc.shard_coords, loc.per_level_index.clone()), (vec![1, 0], vec![3]));
        assert_eq!(l.inner_coords(&[1, 0], &loc.per_level_index), Some(vec![3, 1]));
    }

    #[test]
    fn codecs_after_sharding_are_kept_outside() {
        let l = layout(
            json!([4, 6]),
            json!([sharding(json!([2, 3]), bytes_zstd()), {"name": "gzip", "configuration": {"level": 5}}]),
        )
        .unwrap();
        assert_eq!(l.outer_codecs.len(), 1);
        assert_eq!(l.inner_chunk_shape, [2, 3]);
        assert_eq!(l.levels[0].index_order, None);
    }

    #[test]
    fn what_stays_unsupported() {
        let t = json!({"name": "transpose", "configuration": {"order": [1, 0]}});
        let shard = sharding(json!([3, 2]), bytes_zstd());
        for codecs in [
            json!([t.clone(), t.clone(), shard.clone()]),
            json!([{"name": "transpose", "configuration": {"order": [0, 0]}}, shard.clone()]),
            json!([t.clone(), shard.clone(), {"name": "blosc", "configuration": {}}]),
            json!([
                t.clone(),
                sharding(json!([3, 2]), json!([sharding(json!([1, 1]), bytes_zstd())]))
            ]),
        ] {
            assert!(layout(json!([4, 6]), codecs.clone()).is_err(), "{codecs}");
        }
        let f = CodecSpec::from_json(&json!({"name": "transpose", "configuration": {"order": "F"}}), "c").unwrap();
        assert_eq!(transpose_order(&f, 3).unwrap(), [2, 1, 0]);
    }
}
