//! Reads without opens, on read-only mounts ([`FsConfig::no_open`]).
//!
//! The kernel is told it need not open files: it sends no OPEN or RELEASE, reads arrive with
//! handle 0, and it keeps every file's cached pages, dropping them when a revalidation (after
//! the attribute TTL) shows the file's size or modification time changed. A chunk's time is
//! its shard's, and a shard replaced by anyone gets a new time: a local one its file's (this
//! mount's commits even advance it past the old one), an object one with its version in the
//! sub-second part (`store/object/naming.rs`), so a change is seen within the TTL, as
//! documented. On a remote source that saves a copy two requests per file (OPEN, RELEASE).
//!
//! Without a handle there is no per-open snapshot. A read locates the file afresh (its shard's
//! version confirmed) and reads it; a chunk the kernel reads in several requests (larger than
//! one read) is taken whole at the first, and the later ones are served from that whole chunk
//! for up to the TTL, so a reader never gets pieces of two versions. These snapshots are
//! bounded in bytes and dropped oldest first. A file too large to be taken whole (a stored
//! file of the raw view, read window by window) keeps the state of its reads for up to the
//! TTL instead, as an open would: later reads go on from its version and its read-ahead
//! window, one request per window rather than two per read on a remote source. So the file is
//! read as of one version for the TTL, as the view's metadata is: a read of bytes of that
//! version that are gone fails with `ESTALE`, as it would through an open, and never gets
//! pieces of another version.
//!
//! [`FsConfig::no_open`]: super::FsConfig::no_open

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;

use super::{Fs, FsError, FsResult};
use crate::store::ByteRange;
use crate::view::OpenFile;

/// The handle number of reads of files that were not opened.
pub const NO_HANDLE: u64 = 0;

/// Bytes of whole chunks kept for the later reads of files read without a handle.
const SNAPSHOT_BUDGET: usize = 64 << 20;

/// Files read without a handle and not taken whole whose reads go on from one state.
const FILES_KEPT: usize = 16;

/// Whole chunks read without a handle, oldest first; and the files too large for that.
#[derive(Debug, Default)]
pub struct Snapshots {
    kept: Mutex<VecDeque<(u64, Instant, Bytes)>>,
    files: Mutex<VecDeque<(u64, Instant, Arc<OpenFile>)>>,
}

impl Snapshots {
    /// Drop everything kept (the source changed).
    pub fn clear(&self) {
        self.lock().clear();
        self.files.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Instant, Bytes)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The whole chunk of inode `ino` if one was read less than `ttl` ago.
    fn get(&self, ino: u64, ttl: std::time::Duration) -> Option<Bytes> {
        let kept = self.lock();
        kept.iter()
            .rev()
            .find(|(i, at, _)| *i == ino && at.elapsed() < ttl)
            .map(|(_, _, bytes)| bytes.clone())
    }

    fn put(&self, ino: u64, bytes: Bytes) {
        if bytes.len() > SNAPSHOT_BUDGET {
            return;
        }
        let mut kept = self.lock();
        kept.retain(|(i, _, _)| *i != ino);
        let mut total: usize = kept.iter().map(|(_, _, b)| b.len()).sum::<usize>() + bytes.len();
        while total > SNAPSHOT_BUDGET {
            let Some((_, _, dropped)) = kept.pop_front() else { break };
            total -= dropped.len();
        }
        kept.push_back((ino, Instant::now(), bytes));
    }
}

impl Snapshots {
    fn files(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Instant, Arc<OpenFile>)>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The read state of inode `ino` if its first read was less than `ttl` ago.
    fn file(&self, ino: u64, ttl: std::time::Duration) -> Option<Arc<OpenFile>> {
        let files = self.files();
        files
            .iter()
            .find(|(i, at, _)| *i == ino && at.elapsed() < ttl)
            .map(|(_, _, file)| file.clone())
    }

    fn keep_file(&self, ino: u64, file: Arc<OpenFile>) {
        let mut files = self.files();
        files.retain(|(i, _, _)| *i != ino);
        if files.len() >= FILES_KEPT {
            files.pop_front();
        }
        files.push_back((ino, Instant::now(), file));
    }
}

fn slice(whole: &Bytes, offset: u64, size: u32) -> Bytes {
    let (start, end) = ByteRange::Range {
        offset,
        length: u64::from(size),
    }
    .resolve(whole.len() as u64);
    whole.slice(start as usize..end as usize)
}

impl Fs {
    /// Read `size` bytes at `offset` of inode `ino`, which the kernel did not open.
    pub(super) async fn read_unopened(&self, ino: u64, offset: u64, size: u32) -> FsResult<Bytes> {
        if offset > 0 {
            if let Some(whole) = self.unopened.get(ino, self.config.attr_ttl) {
                return Ok(slice(&whole, offset, size));
            }
            if let Some(file) = self.unopened.file(ino, self.config.attr_ttl) {
                return Ok(self.view.read_open(&file, offset, u64::from(size)).await?);
            }
        }
        let at = self.view.locate(&self.path_of(ino)?).await?;
        let node = match self.view.current(&at).await? {
            Some(node) if node.is_dir() => return Err(FsError::IsADirectory),
            Some(node) => node,
            None => return Err(FsError::NotFound),
        };
        self.check_size(ino, &node)?;
        let shown = node.size;
        let file = Arc::new(OpenFile::new(node));
        let bytes = self.view.read_open(&file, offset, u64::from(size)).await?;
        // Replaced between the size check and the read, by a shorter version: the kernel would
        // fill the rest of the shown size with zeros nobody wrote.
        if (bytes.len() as u64) < shown.saturating_sub(offset).min(u64::from(size)) {
            return Err(FsError::Replaced);
        }
        let more = |len: u64| len > offset + bytes.len() as u64;
        match file.whole().await {
            // More than this read holds: the kernel will ask for the rest.
            Some(whole) if more(whole.len() as u64) => self.unopened.put(ino, whole),
            Some(_) => {}
            None if more(file.node().size) => self.unopened.keep_file(ino, file),
            None => {}
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn snapshots_are_bounded_and_expire() {
        let s = Snapshots::default();
        let ttl = Duration::from_secs(60);
        let half = SNAPSHOT_BUDGET / 2;
        s.put(1, Bytes::from(vec![1; half]));
        s.put(2, Bytes::from(vec![2; half]));
        assert_eq!(s.get(1, ttl).map(|b| b[0]), Some(1));
        // A third pushes the oldest out; the total stays within the budget.
        s.put(3, Bytes::from(vec![3; half]));
        assert!(s.get(1, ttl).is_none());
        assert_eq!(s.get(3, ttl).map(|b| b[0]), Some(3));
        // A newer snapshot of the same file replaces the older one.
        s.put(2, Bytes::from_static(b"new"));
        assert_eq!(s.get(2, ttl).as_deref(), Some(&b"new"[..]));
        // Older than the TTL: not served.
        assert!(s.get(3, Duration::ZERO).is_none());
        // Larger than the whole budget: not kept at all, and nothing else is dropped for it.
        s.put(4, Bytes::from(vec![4; SNAPSHOT_BUDGET + 1]));
        assert!(s.get(4, ttl).is_none());
        assert!(s.get(2, ttl).is_some());
        let total: usize = s.lock().iter().map(|(_, _, b)| b.len()).sum();
        assert!(total <= SNAPSHOT_BUDGET, "{total}");
    }
}
