//! Writing fetched blocks to the disk cache off the read path: a read hands its blocks to one
//! background thread and returns at once. What waits to be written is bounded
//! ([`MAX_PENDING`] bytes); beyond it blocks are dropped (counted), never waited for, so a slow
//! disk slows nothing but the cache's filling. The same thread saves the known versions every
//! [`SAVE_EVERY`](super::versions::SAVE_EVERY) and, at close, saves them clean.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;

use super::versions::{Versions, SAVE_EVERY};
use super::{BlockId, DiskCache};

/// Most bytes of blocks waiting to be written.
pub const MAX_PENDING: u64 = 64 << 20;

#[derive(Debug)]
pub struct Writer {
    jobs: Mutex<Option<SyncSender<(BlockId, Bytes)>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    pending: Arc<AtomicU64>,
    /// Blocks not written because too much was waiting.
    pub dropped: AtomicU64,
    versions: Arc<Versions>,
}

impl Writer {
    pub fn start(cache: Arc<DiskCache>, versions: Arc<Versions>) -> std::io::Result<Writer> {
        let (tx, rx) = mpsc::sync_channel::<(BlockId, Bytes)>(4096);
        let pending = Arc::new(AtomicU64::new(0));
        let thread = {
            let pending = pending.clone();
            let versions = versions.clone();
            std::thread::Builder::new()
                .name("zarrfs-cache".into())
                .spawn(move || loop {
                    match rx.recv_timeout(SAVE_EVERY) {
                        Ok((id, data)) => {
                            if let Err(e) = cache.put(&id, &data) {
                                tracing::warn!("cannot write to the disk cache: {e}");
                            }
                            pending.fetch_sub(data.len() as u64, Relaxed);
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            if let Err(e) = versions.save_if_changed() {
                                tracing::warn!("cannot save the disk cache's versions: {e}");
                            }
                        }
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                })?
        };
        Ok(Writer {
            jobs: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            pending,
            dropped: AtomicU64::new(0),
            versions,
        })
    }

    /// Write `data` as block `id` soon, unless too much is waiting already.
    pub fn write(&self, id: BlockId, data: Bytes) {
        let len = data.len() as u64;
        if self.pending.fetch_add(len, Relaxed) + len > MAX_PENDING {
            self.pending.fetch_sub(len, Relaxed);
            self.dropped.fetch_add(1, Relaxed);
            return;
        }
        let sent = match &*self.jobs.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(jobs) => jobs.try_send((id, data)).is_ok(),
            None => false,
        };
        if !sent {
            self.pending.fetch_sub(len, Relaxed);
            self.dropped.fetch_add(1, Relaxed);
        }
    }

    /// Wait until every block handed over is written (tests).
    #[cfg(test)]
    pub fn settle(&self) {
        while self.pending.load(Relaxed) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Write what waits, stop the thread and save the versions clean (at unmount).
    pub fn close(&self) {
        drop(self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(thread) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = thread.join();
        }
        if let Err(e) = self.versions.save(true) {
            tracing::warn!("cannot save the disk cache's versions: {e}");
        }
    }
}
