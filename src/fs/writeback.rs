//! Opt-in write-back (`--write-back-delay SECONDS`): closed files are not committed when they
//! are closed: chunk files, and files stored as they are but metadata (`Target::may_defer`).
//! Their bytes stay in the overlay (so reads, lookups and listings see them). A file stored as
//! it is goes once it has waited the delay (many at once); chunks are committed shard by
//! shard, each shard in one rewrite:
//! - when a pending chunk has waited the delay and no chunk of its shard was closed for the
//!   delay either (a shard being written is committed once its writer moves on), or after
//!   8 delays however busy the shard,
//! - at once when every inner chunk of a shard is pending (a copy has written the whole shard),
//! - on `fsync` of any file, and when the filesystem is unmounted or the daemon is told to stop.
//!
//! What it trades away, without the journal (`journaling.rs`, the default of remote sources,
//! which makes each close durable on local disk first): `close()` no longer means durable. A
//! crash loses up to the delay of closed writes, and a commit that fails (a conflict beyond the retries, a corrupt shard) can
//! only be logged, or reported to the next `fsync`. What it buys: a copy into the view rewrites
//! each shard once instead of once per chunk.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use super::handles::{Sink, WriteFile, WriteState};
use super::{Fs, FsError, FsResult};
use crate::view::{Batch, Target};

/// The write-back state of a mount.
#[derive(Debug)]
pub struct WriteBack {
    pub delay: Duration,
    /// Wakes the flusher early (a shard became complete, or a flush was asked for).
    wake: Notify,
    /// Pending chunk files per commit batch (their shard), to notice complete ones, and when
    /// the last of them was closed, to notice quiet ones.
    per_batch: std::sync::Mutex<HashMap<Batch, (u64, Instant)>>,
    /// One write-back pass at a time: two passes (the flusher and an fsync) would otherwise
    /// take the same pending files and commit them twice.
    pass: tokio::sync::Mutex<()>,
}

impl WriteBack {
    pub fn new(delay: Duration) -> Self {
        WriteBack {
            delay,
            wake: Notify::new(),
            per_batch: Default::default(),
            pass: Default::default(),
        }
    }

    fn batches(&self) -> std::sync::MutexGuard<'_, HashMap<Batch, (u64, Instant)>> {
        self.per_batch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A chunk file due for commit: where it goes, its bytes and the generation they are of, with
/// its content locked until the commit is done. Held so, a removal or rename of the file waits
/// for the commit (an unlink that went ahead would be undone by the commit landing after it),
/// and a writer rewriting it waits as it would for a commit at close.
struct Due<'a> {
    path: String,
    file: &'a Arc<WriteFile>,
    target: Target,
    data: Bytes,
    generation: u64,
    /// The journal record of `data`, done once it is committed.
    journaled: Option<u64>,
    state: tokio::sync::MutexGuard<'a, WriteState>,
}

/// A pending file waits at most this many delays, however busy its shard.
const MAX_HOLD: u32 = 8;

/// How often a pass that must commit everything (`fsync`, unmount) tries again for files
/// whose content another operation held locked (1 ms apart).
const BUSY_RETRIES: u32 = 5000;

impl Fs {
    /// Whether closing a file of this sink defers its commit.
    pub(super) fn defers(&self, sink: &Sink) -> bool {
        self.writeback.is_some() && matches!(sink, Sink::Commit(t) if t.may_defer())
    }

    /// A file was closed with changes: leave it pending; wake the flusher if its batch (a
    /// chunk's shard) is now complete.
    pub(super) fn defer(&self, path: &str) {
        if self.writeback.is_none() {
            return;
        }
        let sink = self.inodes.with_file(path, |w| {
            let Sink::Commit(target) = &w.sink else { return None };
            if w.pending.is_some() || !target.may_defer() {
                return None;
            }
            w.pending = Some(Instant::now());
            Some(w.sink.clone())
        });
        if let Some(Some(sink)) = sink {
            self.count_pending(&sink);
        }
    }

    /// A file of this sink was marked pending: count it in its batch (a chunk's shard); wake
    /// the flusher if the batch is now complete. (Undone by [`Fs::undefer`].)
    pub(super) fn count_pending(&self, sink: &Sink) {
        let Some((wb, batch)) = self.batch_of(sink) else { return };
        let mut batches = wb.batches();
        let capacity = batch.capacity;
        let (count, last) = batches.entry(batch).or_insert((0, Instant::now()));
        *count += 1;
        *last = Instant::now();
        if *count >= capacity {
            wb.wake.notify_one();
        }
    }

    /// The batch a pending file of this sink counts in, on a write-back mount.
    fn batch_of(&self, sink: &Sink) -> Option<(&WriteBack, Batch)> {
        let (Some(wb), Sink::Commit(target)) = (&self.writeback, sink) else {
            return None;
        };
        Some((wb, target.batch()?))
    }

