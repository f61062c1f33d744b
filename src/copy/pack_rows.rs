//! `--shard`: an array's chunk files gathered into destination shards as its walk lists them,
//! a row of shards at a time, so that no more than a row's chunk files are held at once.
//!
//! The walk (`walk::listings`) lists directories depth first, children in order of their
//! coordinates, and a listing's chunk files are taken in order of theirs: so the chunk files
//! come in ascending order of their first coordinate, a chunk directory (or, for a flat key
//! encoding, the one directory) at a time. A shard is complete when a chunk of a later row of
//! shards (along the first dimension) comes, and is then handed on; the last row when the
//! walk of the array ends. A shard's chunks are packed in the order of their index within it,
//! as `pack` wants them. Of a chunk file only its size is kept, by its entry in the shard's
//! index (`sizes`: 4 bytes a file in a full shard): its path is made again when it is read.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{bail, Result};

use super::pack::{PackUnit, Target};
use super::plan::Unit;
use super::sizes::ChunkSizes;
use crate::store::key::dir_prefix;
use crate::view::Node;

/// The destination shards of one packed array being gathered.
pub struct Rows<'a> {
    /// The array's directory, as a prefix of its files' paths.
    prefix: Arc<str>,
    target: &'a Target,
    /// Shards whose chunks may still come, by coordinates in the shard grid, and their chunks.
    open: BTreeMap<Vec<u64>, ChunkSizes>,
    /// The row (first shard coordinate) of the last chunk taken: rows before it are complete.
    row: u64,
    ready: Vec<Unit>,
    /// The most bytes of chunk records held at once (the shards open and complete, before
    /// `ready` hands them on).
    held_peak: u64,
}

/// Where a chunk file goes: its shard's coordinates and its entry in the shard's index.
type Placed = (Vec<u64>, u64);

impl<'a> Rows<'a> {
    pub fn new(dir: &str, target: &'a Target) -> Rows<'a> {
        Rows {
            prefix: dir_prefix(dir).into(),
            target,
            open: BTreeMap::new(),
            row: 0,
            ready: Vec::new(),
            held_peak: 0,
        }
    }

    /// Take the chunk files of a listing into their shards; give back the other files.
    pub fn add(&mut self, files: Vec<(String, Node)>) -> Result<Vec<(String, Node)>> {
        let mut others = Vec::new();
        let mut chunks = Vec::new();
        for (path, node) in files {
            match self.place(&path) {
                Some(placed) => chunks.push((placed, path, node)),
                None => others.push((path, node)),
            }
        }
        chunks.sort_by(|((sa, ia), _, _), ((sb, ib), _, _)| (sa, ia).cmp(&(sb, ib)));
        let slots = self.target.level.num_chunks();
        for ((shard, index), path, node) in chunks {
            let row = shard.first().copied().unwrap_or(0);
            if row < self.row {
                bail!(
                    "{path}: its chunk comes after chunks of later rows of shards (a name that \
                     is not a coordinate in its shortest form?); cannot pack it"
                );
            }
            if row > self.row {
                self.close_before(row)?;
                self.row = row;
            }
            if !self
                .open
                .entry(shard)
                .or_insert_with(|| ChunkSizes::new(slots))
                .insert(index, node.size)
            {
                bail!("{path}: a second chunk file for its place in its shard; cannot pack it");
            }
        }
        self.held_peak = self.held_peak.max(self.held_bytes());
        Ok(others)
    }

    /// Bytes of chunk records held now: the shards open and those complete not handed on.
    pub fn held_bytes(&self) -> u64 {
        let open: u64 = self.open.values().map(ChunkSizes::held_bytes).sum();
        let ready: u64 = self
            .ready
            .iter()
            .map(|unit| match unit {
                Unit::Pack(pack) => pack.chunks.held_bytes(),
                _ => 0,
            })
            .sum();
        open + ready
    }

    /// The most bytes of chunk records held at once so far.
    pub fn held_peak(&self) -> u64 {
        self.held_peak
    }

    /// The shards complete so far.
    pub fn ready(&mut self) -> Vec<Unit> {
        std::mem::take(&mut self.ready)
    }

    /// Every shard left: the walk of the array has ended.
    pub fn finish(mut self) -> Result<Vec<Unit>> {
        self.close_before(u64::MAX)?;
        let mut units = self.ready;
        for (shard, chunks) in std::mem::take(&mut self.open) {
            units.push(unit(&self.prefix, self.target, &shard, chunks)?);
        }
        Ok(units)
    }

    fn close_before(&mut self, row: u64) -> Result<()> {
        let later = self.open.split_off(&vec![row]);
        let done = std::mem::replace(&mut self.open, later);
        for (shard, chunks) in done {
            self.ready.push(unit(&self.prefix, self.target, &shard, chunks)?);
        }
        Ok(())
    }

    /// The shard and index within it of the chunk file at `path`, if it is one of the array.
    fn place(&self, path: &str) -> Option<Placed> {
        let t = self.target;
        let rel = path.strip_prefix(&*self.prefix)?;
        let coords = t.encoding.decode(rel, t.ndim)?;
        if coords.len() != t.grid.len() || coords.iter().zip(&t.grid).any(|(c, g)| c >= g) {
            return None;
        }
        let per = &t.level.chunks_per_shard;
        let shard: Vec<u64> = coords
            .iter()
            .zip(per)
            .map(|(c, k)| c.checked_div(*k))
            .collect::<Option<_>>()?;
        let within: Vec<u64> = coords
            .iter()
            .zip(per)
            .map(|(c, k)| c.checked_rem(*k))
            .collect::<Option<_>>()?;
        Some((shard, t.level.index_of(&within)?))
    }
}

fn unit(prefix: &Arc<str>, target: &Target, shard: &[u64], mut chunks: ChunkSizes) -> Result<Unit> {
    let key = format!("{prefix}{}", target.encoding.encode(shard));
    if !chunks.seal() {
        bail!("{key}: two chunk files for one place in the shard; cannot pack it");
    }
    Ok(Unit::Pack(Arc::new(PackUnit {
        key,
        chunks,
        prefix: prefix.clone(),
        shard: shard.to_vec(),
        encoding: target.encoding,
        level: target.level.clone(),
    })))
}
