//! Zero-filled segment files, made ahead of use.
//!
//! Every close fsyncs the record it appended. Appending grows the file, and an fsync after a
//! file grew must also write the file's new size and blocks to the filesystem's own journal:
//! on ext4 here that is ~120 µs where overwriting blocks the file already has is ~70 µs, and a
//! copy of many small files into the mount pays it once per file. So a segment starts as a
//! file of zeros as large as a segment, fsynced once, and records are written over the zeros
//! (the reader takes zeros after the last record as the segment's clean end, see `record`).
//!
//! Filling one costs a segment's worth of writes, so it is done ahead, off the close path: a
//! thread fills the next spare (`spare.zj`, written as a `.tmp` and renamed when it is whole and
//! synced) while the current segment is used, and a new segment takes it by renaming it. When
//! none is ready the new segment is an empty file that grows (slower fsyncs, never a wait).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The spare ready for the next segment.
const SPARE: &str = "spare.zj";
/// Written at a time while filling.
const BLOCK: usize = 1 << 20;

#[derive(Debug)]
pub(super) struct Spares {
    dir: PathBuf,
    size: u64,
    /// A fill is under way.
    filling: Arc<AtomicBool>,
    /// The journal is closed: a fill finishing now leaves nothing behind.
    closed: Arc<AtomicBool>,
}

/// Names the temporary file of each fill, unique in the process: a journal opened again in
/// its directory by the same process (a remount in a test) must not fill under the name a
/// fill of the one before is still writing (one rename then finds its file gone).
static FILLS: AtomicU64 = AtomicU64::new(0);

impl Spares {
    /// Spares of `size` bytes in `dir`; temporary files of fills that never finished go.
    pub(super) fn new(dir: &Path, size: u64) -> std::io::Result<Self> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("spare") && n.ends_with(".tmp"))
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(Spares {
            dir: dir.to_path_buf(),
            size,
            filling: Arc::new(AtomicBool::new(false)),
            closed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Make sure a spare is ready, filling one here if none is (at open).
    pub(super) fn ready_now(&self) -> std::io::Result<()> {
        if !self.is_ready() {
            fill(&self.dir, &self.tmp_name(), self.size, &self.closed)?;
        }
        Ok(())
    }

    /// The journal is closed with nothing in it: no spare is kept (a fill under way removes
    /// its own).
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = std::fs::remove_file(self.dir.join(SPARE));
    }

    fn is_ready(&self) -> bool {
        is_ready(&self.dir, self.size)
    }

    fn tmp_name(&self) -> String {
        let n = FILLS.fetch_add(1, Ordering::Relaxed);
        format!("spare-{}-{n}.tmp", std::process::id())
    }

    /// The ready spare, renamed to `path` and opened for writing; `None` if none is ready. The
    /// next one is filled in the background either way. The caller syncs the directory.
    pub(super) fn take(&self, path: &Path) -> std::io::Result<Option<File>> {
        let taken = match self.is_ready() {
            true => match std::fs::rename(self.dir.join(SPARE), path) {
                Ok(()) => Some(cached(OpenOptions::new().write(true).open(path)?)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            },
            false => None,
        };
        self.refill();
        Ok(taken)
    }

    /// Fill a spare on a thread of its own, unless one is ready or being filled.
    fn refill(&self) {
        if self.is_ready() || self.filling.swap(true, Ordering::AcqRel) {
            return;
        }
        let (dir, tmp, size) = (self.dir.clone(), self.tmp_name(), self.size);
        let (filling, closed) = (self.filling.clone(), self.closed.clone());
        let spawned = std::thread::Builder::new()
            .name("zarrfs-journal-spare".into())
            .spawn(move || loop {
                if let Err(e) = fill(&dir, &tmp, size, &closed) {
                    tracing::debug!("could not fill a spare journal segment in {}: {e}", dir.display());
                    let _ = std::fs::remove_file(dir.join(&tmp));
                    filling.store(false, Ordering::Release);
                    return;
                }
                filling.store(false, Ordering::Release);
                // A spare taken while this one was finishing found the fill under way and
                // started none: fill again unless one is ready or another fill took over.
                if closed.load(Ordering::Acquire) || is_ready(&dir, size) || filling.swap(true, Ordering::AcqRel) {
                    return;
                }
            });
        if spawned.is_err() {
            self.filling.store(false, Ordering::Release);
        }
    }
}

/// `file`, with the kernel asked to read it into the page cache in the background. Records do
/// not end on page boundaries, so an append whose last page is not cached would first read that
/// page from disk (a spare's pages go when memory is short, or when caches are dropped): about
/// a fifth more per close.
fn cached(file: File) -> File {
    use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
    if let Err(e) = posix_fadvise(&file, 0, 0, PosixFadviseAdvice::POSIX_FADV_WILLNEED) {
        tracing::debug!("could not ask for a journal segment to be read ahead: {e}");
    }
    file
}

fn is_ready(dir: &Path, size: u64) -> bool {
    std::fs::metadata(dir.join(SPARE)).is_ok_and(|m| m.len() == size)
}

/// Write `size` zeros to `dir/tmp`, sync it, and rename it to the spare (unless the journal
/// was closed meanwhile).
fn fill(dir: &Path, tmp: &str, size: u64, closed: &AtomicBool) -> std::io::Result<()> {
    let path = dir.join(tmp);
    let mut file = File::create(&path)?;
    let zeros = vec![0u8; BLOCK];
    let mut left = size;
    while left > 0 {
        let n = left.min(BLOCK as u64) as usize;
        file.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    file.sync_all()?;
    if closed.load(Ordering::Acquire) {
        return std::fs::remove_file(&path);
    }
    std::fs::rename(&path, dir.join(SPARE))?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_opened_again_fills_under_other_names_than_the_one_before() {
        let dir = tempfile::tempdir().unwrap();
        let before = Spares::new(dir.path(), 16).unwrap();
        let again = Spares::new(dir.path(), 16).unwrap();
        assert_ne!(before.tmp_name(), again.tmp_name());
    }

    #[test]
    fn a_spare_is_taken_whole_and_the_next_one_filled() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("spare-1-0.tmp"), b"half").unwrap();
        let spares = Spares::new(dir.path(), 3 * BLOCK as u64 + 5).unwrap();
        assert!(
            !dir.path().join("spare-1-0.tmp").exists(),
            "an unfinished fill is removed"
        );
        assert!(spares.take(&dir.path().join("a")).unwrap().is_none(), "none ready");
        spares.ready_now().unwrap();
        let taken = spares.take(&dir.path().join("b")).unwrap();
        assert!(taken.is_some());
        let bytes = std::fs::read(dir.path().join("b")).unwrap();
        assert_eq!(bytes.len(), 3 * BLOCK + 5);
        assert!(bytes.iter().all(|b| *b == 0));
        // The next one is filled in the background.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !spares.is_ready() {
            assert!(std::time::Instant::now() < deadline, "no spare filled");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
