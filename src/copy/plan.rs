//! What a copy does, decided before any byte is copied: the view walked once (directories as
//! listed, sharded arrays' chunk trees as their stored shards, see `view::copy_units`), then
//! cut into `--part K/N`.
//!
//! A part is a set of whole units (a shard, or a file outside every chunk tree) balanced by
//! stored bytes: largest first, each to the part that has the fewest bytes so far (ties to the
//! lowest part). The walk sees the same listing on every machine, and the cut depends on
//! nothing else, so N machines given K = 0..N-1 copy disjoint sets whose union is the whole,
//! with no coordination. Every part checks all the metadata of the plan against DEST (so any
//! part refuses a DEST that holds another hierarchy), and part 0 also makes the directories.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::Bytes;

use super::pack::PackUnit;
use crate::view::{CopyListing, Node, ShardUnit, View};

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

/// The whole copy.
#[derive(Debug, Default)]
pub struct Plan {
    pub units: Vec<Unit>,
    /// Every directory of the view outside chunk trees, parents first.
    pub dirs: Vec<String>,
    /// `--shard`: the arrays packed (by directory) and their shard shapes.
    pub packed: std::collections::BTreeMap<String, Vec<u64>>,
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

/// Directories listed at once while walking.
const WALK_LISTINGS: usize = 16;

/// Walk the whole view, a level at a time with the directories of a level listed together
/// (parents before children). With `whole`, chunk trees are walked too, file by file
/// (`--shard` needs every chunk file); else a sharded array's chunk tree is taken as its
/// stored shards.
pub async fn walk(view: &Arc<View>, whole: bool) -> Result<Plan> {
    use futures::{StreamExt, TryStreamExt};
    let mut plan = Plan::default();
    let mut level = vec![String::new()];
    while !level.is_empty() {
        let listings: Vec<CopyListing> = futures::stream::iter(level)
            .map(|dir| {
                let view = view.clone();
                super::on_task(async move {
                    let listing = view.list_for_copy(&dir, whole).await;
                    let shown = if dir.is_empty() { "the root" } else { &dir };
                    listing.with_context(|| format!("cannot list {shown}"))
                })
            })
            .buffered(WALK_LISTINGS)
            .try_collect()
            .await?;
        level = Vec::new();
        for listing in listings {
            plan.units
                .extend(listing.files.into_iter().map(|(path, node)| Unit::File { path, node }));
            plan.units.extend(listing.shards.into_iter().map(Unit::Shard));
            plan.dirs.extend(listing.dirs.iter().cloned());
            level.extend(listing.dirs);
        }
    }
    if plan.units.is_empty() && plan.dirs.is_empty() {
        bail!("nothing to copy: the source shows no file or directory");
    }
    Ok(plan)
}

/// The indexes of the units that make part `part`, in name order, metadata last (so that a
/// part interrupted early leaves chunks without metadata rather than metadata without chunks).
pub fn cut(units: &[Unit], part: Part) -> Vec<usize> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    // Largest first; equal sizes in name order, so every machine orders alike.
    order.sort_by(|&a, &b| {
        units[b]
            .size()
            .cmp(&units[a].size())
            .then_with(|| units[a].name().cmp(units[b].name()))
    });
    // The lightest part on top: (bytes so far, part), smallest first.
    let mut loads: BinaryHeap<Reverse<(u64, usize)>> = (0..part.n).map(|p| Reverse((0, p))).collect();
    let mut mine = Vec::new();
    for i in order {
        let Some(Reverse((load, lightest))) = loads.pop() else {
            break;
        };
        loads.push(Reverse((load.saturating_add(units[i].size().max(1)), lightest)));
        if lightest == part.k {
            mine.push(i);
        }
    }
    mine.sort_by(|&a, &b| (units[a].is_metadata(), units[a].name()).cmp(&(units[b].is_metadata(), units[b].name())));
    mine
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

    #[test]
    fn parts_are_disjoint_and_make_the_whole() {
        let units = units();
        for n in [1, 2, 3, 7, 200] {
            let mut seen = vec![0; units.len()];
            for k in 0..n {
                for i in cut(&units, Part { k, n }) {
                    seen[i] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "n={n}: {seen:?}");
        }
    }

    #[test]
    fn parts_are_balanced_by_bytes() {
        let units = units();
        let total: u64 = units.iter().map(Unit::size).sum();
        let loads: Vec<u64> = (0..4)
            .map(|k| cut(&units, Part { k, n: 4 }).iter().map(|&i| units[i].size()).sum())
            .collect();
        let largest = units.iter().map(Unit::size).max().unwrap();
        for load in &loads {
            assert!(load.abs_diff(total / 4) <= largest, "{loads:?}");
        }
    }

    #[test]
    fn metadata_comes_last_and_names_in_order() {
        let units = units();
        let mine = cut(&units, Part::WHOLE);
        assert!(units[*mine.last().unwrap()].is_metadata());
        let names: Vec<&str> = mine[..mine.len() - 1].iter().map(|&i| units[i].name()).collect();
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
