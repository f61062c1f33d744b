//! Read-ahead for readers that do not list: shards loaded for reads one after another in the
//! order of the shard grid.
//!
//! zarr-python, xarray and tools that open chunk files by name never list a directory, so the
//! listing-driven read-ahead (`read_ahead`) never starts for them; each shard then costs its reader
//! a round trip when it reaches it. Such readers go through an array in C order of its chunks, a
//! few at a time, which visits the shards of a row of shards in turn, once for every row of chunks
//! in them. So reads are followed by the furthest shard (in C order of the shard grid) any read
//! reached: a read of a shard just past it (within [`SLACK`] shards, for readers running a few at
//! once) moves it on, and the next shards in C order are fetched in the background, index and
//! window, as a walk's are: 2 after the second such step, four times as many with each further one
//! up to [`MAX_AHEAD`] (three steps in order are a reader going through the array, not chance).
//! Reads of shards already passed (the next row of chunks) change nothing; a jump further ahead
//! starts over. Every read counts, whether it found the shard's index cached (fetched ahead) or
//! loaded it, so the window keeps moving ahead of the reader; it counts as the read asks for the
//! index, before the load, so that the shards after it go out in the same round trip as its own.
//! Shards the grid holds but the store does not cost a 404 each, remembered for the metadata TTL.
//! The bytes fetched count as read-ahead in `zarrfs stats`, used or wasted, within the same budget
//! as a walk's.

use std::sync::Mutex;

use super::ShardedArray;

/// How far past the furthest shard reached a read still counts as in order.
const SLACK: u64 = 2;
/// Most shards read ahead of an in-order reader.
const MAX_AHEAD: u64 = 16;

/// The furthest shard a read reached (its place in C order), and how many steps in a row were
/// in order.
#[derive(Debug, Default)]
pub(super) struct ReadOrder(Mutex<Option<(u64, u32)>>);

impl ShardedArray {
    /// Shards per dimension of the grid.
    fn shard_grid(&self) -> Vec<u64> {
        (0..self.ndim()).map(|d| self.shards_along(d)).collect()
    }

    /// A read asks for the index of `shard_key`: read ahead if the reader goes in order.
    pub(super) fn read_reached(&self, shard_key: &str) {
        if self.options.data_cache.is_none() || self.options.prefetch_bytes == 0 {
            return;
        }
        let grid = self.shard_grid();
        let Some(coords) = shard_key
            .strip_prefix(&self.prefix)
            .and_then(|rel| self.encoding.decode(rel, self.ndim()))
        else {
            return;
        };
        let Some(place) = c_order_place(&coords, &grid) else {
            return;
        };
        let ahead = {
            let mut last = self.read_order.0.lock().unwrap_or_else(|e| e.into_inner());
            let run = match *last {
                Some((furthest, _)) if place <= furthest => return,
                Some((furthest, run)) if place - furthest <= SLACK => run + 1,
                _ => 0,
            };
            *last = Some((place, run));
            if run == 0 {
                return;
            }
            (2u64 << (2 * (run - 1)).min(16)).min(MAX_AHEAD)
        };
        let total: u64 = grid.iter().product();
        let next: Vec<Vec<u64>> = (place + 1..total.min(place + 1 + ahead))
            .filter_map(|p| coords_at(p, &grid))
            .collect();
        let Some(me) = self.me.get().and_then(|w| w.upgrade()) else {
            return;
        };
        tokio::spawn(async move { me.fetch_ahead(next).await });
    }
}

/// The place of `coords` in the C order of `grid`, if inside it.
fn c_order_place(coords: &[u64], grid: &[u64]) -> Option<u64> {
    if coords.len() != grid.len() {
        return None;
    }
    let mut place: u64 = 0;
    for (&c, &n) in coords.iter().zip(grid) {
        if c >= n {
            return None;
        }
        place = place.checked_mul(n)?.checked_add(c)?;
    }
    Some(place)
}

/// The coordinates at `place` in the C order of `grid`.
fn coords_at(mut place: u64, grid: &[u64]) -> Option<Vec<u64>> {
    let mut coords = vec![0; grid.len()];
    for (d, &n) in grid.iter().enumerate().rev() {
        if n == 0 {
            return None;
        }
        coords[d] = place % n;
        place /= n;
    }
    (place == 0).then_some(coords)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_in_c_order() {
        let grid = [3, 4];
        assert_eq!(c_order_place(&[0, 0], &grid), Some(0));
        assert_eq!(c_order_place(&[1, 2], &grid), Some(6));
        assert_eq!(c_order_place(&[3, 0], &grid), None);
        for p in 0..12 {
            assert_eq!(c_order_place(&coords_at(p, &grid).unwrap(), &grid), Some(p));
        }
        assert_eq!(coords_at(12, &grid), None);
        assert_eq!(c_order_place(&[], &[]), Some(0));
    }
}
