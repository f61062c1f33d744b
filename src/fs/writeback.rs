//! Opt-in write-back (`--write-back-delay SECONDS`): chunk files are not committed when they
//! are closed. Their bytes stay in the overlay (so reads, lookups and listings see them) and
//! are committed shard by shard, each shard in one rewrite:
//! - when the oldest pending chunk of a shard has waited the delay,
//! - at once when every inner chunk of a shard is pending (a copy has written the whole shard),
//! - on `fsync` of any file, and when the filesystem is unmounted or the daemon is told to stop.
//!
//! What it trades away: `close()` no longer means durable. A crash loses up to the delay of
//! closed writes, and a commit that fails (a conflict beyond the retries, a corrupt shard) can
//! only be logged, or reported to the next `fsync`. What it buys: a copy into the view rewrites
//! each shard once instead of once per chunk.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use super::handles::Sink;
use super::{Fs, FsError, FsResult};
use crate::shard::ShardedArray;
use crate::view::Target;

/// The write-back state of a mount.
#[derive(Debug)]
pub struct WriteBack {
    pub delay: Duration,
    /// Wakes the flusher early (a shard became complete, or a flush was asked for).
    wake: Notify,
    /// Pending chunk files per shard key, to notice complete shards.
    per_shard: std::sync::Mutex<HashMap<String, u64>>,
    /// One write-back pass at a time: two passes (the flusher and an fsync) would otherwise
    /// take the same pending files and commit them twice.
    pass: tokio::sync::Mutex<()>,
}

impl WriteBack {
    pub fn new(delay: Duration) -> Self {
        WriteBack {
            delay,
            wake: Notify::new(),
            per_shard: Default::default(),
            pass: Default::default(),
        }
    }
}

/// A chunk file due for commit: where it goes, its bytes, and the generation they are of.
struct Due {
    path: String,
    array: Arc<ShardedArray>,
    coords: Vec<u64>,
    data: Bytes,
    generation: u64,
}

impl Fs {
    /// Whether closing a file of this sink defers its commit.
    pub(super) fn defers(&self, sink: &Sink) -> bool {
        self.writeback.is_some() && matches!(sink, Sink::Commit(Target::Chunk { .. }))
    }

    /// A chunk file was closed with changes: leave it pending; wake the flusher if its shard is
    /// now complete.
    pub(super) fn defer(&self, path: &str) {
        let Some(wb) = &self.writeback else { return };
        let mut overlay = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = overlay.get_mut(path) else { return };
        if entry.pending.is_some() {
            return;
        }
        let Sink::Commit(Target::Chunk { array, coords }) = &entry.sink else {
            return;
        };
        entry.pending = Some(Instant::now());
        let Some(shard) = array.shard_key_of(coords) else {
            return;
        };
        let mut per_shard = wb.per_shard.lock().unwrap_or_else(|e| e.into_inner());
        let count = per_shard.entry(shard).or_insert(0);
        *count += 1;
        if *count >= array.chunks_in_shard_of(coords) {
            wb.wake.notify_one();
        }
    }

