//! Choosing a shard shape for an unsharded array (`zarrfs copy --shard auto`): as many whole
//! chunks per shard as fit in a byte budget, the same number along every dimension (as
//! zarr-python's `shards="auto"` grows them), except along dimensions whose chunks run out
//! first: those take all they have, and the others go on growing.
//!
//! The budget is in stored bytes, measured by the mean size of the array's chunks as stored,
//! since it bounds the size of each shard as an object; an array with no chunk stored is
//! measured by the decoded size of a chunk. A shard never holds more than
//! [`MAX_CHUNKS_PER_SHARD`] chunks, so its index stays small.

use serde_json::Value;

/// Most chunks a chosen shard holds: an index of 1 MiB (16 bytes a chunk), read whole by every
/// reader that opens the shard.
pub const MAX_CHUNKS_PER_SHARD: u64 = 1 << 16;

/// Chunks per shard along each dimension of a chunk grid of `grid` chunks, each about
/// `chunk_bytes`: the largest `k` such that shards of `min(k, grid[i])` chunks along each
/// dimension stay within `budget` bytes and [`MAX_CHUNKS_PER_SHARD`] chunks (at least one
/// chunk).
pub fn chunks_per_shard(grid: &[u64], chunk_bytes: u64, budget: u64) -> Vec<u64> {
    let grid: Vec<u64> = grid.iter().map(|&g| g.max(1)).collect();
    let per = |k: u64| grid.iter().map(|&g| k.min(g)).collect::<Vec<_>>();
    let fits = |k: u64| {
        let chunks = per(k).iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        chunks.is_some_and(|n| {
            n <= MAX_CHUNKS_PER_SHARD && n.checked_mul(chunk_bytes.max(1)).is_some_and(|b| b <= budget)
        })
    };
    // The number of chunks grows with k: the largest k that fits, by bisection.
    let (mut lo, mut hi) = (1u64, grid.iter().copied().max().unwrap_or(1));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    per(lo)
}

/// The shard shape (in elements) for the unsharded array `doc` within `budget` stored bytes a
/// shard, its chunks `mean_chunk_bytes` each as stored (`None`: none is stored); `None` when a
/// shard would hold a single chunk (packing gains nothing) or `doc` has no dimensions.
pub fn auto_shard_shape(doc: &Value, mean_chunk_bytes: Option<u64>, budget: u64) -> Option<Vec<u64>> {
    let dims =
        |pointer: &str| -> Option<Vec<u64>> { doc.pointer(pointer)?.as_array()?.iter().map(Value::as_u64).collect() };
    let (shape, chunk) = (dims("/shape")?, dims("/chunk_grid/configuration/chunk_shape")?);
    if shape.is_empty() || shape.len() != chunk.len() || chunk.contains(&0) {
        return None;
    }
    let grid: Vec<u64> = shape.iter().zip(&chunk).map(|(&s, &c)| s.div_ceil(c)).collect();
    let chunk_bytes = mean_chunk_bytes.unwrap_or_else(|| {
        let elements = chunk
            .iter()
            .try_fold(1u64, |n, &c| n.checked_mul(c))
            .unwrap_or(u64::MAX);
        elements.saturating_mul(item_bytes(doc.get("data_type")))
    });
    let per = chunks_per_shard(&grid, chunk_bytes, budget);
    if per.iter().all(|&k| k == 1) {
        return None;
    }
    // A shard of k chunks can pass the end of a dimension near the largest size: no shape then.
    chunk.iter().zip(&per).map(|(&c, &k)| c.checked_mul(k)).collect()
}

