//! Mapping between the view's inner chunk coordinates and the stored layout.
//!
//! An inner chunk is found by going through element space: its origin element
//! is `e = inner * inner_chunk_shape`; the stored shard is `e / shard_shape`
//! of level 0 (on a rectilinear grid, the shard whose edges hold `e`, see
//! `rect_layout`), and `l` is `e`'s offset in it; at each level `L` the chunk
//! within that level's shard is `(l mod shard_shape_L) / chunk_shape_L` (level
//! 0 with the edges of that very shard), flattened in C order (the order of
//! that level's index). Because each nested level's shard shape is the
//! enclosing level's chunk shape, this walks down the nesting. The inverse
//! sums each level's contribution back into element space. All arithmetic is
//! checked and never panics. Layouts from `analyse` are consistent; for
//! hand-built ones, zero dimensions and mismatched ranks give `None` (levels
//! that do not nest are not detected). Bounds against the array shape are the
//! caller's business: edge shards legitimately contain chunks beyond it.

use crate::zarr::sharding::ShardLayout;

/// Where an inner chunk is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InnerLocation {
    /// Coordinates of the stored shard in the array's (stored) chunk grid.
    pub shard_coords: Vec<u64>,
    /// Per level (outermost first), the C-order chunk index within that
    /// level's shard.
    pub per_level_index: Vec<u64>,
}

impl ShardLayout {
    /// Locate the inner chunk at `inner_coords` (in the view's chunk grid).
    pub fn locate(&self, inner_coords: &[u64]) -> Option<InnerLocation> {
        let ndim = self.inner_chunk_shape.len();
        if inner_coords.len() != ndim || self.inner_chunk_shape.contains(&0) {
            return None;
        }
        let element = mul_each(inner_coords, &self.inner_chunk_shape)?;
        let (shard_coords, local) = self.shard_holding(&element)?;
        let first = self.level0(&shard_coords)?;
        let per_level_index = std::iter::once(first.as_ref())
            .chain(self.levels.iter().skip(1))
            .map(|level| {
                if level.shard_shape.len() != ndim || level.chunk_shape.len() != ndim {
                    return None;
                }
                let within = local
                    .iter()
                    .zip(&level.shard_shape)
                    .zip(&level.chunk_shape)
                    .map(|((&e, &s), &c)| e.checked_rem(s)?.checked_div(c))
                    .collect::<Option<Vec<_>>>()?;
                level.index_of(&within)
            })
            .collect::<Option<Vec<_>>>()?;
        Some(InnerLocation {
            shard_coords,
            per_level_index,
        })
    }

    /// Inverse of [`locate`](Self::locate): stored shard coordinates plus one
    /// chunk index per level back to inner chunk coordinates.
    pub fn inner_coords(&self, shard_coords: &[u64], per_level_index: &[u64]) -> Option<Vec<u64>> {
        let levels = self.levels_of(shard_coords)?;
        if per_level_index.len() != levels.len() {
            return None;
        }
        let mut element = self.shard_start(shard_coords)?;
        for (level, &index) in levels.iter().zip(per_level_index) {
            let within = level.within_of(index)?;
            let offset = mul_each(&within, &level.chunk_shape)?;
            if offset.len() != element.len() {
                return None;
            }
            for (e, o) in element.iter_mut().zip(offset) {
                *e = e.checked_add(o)?;
            }
        }
        if element.len() != self.inner_chunk_shape.len() {
            return None;
        }
        element
            .iter()
            .zip(&self.inner_chunk_shape)
            .map(|(&e, &c)| match e.checked_rem(c)? {
                0 => e.checked_div(c),
                _ => None,
            })
            .collect()
    }
}

