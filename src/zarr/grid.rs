//! Checked arithmetic on regular chunk grids.
//!
//! Shapes come from untrusted metadata, so every product, ceiling division and
//! C-order (row-major) index conversion is done with checked operations and
//! reports overflow or out-of-range input instead of wrapping or panicking.
//! C order means the last dimension varies fastest, which is the order of the
//! entries in a shard index.

use crate::zarr::ZarrError;

/// Product of all dimensions (1 for the empty shape), or `Overflow`.
pub fn checked_product(dims: &[u64]) -> Result<u64, ZarrError> {
    dims.iter().try_fold(1u64, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| ZarrError::overflow(format!("product of dimensions {dims:?}")))
    })
}

/// Number of chunks along each dimension: `ceil(shape[i] / chunk[i])`.
///
/// Errors if the lengths differ or a chunk dimension is zero.
pub fn grid_shape(shape: &[u64], chunk: &[u64]) -> Result<Vec<u64>, ZarrError> {
    if shape.len() != chunk.len() {
        return Err(ZarrError::invalid(
            "chunk_shape",
            format!("has {} dimensions but the shape has {}", chunk.len(), shape.len()),
        ));
    }
    shape
        .iter()
        .zip(chunk)
        .enumerate()
        .map(|(i, (&s, &c))| {
            if c == 0 {
                return Err(ZarrError::invalid(
                    format!("chunk_shape[{i}]"),
                    "must be greater than zero",
                ));
            }
            // s / c + (s % c != 0) cannot overflow, unlike (s + c - 1) / c.
            Ok(s / c + u64::from(s % c != 0))
        })
        .collect()
}

/// Row-major linear index of `coords` in a grid of `dims`.
///
/// `None` if the lengths differ, a coordinate is out of range, or overflow.
pub fn c_order_index(coords: &[u64], dims: &[u64]) -> Option<u64> {
    if coords.len() != dims.len() {
        return None;
    }
    coords.iter().zip(dims).try_fold(0u64, |acc, (&c, &d)| {
        if c >= d {
            return None;
        }
        acc.checked_mul(d)?.checked_add(c)
    })
}

/// Inverse of [`c_order_index`]. `None` if `index` is not below the grid size.
pub fn c_order_coords(index: u64, dims: &[u64]) -> Option<Vec<u64>> {
    let mut rest = index;
    let mut coords = vec![0u64; dims.len()];
    for (slot, &d) in coords.iter_mut().zip(dims).rev() {
        *slot = rest.checked_rem(d)?;
        rest = rest.checked_div(d)?;
    }
    (rest == 0).then_some(coords)
}

/// Every coordinate tuple in the box `[lo, hi)`, in C order.
pub fn box_coords(lo: &[u64], hi: &[u64]) -> Vec<Vec<u64>> {
    BoxCoords::new(lo, hi).collect()
}

/// The coordinate tuples of the box `[lo, hi)`, in C order, one at a time: a caller that stops
/// at the first one it wants (or filters most away) never holds them all.
#[derive(Debug, Clone)]
pub struct BoxCoords {
    lo: Vec<u64>,
    hi: Vec<u64>,
    /// The next tuple; `None` once past the end.
    next: Option<Vec<u64>>,
}

impl BoxCoords {
    pub fn new(lo: &[u64], hi: &[u64]) -> Self {
        let empty = lo.len() != hi.len() || lo.iter().zip(hi).any(|(l, h)| l >= h);
        BoxCoords {
            lo: lo.to_vec(),
            hi: hi.to_vec(),
            next: (!empty).then(|| lo.to_vec()),
        }
    }

    /// An empty box.
    pub fn empty() -> Self {
        BoxCoords {
            lo: Vec::new(),
            hi: Vec::new(),
            next: None,
        }
    }
}

impl Iterator for BoxCoords {
    type Item = Vec<u64>;

    fn next(&mut self) -> Option<Vec<u64>> {
        let current = self.next.take()?;
        let mut following = current.clone();
        let mut dim = following.len();
        while dim > 0 {
            dim -= 1;
            following[dim] += 1;
            if following[dim] < self.hi[dim] {
                self.next = Some(following);
                break;
            }
            following[dim] = self.lo[dim];
        }
        Some(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn product() {
        assert_eq!(checked_product(&[]).unwrap(), 1);
        assert_eq!(checked_product(&[2, 3, 4]).unwrap(), 24);
        assert_eq!(checked_product(&[5, 0, 7]).unwrap(), 0);
        assert!(matches!(
            checked_product(&[1 << 63, 4]),
            Err(ZarrError::Overflow { .. })
        ));
    }

    #[test]
    fn grid_shape_matches_spec_example() {
        assert_eq!(grid_shape(&[10, 200, 3000], &[5, 20, 400]).unwrap(), vec![2, 10, 8]);
        assert_eq!(grid_shape(&[0, 1], &[3, 3]).unwrap(), vec![0, 1]);
        assert_eq!(grid_shape(&[u64::MAX], &[2]).unwrap(), vec![1 << 63]);
        assert_eq!(grid_shape(&[], &[]).unwrap(), Vec::<u64>::new());
        assert!(grid_shape(&[10], &[0]).is_err());
        assert!(grid_shape(&[10, 10], &[5]).is_err());
    }

    #[test]
    fn c_order_examples() {
        assert_eq!(c_order_index(&[1, 2], &[3, 4]), Some(6));
        assert_eq!(c_order_index(&[], &[]), Some(0));
        assert_eq!(c_order_index(&[3, 0], &[3, 4]), None);
        assert_eq!(c_order_index(&[0], &[3, 4]), None);
        assert_eq!(c_order_coords(6, &[3, 4]), Some(vec![1, 2]));
        assert_eq!(c_order_coords(12, &[3, 4]), None);
        assert_eq!(c_order_coords(0, &[]), Some(vec![]));
        assert_eq!(c_order_coords(1, &[]), None);
        assert_eq!(c_order_coords(0, &[0]), None);
        assert_eq!(
            c_order_index(&[u64::MAX - 1, 1], &[u64::MAX, 2]),
            None,
            "overflow must be None"
        );
    }

    proptest! {
        #[test]
        fn c_order_round_trip(dims in proptest::collection::vec(1u64..50, 0..5), seed: u64) {
            let n = checked_product(&dims).unwrap();
            let index = seed % n;
            let coords = c_order_coords(index, &dims).unwrap();
            prop_assert_eq!(c_order_index(&coords, &dims), Some(index));
        }

        #[test]
        fn c_order_never_panics(coords in proptest::collection::vec(any::<u64>(), 0..4),
                                dims in proptest::collection::vec(any::<u64>(), 0..4),
                                index: u64) {
            let _ = c_order_index(&coords, &dims);
            let _ = c_order_coords(index, &dims);
            let _ = grid_shape(&coords, &dims);
            let _ = checked_product(&dims);
        }
    }

    #[test]
    fn boxes_in_c_order() {
        assert_eq!(
            box_coords(&[0, 0], &[2, 2]),
            vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]
        );
        assert_eq!(box_coords(&[], &[]), vec![Vec::<u64>::new()]);
        assert!(box_coords(&[1], &[1]).is_empty());
    }
}
