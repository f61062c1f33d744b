//! Sharded arrays on a rectilinear grid (zarr-python 3.4's `shards=[[16, 24, 24], [24, 24]]`):
//! shards of varying edges over one regular shape of inner chunks.
//!
//! When every shard edge is a multiple of the sharding codec's inner chunk edge along its
//! axis, the inner chunks tile the array regularly, whatever the shards' sizes: the view shows
//! a regular grid of them, exactly as for a regular grid of shards. Only the stored side
//! varies, shard by shard: the shard holding an element is found along each axis from the
//! grid's edges (not by a division), and its index has its own shape, its edges over the
//! inner chunk's ([`ShardLayout::level0`]). Nested sharding below is regular and unchanged.
//!
//! Anything else on a rectilinear grid is shown as stored, with the reason: an unsharded
//! array (its chunks have no one shape a regular grid could show), shard edges that are not
//! multiples of the inner chunks (the sharding codec itself forbids them), codecs around the
//! sharding codec.

use std::borrow::Cow;

use crate::zarr::grid::checked_product;
use crate::zarr::metadata::ArrayMetadata;
use crate::zarr::rectilinear::{EdgeAxis, RectilinearGrid};
use crate::zarr::shard_index::MAX_CHUNKS_PER_SHARD;
use crate::zarr::sharding::{unwrap_levels, ShardLayout, ShardLevel, Sharding, ShardingConfig, SHARDING_CODEC};

/// How to show an array whose chunk grid is `grid` (see the module docs).
pub fn analyse_rectilinear(meta: &ArrayMetadata, grid: &RectilinearGrid) -> Sharding {
    let unsupported = |why: String| Sharding::Unsupported(format!("rectilinear chunk grid: {why}"));
    let codec = match meta.codecs.as_slice() {
        [only] if only.name == SHARDING_CODEC => only,
        codecs if codecs.iter().all(|c| c.name != SHARDING_CODEC) => {
            return unsupported("not sharded, so its chunks have no one shape a regular grid could show".into())
        }
        _ => return unsupported("codecs around the sharding codec".into()),
    };
    let config = match ShardingConfig::from_codec(codec) {
        Ok(config) => config,
        Err(e) => return unsupported(e.to_string()),
    };
    if let Err(why) = check_edges(grid, &config.chunk_shape) {
        return unsupported(why);
    }
    match unwrap_levels(&grid.first_edges(), codec) {
        Ok(mut layout) => {
            layout.rectilinear = Some(grid.clone());
            Sharding::Sharded(layout)
        }
        Err(e) => unsupported(e.to_string()),
    }
}

/// Every shard edge a positive multiple of the inner chunk edge along its axis, and no shard
/// holding more inner chunks than an index may.
fn check_edges(grid: &RectilinearGrid, inner: &[u64]) -> Result<(), String> {
    if inner.len() != grid.axes.len() {
        return Err(format!(
            "inner chunk shape {inner:?} has {} dimensions, the grid {}",
            inner.len(),
            grid.axes.len()
        ));
    }
    let mut most = Vec::with_capacity(inner.len());
    for (d, (axis, &c)) in grid.axes.iter().zip(inner).enumerate() {
        if axis.is_empty() {
            return Err(format!("no shard along dimension {d}"));
        }
        if let Some(edge) = axis.edges().find(|e| e % c != 0) {
            return Err(format!(
                "shard edge {edge} along dimension {d} is not a multiple of the inner chunk edge {c}"
            ));
        }
        most.push(axis.max_edge() / c);
    }
    match checked_product(&most) {
        Ok(n) if n <= MAX_CHUNKS_PER_SHARD => Ok(()),
        _ => Err(format!(
            "its largest shard holds {most:?} inner chunks, more than {MAX_CHUNKS_PER_SHARD} in all"
        )),
    }
}

