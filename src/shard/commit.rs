//! Writing inner chunks: changes are packed back into their shard by read-modify-write, and
//! the shard is replaced only if it is still the version that was read (a conditional write),
//! so a concurrent writer's update is never lost: a lost race re-reads and re-applies after a
//! short random pause (two mounts that lost to each other must not retry in lockstep), up to
//! [`COMMIT_ATTEMPTS`] times, then reports the conflict.
//!
//! Group commit: each stored shard has a queue. A writer adds its change and, if no commit of
//! that shard is running, starts one. The commit takes everything queued in one shard rewrite,
//! answers every writer of that batch, and repeats while changes keep arriving. Chunk files of
//! one shard closed together therefore cost one rewrite, not one each.
//!
//! A writer on a FUSE thread (beside the runtime, not in a task of it) that starts the commit of
//! one shard commits the first batch (its own change and whatever joined it) itself: a close()
//! then commits right there, without handing over to a runtime worker and back (two thread
//! wake-ups per close, ~8% of a close in the default mode). Elsewhere the commit is a task of its
//! own, which lets writers polled by the same task join its first batch. What
//! arrives meanwhile goes on in a task of its own, so the first writer is not held up by later
//! ones. Should a writer be dropped half way through its batch, a guard hands the queue to a
//! task, so no queue is left stuck. A writer whose changes span several shards starts a task
//! per shard, so they are committed concurrently.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::{ShardError, ShardStats, ShardedArray};
use crate::store::{GetOptions, Precondition, StoreError};
use crate::zarr::shard_pack::{pack, unpack, ShardContent};

/// Read-modify-write attempts before a commit gives up with a conflict. Two mounts rewriting
/// chunks of one shard from four threads each lost 8 races in a row about once a minute (each
/// time a close() failed with ESTALE); with random pauses of up to 32 ms, 24 attempts wait at
/// most about half a second on a local source.
const COMMIT_ATTEMPTS: u32 = 24;

/// Attempts of a commit whose conditional write was lost on the wire (see `commit_shard`).
const TRANSPORT_ATTEMPTS: u32 = 8;

/// The pause before attempt `attempt + 1`: random within [base/2, base] for a base doubling
/// from `first` up to `max`, so writers that lost to each other spread out.
fn retry_pause(attempt: u32, first: Duration, max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let base = first.saturating_mul(1 << attempt.min(16)).min(max);
    // RandomState draws fresh random keys per instance: a random number without a crate.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    let fraction = u32::try_from(hasher.finish() % 1024).unwrap_or(0);
    base / 2 + base * fraction / 2048
}

/// One change: the innermost chunk reached by these per-level indexes, new bytes or removal.
type Change = (Vec<u64>, Option<Bytes>);
type Reply = oneshot::Sender<Result<(), Arc<ShardError>>>;

/// Changes waiting for a shard, and whether a commit task is draining them.
#[derive(Debug, Default)]
struct Queue {
    pending: Vec<(Change, Reply)>,
    running: bool,
}

/// The commit queues of one array, by shard key.
#[derive(Debug, Default)]
pub struct CommitQueues {
    queues: Mutex<HashMap<String, Queue>>,
}

impl CommitQueues {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Queue>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Hands a queue to a task of its own if the writer draining it is dropped half way.
struct DrainGuard(Option<(Arc<ShardedArray>, String)>);

impl Drop for DrainGuard {
    fn drop(&mut self) {
        if let Some((array, shard_key)) = self.0.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { array.drain(shard_key).await });
            }
        }
    }
}

impl ShardedArray {
    /// Store (`Some`) or remove (`None`) the inner chunk at `coords`; returns once the shard
    /// holding it has been committed.
    pub async fn write_chunk(self: &Arc<Self>, coords: &[u64], bytes: Option<Bytes>) -> Result<(), ShardError> {
        self.write_chunks(vec![(coords.to_vec(), bytes)]).await
    }

    /// Store or remove several inner chunks; all are queued at once, so the chunks of one shard
    /// go into a single rewrite of it. Returns once every shard involved has been committed.
    pub async fn write_chunks(self: &Arc<Self>, chunks: Vec<(Vec<u64>, Option<Bytes>)>) -> Result<(), ShardError> {
        let mut located = Vec::with_capacity(chunks.len());
        for (coords, bytes) in chunks {
            let outside = || ShardError::OutsideGrid {
                key: self.shard_key(&coords),
            };
            if !self.in_grid(&coords) {
                return Err(outside());
            }
            let loc = self.layout.locate(&coords).ok_or_else(outside)?;
            located.push((self.shard_key(&loc.shard_coords), (loc.per_level_index, bytes)));
        }
        let mut waits = Vec::with_capacity(located.len());
        let mut start = Vec::new();
        self.written.store(true, std::sync::atomic::Ordering::Relaxed);
        {
            let mut queues = self.commits.lock();
            for (shard_key, change) in located {
                let (reply, done) = oneshot::channel();
                let queue = queues.entry(shard_key.clone()).or_default();
                queue.pending.push((change, reply));
                if !std::mem::replace(&mut queue.running, true) {
                    start.push(shard_key.clone());
                }
                waits.push((shard_key, done));
            }
        }
        match <[String; 1]>::try_from(start) {
            Ok([shard_key]) if crate::sys::threads::beside_runtime() => self.commit_first_batch(shard_key).await,
            Ok(one) => self.spawn_drains(one.into()),
            Err(several) => self.spawn_drains(several),
        }
        for (shard_key, done) in waits {
            match done.await {
                Ok(result) => result.map_err(ShardError::Shared)?,
                Err(_) => return Err(ShardError::Unstable { key: shard_key }),
            }
        }
        Ok(())
    }

