//! Listing the chunk tree of a sharded array.
//!
//! With `/` separators the chunk keys form directories. Every level is exact: a directory
//! exists, and is listed, exactly when some present inner chunk lies below it. Its shards are
//! found by walking the shard directories under the matching shard prefix, and each candidate
//! inner chunk is located through the (cached) shard indexes. (Listing prefix directories
//! from shard existence alone would be cheaper, but then a directory could "exist" while
//! holding nothing, which breaks clients that create a directory they believe missing.)
//! With `.` separators every chunk file sits in the array directory itself, listed shard by
//! shard. On a store that cannot be listed (a web server without WebDAV or index pages), the
//! shards of a directory are found by reading the index of each shard of the grid there, at
//! most `max_probe_shards` of them; beyond that a directory above the last level shows every
//! coordinate of the next level unverified (such stores are read-only, so a directory shown
//! that holds nothing misleads no writer), and the last level lists nothing, with a warning.

use super::{ChunkLocation, ShardError, ShardedArray};
use crate::store::{DirEntry, EntryKind};
use crate::zarr::grid::{box_coords, BoxCoords};
use crate::zarr::key_encoding::{ChunkKeyEncoding, Separator};

pub use crate::store::object::DEFAULT_MAX_PROBE_SHARDS;

fn file(name: String, size: u64, mtime_ns: Option<i128>) -> DirEntry {
    DirEntry::file(name, size, mtime_ns)
}

impl ShardedArray {
    fn slash(&self) -> bool {
        self.encoding.separator() == '/'
    }

    /// Store prefix of the directory holding shards whose leading coordinates are `shard_prefix`
    /// (only meaningful with `/` separators).
    pub(super) fn shard_dir(&self, shard_prefix: &[u64]) -> String {
        format!("{}{}", self.prefix, self.encoding.dir_of(shard_prefix))
    }

    pub(super) fn shard_prefix_of(&self, prefix: &[u64]) -> Vec<u64> {
        prefix.iter().enumerate().map(|(d, &i)| self.shard_of(d, i)).collect()
    }

    pub(super) fn prefix_in_grid(&self, prefix: &[u64]) -> bool {
        prefix.len() < self.ndim() && prefix.iter().zip(&self.inner_grid).all(|(i, g)| i < g)
    }

    /// The inner coordinates along `dim` that shard coordinate `s` covers, clipped to the grid.
    pub(super) fn covered(&self, dim: usize, s: u64) -> std::ops::Range<u64> {
        let grid = self.inner_grid.get(dim).copied().unwrap_or(0);
        let span = self.span(dim, s);
        span.start.min(grid)..span.end.min(grid)
    }