impl ShardLayout {
    /// The outermost level of the stored shard at `shard_coords`: `levels[0]` on a regular
    /// grid, on a rectilinear one with that shard's edges (and index shape). `None` past the
    /// grid.
    pub fn level0(&self, shard_coords: &[u64]) -> Option<Cow<'_, ShardLevel>> {
        let first = self.levels.first()?;
        let Some(grid) = &self.rectilinear else {
            return Some(Cow::Borrowed(first));
        };
        if shard_coords.len() != grid.axes.len() || first.chunk_shape.len() != grid.axes.len() {
            return None;
        }
        let shard_shape = grid
            .axes
            .iter()
            .zip(shard_coords)
            .map(|(axis, &s)| axis.chunk(s).map(|(_, edge)| edge))
            .collect::<Option<Vec<u64>>>()?;
        let chunks_per_shard = shard_shape
            .iter()
            .zip(&first.chunk_shape)
            .map(|(&s, &c)| s.checked_div(c))
            .collect::<Option<Vec<u64>>>()?;
        Some(Cow::Owned(ShardLevel {
            shard_shape,
            chunks_per_shard,
            ..first.clone()
        }))
    }

    /// Every level of the stored shard at `shard_coords` (see [`level0`](Self::level0)).
    pub fn levels_of(&self, shard_coords: &[u64]) -> Option<Cow<'_, [ShardLevel]>> {
        match self.level0(shard_coords)? {
            Cow::Borrowed(_) => Some(Cow::Borrowed(&self.levels)),
            Cow::Owned(first) => {
                let mut levels = self.levels.clone();
                *levels.first_mut()? = first;
                Some(Cow::Owned(levels))
            }
        }
    }

    /// The stored shard holding `element`, and the element's offset within it.
    pub(crate) fn shard_holding(&self, element: &[u64]) -> Option<(Vec<u64>, Vec<u64>)> {
        let first = self.levels.first()?;
        let (mut coords, mut local) = (Vec::with_capacity(element.len()), Vec::with_capacity(element.len()));
        for (d, &e) in element.iter().enumerate() {
            let (s, start) = match &self.rectilinear {
                Some(grid) => grid.axes.get(d)?.find(e).map(|(s, start, _)| (s, start))?,
                None => {
                    let edge = *first.shard_shape.get(d)?;
                    let s = e.checked_div(edge)?;
                    (s, s * edge)
                }
            };
            coords.push(s);
            local.push(e - start);
        }
        Some((coords, local))
    }

    /// The first element of the stored shard at `shard_coords`.
    pub(crate) fn shard_start(&self, shard_coords: &[u64]) -> Option<Vec<u64>> {
        let first = self.levels.first()?;
        shard_coords
            .iter()
            .enumerate()
            .map(|(d, &s)| match &self.rectilinear {
                Some(grid) => grid.axes.get(d)?.chunk(s).map(|(start, _)| start),
                None => s.checked_mul(*first.shard_shape.get(d)?),
            })
            .collect()
    }

    /// The stored shards along each dimension in units of the view's (innermost) chunks:
    /// which shard holds inner chunk `i`, which inner chunks shard `s` spans.
    pub fn shard_axes(&self) -> Option<Vec<EdgeAxis>> {
        let first = self.levels.first()?;
        if first.shard_shape.len() != self.inner_chunk_shape.len() {
            return None;
        }
        match &self.rectilinear {
            Some(grid) => grid
                .axes
                .iter()
                .zip(&self.inner_chunk_shape)
                .map(|(axis, &c)| axis.divided(c))
                .collect(),
            None => first
                .shard_shape
                .iter()
                .zip(&self.inner_chunk_shape)
                .map(|(&s, &c)| match s.checked_rem(c) {
                    Some(0) if s > 0 => Some(EdgeAxis::regular(s / c)),
                    _ => None,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
    use crate::zarr::sharding::analyse;
    use crate::zarr::sharding::tests::{bytes_zstd, sharding};
    use serde_json::{json, Value};

    pub(crate) fn rect_meta(shape: Value, chunk_shapes: Value, codecs: Value) -> ArrayMetadata {
        let doc = json!({
            "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "int32",
            "chunk_grid": {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": chunk_shapes}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": codecs, "attributes": {}
        });
        match parse_zarr_json(&serde_json::to_vec(&doc).unwrap()).unwrap() {
            NodeMetadata::Array(a) => a,
            NodeMetadata::Group { .. } => panic!(),
        }
    }

    /// What zarr-python 3.4 writes for `chunks=(8, 8), shards=[[16, 24, 24], [24, 24]]`.
    pub(crate) fn zarr_python_layout() -> ShardLayout {
        let meta = rect_meta(
            json!([64, 48]),
            json!([[16, [24, 2]], [[24, 2]]]),
            json!([sharding(json!([8, 8]), bytes_zstd())]),
        );
        match analyse(&meta) {
            Sharding::Sharded(l) => l,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_shard_has_its_own_index_shape() {
        let l = zarr_python_layout();
        assert_eq!(l.inner_chunk_shape, [8, 8]);
        let first = l.level0(&[0, 0]).unwrap();
        assert_eq!(first.shard_shape, [16, 24]);
        assert_eq!(first.chunks_per_shard, [2, 3]);
        assert_eq!(first.index_size(), 6 * 16 + 4);
        let last = l.level0(&[2, 1]).unwrap();
        assert_eq!(last.chunks_per_shard, [3, 3]);
        assert_eq!(last.index_size(), 9 * 16 + 4);
        assert!(l.level0(&[3, 0]).is_none());
        assert!(l.level0(&[0]).is_none());
        assert_eq!(l.levels_of(&[1, 0]).unwrap()[0].chunks_per_shard, [3, 3]);
        let axes = l.shard_axes().unwrap();
        assert_eq!(axes[0].find(2), Some((1, 2, 3)));
        assert_eq!(axes[1].find(5), Some((1, 3, 3)));
    }

    #[test]
    fn what_is_shown_as_stored_says_why() {
        let why = |shapes: Value, codecs: Value| match analyse(&rect_meta(json!([30, 20]), shapes, codecs)) {
            Sharding::Unsupported(why) => why,
            other => panic!("{other:?}"),
        };
        let unsharded = why(json!([[10, 5, 15], [20]]), bytes_zstd());
        assert!(unsharded.contains("not sharded"), "{unsharded}");
        let shard = sharding(json!([10, 10]), bytes_zstd());
        let odd = why(json!([[15, 15], [20]]), json!([shard.clone()]));
        assert!(odd.contains("edge 15 along dimension 0"), "{odd}");
        let around = why(json!([[10, 20], [20]]), json!([shard, "crc32c"]));
        assert!(around.contains("around"), "{around}");
        let huge = why(
            json!([[[1 << 20, 1]], [[1 << 20, 1]]]),
            json!([sharding(json!([1, 1]), bytes_zstd())]),
        );
        assert!(huge.contains("inner chunks"), "{huge}");
    }

    #[test]
    fn regular_layouts_answer_the_same_questions() {
        let meta = crate::zarr::sharding::tests::array_meta(
            json!([100, 95]),
            json!([50, 50]),
            json!([sharding(json!([10, 25]), bytes_zstd())]),
        );
        let Sharding::Sharded(l) = analyse(&meta) else { panic!() };
        assert!(matches!(l.level0(&[7, 7]), Some(Cow::Borrowed(_))));
        assert_eq!(l.shard_holding(&[70, 49]), Some((vec![1, 0], vec![20, 49])));
        assert_eq!(l.shard_start(&[1, 1]), Some(vec![50, 50]));
        assert_eq!(l.shard_axes().unwrap()[1].find(3), Some((1, 2, 2)));
    }

    #[test]
    fn every_inner_chunk_has_one_place_and_back() {
        let l = zarr_python_layout();
        let mut seen = std::collections::HashSet::new();
        for y in 0..8 {
            for x in 0..6 {
                let loc = l.locate(&[y, x]).unwrap();
                let expect_y = [0, 0, 1, 1, 1, 2, 2, 2][y as usize];
                assert_eq!(loc.shard_coords, [expect_y, x / 3]);
                assert!(loc.per_level_index[0] < l.level0(&loc.shard_coords).unwrap().num_chunks());
                assert!(seen.insert((loc.shard_coords.clone(), loc.per_level_index.clone())));
                assert_eq!(
                    l.inner_coords(&loc.shard_coords, &loc.per_level_index),
                    Some(vec![y, x])
                );
            }
        }
        // Inner (3, 4): elements (24, 32) -> shard (1, 1) from (16, 24); within (1, 1) of [3, 3].
        assert_eq!(l.locate(&[3, 4]).unwrap().per_level_index, [4]);
        assert_eq!(l.locate(&[8, 0]), None, "past the grid's edges");
        assert_eq!(l.inner_coords(&[0, 0], &[6]), None, "past the first shard's index");
    }

    #[test]
    fn nested_sharding_below_rectilinear_shards() {
        let inner = sharding(json!([4, 4]), bytes_zstd());
        let meta = rect_meta(
            json!([64, 48]),
            json!([[16, [24, 2]], [[24, 2]]]),
            json!([sharding(json!([8, 8]), json!([inner]))]),
        );
        let Sharding::Sharded(l) = analyse(&meta) else { panic!() };
        assert_eq!(l.inner_chunk_shape, [4, 4]);
        for y in 0..16 {
            for x in 0..12 {
                let loc = l.locate(&[y, x]).unwrap();
                assert_eq!(
                    l.inner_coords(&loc.shard_coords, &loc.per_level_index),
                    Some(vec![y, x])
                );
            }
        }
        assert_eq!(l.shard_axes().unwrap()[0].find(4), Some((1, 4, 6)));
    }

    proptest::proptest! {
        #[test]
        fn random_edges_place_every_inner_chunk_once(
            edges in proptest::collection::vec(proptest::collection::vec((1u64..4, 1u64..3), 1..4), 2..=2),
            inner in proptest::collection::vec(1u64..4, 2..=2),
        ) {
            // Edges in multiples of the inner chunk edge, as runs [k * inner, count].
            let specs: Vec<Value> = edges.iter().zip(&inner).map(|(runs, &c)| {
                Value::Array(runs.iter().map(|&(k, n)| json!([k * c, n])).collect())
            }).collect();
            let sums: Vec<u64> = edges.iter().zip(&inner).map(|(runs, &c)| runs.iter().map(|(k, n)| k * c * n).sum()).collect();
            let meta = rect_meta(json!(sums), json!(specs), json!([sharding(json!(inner), bytes_zstd())]));
            let Sharding::Sharded(l) = analyse(&meta) else { panic!("{:?}", analyse(&meta)) };
            let grid: Vec<u64> = sums.iter().zip(&inner).map(|(s, c)| s / c).collect();
            let mut seen = std::collections::HashSet::new();
            for y in 0..grid[0] {
                for x in 0..grid[1] {
                    let loc = l.locate(&[y, x]).unwrap();
                    let level = l.level0(&loc.shard_coords).unwrap();
                    proptest::prop_assert!(loc.per_level_index[0] < level.num_chunks());
                    proptest::prop_assert!(seen.insert((loc.shard_coords.clone(), loc.per_level_index.clone())));
                    proptest::prop_assert_eq!(l.inner_coords(&loc.shard_coords, &loc.per_level_index), Some(vec![y, x]));
                }
            }
            let axes = l.shard_axes().unwrap();
            let shards: u64 = axes.iter().zip(&grid).map(|(a, &g)| a.count_covering(g)).product();
            let chunks: u64 = (0..shards).map(|i| {
                let s = crate::zarr::grid::c_order_coords(i, &[axes[0].count_covering(grid[0]), axes[1].count_covering(grid[1])]).unwrap();
                l.level0(&s).unwrap().num_chunks()
            }).sum();
            proptest::prop_assert_eq!(chunks, grid[0] * grid[1]);
        }
    }
}
