//! Resizing an array stored on a rectilinear grid of shards, as asked through the view (whose
//! grid is regular: a reader resizes freely).
//!
//! Shrinking keeps the stored edges (a grid may overhang the shape). Growing past the edges
//! appends, on each axis that falls short, one shard edge: the growth rounded up to the inner
//! chunk edge, since every shard edge must stay a multiple of it (zarr-python 3.4 appends the
//! growth itself and refuses growth that is not a multiple; rounding up instead overhangs,
//! which the grid allows). An axis given as one integer repeats as far as needed and never
//! falls short. A grid that cannot be read, or an edge that cannot be added, is refused.

use serde_json::Value;

use crate::zarr::json;
use crate::zarr::rectilinear::RectilinearGrid;

/// The stored `chunk_grid` for an array resized to `shape`: `Ok(None)` when the stored one
/// still covers it, `Ok(Some(grid))` with edges appended, `Err` when it cannot be expressed.
/// `codecs` are the stored codecs (one `sharding_indexed`, whose inner chunk shape the new
/// edges are multiples of).
pub fn fit_grid(grid: &Value, codecs: &Value, shape: &[u64]) -> Result<Option<Value>, String> {
    let config = grid.get("configuration").ok_or("no grid configuration")?;
    let parsed = match RectilinearGrid::from_configuration(config, &vec![0; shape.len()]) {
        Ok(parsed) => parsed,
        Err(e) => return Err(e.to_string()),
    };
    if parsed.axes.iter().zip(shape).all(|(a, &len)| a.extent() >= len) {
        return Ok(None);
    }
    let inner = codecs
        .pointer("/0/configuration/chunk_shape")
        .ok_or("no inner chunk shape to align new shard edges to")
        .and_then(|v| json::positive_u64_array(v, "chunk_shape").map_err(|_| "bad inner chunk shape"))?;
    let mut out = grid.clone();
    let specs = out
        .pointer_mut("/configuration/chunk_shapes")
        .and_then(Value::as_array_mut)
        .ok_or("no chunk_shapes")?;
    for (d, (axis, &len)) in parsed.axes.iter().zip(shape).enumerate() {
        let short = len.saturating_sub(axis.extent());
        if short == 0 {
            continue;
        }
        let unit = *inner.get(d).ok_or("inner chunk shape of another rank")?;
        let edge = short
            .div_ceil(unit)
            .checked_mul(unit)
            .ok_or("the new shard edge overflows")?;
        match specs.get_mut(d).and_then(Value::as_array_mut) {
            Some(edges) => edges.push(Value::from(edge)),
            None => return Err(format!("dimension {d} cannot grow")),
        }
    }
    RectilinearGrid::from_configuration(out.get("configuration").unwrap_or(&Value::Null), shape)
        .map_err(|e| e.to_string())?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grid(shapes: Value) -> Value {
        json!({"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": shapes}})
    }

    fn codecs() -> Value {
        json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8]}}])
    }

    #[test]
    fn shrinking_or_staying_inside_keeps_the_grid() {
        let g = grid(json!([[16, [24, 2]], [[24, 2]]]));
        assert_eq!(fit_grid(&g, &codecs(), &[40, 48]), Ok(None));
        assert_eq!(fit_grid(&g, &codecs(), &[64, 1]), Ok(None));
    }

    #[test]
    fn growing_appends_an_aligned_edge() {
        let g = grid(json!([[16, [24, 2]], [[24, 2]]]));
        let grown = fit_grid(&g, &codecs(), &[80, 50]).unwrap().unwrap();
        assert_eq!(grown, grid(json!([[16, [24, 2], 16], [[24, 2], 8]])));
        let odd = fit_grid(&g, &codecs(), &[70, 48]).unwrap().unwrap();
        assert_eq!(odd["configuration"]["chunk_shapes"][0], json!([16, [24, 2], 8]));
        // An integer axis repeats as far as needed.
        assert_eq!(fit_grid(&grid(json!([16, 24])), &codecs(), &[1000, 1000]), Ok(None));
    }

    #[test]
    fn what_cannot_be_expressed_is_refused() {
        let g = grid(json!([[16], [24]]));
        assert!(fit_grid(&g, &json!([{"name": "bytes"}]), &[80, 1]).is_err());
        assert!(fit_grid(&json!({"name": "rectilinear"}), &codecs(), &[8, 8]).is_err());
        let big = json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [1u64 << 63, 8]}}]);
        let edge = fit_grid(&grid(json!([[3], [24]])), &big, &[u64::MAX, 1]);
        assert!(edge.is_err(), "an edge past u64::MAX: {edge:?}");
        assert!(fit_grid(&g, &codecs(), &[8]).is_err());
    }
}
