//! Finding the stored shards below a chunk directory: a walk of the shard directories, each
//! level's directories listed at once; or, on a store that cannot be listed, a read of the
//! index of every shard of the grid there (a few at a time, at most `--max-probe-shards`).

use super::read_ahead::INDEX_FETCHES;
use super::{ShardError, ShardedArray};
use crate::store::EntryKind;
use crate::zarr::grid::box_coords;

/// Index reads in flight while probing.
const SHARD_PROBES: usize = 16;

impl ShardedArray {
    /// Coordinates of the stored shards whose leading coordinates are `shard_prefix` (a walk of
    /// the shard directories below it, each level's directories listed concurrently; `/`
    /// separators).
    pub(super) async fn shards_under(&self, shard_prefix: &[u64]) -> Result<Vec<Vec<u64>>, ShardError> {
        if !self.store.capabilities().listable {
            return self.probe_shards(shard_prefix).await;
        }
        Ok(self
            .walk_shards(shard_prefix)
            .await?
            .into_iter()
            .map(|(c, _)| c)
            .collect())
    }

    /// Every stored shard of the array with its stored size, for work planned over whole
    /// shards (`zarrfs copy --part`): one walk of the shard directories (or one listing of the
    /// array directory with `.` separators), and no index read. On a store that cannot be
    /// listed, the grid's shards are probed, and a grid beyond `max_probe_shards` is an error:
    /// a plan must not miss shards silently.
    pub async fn stored_shards_sized(&self) -> Result<Vec<(Vec<u64>, u64)>, ShardError> {
        if !self.store.capabilities().listable {
            let (_, _, count) = self.probe_box(&[]);
            let limit = self.options.max_probe_shards;
            if count > limit {
                return Err(ShardError::Unlistable {
                    key: self.prefix.clone(),
                    shards: count,
                    limit,
                });
            }
            let mut found = Vec::new();
            for coords in self.probe_shards(&[]).await? {
                let size = match self.top_index_listed(&self.shard_key(&coords)).await {
                    Ok(Some(index)) => index.shard_size,
                    _ => 0,
                };
                found.push((coords, size));
            }
            return Ok(found);
        }
        if self.ndim() == 0 {
            let key = self.shard_key(&[]);
            let meta = self.store.head(&key).await?;
            return Ok(meta.map(|m| (Vec::new(), m.size)).into_iter().collect());
        }
        if self.encoding.separator() != '/' {
            let mut found = self.shards_in(&self.store.list_dir(&self.prefix).await?);
            found.sort_unstable();
            return Ok(found);
        }
        self.walk_shards(&[]).await
    }

    /// The shards below `shard_prefix` with their sizes, from a walk of the shard directories
    /// (`/` separators, a listable store).
    async fn walk_shards(&self, shard_prefix: &[u64]) -> Result<Vec<(Vec<u64>, u64)>, ShardError> {
        use futures::{StreamExt, TryStreamExt};
        let mut found = Vec::new();
        let mut level = vec![shard_prefix.to_vec()];
        while !level.is_empty() {
            let listed: Vec<_> = futures::stream::iter(level)
                .map(|prefix| async move {
                    let entries = self.store.list_dir(&self.shard_dir(&prefix)).await?;
                    Ok::<_, ShardError>((prefix, entries))
                })
                .buffered(INDEX_FETCHES)
                .try_collect()
                .await?;
            level = Vec::new();
            for (prefix, entries) in listed {
                let leaf = prefix.len() + 1 == self.ndim();
                for entry in entries {
                    let is_file = matches!(entry.kind, EntryKind::File { .. });
                    let Some(c) = self
                        .encoding
                        .parse_level(prefix.len(), &entry.name)
                        .filter(|_| is_file == leaf)
                    else {
                        continue;
                    };
                    let mut coords = prefix.clone();
                    coords.push(c);
                    if let (true, EntryKind::File { size }) = (leaf, &entry.kind) {
                        self.listed_shard_size(&entry.kind);
                        found.push((coords, *size));
                    } else {
                        level.push(coords);
                    }
                }
            }
        }
        found.sort_unstable();
        Ok(found)
    }

    /// The stored shards whose leading coordinates are `shard_prefix`, on a store that cannot
    /// be listed: the index of every shard of the grid there is read (a few at a time; a
    /// missing shard is one 404, and found indexes stay cached for what follows). Beyond
    /// `max_probe_shards` candidates nothing is probed and the listing is empty, with a
    /// warning.
    pub(super) async fn probe_shards(&self, shard_prefix: &[u64]) -> Result<Vec<Vec<u64>>, ShardError> {
        use futures::StreamExt;
        let (lo, hi, count) = self.probe_box(shard_prefix);
        let limit = self.options.max_probe_shards;
        if count > limit {
            tracing::warn!(
                array = %self.prefix,
                shards = count,
                "the store cannot be listed and this directory spans more than --max-probe-shards {limit} shards: not probing them, so it lists nothing (its chunks can still be opened by name)"
            );
            return Ok(Vec::new());
        }
        let probes = futures::stream::iter(box_coords(&lo, &hi))
            .map(|coords| async move {
                let key = self.shard_key(&coords);
                if !self.index_is_fresh(&key) {
                    super::ShardStats::add(&self.options.stats.probes);
                }
                let found = self.top_index_listed(&key).await;
                (coords, found)
            })
            .buffered(SHARD_PROBES)
            .collect::<Vec<_>>()
            .await;
        let mut found = Vec::new();
        for (coords, probe) in probes {
            match probe {
                Ok(Some(_)) | Err(ShardError::Corrupt { .. }) => found.push(coords),
                Ok(None) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// The box of shard coordinates of the grid whose leading coordinates are `shard_prefix`,
    /// and how many shards it holds.
    pub(super) fn probe_box(&self, shard_prefix: &[u64]) -> (Vec<u64>, Vec<u64>, u64) {
        let grid = (0..self.ndim()).map(|d| self.shards_along(d));
        let (mut lo, mut hi) = (
            shard_prefix.to_vec(),
            shard_prefix.iter().map(|c| c + 1).collect::<Vec<_>>(),
        );
        for n in grid.skip(shard_prefix.len()) {
            lo.push(0);
            hi.push(n);
        }
        let count = hi.iter().zip(&lo).map(|(h, l)| h.saturating_sub(*l)).product::<u64>();
        (lo, hi, count)
    }
}