    /// Store or remove one inner chunk by a rewrite of its shard of its own, outside the
    /// commit queues (for callers without an `Arc`, such as the [`Store`] impl).
    ///
    /// [`Store`]: crate::store::Store
    pub(super) async fn commit_one(&self, coords: &[u64], bytes: Option<Bytes>) -> Result<(), ShardError> {
        let (shard_key, path) = self.place_in_shard(coords)?;
        self.commit_shard(&shard_key, &[(path, bytes)]).await
    }

    /// Store the inner chunk at `coords` only if it holds nothing now: [`ShardError::Exists`]
    /// otherwise, decided on the shard version the conditional write replaces, so of two
    /// creators (of this mount or another of the store) exactly one wins. Outside the commit
    /// queues, whose batches share one outcome: exclusive creates (`link(2)`) are rare.
    pub async fn create_chunk(&self, coords: &[u64], bytes: Bytes) -> Result<(), ShardError> {
        let (shard_key, path) = self.place_in_shard(coords)?;
        self.rewrite_shard(&shard_key, &[(path, Some(bytes))], true).await
    }

    /// The key of the shard holding the inner chunk at `coords`, and its per-level indexes.
    fn place_in_shard(&self, coords: &[u64]) -> Result<(String, Vec<u64>), ShardError> {
        let outside = || ShardError::OutsideGrid {
            key: self.shard_key(coords),
        };
        let loc = self
            .layout
            .locate(coords)
            .filter(|_| self.in_grid(coords))
            .ok_or_else(outside)?;
        Ok((self.shard_key(&loc.shard_coords), loc.per_level_index))
    }

    /// Remove the directories of an erased shard that are left empty, up to (not including)
    /// the array's directory, as object stores would have them vanish. Stops at the first one
    /// that is not empty.
    async fn prune_dirs(&self, shard_key: &str) {
        let mut dir = shard_key;
        while let Some((parent, _)) = dir.rsplit_once('/') {
            if parent.len() < self.prefix.len() {
                break;
            }
            if self.store.remove_dir(&format!("{parent}/")).await.is_err() {
                break;
            }
            dir = parent;
        }
    }

    /// The key of the stored shard holding the inner chunk at `coords`.
    pub fn shard_key_of(&self, coords: &[u64]) -> Option<String> {
        let loc = self.layout.locate(coords).filter(|_| self.in_grid(coords))?;
        Some(self.shard_key(&loc.shard_coords))
    }

    /// How many inner chunks of the grid the shard holding `coords` can contain.
    pub fn chunks_in_shard_of(&self, coords: &[u64]) -> u64 {
        (0..self.ndim().min(coords.len()))
            .map(|d| {
                let covered = self.covered(d, self.shard_of(d, coords[d]));
                covered.end - covered.start
            })
            .product()
    }

    /// Commit the queues of these shards, each in a task of its own (concurrently).
    fn spawn_drains(self: &Arc<Self>, shard_keys: Vec<String>) {
        for shard_key in shard_keys {
            let array = self.clone();
            tokio::spawn(async move { array.drain(shard_key).await });
        }
    }

    /// Commit batches of queued changes of one shard until none are left.
    async fn drain(self: Arc<Self>, shard_key: String) {
        while let Some(batch) = self.take_batch(&shard_key) {
            self.commit_batch(&shard_key, batch).await;
        }
    }

    /// Commit the first batch of a queue this writer started, here; later batches in a task.
    async fn commit_first_batch(self: &Arc<Self>, shard_key: String) {
        let mut guard = DrainGuard(Some((self.clone(), shard_key.clone())));
        if let Some(batch) = self.take_batch(&shard_key) {
            self.commit_batch(&shard_key, batch).await;
        }
        if let Some(batch) = self.take_batch(&shard_key) {
            let array = self.clone();
            tokio::spawn(async move {
                array.commit_batch(&shard_key, batch).await;
                array.drain(shard_key).await;
            });
        }
        guard.0 = None;
    }

    /// The changes queued for a shard (the queue stays marked as being drained), or, when none
    /// are left, `None` with the queue retired: one step under the lock, so a change queued
    /// meanwhile either is in the batch or finds no drain running and starts one.
    fn take_batch(&self, shard_key: &str) -> Option<Vec<(Change, Reply)>> {
        let mut queues = self.commits.lock();
        let queue = queues.get_mut(shard_key)?;
        if queue.pending.is_empty() {
            queues.remove(shard_key);
            return None;
        }
        Some(std::mem::take(&mut queue.pending))
    }

