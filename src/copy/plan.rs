//! What a copy does and which part copies it: units of work (a shard, a file outside every
//! chunk tree, a destination shard to pack) and the cut of `--part K/N`.
//!
//! The units are never all known at once (see `walk`): they come in batches (a directory's
//! listing, an array's stored shards, a row of destination shards), in an order every machine
//! sees alike. The [`Cutter`] deals each batch out as it comes, largest unit first (equal sizes
//! in name order), each to the part that has the fewest bytes so far (ties to the lowest
//! part), the loads carried from batch to batch. Each machine makes the same deals from the
//! same listings, so N machines given K = 0..N-1 copy disjoint sets whose union is the whole,
//! with no coordination; and as in any such list scheduling, the parts end within the largest
//! unit of each other, whatever the batches.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use std::sync::Arc;

use anyhow::Result;
use bytes::Bytes;

use super::pack::PackUnit;
use crate::view::{Node, ShardUnit};

/// Files whose bytes say what the hierarchy is: a DEST holding other bytes under these names
/// holds another hierarchy.
const METADATA_NAMES: [&str; 5] = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];

/// Whether the file at `path` is a metadata document (see [`METADATA_NAMES`]).
pub fn is_metadata_path(path: &str) -> bool {
    METADATA_NAMES.contains(&path.rsplit('/').next().unwrap_or(path))
}

/// One unit of work.
#[derive(Debug, Clone)]
pub enum Unit {
    /// A file outside the chunk trees of sharded arrays (metadata, unsharded chunks, …).
    File { path: String, node: Node },
    /// A stored shard: its chunk files.
    Shard(ShardUnit),
    /// A metadata document with the bytes the copy writes (`--shard`: a packed array's, or a
    /// group's whose consolidated entries changed).
    Doc { path: String, bytes: Bytes },
    /// A shard to pack (`--shard`).
    Pack(Arc<PackUnit>),
}

impl Unit {
    /// Stored bytes, for balancing parts and for progress.
    pub fn size(&self) -> u64 {
        match self {
            Unit::File { node, .. } => node.size,
            Unit::Shard(shard) => shard.size,
            Unit::Doc { bytes, .. } => bytes.len() as u64,
            Unit::Pack(pack) => pack.chunk_bytes(),
        }
    }

    /// Keys of the source it holds in memory: its chunk files' when packing, else one.
    pub fn entries(&self) -> u64 {
        match self {
            Unit::Pack(pack) => pack.chunks.len(),
            _ => 1,
        }
    }

    /// The path (a file's) or store key (a shard's) that names the unit.
    pub fn name(&self) -> &str {
        match self {
            Unit::File { path, .. } | Unit::Doc { path, .. } => path,
            Unit::Shard(shard) => &shard.key,
            Unit::Pack(pack) => &pack.key,
        }
    }

    /// Whether this is a metadata document (see [`METADATA_NAMES`]).
    pub fn is_metadata(&self) -> bool {
        match self {
            Unit::File { path, .. } | Unit::Doc { path, .. } => is_metadata_path(path),
            Unit::Shard(_) | Unit::Pack(_) => false,
        }
    }
}

/// `--part K/N`: K counts from 0, as Slurm array indexes and Kubernetes completion indexes do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub k: usize,
    pub n: usize,
}

impl Part {
    pub const WHOLE: Part = Part { k: 0, n: 1 };

    pub fn parse(s: &str) -> Result<Part, String> {
        let bad = || format!("--part {s}: expected K/N, e.g. 0/4 (K counts from 0 and is below N)");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (usize, usize) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if n == 0 || k >= n {
            return Err(bad());
        }
        Ok(Part { k, n })
    }

    pub fn is_whole(&self) -> bool {
        self.n == 1
    }
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// The deal of units to parts (see the module notes).
#[derive(Debug)]
pub struct Cutter {
    part: Part,
    /// The lightest part on top: (bytes so far, part), smallest first.
    loads: BinaryHeap<Reverse<(u64, usize)>>,
}

impl Cutter {
    pub fn new(part: Part) -> Cutter {
        Cutter {
            part,
            loads: (0..part.n).map(|p| Reverse((0, p))).collect(),
        }
    }

    /// The units of `batch` that are this part's, in name order.
    pub fn cut(&mut self, mut batch: Vec<Unit>) -> Vec<Unit> {
        // Largest first; equal sizes in name order, so every machine deals alike.
        batch.sort_by(|a, b| b.size().cmp(&a.size()).then_with(|| a.name().cmp(b.name())));
        let mut mine = Vec::new();
        for unit in batch {
            let Some(Reverse((load, lightest))) = self.loads.pop() else {
                break;
            };
            self.loads
                .push(Reverse((load.saturating_add(unit.size().max(1)), lightest)));
            if lightest == self.part.k {
                mine.push(unit);
            }
        }
        mine.sort_by(|a, b| a.name().cmp(b.name()));
        mine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(key: &str, size: u64) -> Unit {
        Unit::Shard(ShardUnit {
            array_dir: "a".into(),
            coords: vec![],
            key: key.into(),
            size,
        })
    }

    fn units() -> Vec<Unit> {
        let mut units: Vec<Unit> = (0..97)
            .map(|i| shard(&format!("a/c/{i}"), 1000 + (i * 7919) % 5000))
            .collect();
        units.push(Unit::File {
            path: "a/zarr.json".into(),
            node: Node::unstored(300),
        });
        units.push(shard("a/c/empty", 0));
        units
    }

    /// The units dealt in batches of `batch` (as a walk gives them), part `part`'s.
    fn cut(units: &[Unit], part: Part, batch: usize) -> Vec<String> {
        let mut cutter = Cutter::new(part);
        units
            .chunks(batch)
            .flat_map(|b| cutter.cut(b.to_vec()))
            .map(|u| u.name().to_string())
            .collect()
    }

    #[test]
    fn parts_are_disjoint_and_make_the_whole() {
        let units = units();
        for batch in [1, 10, 1000] {
            for n in [1, 2, 3, 7, 200] {
                let mut seen: Vec<String> = (0..n).flat_map(|k| cut(&units, Part { k, n }, batch)).collect();
                seen.sort();
                let mut all: Vec<String> = units.iter().map(|u| u.name().to_string()).collect();
                all.sort();
                assert_eq!(seen, all, "n={n}, batch={batch}");
            }
        }
    }

    #[test]
    fn parts_are_balanced_by_bytes_whatever_the_batches() {
        let units = units();
        let size = |name: &String| units.iter().find(|u| u.name() == name).map_or(0, Unit::size);
        let total: u64 = units.iter().map(Unit::size).sum();
        let largest = units.iter().map(Unit::size).max().unwrap();
        for batch in [1, 7, 1000] {
            let loads: Vec<u64> = (0..4)
                .map(|k| cut(&units, Part { k, n: 4 }, batch).iter().map(size).sum())
                .collect();
            for load in &loads {
                assert!(load.abs_diff(total / 4) <= largest, "{loads:?}");
            }
        }
    }

    #[test]
    fn a_batch_comes_out_in_name_order() {
        let units = units();
        let names = cut(&units, Part::WHOLE, units.len());
        assert!(names.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn part_parsing() {
        assert_eq!(Part::parse("0/4"), Ok(Part { k: 0, n: 4 }));
        assert_eq!(Part::parse("3/4"), Ok(Part { k: 3, n: 4 }));
        for bad in ["4/4", "1/0", "x/2", "2", "-1/3", ""] {
            assert!(Part::parse(bad).unwrap_err().contains("K/N"), "{bad}");
        }
    }
}
