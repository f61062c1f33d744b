//! The content of a file being written, in memory up to a mount-wide budget and on local disk
//! beyond it.
//!
//! Every buffer draws its memory from one [`Budget`]. A buffer that would take the budget past
//! its limit moves its content to an unlinked temporary file in the spill directory (nothing
//! is left behind on a crash) and continues there; its memory goes back to the budget. Commits
//! read the content back whole: a chunk is packed into its shard in memory anyway.
//!
//! Spilling can fail (the spill directory full, the process out of descriptors: every spilled
//! file holds one). The failure names the directory, and the content is left as it was when
//! the failed step added nothing; callers must still treat a failed write as having left the
//! file incomplete (a write into a spilled file may stop half way), see `fs/write.rs`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use thiserror::Error;

/// Why a buffer could not do what was asked.
#[derive(Debug, Error)]
pub enum BufferError {
    #[error("file too large")]
    TooLarge,
    /// The spill directory failed: full, out of descriptors, unwritable.
    #[error(
        "the spill directory {dir} (where files being written go beyond the --write-buffer-size \
         of {limit} bytes; TMPDIR sets it): {source}"
    )]
    Spill {
        dir: PathBuf,
        limit: usize,
        source: io::Error,
    },
}

/// Memory shared by all buffers of a mount, and where they spill.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
    spill_dir: PathBuf,
    /// Buffers on disk now (each holds a descriptor).
    spilled: AtomicUsize,
}

impl Budget {
    pub fn new(limit: usize, spill_dir: PathBuf) -> Arc<Self> {
        Arc::new(Budget {
            limit,
            used: AtomicUsize::new(0),
            spill_dir,
            spilled: AtomicUsize::new(0),
        })
    }

    /// Take `n` bytes if they fit.
    fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.used
            .fetch_sub(n.min(self.used.load(Ordering::Acquire)), Ordering::AcqRel);
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Buffers whose content is in the spill directory now.
    pub fn spilled(&self) -> usize {
        self.spilled.load(Ordering::Acquire)
    }

    fn spill_error(&self, source: io::Error) -> BufferError {
        BufferError::Spill {
            dir: self.spill_dir.clone(),
            limit: self.limit,
            source,
        }
    }
}

#[derive(Debug)]
enum Content {
    Memory(Vec<u8>),
    Disk { file: File, len: u64 },
}

#[derive(Debug)]
pub struct Buffer {
    content: Content,
    budget: Arc<Budget>,
}

impl Buffer {
    pub fn new(budget: Arc<Budget>) -> Self {
        Buffer {
            content: Content::Memory(Vec::new()),
            budget,
        }
    }

