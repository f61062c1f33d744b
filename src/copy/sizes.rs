//! The chunk files of one destination shard of `--shard`, as they are held from the walk that
//! lists them until the shard is packed: only each file's size, by its entry in the shard's
//! index (its path is made again from the entry when it is read).
//!
//! A row of destination shards is held while it is gathered (and the row before it while it
//! is packed): with 1024 x 1024 chunks a shard, millions of chunk files. A record of 24 bytes
//! a file (entry, coordinates, size) made that 160 MiB and more for the 10^7-chunk array of
//! `bench/bench_copy_scale.sh`. So a shard holding few files keeps a list of (entry, size), 16
//! bytes a file; once it holds an eighth of its entries, a dense table of `u32` sizes, 4
//! bytes an entry, the entry implied by the place. A size that does not fit in a `u32` (a
//! chunk file of 4 GiB) is kept apart.

use std::collections::BTreeMap;

/// A dense table's mark of an entry with no chunk file.
const ABSENT: u32 = u32::MAX;
/// A dense table's mark of a chunk file whose size is kept in `large`.
const LARGE: u32 = u32::MAX - 1;

/// The sizes of a shard's chunk files by their entry in its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkSizes {
    /// Entries of the shard's index.
    slots: u64,
    held: Held,
    /// Sizes too large for a dense table's `u32`, by entry.
    large: BTreeMap<u64, u64>,
    /// Chunk files held.
    len: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    /// (entry, size); in ascending order of entry once sealed.
    Sparse(Vec<(u64, u64)>),
    /// A size (or a mark) for each entry.
    Dense(Vec<u32>),
}

impl ChunkSizes {
    /// No chunk file yet, of a shard of `slots` entries.
    pub fn new(slots: u64) -> ChunkSizes {
        ChunkSizes {
            slots,
            held: Held::Sparse(Vec::new()),
            large: BTreeMap::new(),
            len: 0,
        }
    }

    /// Sizes from (entry, size) pairs, in any order (`None`: an entry twice or out of range).
    pub fn from_pairs(slots: u64, pairs: impl IntoIterator<Item = (u64, u64)>) -> Option<ChunkSizes> {
        let mut sizes = ChunkSizes::new(slots);
        for (index, size) in pairs {
            if !sizes.insert(index, size) {
                return None;
            }
        }
        sizes.seal().then_some(sizes)
    }

    /// Hold the chunk file of entry `index`; false (and nothing held) if the entry is out of
    /// range or held already (in a sparse list, a repeat is found when sealed).
    pub fn insert(&mut self, index: u64, size: u64) -> bool {
        if index >= self.slots {
            return false;
        }
        if let Held::Sparse(list) = &self.held {
            if (list.len() as u64).saturating_mul(8) >= self.slots && !self.densify() {
                return false;
            }
        }
        match &mut self.held {
            Held::Sparse(list) => list.push((index, size)),
            Held::Dense(table) => {
                let Some(slot) = usize::try_from(index).ok().and_then(|i| table.get_mut(i)) else {
                    return false;
                };
                if *slot != ABSENT {
                    return false;
                }
                *slot = match u32::try_from(size) {
                    Ok(small) if small < LARGE => small,
                    _ => {
                        self.large.insert(index, size);
                        LARGE
                    }
                };
            }
        }
        self.len += 1;
        true
    }

    /// Done inserting: a sparse list sorted by entry and trimmed (false: an entry came twice).
    pub fn seal(&mut self) -> bool {
        match &mut self.held {
            Held::Sparse(list) => {
                list.sort_unstable_by_key(|(index, _)| *index);
                list.shrink_to_fit();
                list.windows(2).all(|w| w[0].0 != w[1].0)
            }
            Held::Dense(_) => true,
        }
    }

    /// Chunk files held.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// (entry, size) of each chunk file, in ascending order of entry (once sealed).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let (sparse, dense): (&[(u64, u64)], &[u32]) = match &self.held {
            Held::Sparse(list) => (list, &[]),
            Held::Dense(table) => (&[], table),
        };
        let dense = dense
            .iter()
            .enumerate()
            .filter(|(_, size)| **size != ABSENT)
            .map(|(index, size)| {
                let index = index as u64;
                match *size {
                    LARGE => (index, self.large.get(&index).copied().unwrap_or(0)),
                    small => (index, u64::from(small)),
                }
            });
        sparse.iter().copied().chain(dense)
    }

    /// Bytes of the chunk files.
    pub fn total(&self) -> u64 {
        self.iter().fold(0u64, |sum, (_, size)| sum.saturating_add(size))
    }

    /// Bytes of memory the record takes (its allocations, not counting `large`'s few).
    pub fn held_bytes(&self) -> u64 {
        let allocated = match &self.held {
            Held::Sparse(list) => list.capacity() * std::mem::size_of::<(u64, u64)>(),
            Held::Dense(table) => table.capacity() * std::mem::size_of::<u32>(),
        };
        allocated as u64 + std::mem::size_of::<Self>() as u64
    }

    /// The sparse list made a dense table (false: it held an entry twice; true also when the
    /// table would not fit in memory's addresses, the list kept).
    fn densify(&mut self) -> bool {
        let Ok(slots) = usize::try_from(self.slots) else {
            return true;
        };
        let Held::Sparse(list) = std::mem::replace(&mut self.held, Held::Dense(vec![ABSENT; slots])) else {
            return true;
        };
        self.len = 0;
        list.into_iter().all(|(index, size)| self.insert(index, size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_and_dense_give_the_same_files_in_entry_order() {
        let slots: u64 = 1000;
        for n in [0u64, 3, 124, 126, 1000] {
            // Every k-th entry, inserted in descending order, one of them too large for u32.
            let step = slots.checked_div(n).unwrap_or(1);
            let pairs: Vec<(u64, u64)> = (0..n)
                .map(|i| i * step)
                .rev()
                .map(|index| (index, if index == step { 5 << 32 } else { index % 7 }))
                .collect();
            let sizes = ChunkSizes::from_pairs(slots, pairs.clone()).unwrap();
            let mut want = pairs;
            want.sort();
            assert_eq!(sizes.iter().collect::<Vec<_>>(), want, "n={n}");
            assert_eq!(sizes.len(), n);
            assert_eq!(sizes.total(), want.iter().map(|p| p.1).sum::<u64>());
        }
    }

    #[test]
    fn a_full_shard_takes_four_bytes_an_entry() {
        let slots = 1 << 16;
        let sizes = ChunkSizes::from_pairs(slots, (0..slots).map(|i| (i, 16))).unwrap();
        let per_file = sizes.held_bytes() as f64 / slots as f64;
        assert!(per_file <= 4.01, "{per_file} bytes a chunk file");
        // A sparse shard keeps what it holds, not a table of every entry.
        let few = ChunkSizes::from_pairs(slots, [(7, 1), (9000, 2)]).unwrap();
        assert!(few.held_bytes() < 200, "{} bytes", few.held_bytes());
    }

    #[test]
    fn repeats_and_entries_out_of_range_are_refused() {
        assert_eq!(ChunkSizes::from_pairs(10, [(3, 1), (3, 2)]), None, "sparse repeat");
        assert_eq!(ChunkSizes::from_pairs(10, [(10, 1)]), None, "out of range");
        let dense_repeat = (0..8).map(|i| (i, 1)).chain([(2, 1)]);
        assert_eq!(ChunkSizes::from_pairs(8, dense_repeat), None, "dense repeat");
    }
}
