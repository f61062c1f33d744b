//! Names the kernel keeps as missing. A lookup of a name that is not there is answered as a
//! negative entry (inode 0) with the entry TTL, so the kernel answers the next lookups of it
//! itself (ENOENT alone is kept for no time at all). A sparse array's absent chunks are looked
//! up by every read of it (zarr-python asks for each chunk in turn and takes ENOENT as the
//! fill value), and so are the documents clients probe for (`.zarray`, `.zgroup`,
//! `.zmetadata`): each was one daemon round trip per read.
//!
//! A kept miss must be dropped as soon as the name may exist:
//! - The mount's own changes need nothing: the kernel makes a name through its negative entry
//!   (create, mkdir, rename, link) and replaces it, and it holds the directory's lock while
//!   it does, so no lookup there races the change. A write never makes another name appear
//!   (an array created through the mount is shown as stored until the next mount, see
//!   `view/metadata_write.rs`), so no miss is dropped for one.
//! - Changes others make to a watched source drop the kept misses at and above each changed
//!   path ([`Fs::source_changed`]): the record here says which names the kernel was told are
//!   missing, since the inode table has nothing for them. A changed directory drops the
//!   kernel's names below it, misses included, and so does everything-changed for the root's.
//! - Any other source keeps its TTL: a name another writer adds shows once the kept miss
//!   expires, as its other changes do.
//!
//! A miss is recorded before the answer's TTL is taken (the [`TtlTicket`]): a source change
//! whose drops were taken before it was recorded has moved the generation by then, and the
//! answer goes out with a TTL of zero. One taken after finds it and drops it; the kernel
//! applies that drop only once the lookup it answers is done (a drop waits for the
//! directory's lock, which the lookup holds). The mount's own change generation is not looked
//! at: the kernel holds a directory's lock through every change of a name in it, so no lookup
//! of that directory runs beside one, and closes of files elsewhere (which move it) would keep
//! most misses of a busy writable mount from being kept.
//!
//! The record is bounded ([`MAX_KEPT`]); when it is full of misses still valid, a miss is
//! answered with a TTL of zero, as before. A directory's record goes when the kernel forgets
//! the directory (its misses went before it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::source_changes::TtlTicket;
use super::{Attr, Fs, FsError, FsResult};

/// Misses recorded at most (about 80 bytes each).
pub const MAX_KEPT: usize = 1 << 16;

/// Directory inode -> missing name -> when the kernel's miss expires (`None`: never).
type ByDir = HashMap<u64, HashMap<Box<str>, Option<Instant>>>;

/// What a lookup found: an entry, or a miss the kernel may keep for the TTL given.
#[derive(Debug, Clone)]
pub enum Looked {
    Found(Attr, Duration),
    Missing(Duration),
}

/// The misses the kernel was told it may keep, by directory inode; each with when it expires
/// (`None`: never, a watched source's).
#[derive(Debug, Default)]
pub struct KeptMisses {
    dirs: Mutex<ByDir>,
    count: AtomicUsize,
    /// Misses answered with a TTL the kernel keeps.
    given: AtomicU64,
}

impl KeptMisses {
    fn lock(&self) -> std::sync::MutexGuard<'_, ByDir> {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record that `name` in `dir` is told missing for `ttl`; false if there is no room.
    pub fn record(&self, dir: u64, name: &str, ttl: Duration) -> bool {
        self.record_at(dir, name, ttl, Instant::now())
    }