/// Element-wise checked product of two equally long vectors.
fn mul_each(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    if a.len() != b.len() {
        return None;
    }
    a.iter().zip(b).map(|(&x, &y)| x.checked_mul(y)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::grid::{c_order_coords, checked_product, grid_shape};
    use crate::zarr::sharding::tests::{array_meta, bytes_zstd, sharding};
    use crate::zarr::sharding::{analyse, Sharding};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn layout(shape: Value, shard: Value, codecs: Value) -> ShardLayout {
        match analyse(&array_meta(shape, shard, codecs)) {
            Sharding::Sharded(l) => l,
            other => panic!("{other:?}"),
        }
    }

    fn plain() -> ShardLayout {
        layout(
            json!([100, 95]),
            json!([50, 50]),
            json!([sharding(json!([10, 25]), bytes_zstd())]),
        )
    }

    fn nested() -> ShardLayout {
        let inner = sharding(json!([2, 5]), bytes_zstd());
        let mid = sharding(json!([10, 10]), json!([inner]));
        layout(json!([100, 95]), json!([50, 50]), json!([mid]))
    }

    #[test]
    fn plain_examples() {
        let l = plain();
        // Inner (7, 3): elements (70, 75) -> shard (1, 1); within (20, 25) -> chunk (2, 1) -> 2*2+1.
        assert_eq!(
            l.locate(&[7, 3]),
            Some(InnerLocation {
                shard_coords: vec![1, 1],
                per_level_index: vec![5]
            })
        );
        assert_eq!(l.inner_coords(&[1, 1], &[5]), Some(vec![7, 3]));
        assert_eq!(l.locate(&[0, 0]).unwrap().per_level_index, vec![0]);
        assert_eq!(l.locate(&[7]), None);
        assert_eq!(l.inner_coords(&[1, 1], &[10]), None);
        assert_eq!(l.inner_coords(&[1, 1], &[1, 1]), None);
        assert_eq!(l.inner_coords(&[1], &[1]), None);
        assert_eq!(l.locate(&[u64::MAX, 0]), None);
    }

    #[test]
    fn nested_examples() {
        let l = nested();
        // Inner (7, 3) with chunk (2,5): elements (14, 15) -> shard (0, 0);
        // level 0: within (14, 15) / (10, 10) -> (1, 1) of [5,5] -> 6;
        // level 1: within (4, 5) / (2, 5) -> (2, 1) of [5,2] -> 5.
        let loc = l.locate(&[7, 3]).unwrap();
        assert_eq!(loc.shard_coords, vec![0, 0]);
        assert_eq!(loc.per_level_index, vec![6, 5]);
        assert_eq!(l.inner_coords(&[0, 0], &[6, 5]), Some(vec![7, 3]));
        assert_eq!(l.inner_coords(&[0, 0], &[6]), None);
    }

    #[test]
    fn edge_shards_cover_the_view_grid() {
        // Shape 95 in dim 1: last shard (x=1) holds chunks 2 and 3, of which
        // chunk 3 (elements 75..100) overhangs the array end.
        let l = plain();
        let view_grid = grid_shape(&[100, 95], &l.inner_chunk_shape).unwrap();
        assert_eq!(view_grid, vec![10, 4]);
        let last = l.locate(&[9, 3]).unwrap();
        assert_eq!(last.shard_coords, vec![1, 1]);
        assert_eq!(last.per_level_index, vec![9]);
    }

    #[test]
    fn inconsistent_layouts_do_not_panic() {
        let mut l = nested();
        l.levels[0].shard_shape = vec![0, 0];
        assert_eq!(l.locate(&[1, 1]), None);
        let mut l = nested();
        l.inner_chunk_shape = vec![0, 5];
        assert_eq!(l.locate(&[1, 1]), None);
        assert_eq!(l.inner_coords(&[0, 0], &[0, 0]), None);
        let mut l = nested();
        l.levels.clear();
        assert_eq!(l.locate(&[1, 1]), None);
        assert_eq!(l.inner_coords(&[0, 0], &[]), None);
    }

    proptest! {
        #[test]
        fn round_trip_over_every_inner_chunk_of_a_shard(
            sy in 1u64..4, sx in 1u64..4,   // shard coords
            seed: u64,
            nested_layout: bool,
        ) {
            let l = if nested_layout { nested() } else { plain() };
            let per_shard: Vec<u64> = l.levels.iter().map(|lv| lv.num_chunks()).collect();
            let per_level_index: Vec<u64> = per_shard.iter().map(|&n| seed % n).collect();
            let inner = l.inner_coords(&[sy, sx], &per_level_index).unwrap();
            let loc = l.locate(&inner).unwrap();
            prop_assert_eq!(loc.shard_coords, vec![sy, sx]);
            prop_assert_eq!(loc.per_level_index, per_level_index);
        }

        #[test]
        fn locate_then_inner_coords_is_identity(y in 0u64..1000, x in 0u64..1000, nested_layout: bool) {
            let l = if nested_layout { nested() } else { plain() };
            let loc = l.locate(&[y, x]).unwrap();
            prop_assert_eq!(l.inner_coords(&loc.shard_coords, &loc.per_level_index), Some(vec![y, x]));
        }

        #[test]
        fn bijection_within_a_shard(nested_layout: bool) {
            // Every inner chunk of shard (0, 0) maps to a distinct index tuple.
            let l = if nested_layout { nested() } else { plain() };
            let per_dim: Vec<u64> = l.levels[0].shard_shape.iter().zip(&l.inner_chunk_shape).map(|(s, c)| s / c).collect();
            let total = checked_product(&per_dim).unwrap();
            let mut seen = std::collections::HashSet::new();
            for i in 0..total {
                let inner = c_order_coords(i, &per_dim).unwrap();
                let loc = l.locate(&inner).unwrap();
                prop_assert_eq!(&loc.shard_coords, &vec![0, 0]);
                prop_assert!(seen.insert(loc.per_level_index));
            }
        }
    }
}