    pub fn len(&self) -> u64 {
        match &self.content {
            Content::Memory(v) => v.len() as u64,
            Content::Disk { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Make room for `new_len` bytes in memory, or move to disk when the budget says no.
    fn reserve(&mut self, new_len: u64) -> Result<(), BufferError> {
        let Content::Memory(v) = &mut self.content else {
            return Ok(());
        };
        let grow = usize::try_from(new_len).unwrap_or(usize::MAX).saturating_sub(v.len());
        if grow == 0 || self.budget.take(grow) {
            return Ok(());
        }
        self.spill()
    }

    /// Move the content to an unlinked file in the spill directory (in memory as it was if
    /// that fails).
    fn spill(&mut self) -> Result<(), BufferError> {
        let Content::Memory(v) = &mut self.content else {
            return Ok(());
        };
        let budget = &self.budget;
        let file = std::fs::create_dir_all(&budget.spill_dir)
            .and_then(|()| tempfile::tempfile_in(&budget.spill_dir))
            .and_then(|file| file.write_all_at(v, 0).map(|()| file))
            .map_err(|e| budget.spill_error(e))?;
        let len = v.len() as u64;
        budget.give(v.len());
        budget.spilled.fetch_add(1, Ordering::AcqRel);
        self.content = Content::Disk { file, len };
        Ok(())
    }

    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), BufferError> {
        let end = offset.checked_add(data.len() as u64).ok_or(BufferError::TooLarge)?;
        if end > self.len() {
            self.reserve(end)?;
        }
        match &mut self.content {
            Content::Memory(v) => {
                let (start, end) = (to_usize(offset)?, to_usize(end)?);
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[start..end].copy_from_slice(data);
            }
            Content::Disk { file, len } => {
                file.write_all_at(data, offset)
                    .map_err(|e| self.budget.spill_error(e))?;
                *len = (*len).max(end);
            }
        }
        Ok(())
    }

    pub fn resize(&mut self, new_len: u64) -> Result<(), BufferError> {
        if new_len > self.len() {
            self.reserve(new_len)?;
        }
        match &mut self.content {
            Content::Memory(v) => {
                let old = v.len();
                v.resize(to_usize(new_len)?, 0);
                self.budget.give(old.saturating_sub(v.len()));
            }
            Content::Disk { file, len } => {
                file.set_len(new_len).map_err(|e| self.budget.spill_error(e))?;
                *len = new_len;
            }
        }
        Ok(())
    }

    /// Up to `len` bytes from `offset` (short at the end).
    pub fn read(&self, offset: u64, len: u64) -> Result<Bytes, BufferError> {
        let start = offset.min(self.len());
        let end = offset.saturating_add(len).min(self.len());
        match &self.content {
            Content::Memory(v) => Ok(Bytes::copy_from_slice(&v[to_usize(start)?..to_usize(end)?])),
            Content::Disk { file, .. } => {
                let mut out = vec![0; to_usize(end - start)?];
                file.read_exact_at(&mut out, start)
                    .map_err(|e| self.budget.spill_error(e))?;
                Ok(Bytes::from(out))
            }
        }
    }

    /// The whole content.
    pub fn to_bytes(&self) -> Result<Bytes, BufferError> {
        self.read(0, self.len())
    }

    /// Replace the whole content.
    pub fn replace(&mut self, bytes: &[u8]) -> Result<(), BufferError> {
        self.resize(0)?;
        self.write_at(0, bytes)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        match &self.content {
            Content::Memory(v) => self.budget.give(v.len()),
            Content::Disk { .. } => {
                self.budget.spilled.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

fn to_usize(n: u64) -> Result<usize, BufferError> {
    usize::try_from(n).map_err(|_| BufferError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spills_beyond_the_budget_and_gives_memory_back() {
        let dir = tempfile::tempdir().unwrap();
        let budget = Budget::new(100, dir.path().join("spill"));
        let mut a = Buffer::new(budget.clone());
        a.write_at(0, &[1; 60]).unwrap();
        assert_eq!(budget.used(), 60);
        let mut b = Buffer::new(budget.clone());
        b.write_at(10, &[2; 50]).unwrap(); // 60 + 60 > 100: b goes to disk
        assert_eq!(budget.used(), 60);
        assert_eq!(b.len(), 60);
        assert_eq!(
            &b.read(0, 12).unwrap()[..],
            &[0; 10].iter().chain(&[2, 2]).copied().collect::<Vec<_>>()[..]
        );
        b.resize(20).unwrap();
        assert_eq!(b.to_bytes().unwrap().len(), 20);
        a.resize(10).unwrap();
        assert_eq!(budget.used(), 10);
        drop(a);
        assert_eq!(budget.used(), 0);
        assert_eq!(
            std::fs::read_dir(dir.path().join("spill")).unwrap().count(),
            0,
            "spill files are unlinked"
        );
        let mut c = Buffer::new(budget.clone());
        c.replace(b"hello").unwrap();
        assert_eq!(&c.read(3, 100).unwrap()[..], b"lo");
        assert_eq!(c.read(1 << 62, 10).unwrap().len(), 0);
        assert!(c.write_at(u64::MAX, b"x").is_err());
    }

    #[test]
    fn a_spill_that_fails_names_its_directory_and_keeps_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"").unwrap();
        let budget = Budget::new(8, not_a_dir.join("spill"));
        let mut a = Buffer::new(budget.clone());
        a.write_at(0, b"12345678").unwrap();
        let e = a.write_at(8, b"9").unwrap_err();
        assert!(e.to_string().contains(&*not_a_dir.to_string_lossy()), "{e}");
        assert!(e.to_string().contains("--write-buffer-size of 8 bytes"), "{e}");
        assert!(matches!(e, BufferError::Spill { .. }));
        assert_eq!(&a.to_bytes().unwrap()[..], b"12345678", "content as it was");
        assert_eq!((budget.used(), budget.spilled()), (8, 0));
        drop(a);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn spilled_buffers_are_counted_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let budget = Budget::new(4, dir.path().to_path_buf());
        let mut a = Buffer::new(budget.clone());
        a.write_at(0, b"more than four").unwrap();
        assert_eq!((budget.used(), budget.spilled()), (0, 1));
        drop(a);
        assert_eq!(budget.spilled(), 0);
    }
}
