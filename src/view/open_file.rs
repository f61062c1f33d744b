//! Files open for reading: the node confirmed at open, read consistently.
//!
//! Opening confirms what is there now: a chunk's shard version is checked (a file about to be
//! opened must not come from a stale index) and where the chunk lies is kept, so reads go
//! straight to its bytes. A chunk file is then read as a snapshot: the first read fetches the
//! whole inner chunk (one ranged request, pinned to its shard's version) and every later read
//! of that open file is served from it, so a reader never sees a chunk half old and half new.
//! Chunks larger than [`SNAPSHOT_LIMIT`] are read range by range instead. A stored file of a
//! remote source is read ahead ([`super::read_ahead`]).
//!
//! Snapshots are held until their file is closed, so together they are bounded: the open
//! files of a view draw on one [`SnapshotBudget`] (`--cache-size`, counted apart from the
//! caches). A file opened when the budget is spent reads range by range, each range pinned to
//! the shard version found at open: a chunk replaced meanwhile is ESTALE, never half old and
//! half new. Thousands of files held open cost their handles, not their chunks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::locate::{At, Located};
use super::read_ahead::{self, ReadAhead};
use super::types::Source;
use super::{Node, View, ViewError};
use crate::store::ByteRange;

/// Largest chunk read whole into an open file on first read.
pub const SNAPSHOT_LIMIT: u64 = 16 << 20;

/// The bytes the snapshots of a view's open files may hold together, and hold now.
#[derive(Debug)]
pub struct SnapshotBudget {
    limit: u64,
    held: AtomicU64,
}

impl SnapshotBudget {
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(SnapshotBudget {
            limit,
            held: AtomicU64::new(0),
        })
    }

    fn take(&self, n: u64) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn give(&self, n: u64) {
        let _ = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| Some(held.saturating_sub(n)));
    }

    /// Bytes the snapshots of open files hold now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }
}

/// A file of the view open for reading.
#[derive(Debug)]
pub struct OpenFile {
    node: Node,
    /// The whole file, once read (chunk files up to the snapshot limit).
    snapshot: tokio::sync::Mutex<Option<Bytes>>,
    read_ahead: ReadAhead,
    /// What the snapshot is counted against (`None`: a file read once, not held).
    budget: Option<Arc<SnapshotBudget>>,
    /// The whole file, kept because its name went away while it was open (see
    /// [`View::keep_whole`]): every later read is served from it.
    kept: std::sync::OnceLock<Bytes>,
}

impl OpenFile {
    /// A file read once, right away (its snapshot is not held, so not counted).
    pub fn new(node: Node) -> Self {
        OpenFile {
            node,
            snapshot: tokio::sync::Mutex::new(None),
            read_ahead: ReadAhead::default(),
            budget: None,
            kept: std::sync::OnceLock::new(),
        }
    }

    /// Whether a snapshot of `size` bytes may be taken (counted until the file is dropped).
    fn may_snapshot(&self, size: u64) -> bool {
        self.budget.as_ref().is_none_or(|b| b.take(size))
    }

    fn snapshot_dropped(&self) {
        if let Some(budget) = &self.budget {
            budget.give(self.node.size);
        }
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The whole file, if a read has taken it whole (chunk files up to the snapshot limit).
    pub async fn whole(&self) -> Option<Bytes> {
        self.snapshot.lock().await.clone()
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        if self.snapshot.get_mut().is_some() {
            self.snapshot_dropped();
        }
    }
}

impl View {
    /// A node opened for reading: its snapshot counted against the view's budget.
    pub fn open(&self, node: Node) -> OpenFile {
        let mut file = OpenFile::new(node);
        file.budget = Some(self.snapshots.clone());
        file
    }

    /// Bytes the snapshots of open files hold now.
    pub fn snapshot_bytes(&self) -> u64 {
        self.snapshots.held()
    }

    /// What is at a placed path as the store holds it now, to be opened: a chunk is located
    /// afresh (its shard's version confirmed) and the location kept in the node.
    pub async fn current(&self, at: &Located) -> Result<Option<Node>, ViewError> {
        let At::Chunk { node, coords } = &at.at else {
            return self.node(at).await;
        };
        let Some(loc) = node.array.locate_current(coords).await? else {
            return Ok(None);
        };
        Ok(Some(Node {
            size: loc.nbytes,
            mtime_ns: loc.mtime_ns,
            source: Source::Chunk {
                array: node.array.clone(),
                coords: coords.as_slice().into(),
                at: Some(loc),
            },
        }))
    }

    /// Keep the whole of an open file for its later reads: its name is about to be removed
    /// or replaced, and on a filesystem an open file stays readable until closed. Taken from
    /// its snapshot if it has one; refused beyond `limit` bytes (the largest file the mount
    /// writes), where later reads may fail instead (ESTALE, or ENOENT as stored files go).
    /// Not counted against the snapshot budget: what removed open files hold is theirs until
    /// closed, as the blocks of an unlinked file are on a local filesystem.
    pub async fn keep_whole(&self, file: &OpenFile, limit: u64) -> Result<(), ViewError> {
        if file.kept.get().is_some() || file.node.size > limit {
            return Ok(());
        }
        let whole = match file.whole().await {
            Some(whole) => whole,
            None => self.read(&file.node, 0, u64::MAX).await?,
        };
        let _ = file.kept.set(whole);
        Ok(())
    }

    /// Read `len` bytes at `offset` of an open file (see the module notes).
    pub async fn read_open(&self, file: &OpenFile, offset: u64, len: u64) -> Result<Bytes, ViewError> {
        if let Some(whole) = file.kept.get() {
            let (start, end) = ByteRange::Range { offset, length: len }.resolve(whole.len() as u64);
            return Ok(whole.slice(start as usize..end as usize));
        }
        let node = &file.node;
        match &node.source {
            Source::Stored { key, .. } if self.read_ahead > 0 => {
                let target = read_ahead::Target {
                    store: &self.store,
                    key,
                    size: node.size,
                    ahead: self.read_ahead,
                };
                file.read_ahead.read(&target, offset, len).await
            }
            Source::Chunk { .. } if node.size <= SNAPSHOT_LIMIT => {
                let mut snapshot = file.snapshot.lock().await;
                if snapshot.is_none() {
                    if !file.may_snapshot(node.size) {
                        drop(snapshot);
                        return self.read_pinned(node, offset, len).await;
                    }
                    match self.read(node, 0, SNAPSHOT_LIMIT).await {
                        Ok(whole) => *snapshot = Some(whole),
                        Err(e) => {
                            file.snapshot_dropped();
                            return Err(e);
                        }
                    }
                }
                let whole = snapshot.as_ref().cloned().unwrap_or_default();
                let (start, end) = ByteRange::Range { offset, length: len }.resolve(whole.len() as u64);
                Ok(whole.slice(start as usize..end as usize))
            }
            _ => self.read(node, offset, len).await,
        }
    }

    /// A range of a chunk from the shard version found at open (ESTALE if it was replaced).
    async fn read_pinned(&self, node: &Node, offset: u64, len: u64) -> Result<Bytes, ViewError> {
        match &node.source {
            Source::Chunk {
                array, at: Some(loc), ..
            } => Ok(array.read_at(loc, offset, len).await?),
            _ => self.read(node, offset, len).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_budget_is_shared_and_given_back() {
        let budget = SnapshotBudget::new(10);
        assert!(budget.take(6));
        assert!(!budget.take(6), "over the limit");
        assert!(budget.take(4));
        assert_eq!(budget.held(), 10);
        budget.give(6);
        budget.give(100);
        assert_eq!(budget.held(), 0, "never below zero");
    }
}