    /// Whether the chunk directory with these leading coordinates exists (`/` separators):
    /// exactly when some present inner chunk has them as leading coordinates.
    pub async fn dir_exists(&self, prefix: &[u64]) -> Result<bool, ShardError> {
        if !self.slash() || !self.prefix_in_grid(prefix) {
            return Ok(false);
        }
        if !self.exact_prefixes() {
            let shard_dir = self.shard_dir(&self.shard_prefix_of(prefix));
            return Ok(!self.store.list_dir(&shard_dir).await?.is_empty());
        }
        let shard_prefix = self.shard_prefix_of(prefix);
        if !self.store.capabilities().listable && self.probe_box(&shard_prefix).2 > self.options.max_probe_shards {
            // Too many shards to look for: the directory is taken to exist (it is inside the
            // grid), so that its chunks can be opened by name.
            return Ok(true);
        }
        for shard in self.shards_under(&shard_prefix).await? {
            // The first chunk found settles it: a lookup of a full directory costs one.
            match self
                .present_in_shard(&shard, self.slice_of_shard(&shard, prefix), true)
                .await
            {
                Ok(present) if present.is_empty() => {}
                Ok(_) => return Ok(true),
                // Unreadable: it may hold chunks; shown, and its reads fail with EIO.
                Err(ShardError::Corrupt { .. }) => return Ok(true),
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// The inner chunks of a shard whose leading coordinates are `prefix`, in C order.
    fn slice_of_shard(&self, shard: &[u64], prefix: &[u64]) -> BoxCoords {
        let (mut lo, mut hi) = (Vec::with_capacity(self.ndim()), Vec::with_capacity(self.ndim()));
        for (d, &s) in shard.iter().enumerate().take(self.ndim()) {
            let covered = self.covered(d, s);
            match prefix.get(d) {
                Some(&p) if covered.contains(&p) => {
                    lo.push(p);
                    hi.push(p + 1);
                }
                Some(_) => return BoxCoords::empty(),
                None => {
                    lo.push(covered.start);
                    hi.push(covered.end);
                }
            }
        }
        BoxCoords::new(&lo, &hi)
    }

    /// Chunk-tree entries of the array directory itself.
    pub async fn list_array_dir(&self) -> Result<Vec<DirEntry>, ShardError> {
        match self.encoding {
            ChunkKeyEncoding::Default(Separator::Slash) if self.ndim() > 0 => {
                let exists = self.dir_exists(&[]).await?;
                let top = self.encoding.top_dir().filter(|_| exists);
                Ok(top.map(DirEntry::dir).into_iter().collect())
            }
            ChunkKeyEncoding::V2(Separator::Slash) | ChunkKeyEncoding::Draft(Separator::Slash) if self.ndim() > 0 => {
                self.list_chunk_dir(&[]).await
            }
            _ => self.list_flat().await,
        }
    }

    /// Entries of the chunk directory with leading coordinates `prefix` (`/` separators): the
    /// next coordinates of the present inner chunks below it, as files at the last level and
    /// as directories above. Exact at every level, read from the (cached) shard indexes.
    pub async fn list_chunk_dir(&self, prefix: &[u64]) -> Result<Vec<DirEntry>, ShardError> {
        if !self.slash() || !self.prefix_in_grid(prefix) {
            return Ok(Vec::new());
        }
        let dim = prefix.len();
        let leaf = dim + 1 == self.ndim();
        self.read_ahead_after(prefix);
        if !leaf && !self.exact_prefixes() {
            return self.list_prefix_dir_from_shards(prefix).await;
        }
        if !leaf && !self.store.capabilities().listable {
            // Too many shards to look for below: every coordinate of the next level is shown
            // (the source is read-only; a walk goes on down, where each directory spans fewer
            // shards).
            let next = self.inner_grid[dim];
            let limit = self.options.max_probe_shards;
            if self.probe_box(&self.shard_prefix_of(prefix)).2 > limit && next <= limit {
                let name = |i| self.encoding.level_name(dim, i);
                return Ok((0..next).map(|i| DirEntry::dir(name(i))).collect());
            }
        }
        if leaf {
            return self.list_leaf_dir(prefix).await;
        }
        let shards = self.shards_under(&self.shard_prefix_of(prefix)).await?;
        let mut children = std::collections::BTreeSet::new();
        for shard in shards {
            // Above the last level, each child this shard covers is settled by the first chunk
            // found below it: a listing of the top chunk directory of a full array looks at one
            // chunk per child and shard, not at every chunk of the array.
            let Some(&s) = shard.get(dim) else {
                continue;
            };
            let mut below = prefix.to_vec();
            below.push(0);
            for child in self.covered(dim, s) {
                if children.contains(&child) {
                    continue;
                }
                below[dim] = child;
                match self
                    .present_in_shard(&shard, self.slice_of_shard(&shard, &below), true)
                    .await
                {
                    Ok(present) if present.is_empty() => {}
                    // An unreadable shard above the last level: its directories are shown
                    // (their files then fail with EIO); at the last level the listing fails.
                    Ok(_) | Err(ShardError::Corrupt { .. }) => {
                        children.insert(child);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(children
            .into_iter()
            .map(|i| DirEntry::dir(self.encoding.level_name(dim, i)))
            .collect())
    }

    /// The chunk files of the last level of the chunk tree: in the order of their
    /// coordinates when they are named by them (which is the order of their names as decimal
    /// numbers), else in the order of their names. Every shard's index is needed: they are
    /// fetched concurrently first (see `leaf_pages` for a listing a page at a time).
    async fn list_leaf_dir(&self, prefix: &[u64]) -> Result<Vec<DirEntry>, ShardError> {
        self.note_leaf_listing();
        let mut cursor = self.leaf_cursor(prefix).await?;
        self.fetch_indexes(self.shards_left(&cursor)).await;
        let mut files = Vec::new();
        while let Some(page) = self.leaf_page(&mut cursor).await? {
            files.extend(page);
        }
        if !self.leaf_named_by_number(prefix) {
            files.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(files)
    }

    /// Which of `chunks` (inner chunks of the stored shard at `shard`) are present, with their
    /// sizes and the shard's modification time (only the first found, if `first`). With one
    /// level of sharding that is one look at the shard's (cached) index for all of them; nested
    /// shards are located chunk by chunk.
    pub(super) async fn present_in_shard(
        &self,
        shard: &[u64],
        chunks: impl Iterator<Item = Vec<u64>>,
        first: bool,
    ) -> Result<Vec<(Vec<u64>, (u64, Option<i128>))>, ShardError> {
        let mut present = Vec::new();
        let mut chunks = chunks.peekable();
        if chunks.peek().is_none() {
            return Ok(present);
        }
        if self.layout.levels.len() != 1 {
            for coords in chunks {
                if let Some(loc) = self.locate(&coords).await? {
                    present.push((coords, (loc.nbytes, loc.mtime_ns)));
                    if first {
                        break;
                    }
                }
            }
            return Ok(present);
        }
        let Some(index) = self.top_index_listed(&self.shard_key(shard)).await? else {
            return Ok(present);
        };
        let slot_of = self.slot_finder(shard);
        for coords in chunks {
            let range = self
                .in_grid(&coords)
                .then(|| slot_of(&coords))
                .flatten()
                .and_then(|slot| index.index.get(slot));
            if let Some(range) = range {
                present.push((coords, (range.nbytes, index.mtime_ns)));
                if first {
                    break;
                }
            }
        }
        Ok(present)
    }

    /// Where each inner chunk of the stored `shard` is in its index (one level of sharding).
    /// A shard that starts on an inner chunk's edge (always, but for rectilinear grids that do
    /// not) is a box of chunks in its level's order: a subtraction and an index, with nothing
    /// allocated per chunk (a listing asks for every chunk of a directory).
    fn slot_finder<'a>(&'a self, shard: &'a [u64]) -> impl Fn(&[u64]) -> Option<u64> + 'a {
        let inner = &self.layout.inner_chunk_shape;
        let first_chunk = self.layout.shard_start(shard).and_then(|start| {
            let aligned = start
                .iter()
                .zip(inner)
                .map(|(&s, &c)| (c > 0 && s % c == 0).then(|| s / c));
            aligned.collect::<Option<Vec<u64>>>()
        });
        let level = self.layout.level0(shard).filter(|l| l.chunk_shape == *inner);
        move |coords: &[u64]| match (&first_chunk, &level) {
            (Some(first), Some(level)) if first.len() == coords.len() && coords.len() <= 8 => {
                let mut within = [0u64; 8];
                for (d, (&c, &f)) in coords.iter().zip(first).enumerate() {
                    within[d] = c.checked_sub(f)?;
                }
                level.index_of(&within[..coords.len()])
            }
            _ => {
                let loc = self.layout.locate(coords).filter(|loc| loc.shard_coords == shard)?;
                loc.per_level_index.first().copied()
            }
        }
    }

    fn exact_prefixes(&self) -> bool {
        self.options.exact_prefix_dirs
            || self.written.load(std::sync::atomic::Ordering::Relaxed)
            || !self.store.capabilities().listable
    }

    /// A prefix directory listed from shard existence alone (one `list_dir`): each stored shard
    /// coordinate `s` contributes the inner coordinates it covers.
    async fn list_prefix_dir_from_shards(&self, prefix: &[u64]) -> Result<Vec<DirEntry>, ShardError> {
        let dim = prefix.len();
        let listed = self
            .store
            .list_dir(&self.shard_dir(&self.shard_prefix_of(prefix)))
            .await?;
        let mut children: Vec<u64> = listed
            .iter()
            .filter(|e| e.kind == EntryKind::Dir)
            .filter_map(|e| self.encoding.parse_level(dim, &e.name))
            .flat_map(|s| self.covered(dim, s))
            .collect();
        children.sort_unstable();
        children.dedup();
        let name = |i| self.encoding.level_name(dim, i);
        Ok(children.into_iter().map(|i| DirEntry::dir(name(i))).collect())
    }

    /// Every chunk file of an array whose chunk keys have no directories.
    async fn list_flat(&self) -> Result<Vec<DirEntry>, ShardError> {
        let mut out = Vec::new();
        let shards = if self.store.capabilities().listable {
            let entries = self.store.list_dir(&self.prefix).await?;
            self.shards_in(&entries).into_iter().map(|(c, _)| c).collect()
        } else {
            self.probe_shards(&[]).await?
        };
        self.fetch_indexes(&shards).await;
        for shard in shards {
            for (coords, loc) in self.chunks_of_shard(&shard).await? {
                out.push(file(self.encoding.encode(&coords), loc.nbytes, loc.mtime_ns));
            }
        }
        Ok(out)
    }

    /// The shards among the entries of the array directory (`.` separators), with their sizes.
    pub(super) fn shards_in(&self, entries: &[DirEntry]) -> Vec<(Vec<u64>, u64)> {
        entries
            .iter()
            .filter_map(|e| match e.kind {
                EntryKind::File { size } => {
                    self.listed_shard_size(&e.kind);
                    Some((self.encoding.decode(&e.name, self.ndim())?, size))
                }
                EntryKind::Dir => None,
            })
            .collect()
    }

    /// The present inner chunks of one stored shard that lie inside the grid, in C order.
    pub async fn chunks_of_shard(&self, shard: &[u64]) -> Result<Vec<(Vec<u64>, ChunkLocation)>, ShardError> {
        let lo: Vec<u64> = (0..self.ndim()).map(|d| self.covered(d, shard[d]).start).collect();
        let hi: Vec<u64> = (0..self.ndim()).map(|d| self.covered(d, shard[d]).end).collect();
        let mut out = Vec::new();
        for coords in box_coords(&lo, &hi) {
            if let Some(loc) = self.locate(&coords).await? {
                out.push((coords, loc));
            }
        }
        Ok(out)
    }

    /// Coordinates of every stored shard of the array (one recursive listing).
    pub async fn stored_shards(&self) -> Result<Vec<Vec<u64>>, ShardError> {
        let root = match self.encoding {
            ChunkKeyEncoding::Default(_) | ChunkKeyEncoding::Draft(_) => format!("{}c", self.prefix),
            ChunkKeyEncoding::V2(_) => self.prefix.clone(),
        };
        let keys = self.store.list_prefix(&root).await?;
        Ok(keys
            .iter()
            .filter_map(|k| k.strip_prefix(&self.prefix))
            .filter_map(|rel| self.encoding.decode(rel, self.ndim()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use crate::zarr::key_encoding::parse_coord;

    #[test]
    fn canonical_coordinates_only() {
        assert_eq!(parse_coord("0"), Some(0));
        assert_eq!(parse_coord("17"), Some(17));
        for bad in ["", "01", "+1", "-1", "1a", "99999999999999999999999"] {
            assert_eq!(parse_coord(bad), None, "{bad:?}");
        }
    }
}