    /// A file is opened for writing: if it was pending, it is being written again, not pending
    /// any more. Write-back leaves it alone until it is closed (its close defers it anew) or
    /// fsynced: committed meanwhile, it could be stored half-written (emptied by O_TRUNC, the new
    /// bytes not there yet), and a crash before the next commit would leave that in its shard.
    /// The mark taken is that of `file`, the one the new handle holds at inode `ino`, not of
    /// whatever file its path holds: no lock orders an open against renames, so by now the
    /// name may hold another file renamed onto it (whose mark taken, it would never be
    /// committed, nor fsynced), and this one may have been renamed elsewhere.
    pub(super) fn reopened(&self, ino: u64, file: &Arc<WriteFile>) {
        if self.writeback.is_none() {
            return;
        }
        if let Some(sink) = self.inodes.take_pending(ino, file) {
            self.undefer(&sink);
        }
    }

    /// A pending file is no longer held (committed, or unlinked).
    pub(super) fn undefer(&self, sink: &Sink) {
        let Some((wb, batch)) = self.batch_of(sink) else { return };
        let mut batches = wb.batches();
        if let Some((count, _)) = batches.get_mut(&batch) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                batches.remove(&batch);
            }
        }
    }

    /// Pending chunk files that are due: all of them (`all`), else those of a complete batch,
    /// or waiting longer than the delay in a batch (shard) that has been quiet for the delay
    /// too: a shard being written is committed once, when its writer has moved on, not once
    /// a delay (a copy of small chunks closes a shard's files over many seconds). A shard
    /// that never goes quiet is committed after [`MAX_HOLD`] delays all the same.
    fn candidates(&self, all: bool) -> Vec<(String, Arc<WriteFile>, Target)> {
        let Some(wb) = &self.writeback else { return Vec::new() };
        let batches = wb.batches().clone();
        self.inodes
            .files()
            .into_iter()
            .filter_map(|(path, file, sink, pending)| {
                let waited = pending?.elapsed();
                let Sink::Commit(target) = sink else { return None };
                let batch = target.batch().and_then(|b| batches.get(&b).map(|s| (b.capacity, *s)));
                let due = match batch {
                    _ if all => true,
                    Some((capacity, (count, _))) if count >= capacity => true,
                    Some((_, (_, last))) => {
                        (waited >= wb.delay && last.elapsed() >= wb.delay) || waited >= wb.delay * MAX_HOLD
                    }
                    None => waited >= wb.delay,
                };
                due.then_some((path, file, target))
            })
            .collect()
    }

    /// Lock the content of each candidate and take it if it is still pending; a content
    /// another operation holds is left for a later pass (waiting for it here could deadlock
    /// with a rename holding two files). Returns the files due and how many were busy.
    fn lock_due<'a>(&self, candidates: &'a [(String, Arc<WriteFile>, Target)]) -> (Vec<Due<'a>>, usize) {
        let mut due = Vec::with_capacity(candidates.len());
        let mut busy = 0;
        for (path, file, target) in candidates {
            let Ok(state) = file.state.try_lock() else {
                busy += 1;
                continue;
            };
            // Still pending under the content's lock: a file opened for writing since the list
            // was made (`reopened`, before it changes the content) is left to its writer.
            let pending = self
                .inodes
                .with_file(path, |w| w.pending.is_some() && Arc::ptr_eq(&w.file, file));
            if pending == Some(true) && state.dirty && state.loaded {
                let Ok(data) = state.content() else { continue };
                due.push(Due {
                    path: path.clone(),
                    file,
                    target: target.clone(),
                    data,
                    generation: state.generation,
                    journaled: state.journaled,
                    state,
                });
            }
        }
        (due, busy)
    }

    /// At unmount or exit: commit every file still holding changes (pending write-back, or open
    /// handles whose release the kernel never sent), then report the first failure.
    pub async fn commit_all(&self) -> FsResult<()> {
        let _changing = self.changing();
        let result = self.write_back(true).await;
        let mut first_error = result.err();
        for (path, file, sink, _) in self.inodes.files() {
            let Sink::Commit(target) = sink else { continue };
            let mut state = file.state.lock().await;
            if !state.dirty || !state.loaded {
                continue;
            }
            let committed = match state.content() {
                Ok(data) => self.view.commit(&target, data).await.map_err(FsError::from),
                Err(e) => Err(e),
            };
            match committed {
                Ok(()) => {
                    state.dirty = false;
                    self.journal_done(state.journaled.take().into_iter().collect()).await;
                }
                Err(e) => {
                    self.fail("commit at exit", 0, &e);
                    tracing::error!(path, "changes could not be committed at exit: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Commit pending chunk files (all of them with `all`), handed to the view together so
    /// each shard is rewritten once.
    pub async fn write_back(&self, all: bool) -> FsResult<()> {
        let _changing = self.changing();
        let Some(wb) = &self.writeback else { return Ok(()) };
        let _pass = wb.pass.lock().await;
        let mut first_error = None;
        for _ in 0..BUSY_RETRIES {
            let candidates = self.candidates(all);
            let (due, busy) = self.lock_due(&candidates);
            if let Err(e) = self.commit_due(due).await {
                first_error.get_or_insert(e);
            }
            if !all || busy == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn commit_due(&self, due: Vec<Due<'_>>) -> FsResult<()> {
        if due.is_empty() {
            return Ok(());
        }
        let files = due.iter().map(|d| (d.target.clone(), d.data.clone())).collect();
        let outcomes = self.view.commit_together(files).await;
        let mut due: Vec<Option<Due>> = due.into_iter().map(Some).collect();
        let mut first_error = None;
        let mut stored = Vec::new();
        for (indexes, outcome) in outcomes {
            match outcome {
                Ok(()) => stored.extend(
                    indexes
                        .into_iter()
                        .filter_map(|i| due.get_mut(i).and_then(Option::take)),
                ),
                Err(e) => {
                    let e = FsError::from(e);
                    self.fail("write-back", 0, &e);
                    first_error.get_or_insert(e);
                }
            }
        }
        self.journal_done(stored.iter().filter_map(|d| d.journaled).collect())
            .await;
        for d in stored {
            self.committed(d);
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A pending file's bytes are in the store (and its journal record done): it is clean (its
    /// content stayed locked since they were taken), and is no longer held when no handle has
    /// it open.
    fn committed(&self, mut due: Due<'_>) {
        let Some((file, sink)) = self.inodes.file_at(&due.path) else {
            return;
        };
        if !Arc::ptr_eq(&file, due.file) || due.state.generation != due.generation {
            return; // replaced since: the file there now waits for its own commit
        }
        due.state.dirty = false;
        due.state.journaled = None;
        // All of it under the content's lock: once that is released, a writer waiting for it
        // (an open that truncates) may write and close the file again. Its new pending mark
        // taken here, or the file dropped, would leave its new bytes dirty but never committed
        // (an fsync then returned without them; the crash campaign found it).
        // Counted out of its batch once: a file opened for writing meanwhile was already. Only
        // if the name still holds this file: one renamed onto it since waits for its own commit.
        let was_pending = self
            .inodes
            .with_file(&due.path, |w| Arc::ptr_eq(&w.file, &file) && w.pending.take().is_some())
            == Some(true);
        self.inodes.drop_committed(&due.path, &file);
        drop(due.state);
        #[cfg(test)]
        super::hooks::reached(super::hooks::Point::ContentReleased);
        if was_pending {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;

    use crate::fs::hooks::{self, Point};
    use crate::fs::inodes::ROOT_INO;
    use crate::fs::{Fs, FsConfig};
    use crate::store::memory::MemoryStore;
    use crate::store::{GetOptions, Store};
    use crate::view::{View, ViewOptions};

    async fn stored(store: &MemoryStore) -> Bytes {
        store.get("f.bin", GetOptions::default()).await.unwrap().unwrap().bytes
    }

    /// Write `data` to the file through a handle opened with O_TRUNC, and close it.
    async fn rewrite(fs: &Fs, ino: u64, data: &[u8]) {
        let fh = fs.open(ino, true, true).await.unwrap();
        fs.write(fh, 0, data).await.unwrap();
        fs.flush(fh).await.unwrap();
        fs.release(fh).await;
    }

    /// A writer waiting for the content of a pending file while write-back commits it writes
    /// and closes it as soon as the commit lets go of it: those bytes are pending, and the next
    /// pass (an fsync's) commits them. (The pending mark was taken after the content was
    /// released: the new bytes stayed dirty, never committed, and the fsync returned.)
    #[tokio::test]
    async fn a_file_written_again_as_its_commit_ends_is_committed_by_the_next_pass() {
        let store = Arc::new(MemoryStore::new());
        store.set("f.bin", Bytes::from_static(b"old")).await.unwrap();
        let mut config = FsConfig::read_only(0, 0, Duration::from_secs(1));
        config.writable = true;
        config.write_back_delay = Some(Duration::from_secs(3600));
        let fs = Arc::new(Fs::new(View::new(store.clone(), &ViewOptions::default()), config));
        let ino = fs.lookup(ROOT_INO, "f.bin").await.unwrap().ino;
        rewrite(&fs, ino, b"one").await;
        assert_eq!(stored(&store).await, "old", "deferred");
        let writer = fs.clone();
        hooks::at(Point::ContentReleased, move || {
            futures::executor::block_on(rewrite(&writer, ino, b"two"))
        });
        fs.write_back(true).await.unwrap();
        assert_eq!(stored(&store).await, "one");
        fs.write_back(true).await.unwrap();
        assert_eq!(stored(&store).await, "two", "the second write was lost");
    }
}