    /// Commit one batch in one shard rewrite and answer each of its writers.
    async fn commit_batch(&self, shard_key: &str, batch: Vec<(Change, Reply)>) {
        let (changes, replies): (Vec<Change>, Vec<Reply>) = batch.into_iter().unzip();
        let result = self.commit_shard(shard_key, &changes).await.map_err(Arc::new);
        for reply in replies {
            let _ = reply.send(result.clone());
        }
    }

    /// Apply changes to one stored shard: read it, repack, replace it if unchanged meanwhile.
    pub async fn commit_shard(&self, shard_key: &str, changes: &[Change]) -> Result<(), ShardError> {
        let start = std::time::Instant::now();
        let result = self.rewrite_shard(shard_key, changes, false).await;
        self.options.stats.commit_latency.record(start.elapsed());
        result
    }

    /// [`commit_shard`](Self::commit_shard); with `only_new`, refused with
    /// [`ShardError::Exists`] if any changed chunk holds something in the version read.
    async fn rewrite_shard(&self, shard_key: &str, changes: &[Change], only_new: bool) -> Result<(), ShardError> {
        self.written.store(true, std::sync::atomic::Ordering::Relaxed);
        let levels = self.levels_of_key(shard_key)?;
        let levels = levels.as_ref();
        for attempt in 0..COMMIT_ATTEMPTS {
            let current = self.store.get(shard_key, GetOptions::default()).await?;
            let (mut content, condition) = match &current {
                Some(got) => {
                    let content = unpack(&got.bytes, levels).map_err(|e| ShardError::corrupt(shard_key, e))?;
                    (content, Precondition::Version(got.meta.version.clone()))
                }
                None => (ShardContent::default(), Precondition::Absent),
            };
            if only_new && changes.iter().any(|(path, _)| content.get(path).is_some()) {
                return Err(ShardError::Exists {
                    key: shard_key.to_string(),
                });
            }
            for (path, bytes) in changes {
                content
                    .set_checked(levels, path, bytes.clone())
                    .map_err(|e| ShardError::corrupt(shard_key, e))?;
            }
            let packed = pack(&content, levels).map_err(|e| ShardError::corrupt(shard_key, e))?;
            let packed_empty = packed.is_none();
            let written = match packed {
                Some(bytes) => self
                    .store
                    .set_if(shard_key, Bytes::from(bytes), condition)
                    .await
                    .map(drop),
                None if current.is_none() => Ok(()),
                None => self.store.erase_if(shard_key, condition).await,
            };
            self.forget_shard(shard_key);
            match written {
                Ok(()) if packed_empty => {
                    ShardStats::add(&self.options.stats.commits);
                    self.prune_dirs(shard_key).await;
                    return Ok(());
                }
                Ok(()) => {
                    ShardStats::add(&self.options.stats.commits);
                    return Ok(());
                }
                Err(StoreError::Conflict { .. }) => {
                    ShardStats::add(&self.options.stats.conflicts);
                    tracing::debug!(shard_key, attempt, "shard changed during commit; re-reading");
                    tokio::time::sleep(retry_pause(
                        attempt,
                        Duration::from_millis(1),
                        Duration::from_millis(32),
                    ))
                    .await;
                }
                // A conditional write lost on the wire (the client does not retry those itself:
                // it cannot know whether the first one landed). Reading again and re-applying
                // is safe either way: had it landed, the changes are there and are written again
                // over the new version.
                Err(e) if is_transport(&e) && attempt + 1 < TRANSPORT_ATTEMPTS => {
                    tracing::debug!(shard_key, attempt, "commit failed on the wire; re-reading: {e}");
                    tokio::time::sleep(retry_pause(
                        attempt,
                        Duration::from_millis(20),
                        Duration::from_millis(1280),
                    ))
                    .await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ShardError::Unstable {
            key: shard_key.to_string(),
        })
    }
}

/// A remote store's failure to send or answer (its errors carry no OS error kind); a local
/// store's errors (a full disk, permissions) are never retried here.
fn is_transport(e: &StoreError) -> bool {
    matches!(e, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::Other && source.raw_os_error().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_pauses_double_within_their_bound_and_vary() {
        let (first, max) = (Duration::from_millis(1), Duration::from_millis(32));
        for attempt in 0..COMMIT_ATTEMPTS {
            let base = first.saturating_mul(1 << attempt.min(16)).min(max);
            let pause = retry_pause(attempt, first, max);
            assert!(
                pause >= base / 2 && pause <= base,
                "attempt {attempt}: {pause:?} of {base:?}"
            );
        }
        let pauses: std::collections::HashSet<_> = (0..32).map(|_| retry_pause(6, first, max)).collect();
        assert!(pauses.len() > 4, "pauses do not vary: {pauses:?}");
    }
}