    /// A pending entry left the overlay (committed, or unlinked).
    pub(super) fn undefer(&self, sink: &Sink) {
        let (Some(wb), Sink::Commit(Target::Chunk { array, coords })) = (&self.writeback, sink) else {
            return;
        };
        let Some(shard) = array.shard_key_of(coords) else {
            return;
        };
        let mut per_shard = wb.per_shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = per_shard.get_mut(&shard) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                per_shard.remove(&shard);
            }
        }
    }

    /// Pending chunk files that are due: all of them (`all`), else those waiting longer than
    /// the delay or belonging to a complete shard.
    async fn due(&self, all: bool) -> Vec<Due> {
        let Some(wb) = &self.writeback else { return Vec::new() };
        let candidates: Vec<_> = {
            let overlay = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
            let complete = wb.per_shard.lock().unwrap_or_else(|e| e.into_inner()).clone();
            overlay
                .iter()
                .filter_map(|(path, e)| {
                    let since = e.pending?;
                    let Sink::Commit(Target::Chunk { array, coords }) = &e.sink else {
                        return None;
                    };
                    let full = array
                        .shard_key_of(coords)
                        .and_then(|s| complete.get(&s).copied())
                        .is_some_and(|n| n >= array.chunks_in_shard_of(coords));
                    (all || full || since.elapsed() >= wb.delay)
                        .then(|| (path.clone(), e.file.clone(), array.clone(), coords.clone()))
                })
                .collect()
        };
        let mut due = Vec::with_capacity(candidates.len());
        for (path, file, array, coords) in candidates {
            let state = file.state.lock().await;
            if state.dirty && state.loaded {
                let Ok(data) = state.data.to_bytes() else { continue };
                due.push(Due {
                    path,
                    array,
                    coords,
                    data,
                    generation: state.generation,
                });
            }
        }
        due
    }

    /// At unmount or exit: commit every file still holding changes (pending write-back, or open
    /// handles whose release the kernel never sent), then report the first failure.
    pub async fn commit_all(&self) -> FsResult<()> {
        let result = self.write_back(true).await;
        let dirty: Vec<(String, Arc<super::handles::WriteFile>, Sink)> = {
            let overlay = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
            overlay
                .iter()
                .map(|(p, e)| (p.clone(), e.file.clone(), e.sink.clone()))
                .collect()
        };
        let mut first_error = result.err();
        for (path, file, sink) in dirty {
            let Sink::Commit(target) = sink else { continue };
            let mut state = file.state.lock().await;
            if !state.dirty || !state.loaded {
                continue;
            }
            let committed = match state.data.to_bytes() {
                Ok(data) => self.commit(&target, data).await,
                Err(e) => Err(e.into()),
            };
            match committed {
                Ok(()) => state.dirty = false,
                Err(e) => {
                    self.fail("commit at exit", 0, &e);
                    tracing::error!(path, "changes could not be committed at exit: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Commit pending chunk files (all of them with `all`), one rewrite per shard.
    pub async fn write_back(&self, all: bool) -> FsResult<()> {
        let Some(wb) = &self.writeback else { return Ok(()) };
        let _pass = wb.pass.lock().await;
        let due = self.due(all).await;
        if due.is_empty() {
            return Ok(());
        }
        let mut by_array: HashMap<usize, (Arc<ShardedArray>, Vec<Due>)> = HashMap::new();
        for d in due {
            by_array
                .entry(Arc::as_ptr(&d.array) as usize)
                .or_insert_with(|| (d.array.clone(), Vec::new()))
                .1
                .push(d);
        }
        let mut first_error = None;
        for (_, (array, items)) in by_array {
            let chunks = items.iter().map(|d| (d.coords.clone(), Some(d.data.clone()))).collect();
            match array.write_chunks(chunks).await {
                Ok(()) => {
                    for d in items {
                        self.committed(&d).await;
                    }
                }
                Err(e) => {
                    let e = FsError::from(e);
                    self.fail("write-back", 0, &e);
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A pending file's bytes are in the store: it is clean unless written again meanwhile, and
    /// leaves the overlay when no handle has it open.
    async fn committed(&self, due: &Due) {
        let Some((file, sink)) = self.overlay_get(&due.path) else {
            return;
        };
        let mut state = file.state.lock().await;
        if state.generation != due.generation {
            return;
        }
        state.dirty = false;
        drop(state);
        let mut overlay = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
        let done = overlay
            .get(&due.path)
            .is_some_and(|e| e.handles == 0 && Arc::ptr_eq(&e.file, &file));
        if done {
            overlay.remove(&due.path);
            drop(overlay);
            self.undefer(&sink);
        } else if let Some(entry) = overlay.get_mut(&due.path) {
            entry.pending = None;
            drop(overlay);
            self.undefer(&sink);
        }
    }

    /// The background flusher of a write-back mount: wakes every quarter of the delay, or when
    /// woken, and commits what is due. Runs until the runtime stops.
    pub fn start_write_back(self: &Arc<Self>) {
        let Some(wb) = &self.writeback else { return };
        let tick = (wb.delay / 4).max(Duration::from_millis(10));
        let fs = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                if let Some(wb) = &fs.writeback {
                    tokio::select! {
                        _ = tokio::time::sleep(tick) => {}
                        _ = wb.wake.notified() => {}
                    }
                }
                let _ = fs.write_back(false).await;
            }
        });
    }
}