/// Bytes of one element of a data type, decoded (8 for one of no fixed size known here).
fn item_bytes(data_type: Option<&Value>) -> u64 {
    data_type
        .and_then(crate::zarr::transcode::sizes)
        .map_or(8, |(item, _)| item as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(shape: &[u64], chunk: &[u64], data_type: &str) -> Value {
        json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}}})
    }

    #[test]
    fn chunks_grow_alike_along_every_dimension_within_the_budget() {
        // 8 KiB chunks, 1 MiB: 128 chunks at most, so 11 x 11 (121).
        assert_eq!(chunks_per_shard(&[64, 64], 8 << 10, 1 << 20), vec![11, 11]);
        // Exactly on the budget is in.
        assert_eq!(chunks_per_shard(&[64, 64], 1 << 10, 16 << 10), vec![4, 4]);
        assert_eq!(chunks_per_shard(&[8, 8, 8], 1, 27), vec![3, 3, 3]);
    }

    #[test]
    fn a_dimension_whose_chunks_run_out_takes_them_all_and_the_others_grow_on() {
        // (time, y, x) with one chunk along y and x: shards grow along time only.
        assert_eq!(chunks_per_shard(&[1000, 1, 1], 1 << 20, 64 << 20), vec![64, 1, 1]);
        assert_eq!(chunks_per_shard(&[3, 100], 1, 30), vec![3, 10]);
        // The whole array fits: one shard.
        assert_eq!(chunks_per_shard(&[4, 4], 1, 1 << 30), vec![4, 4]);
    }

    #[test]
    fn a_chunk_over_the_budget_and_the_chunk_count_cap() {
        assert_eq!(chunks_per_shard(&[10, 10], 1 << 30, 1 << 20), vec![1, 1]);
        assert_eq!(chunks_per_shard(&[1 << 20], 1, u64::MAX), vec![MAX_CHUNKS_PER_SHARD]);
        assert_eq!(chunks_per_shard(&[1 << 20, 1 << 20], 0, u64::MAX), vec![256, 256]);
        // Nothing overflows on extreme grids.
        assert_eq!(chunks_per_shard(&[u64::MAX; 4], u64::MAX, u64::MAX), vec![1; 4]);
    }

    #[test]
    fn the_shape_in_elements_from_stored_or_decoded_sizes() {
        let d = doc(&[4096, 4096], &[64, 64], "uint16");
        // Stored 8 KiB a chunk, 2 MiB: 16 x 16 chunks.
        assert_eq!(auto_shard_shape(&d, Some(8 << 10), 2 << 20), Some(vec![1024, 1024]));
        // Compressed to 2 KiB a chunk: 4 times the chunks, 32 x 32.
        assert_eq!(auto_shard_shape(&d, Some(2 << 10), 2 << 20), Some(vec![2048, 2048]));
        // Nothing stored: decoded, 64 x 64 x 2 bytes = 8 KiB.
        assert_eq!(auto_shard_shape(&d, None, 2 << 20), Some(vec![1024, 1024]));
        // A ragged edge: 100 elements in chunks of 30 is 4 chunks along it.
        assert_eq!(
            auto_shard_shape(&doc(&[100], &[30], "uint8"), Some(1), 1 << 20),
            Some(vec![120])
        );
    }

    #[test]
    fn nothing_when_a_shard_would_hold_one_chunk() {
        let d = doc(&[4096, 4096], &[64, 64], "uint16");
        assert_eq!(auto_shard_shape(&d, Some(8 << 10), 8 << 10), None);
        assert_eq!(auto_shard_shape(&doc(&[10], &[10], "uint8"), Some(10), 1 << 20), None);
        assert_eq!(auto_shard_shape(&doc(&[], &[], "uint8"), Some(1), 1 << 20), None);
        assert_eq!(auto_shard_shape(&doc(&[10], &[0], "uint8"), Some(1), 1 << 20), None);
        assert_eq!(auto_shard_shape(&json!({"shape": [10]}), Some(1), 1 << 20), None);
        // Shapes near the largest number: no overflow, no panic.
        assert_eq!(
            auto_shard_shape(&doc(&[u64::MAX], &[1 << 62], "uint8"), Some(1), u64::MAX),
            None
        );
        assert_eq!(
            auto_shard_shape(&doc(&[u64::MAX, 2], &[u64::MAX, 1], "uint8"), Some(1), 16),
            Some(vec![u64::MAX, 2])
        );
    }
}