    fn record_at(&self, dir: u64, name: &str, ttl: Duration, now: Instant) -> bool {
        let mut dirs = self.lock();
        if self.count.load(Ordering::Relaxed) >= MAX_KEPT {
            self.sweep(&mut dirs, now);
            if self.count.load(Ordering::Relaxed) >= MAX_KEPT {
                return false;
            }
        }
        if dirs
            .entry(dir)
            .or_default()
            .insert(name.into(), now.checked_add(ttl))
            .is_none()
        {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        self.given.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Drop what expired.
    fn sweep(&self, dirs: &mut ByDir, now: Instant) {
        let mut left = 0;
        dirs.retain(|_, names| {
            names.retain(|_, until| until.is_none_or(|t| t > now));
            left += names.len();
            !names.is_empty()
        });
        self.count.store(left, Ordering::Relaxed);
    }

    /// Take `name` in `dir` out of the record: whether the kernel may still keep it as missing.
    pub fn take(&self, dir: u64, name: &str) -> bool {
        if self.is_empty() {
            return false;
        }
        let mut dirs = self.lock();
        let Some(names) = dirs.get_mut(&dir) else {
            return false;
        };
        let found = names.remove(name).is_some();
        if names.is_empty() {
            dirs.remove(&dir);
        }
        if found {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        found
    }

    /// Take every recorded miss out.
    pub fn take_all(&self) -> Vec<(u64, String)> {
        let mut dirs = self.lock();
        self.count.store(0, Ordering::Relaxed);
        dirs.drain()
            .flat_map(|(dir, names)| names.into_keys().map(move |name| (dir, name.into())))
            .collect()
    }

    /// The kernel forgot directory `dir`, and with it every name it kept below it.
    pub fn dir_forgotten(&self, dir: u64) {
        if self.is_empty() {
            return;
        }
        if let Some(names) = self.lock().remove(&dir) {
            self.count.fetch_sub(names.len(), Ordering::Relaxed);
        }
    }

    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn given(&self) -> u64 {
        self.given.load(Ordering::Relaxed)
    }
}

impl Fs {
    /// Look a name up for the kernel, whose request arrived with `ticket`: an entry, or a miss
    /// it may keep (see the module's doc).
    pub async fn lookup_kept(&self, parent: u64, name: &str, ticket: &TtlTicket) -> FsResult<Looked> {
        match self.lookup(parent, name).await {
            Ok(attr) => {
                self.missing.take(parent, name);
                Ok(Looked::Found(attr, ticket.ttl()))
            }
            Err(e @ FsError::NotFound) | Err(e @ FsError::View(crate::view::ViewError::NotFound(_))) => {
                // An expected miss: said at debug level, as a failed lookup was.
                tracing::debug!(parent, name, "{e}: answered as missing");
                let ttl = ticket.ttl();
                if ttl.is_zero() || !self.missing.record(parent, name, ttl) {
                    return Ok(Looked::Missing(Duration::ZERO));
                }
                // Taken after the record (see the module's doc).
                match ticket.ttl().is_zero() {
                    true => Ok(Looked::Missing(Duration::ZERO)),
                    false => Ok(Looked::Missing(ttl)),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// `name` was made in `parent` through the mount: the kernel's miss was replaced as it
    /// was made, so the record of it goes (it would otherwise fill the record of a mount that
    /// writes many new files).
    pub(super) fn made(&self, parent: u64, name: &str) {
        self.missing.take(parent, name);
    }

    /// Names the kernel was told are missing, recorded now.
    pub fn missing_kept(&self) -> usize {
        self.missing.len()
    }

    /// Counters of the kept misses (`zarrfs stats`).
    pub(super) fn missing_counts(&self) -> [(&'static str, u64); 2] {
        [
            ("missing_names_kept", self.missing_kept() as u64),
            ("lookups_missing_kept", self.missing.given()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misses_are_recorded_taken_and_forgotten_with_their_directory() {
        let kept = KeptMisses::default();
        assert!(kept.record(1, "a", Duration::from_secs(60)));
        assert!(kept.record(1, "b", Duration::MAX));
        assert!(kept.record(2, "a", Duration::from_secs(60)));
        assert!(kept.record(2, "a", Duration::from_secs(60)), "again: no second entry");
        assert_eq!(kept.len(), 3);
        assert!(kept.take(1, "a"));
        assert!(!kept.take(1, "a"));
        assert!(!kept.take(3, "a"));
        kept.dir_forgotten(2);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept.take_all(), [(1, "b".to_string())]);
        assert!(kept.is_empty());
        assert_eq!(kept.given(), 4);
    }

    #[test]
    fn a_full_record_makes_room_from_expired_misses_only() {
        let kept = KeptMisses::default();
        let start = Instant::now();
        let ttl = Duration::from_secs(60);
        for i in 0..MAX_KEPT {
            assert!(kept.record_at(7, &i.to_string(), ttl, start));
        }
        let later = start + Duration::from_secs(30);
        assert!(!kept.record_at(8, "x", ttl, later), "full of valid misses");
        let expired = start + Duration::from_secs(61);
        assert!(kept.record_at(8, "x", Duration::MAX, expired), "expired ones make room");
        assert_eq!(kept.len(), 1);
        assert!(kept.take(8, "x"));
    }
}
