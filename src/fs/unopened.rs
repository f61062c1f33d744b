//! Reads without opens, on read-only mounts of local sources ([`FsConfig::no_open`]).
//!
//! The kernel is told it need not open files: it sends no OPEN or RELEASE, reads arrive with
//! handle 0, and it keeps every file's cached pages, dropping them when a revalidation (after
//! the attribute TTL) shows the file's size or modification time changed. A chunk's time is
//! its shard's, and a local shard replaced by anyone gets a new time (this mount's commits
//! even advance it past the old one), so a change is seen within the TTL, as documented.
//!
//! Without a handle there is no per-open snapshot. A read locates the file afresh (its shard's
//! version confirmed) and reads it; a chunk the kernel reads in several requests (larger than
//! one read) is taken whole at the first, and the later ones are served from that whole chunk
//! for up to the TTL, so a reader never gets pieces of two versions. These snapshots are
//! bounded in bytes and dropped oldest first.
//!
//! [`FsConfig::no_open`]: super::FsConfig::no_open

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;

use super::{Fs, FsError, FsResult};
use crate::store::ByteRange;
use crate::view::OpenFile;

/// The handle number of reads of files that were not opened.
pub const NO_HANDLE: u64 = 0;

/// Bytes of whole chunks kept for the later reads of files read without a handle.
const SNAPSHOT_BUDGET: usize = 64 << 20;

/// Whole chunks read without a handle, oldest first.
#[derive(Debug, Default)]
pub struct Snapshots {
    kept: Mutex<VecDeque<(u64, Instant, Bytes)>>,
}

impl Snapshots {
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
        }
        let at = self.view.locate(&self.path_of(ino)?).await?;
        let node = match self.view.current(&at).await? {
            Some(node) if node.is_dir() => return Err(FsError::IsADirectory),
            Some(node) => node,
            None => return Err(FsError::NotFound),
        };
        self.check_size(ino, &node)?;
        let file = OpenFile::new(node);
        let bytes = self.view.read_open(&file, offset, u64::from(size)).await?;
        if let Some(whole) = file.whole().await {
            // More than this read holds: the kernel will ask for the rest.
            if whole.len() as u64 > offset + bytes.len() as u64 {
                self.unopened.put(ino, whole);
            }
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
