//! Writing inner chunks: changes are packed back into their shard by read-modify-write, and
//! the shard is replaced only if it is still the version that was read (a conditional write),
//! so a concurrent writer's update is never lost: a lost race re-reads and re-applies, a few
//! times, then reports the conflict.
//!
//! Group commit: each stored shard has a queue. A writer adds its change and, if no commit of
//! that shard is running, starts one as a task of its own (so a cancelled caller cannot leave
//! the queue stuck). The task commits everything queued in one shard rewrite, answers every
//! writer of that batch, and repeats while changes keep arriving. Chunk files of one shard
//! closed together therefore cost one rewrite, not one each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::{ShardError, ShardedArray};
use crate::store::{GetOptions, Precondition, StoreError};
use crate::zarr::shard_pack::{pack, unpack, ShardContent};

/// Read-modify-write attempts before a commit gives up with a conflict.
const COMMIT_ATTEMPTS: u32 = 8;

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

impl ShardedArray {
    /// Store (`Some`) or remove (`None`) the inner chunk at `coords`; returns once the shard
    /// holding it has been committed.
    pub async fn write_chunk(self: &Arc<Self>, coords: &[u64], bytes: Option<Bytes>) -> Result<(), ShardError> {
        if !self.in_grid(coords) {
            return Err(ShardError::OutsideGrid {
                key: self.shard_key(coords),
            });
        }
        let loc = self.layout.locate(coords).ok_or_else(|| ShardError::OutsideGrid {
            key: self.shard_key(coords),
        })?;
        let shard_key = self.shard_key(&loc.shard_coords);
        let (reply, done) = oneshot::channel();
        let start = {
            let mut queues = self.commits.lock();
            let queue = queues.entry(shard_key.clone()).or_default();
            queue.pending.push(((loc.per_level_index, bytes), reply));
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            let array = self.clone();
            tokio::spawn(async move { array.drain(shard_key).await });
        }
        match done.await {
            Ok(result) => result.map_err(ShardError::Shared),
            Err(_) => Err(ShardError::Shared(Arc::new(ShardError::Unstable {
                key: self.shard_key(coords),
            }))),
        }
    }

    /// Commit batches of queued changes of one shard until none are left.
    async fn drain(self: Arc<Self>, shard_key: String) {
        loop {
            let batch = {
                let mut queues = self.commits.lock();
                let Some(queue) = queues.get_mut(&shard_key) else {
                    return;
                };
                if queue.pending.is_empty() {
                    queues.remove(&shard_key);
                    return;
                }
                std::mem::take(&mut queue.pending)
            };
            let (changes, replies): (Vec<Change>, Vec<Reply>) = batch.into_iter().unzip();
            let result = self.commit_shard(&shard_key, &changes).await.map_err(Arc::new);
            for reply in replies {
                let _ = reply.send(result.clone());
            }
        }
    }

    /// Apply changes to one stored shard: read it, repack, replace it if unchanged meanwhile.
    pub async fn commit_shard(&self, shard_key: &str, changes: &[Change]) -> Result<(), ShardError> {
        let levels = &self.layout.levels;
        for attempt in 0..COMMIT_ATTEMPTS {
            let current = self.store.get(shard_key, GetOptions::default()).await?;
            let (mut content, condition) = match &current {
                Some(got) => {
                    let content = unpack(&got.bytes, levels).map_err(|e| ShardError::from_zarr(shard_key, e))?;
                    (content, Precondition::Version(got.meta.version.clone()))
                }
                None => (ShardContent::default(), Precondition::Absent),
            };
            for (path, bytes) in changes {
                content
                    .set(path, bytes.clone())
                    .map_err(|e| ShardError::from_zarr(shard_key, e))?;
            }
            let packed = pack(&content, levels).map_err(|e| ShardError::from_zarr(shard_key, e))?;
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
                Ok(()) => return Ok(()),
                Err(StoreError::Conflict { .. }) => {
                    tracing::debug!(shard_key, attempt, "shard changed during commit; re-reading");
                    tokio::time::sleep(Duration::from_millis(1 << attempt.min(6))).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ShardError::Unstable {
            key: shard_key.to_string(),
        })
    }
}
