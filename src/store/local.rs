//! The local filesystem store (`specs/v3-store-filesystem.rst`): key `a/b/c` is the file
//! `ROOT/a/b/c`. Keys are validated before they are joined onto the root, so no key can name a
//! path outside it.
//!
//! A version is (inode, size, mtime). Values are replaced by writing a temporary file in the
//! same directory and renaming it over the old one, so a replaced value always gets a new
//! inode: a reader that opened the old file keeps reading the old bytes, and a pinned read
//! (`if_version`) compares the version of the *open file* (fstat), which makes the check and
//! the read refer to the same bytes without a second request.
//!
//! Pinned reads (the chunk reads of the sharding transformer) go through a small cache of open
//! files: a cached descriptor is used only while the path still names the pinned version (a
//! `stat` per read), which saves an open and a close per chunk and keeps the kernel's readahead
//! state across the chunks of a shard.
//!
//! File I/O runs where blocking is allowed. A FUSE worker thread polling a request (and any
//! caller outside a tokio task) runs it inline: reads of local files are served from the page
//! cache in microseconds, and handing each one to another thread would cost as much as the read
//! itself. Inside a task on the runtime's workers — a group commit or a write-back pass, with
//! their `flock` waits and `fsync`s — it runs through `block_in_place`, which first hands the
//! worker's other tasks to another thread, so no request waits behind this I/O.
//!
//! # Conditional writes
//!
//! `set_if` / `erase_if` check a [`Precondition`] and write as one step, against two kinds of
//! concurrent writers.
//!
//! **Cooperating writers** (other threads, other `LocalStore`s on the same tree, other zarrfs
//! processes such as a second mount of it): every conditional write takes an exclusive `flock`
//! on the key's parent *directory* (opened `O_RDONLY | O_DIRECTORY`; `flock` works on
//! directories on Linux, and locks of different open descriptions exclude each other within a
//! process too), checks the current version under it, replaces, and releases. Among them the
//! check and the replacement are exact. The new value is written and `fsync`ed to a temporary
//! file (`TEMP_MARKER` name in the same directory, hidden from listings) *before* the lock is
//! taken, and the directory is `fsync`ed after it is released, so the lock covers a few
//! metadata calls. All steps are relative to the one open directory (`openat`, `renameat2`,
//! `fstatat`...), so they act on the directory that is locked.
//!
//! **Foreign writers that replace by rename** (zarr-python, tensorstore: write a temporary
//! file, rename it over the key) know nothing of the lock. Against them:
//!
//! * `Version(v)`: the replacement is `renameat2(temp, key, RENAME_EXCHANGE)`, which puts our
//!   value under the key and the replaced value under our private temporary name in one atomic
//!   step. If what we got back is version `v`, the write succeeded and it is unlinked. If not, a
//!   foreign rename landed between our check and the exchange: we exchange back (their value is
//!   under the key again, byte for byte; ours returns to the temporary name and is unlinked)
//!   and return `Conflict`. Should yet another foreign rename land between our two exchanges,
//!   the second exchange brings back *their* newest value instead of ours; we then exchange
//!   again until what comes back is the value we displaced (bounded; see the limits), so the
//!   key ends with the newest foreign value and only superseded values are dropped.
//! * `Absent`: `renameat2(temp, key, RENAME_NOREPLACE)`; `EEXIST` is the conflict.
//! * `erase_if(Version(v))`: the value is renamed to a temporary name (there is no exchange for
//!   an unlink), and what was moved is checked: version `v` is unlinked; anything else is put
//!   back with `RENAME_NOREPLACE` and the erase is a `Conflict`. If a newer value appeared under
//!   the key meanwhile, the moved one was superseded anyway and is dropped.
//! * `Any` needs no lock: a plain rename, like `set`. `erase_if(Absent)` is a check only.
//!
//! A conflict or an error removes our temporary file (except in the one case where a failed
//! system call leaves a foreign value under our temporary name: that is kept and logged).
//!
//! **Versions and inode reuse.** A version is (inode, size, mtime). A filesystem may hand the
//! inode of a replaced file to the next new file, and file timestamps come from a coarse clock
//! (a few milliseconds), so two quick rewrites could give a *different* value the *same*
//! version (ABA) and let a stale `set_if` through. Conditional writes therefore set the mtime
//! of the new file to `max(now, old mtime + 1 ns)` with the precise clock: under one key the
//! mtimes of conditionally written values strictly increase, and no value can again carry an
//! old version. (Plain `set` keeps the filesystem's own mtime.)
//!
//! **Fallbacks.** Filesystems without `renameat2` flags (`EINVAL`, e.g. NFS, some FUSE
//! filesystems, non-Linux): `Absent` uses `link(temp, key)`, which also fails atomically with
//! `EEXIST`; `Version` and the put-back of an erase check under the lock and then rename
//! plainly. Cooperating writers stay exact; against foreign writers the window between check
//! and rename is open. Where the directory cannot be locked (`flock` on a read-only descriptor
//! fails on NFS), conditional writes fail with the I/O error rather than run unprotected.
//!
//! **Limits** (updates that a foreign writer can still lose):
//! * Writers that modify a file *in place* (open, write, no rename): a write into the old inode
//!   after our check is lost when we unlink it, and an in-place rewrite of the same size within
//!   one timestamp tick does not change the version, so it is not even detected.
//! * Writers that keep the old file open and write to it later: those bytes go to the unlinked
//!   inode.
//! * Rename writers, in a pathological case: if foreign renames keep landing inside the
//!   microsecond window between our exchanges more than a few times in a row, we stop
//!   exchanging and plainly rename the newest value we hold back under the key, which can
//!   overwrite a still newer one. And while we undo a conflicting exchange, a reader may for a
//!   few microseconds see our refused value under the key (an erase that moved a foreign value
//!   away: see the key missing).

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::num::NonZeroUsize;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use lru::LruCache;

use super::key::{validate, validate_prefix};
#[cfg(test)]
use super::lock::hook::{self, Point};
use super::lock::{unsupported, Dir, RENAME_EXCHANGE, RENAME_NOREPLACE};
use super::{
    Capabilities, DirEntry, EntryKind, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreError, StoreResult,
    Version,
};

/// Names of in-flight temporary files start with this; listings hide them.
const TEMP_MARKER: &str = ".zarrfs-tmp.";

/// Open files kept for pinned reads.
const OPEN_FILES: usize = 64;

/// Numbers temporary names, process-wide: two stores of one process on one directory must not
/// pick the same name.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How often a conflicting exchange is undone and redone while foreign renames keep landing in
/// between (see the module docs) before the newest value is put back plainly.
const RESTORE_ATTEMPTS: usize = 8;

#[derive(Debug)]
pub struct LocalStore {
    root: PathBuf,
    writable: bool,
    /// Open files for pinned reads, with the version each was opened at.
    open_files: Mutex<LruCache<String, (Arc<File>, Version)>>,
    /// Removes temporary files left by crashed writers, once per directory written.
    sweeper: super::sweep::Sweeper,
}

impl LocalStore {
    /// A store rooted at an existing directory.
    pub fn new(root: impl Into<PathBuf>, writable: bool) -> std::io::Result<Self> {
        let root = root.into();
        let meta = fs::metadata(&root)?;
        if !meta.is_dir() {
            return Err(std::io::Error::new(ErrorKind::NotADirectory, "not a directory"));
        }
        let capacity = NonZeroUsize::new(OPEN_FILES).unwrap_or(NonZeroUsize::MIN);
        Ok(LocalStore {
            root,
            writable,
            open_files: Mutex::new(LruCache::new(capacity)),
            sweeper: Default::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> StoreResult<PathBuf> {
        validate(key)?;
        Ok(self.root.join(key))
    }

    fn dir_path(&self, prefix: &str) -> StoreResult<PathBuf> {
        validate_prefix(prefix)?;
        Ok(self.root.join(prefix.trim_end_matches('/')))
    }

    /// A pinned read through the cache of open files. The path is stat'ed first: a cached file
    /// is used only while the path still names the pinned version, so a replaced value is
    /// never served, and a stat costs far less than an open and a close.
    fn get_pinned(
        &self,
        path: &Path,
        key: &str,
        pinned: &Version,
        opts: &GetOptions,
    ) -> StoreResult<Option<GetResult>> {
        let current = match fs::metadata(path) {
            Ok(m) if m.is_dir() => return Ok(None),
            Ok(m) => meta_of(&m).version,
            Err(e) if is_missing(&e) => return Ok(None),
            Err(e) => return Err(StoreError::io(key, e)),
        };
        if current != *pinned {
            return Err(StoreError::VersionMismatch {
                key: key.to_string(),
                expected: pinned.0.clone(),
            });
        }
        let cached = self
            .open_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        if let Some((file, version)) = cached {
            if version == *pinned {
                return read_open(&file, key, opts);
            }
        }
        let Some(file) = open_file(path, key)? else {
            return Ok(None);
        };
        let result = read_open(&file, key, opts)?;
        if let Some(got) = &result {
            let entry = (Arc::new(file), got.meta.version.clone());
            self.open_files
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .put(key.to_string(), entry);
        }
        Ok(result)
    }

    fn temp_path(&self, target: &Path) -> PathBuf {
        let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("value");
        target.with_file_name(temp_name(name))
    }

    /// The directory of a key and the key's name in it.
    fn split<'k>(&self, key: &'k str) -> StoreResult<(PathBuf, &'k str)> {
        validate(key)?;
        Ok(match key.rsplit_once('/') {
            Some((dir, name)) => (self.root.join(dir), name),
            None => (self.root.clone(), key),
        })
    }

    fn set_if_blocking(&self, key: &str, value: &[u8], condition: &Precondition) -> StoreResult<Version> {
        let io = |e| StoreError::io(key, e);
        let (dir_path, name) = self.split(key)?;
        if !matches!(condition, Precondition::Version(_)) {
            fs::create_dir_all(&dir_path).map_err(io)?;
        }
        let dir = match Dir::open(&dir_path) {
            Ok(dir) => dir,
            // The key cannot exist, let alone with that version.
            Err(e) if is_missing(&e) && matches!(condition, Precondition::Version(_)) => return Err(conflict(key)),
            Err(e) => return Err(io(e)),
        };
        self.sweeper.sweep_once(&dir_path, TEMP_MARKER);
        let (temp, file) = write_temp(&dir, name, value).map_err(io)?;
        let result = match condition {
            Precondition::Any => replace_any(&dir, name, &temp, &file),
            Precondition::Absent => replace_absent(&dir, name, &temp, &file),
            Precondition::Version(expected) => replace_version(&dir, name, &temp, &file, expected),
        };
        match result {
            Ok(()) => {
                dir.sync().map_err(io)?;
                Ok(meta_of(&file.metadata().map_err(io)?).version)
            }
            Err(e) => {
                if !e.keep_temp {
                    dir.discard(&temp);
                }
                Err(e.into_store_error(key))
            }
        }
    }

    fn erase_absent_blocking(&self, key: &str) -> StoreResult<()> {
        let (dir_path, name) = self.split(key)?;
        match fs::metadata(dir_path.join(name)) {
            Ok(m) if !m.is_dir() => Err(conflict(key)),
            Ok(_) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(StoreError::io(key, e)),
        }
    }

    fn erase_version_blocking(&self, key: &str, expected: &Version) -> StoreResult<()> {
        let (dir_path, name) = self.split(key)?;
        let dir = match Dir::open(&dir_path) {
            Ok(dir) => dir,
            Err(e) if is_missing(&e) => return Err(conflict(key)),
            Err(e) => return Err(StoreError::io(key, e)),
        };
        match remove_version(&dir, name, expected) {
            Ok(()) => dir.sync().map_err(|e| StoreError::io(key, e)),
            Err(e) => Err(e.into_store_error(key)),
        }
    }
}

/// A fresh temporary name for a value named `name`.
fn temp_name(name: &str) -> String {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{TEMP_MARKER}{name}.{}.{n}", std::process::id())
}

/// The version of an open or stat'ed file.
pub fn meta_of(m: &fs::Metadata) -> ObjectMeta {
    meta_from(m.ino(), m.len(), i128::from(m.mtime()), i128::from(m.mtime_nsec()))
}

/// The version of a `stat` result: the same as [`meta_of`] for the same file.
fn meta_of_stat(st: &libc::stat) -> ObjectMeta {
    meta_from(
        ino(st),
        u64::try_from(st.st_size).unwrap_or(0),
        i128::from(st.st_mtime),
        i128::from(st.st_mtime_nsec),
    )
}

fn meta_from(ino: u64, size: u64, mtime_s: i128, mtime_nsec: i128) -> ObjectMeta {
    let mtime_ns = mtime_s * 1_000_000_000 + mtime_nsec;
    ObjectMeta {
        size,
        version: Version(format!("{ino:x}-{size:x}-{mtime_ns:x}")),
        mtime_ns: Some(mtime_ns),
    }
}

/// The inode number of a `stat` result (its type varies across targets).
#[allow(clippy::useless_conversion)]
fn ino(st: &libc::stat) -> u64 {
    u64::from(st.st_ino)
}

fn is_dir_stat(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

fn conflict(key: &str) -> StoreError {
    StoreError::Conflict { key: key.to_string() }
}

/// Why a conditional replacement did not happen.
#[derive(Debug)]
struct Refused {
    kind: RefusedKind,
    /// The temporary name holds a value that is not ours and could not be put back: keep it.
    keep_temp: bool,
}

#[derive(Debug)]
enum RefusedKind {
    Conflict,
    IsDirectory,
    Io(std::io::Error),
}

impl Refused {
    fn conflict() -> Self {
        Refused {
            kind: RefusedKind::Conflict,
            keep_temp: false,
        }
    }

    fn into_store_error(self, key: &str) -> StoreError {
        match self.kind {
            RefusedKind::Conflict => conflict(key),
            RefusedKind::IsDirectory => StoreError::IsDirectory { key: key.to_string() },
            RefusedKind::Io(e) => StoreError::io(key, e),
        }
    }
}

impl From<std::io::Error> for Refused {
    fn from(e: std::io::Error) -> Self {
        Refused {
            kind: RefusedKind::Io(e),
            keep_temp: false,
        }
    }
}

/// Write `value` to a new temporary file in `dir` and `fsync` it; removed again on failure.
fn write_temp(dir: &Dir, name: &str, value: &[u8]) -> std::io::Result<(String, File)> {
    let mut attempts = 0;
    let (temp, mut file) = loop {
        let temp = temp_name(name);
        match dir.create_new(&temp) {
            Ok(file) => break (temp, file),
            // A leftover of a crashed process that had our pid.
            Err(e) if e.kind() == ErrorKind::AlreadyExists && attempts < 16 => attempts += 1,
            Err(e) => return Err(e),
        }
    };
    match file.write_all(value).and_then(|()| file.sync_all()) {
        Ok(()) => Ok((temp, file)),
        Err(e) => {
            dir.discard(&temp);
            Err(e)
        }
    }
}

/// Set the new value's mtime to `max(now, replaced + 1 ns)` from the precise clock, so that no
/// later value of the key can repeat an earlier version (see the module docs). Best effort: a
/// filesystem that refuses keeps its own timestamp.
fn advance_mtime(file: &File, replaced_mtime_ns: Option<i128>) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
        .unwrap_or(0);
    let ns = replaced_mtime_ns.map_or(now, |old| now.max(old + 1));
    let (Ok(secs), Ok(nanos)) = (
        libc::time_t::try_from(ns.div_euclid(1_000_000_000)),
        i64::try_from(ns.rem_euclid(1_000_000_000)),
    ) else {
        return;
    };
    let mtime = nix::sys::time::TimeSpec::new(secs, nanos as _);
    if let Err(e) = nix::sys::stat::futimens(file, &nix::sys::time::TimeSpec::UTIME_OMIT, &mtime) {
        tracing::debug!("could not set the mtime of a new value: {e}");
    }
}

/// `Any`: a plain rename, no lock.
fn replace_any(dir: &Dir, name: &str, temp: &str, file: &File) -> Result<(), Refused> {
    let old = dir.stat(name)?.map(|st| meta_of_stat(&st));
    advance_mtime(file, old.and_then(|m| m.mtime_ns));
    dir.rename(temp, name, 0)?;
    Ok(())
}

/// `Absent`: `RENAME_NOREPLACE`, or `link` where that flag is unsupported, or (neither) a check
/// and a rename under the lock.
fn replace_absent(dir: &Dir, name: &str, temp: &str, file: &File) -> Result<(), Refused> {
    advance_mtime(file, None);
    let _lock = dir.lock()?;
    #[cfg(test)]
    hook::fire(Point::BeforeReplace);
    let exists = |dir: &Dir| -> Result<(), Refused> {
        match dir.stat(name)? {
            Some(st) if is_dir_stat(&st) => Err(Refused {
                kind: RefusedKind::IsDirectory,
                keep_temp: false,
            }),
            _ => Err(Refused::conflict()),
        }
    };
    match dir.rename(temp, name, RENAME_NOREPLACE) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => return exists(dir),
        Err(e) if unsupported(&e) => {}
        Err(e) => return Err(e.into()),
    }
    match dir.link(temp, name) {
        Ok(()) => {
            dir.discard(temp);
            return Ok(());
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => return exists(dir),
        Err(e) if unsupported(&e) => {}
        Err(e) => return Err(e.into()),
    }
    if dir.lstat(name)?.is_some() {
        return exists(dir);
    }
    dir.rename(temp, name, 0)?;
    Ok(())
}

/// `Version(expected)`: check under the lock, exchange, verify what the exchange displaced,
/// undo the exchange if it was not the expected version.
fn replace_version(dir: &Dir, name: &str, temp: &str, file: &File, expected: &Version) -> Result<(), Refused> {
    let _lock = dir.lock()?;
    let current = match dir.stat(name)? {
        Some(st) if !is_dir_stat(&st) => meta_of_stat(&st),
        _ => return Err(Refused::conflict()),
    };
    if current.version != *expected {
        return Err(Refused::conflict());
    }
    advance_mtime(file, current.mtime_ns);
    #[cfg(test)]
    hook::fire(Point::BeforeReplace);
    match dir.rename(temp, name, RENAME_EXCHANGE) {
        Ok(()) => {}
        // Removed since the check (temp surely exists): the precondition no longer holds.
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(Refused::conflict()),
        Err(e) if unsupported(&e) => {
            // No exchange here: the check under the lock is all we have (see the module docs).
            dir.rename(temp, name, 0)?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    }
    // `temp` now holds what the key held an instant ago.
    let ours = file.metadata()?.ino();
    let displaced = match dir.stat(temp) {
        Ok(st) => st,
        Err(e) => {
            // Cannot tell what we displaced: undo and report.
            return Err(match dir.rename(temp, name, RENAME_EXCHANGE) {
                Ok(()) => e.into(),
                Err(_) => keep_foreign(e),
            });
        }
    };
    match displaced {
        Some(st) if !is_dir_stat(&st) && meta_of_stat(&st).version == *expected => {
            dir.discard(temp);
            Ok(())
        }
        _ => {
            tracing::debug!(
                name,
                "a foreign writer replaced the value during a conditional write; undoing"
            );
            restore(dir, name, temp, ours)?;
            Err(Refused::conflict())
        }
    }
}

/// A refusal that must keep the temporary file: it holds a foreign value.
fn keep_foreign(e: std::io::Error) -> Refused {
    tracing::warn!("a conditional write could not be undone; the replaced value is kept under a temporary name: {e}");
    Refused {
        kind: RefusedKind::Io(e),
        keep_temp: true,
    }
}

/// Undo an exchange that displaced a foreign value: `temp` holds that value, `name` should
/// still hold ours (inode `ours`). Exchange back; if what comes back is not ours, a foreign
/// rename replaced ours meanwhile and is newer than what we just put back: exchange again, and
/// so on. Ends with the newest foreign value under `name` and `temp` removed.
fn restore(dir: &Dir, name: &str, temp: &str, ours: u64) -> Result<(), Refused> {
    // The inode we expect back from the next exchange.
    let mut expected = ours;
    for _ in 0..RESTORE_ATTEMPTS {
        // Errors from here on keep `temp`: it may hold the newest foreign value.
        let putting_back = match dir.lstat(temp).map_err(keep_foreign)? {
            Some(st) => ino(&st),
            None => return Ok(()),
        };
        #[cfg(test)]
        hook::fire(Point::BeforeRestore);
        match dir.rename(temp, name, RENAME_EXCHANGE) {
            Ok(()) => {}
            // The key was removed after our exchange: that removal is the newest write.
            Err(e) if e.kind() == ErrorKind::NotFound => {
                dir.discard(temp);
                return Ok(());
            }
            Err(e) => return Err(keep_foreign(e)),
        }
        match dir.lstat(temp).map_err(keep_foreign)? {
            Some(st) if ino(&st) == expected => {
                dir.discard(temp);
                return Ok(());
            }
            Some(_) => expected = putting_back,
            None => return Ok(()),
        }
    }
    tracing::warn!(
        name,
        "foreign writers keep replacing the value; putting the newest back plainly"
    );
    dir.rename(temp, name, 0).map_err(keep_foreign)
}

/// `erase_if(Version(expected))`: under the lock, check, move the value to a temporary name,
/// verify what was moved, and put it back if it was not the expected version.
fn remove_version(dir: &Dir, name: &str, expected: &Version) -> Result<(), Refused> {
    let _lock = dir.lock()?;
    match dir.stat(name)? {
        Some(st) if !is_dir_stat(&st) && meta_of_stat(&st).version == *expected => {}
        _ => return Err(Refused::conflict()),
    }
    let temp = temp_name(name);
    #[cfg(test)]
    hook::fire(Point::BeforeReplace);
    match dir.rename(name, &temp, RENAME_NOREPLACE) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(Refused::conflict()),
        Err(e) if unsupported(&e) => dir.rename(name, &temp, 0).map_err(|e| match e.kind() {
            ErrorKind::NotFound => Refused::conflict(),
            _ => e.into(),
        })?,
        Err(e) => return Err(e.into()),
    }
    let moved = match dir.stat(&temp) {
        Ok(moved) => moved,
        Err(e) => {
            put_back(dir, name, &temp)?;
            return Err(e.into());
        }
    };
    if let Some(st) = moved {
        if !is_dir_stat(&st) && meta_of_stat(&st).version == *expected {
            dir.discard(&temp);
            return Ok(());
        }
    }
    tracing::debug!(
        name,
        "a foreign writer replaced the value during a conditional erase; putting it back"
    );
    put_back(dir, name, &temp)?;
    Err(Refused::conflict())
}

/// Put a value moved to `temp` back under `name`, unless a newer value appeared there (then the
/// moved one was superseded and is dropped).
fn put_back(dir: &Dir, name: &str, temp: &str) -> Result<(), Refused> {
    #[cfg(test)]
    hook::fire(Point::BeforeRestore);
    match dir.rename(temp, name, RENAME_NOREPLACE) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            dir.discard(temp);
            return Ok(());
        }
        Err(e) if unsupported(&e) => {}
        Err(e) => return Err(keep_foreign(e)),
    }
    match dir.link(temp, name) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) if unsupported(&e) => return dir.rename(temp, name, 0).map_err(keep_foreign),
        Err(e) => return Err(keep_foreign(e)),
    }
    dir.discard(temp);
    Ok(())
}

/// Errors that mean "no value under this key".
fn is_missing(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// Run file I/O where blocking is allowed (see the module docs).
async fn blocking<T>(f: impl FnOnce() -> StoreResult<T>) -> StoreResult<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let on_worker = tokio::task::try_id().is_some()
        && Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if on_worker {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

fn open_file(path: &Path, key: &str) -> StoreResult<Option<File>> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if is_missing(&e) => Ok(None),
        Err(e) => Err(StoreError::io(key, e)),
    }
}

/// Read from an open file, after checking its version against the pin.
fn read_open(file: &File, key: &str, opts: &GetOptions) -> StoreResult<Option<GetResult>> {
    let m = file.metadata().map_err(|e| StoreError::io(key, e))?;
    if m.is_dir() {
        return Ok(None);
    }
    let meta = meta_of(&m);
    if let Some(expected) = &opts.if_version {
        if *expected != meta.version {
            return Err(StoreError::VersionMismatch {
                key: key.to_string(),
                expected: expected.0.clone(),
            });
        }
    }
    let (start, end) = opts.byte_range().resolve(meta.size);
    let len = usize::try_from(end - start)
        .map_err(|_| StoreError::io(key, std::io::Error::new(ErrorKind::InvalidInput, "range too large")))?;
    let mut buf = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buf[filled..], start + filled as u64) {
            Ok(0) => break, // the file shrank under us; return what is there
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(StoreError::io(key, e)),
        }
    }
    buf.truncate(filled);
    Ok(Some(GetResult {
        bytes: Bytes::from(buf),
        offset: start,
        meta,
    }))
}

fn write_atomically(path: &Path, temp: &Path, key: &str, value: &[u8]) -> StoreResult<Version> {
    let io = |e| StoreError::io(key, e);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io)?;
    }
    let result = (|| {
        let mut f = File::create(temp)?;
        f.write_all(value)?;
        f.sync_all()?;
        fs::rename(temp, path)?;
        if let Some(parent) = path.parent() {
            File::open(parent)?.sync_all()?;
        }
        fs::metadata(path)
    })();
    match result {
        Ok(m) => Ok(meta_of(&m).version),
        Err(e) => {
            let _ = fs::remove_file(temp);
            Err(io(e))
        }
    }
}

fn list_dir_blocking(dir: &Path, prefix: &str) -> StoreResult<Vec<DirEntry>> {
    let entries = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if is_missing(&e) => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(prefix, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(prefix, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            tracing::debug!(prefix, "skipping a name that is not UTF-8");
            continue;
        };
        if name.starts_with(TEMP_MARKER) {
            continue;
        }
        // Follow symlinks: the source tree is the user's, shown as it reads.
        let m = match fs::metadata(entry.path()) {
            Ok(m) => m,
            Err(e) if is_missing(&e) => continue,
            Err(e) => return Err(StoreError::io(prefix, e)),
        };
        out.push(if m.is_dir() {
            DirEntry::dir(name)
        } else {
            DirEntry::file(name, m.len(), meta_of(&m).mtime_ns)
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn walk(dir: &Path, key_prefix: &str, out: &mut Vec<String>) -> StoreResult<()> {
    for entry in list_dir_blocking(dir, key_prefix)? {
        let key = format!("{key_prefix}{}", entry.name);
        match entry.kind {
            EntryKind::Dir => walk(&dir.join(&entry.name), &format!("{key}/"), out)?,
            EntryKind::File { .. } => out.push(key),
        }
    }
    Ok(())
}

#[async_trait]
impl Store for LocalStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            readable: true,
            writable: self.writable,
            listable: true,
        }
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        let path = self.path(key)?;
        blocking(|| match &opts.if_version {
            None => match open_file(&path, key)? {
                Some(file) => read_open(&file, key, &opts),
                None => Ok(None),
            },
            Some(pinned) => self.get_pinned(&path, key, pinned, &opts),
        })
        .await
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        let path = self.path(key)?;
        let key = key.to_string();
        blocking(move || match fs::metadata(&path) {
            Ok(m) if m.is_dir() => Ok(None),
            Ok(m) => Ok(Some(meta_of(&m))),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(StoreError::io(&key, e)),
        })
        .await
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let path = self.path(key)?;
        let temp = self.temp_path(&path);
        let key = key.to_string();
        blocking(move || write_atomically(&path, &temp, &key, &value)).await
    }

    /// Writes in place (not atomic): for stores of values that are not shared with readers.
    async fn set_partial_values(&self, values: &[(String, u64, Bytes)]) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        for (key, offset, bytes) in values {
            let path = self.path(key)?;
            blocking(|| {
                let file = fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| StoreError::io(key, e))?;
                file.write_all_at(bytes, *offset).map_err(|e| StoreError::io(key, e))
            })
            .await?;
        }
        Ok(())
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let path = self.path(key)?;
        let key = key.to_string();
        blocking(move || match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(StoreError::io(&key, e)),
        })
        .await
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        blocking(|| self.set_if_blocking(key, &value, &condition)).await
    }

    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        match condition {
            Precondition::Any => self.erase(key).await,
            Precondition::Absent => blocking(|| self.erase_absent_blocking(key)).await,
            Precondition::Version(expected) => blocking(|| self.erase_version_blocking(key, &expected)).await,
        }
    }

    fn conditional_writes(&self) -> bool {
        true
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        // Walk the deepest directory the prefix names, then filter by the partial name.
        let dir_part = match prefix.rfind('/') {
            Some(i) => &prefix[..=i],
            None => "",
        };
        let dir = self.dir_path(dir_part)?;
        let (dir_part, prefix) = (dir_part.to_string(), prefix.to_string());
        blocking(move || {
            let mut keys = Vec::new();
            walk(&dir, &dir_part, &mut keys)?;
            keys.retain(|k| k.starts_with(&prefix));
            keys.sort();
            Ok(keys)
        })
        .await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        let dir = self.dir_path(prefix)?;
        let prefix = prefix.to_string();
        blocking(move || list_dir_blocking(&dir, &prefix)).await
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let (from_path, to_path) = (self.path(from)?, self.path(to)?);
        blocking(|| {
            if let Some(parent) = to_path.parent() {
                fs::create_dir_all(parent).map_err(|e| StoreError::io(to, e))?;
            }
            fs::rename(&from_path, &to_path).map_err(|e| StoreError::io(from, e))
        })
        .await
    }

    async fn create_dir(&self, prefix: &str) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let dir = self.dir_path(prefix)?;
        blocking(|| fs::create_dir_all(&dir).map_err(|e| StoreError::io(prefix, e))).await
    }

    async fn remove_dir(&self, prefix: &str) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let dir = self.dir_path(prefix)?;
        blocking(|| match fs::remove_dir(&dir) {
            Ok(()) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(StoreError::io(prefix, e)),
        })
        .await
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        let dir = self.dir_path(prefix)?;
        let prefix = prefix.to_string();
        blocking(move || match fs::metadata(&dir) {
            Ok(m) => Ok(m.is_dir()),
            Err(e) if is_missing(&e) => Ok(false),
            Err(e) => Err(StoreError::io(&prefix, e)),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ByteRange;

    #[tokio::test]
    async fn keys_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), b"outside").unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let store = LocalStore::new(&root, true).unwrap();
        for key in ["../secret", "a/../../secret", "/etc/passwd", ""] {
            assert!(
                matches!(
                    store.get(key, GetOptions::default()).await,
                    Err(StoreError::InvalidKey { .. })
                ),
                "{key}"
            );
            assert!(store.set(key, Bytes::from_static(b"x")).await.is_err(), "{key}");
        }
        assert!(store.list_dir("../").await.is_err());
    }

    #[tokio::test]
    async fn atomic_replace_changes_version_and_pins_reads() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        let v1 = store.set("a/b", Bytes::from_static(b"first value")).await.unwrap();
        let got = store
            .get("a/b", GetOptions::pinned(ByteRange::Suffix(5), v1.clone()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got.bytes[..], b"value");
        let v2 = store.set("a/b", Bytes::from_static(b"other bytes")).await.unwrap();
        assert_ne!(v1, v2, "a replaced value kept its version");
        // The old version is still open in the cache, but it is replaced: never served.
        let stale = store.get("a/b", GetOptions::pinned(ByteRange::Full, v1)).await;
        assert!(matches!(stale, Err(StoreError::VersionMismatch { .. })));
        let got = store
            .get("a/b", GetOptions::pinned(ByteRange::Full, v2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got.bytes[..], b"other bytes");
        store
            .set_partial_values(&[("a/b".into(), 0, Bytes::from_static(b"FIRST"))])
            .await
            .unwrap();
        let got = store.get("a/b", GetOptions::default()).await.unwrap().unwrap();
        assert_eq!(&got.bytes[..], b"FIRST bytes");
        assert!(store.dir_exists("a/").await.unwrap());
        assert!(!store.dir_exists("zz/").await.unwrap());
        let listed = store.list_dir("").await.unwrap();
        assert_eq!(listed.len(), 1, "temporary files must not be listed: {listed:?}");
        store.erase("a/b").await.unwrap();
        store.erase("a/b").await.unwrap();
        assert!(store.get("a/b", GetOptions::default()).await.unwrap().is_none());
        let ro = LocalStore::new(dir.path(), false).unwrap();
        assert!(matches!(ro.set("x", Bytes::new()).await, Err(StoreError::ReadOnly)));
    }

    // ---- conditional writes ----

    fn b(bytes: &'static [u8]) -> Bytes {
        Bytes::from_static(bytes)
    }

    async fn value(store: &LocalStore, key: &str) -> Option<Bytes> {
        store.get(key, GetOptions::default()).await.unwrap().map(|r| r.bytes)
    }

    async fn version(store: &LocalStore, key: &str) -> Version {
        store.head(key).await.unwrap().unwrap().version
    }

    fn is_conflict<T: std::fmt::Debug>(r: &StoreResult<T>) -> bool {
        matches!(r, Err(StoreError::Conflict { .. }))
    }

    /// Every file under `dir` whose name marks it as temporary.
    fn temp_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.extend(temp_files(&path));
            } else if path.file_name().unwrap().to_str().unwrap().starts_with(TEMP_MARKER) {
                out.push(path);
            }
        }
        out
    }

    /// What a foreign writer such as zarr-python does: write a temporary file, rename it over.
    fn foreign_replace(target: &Path, bytes: &[u8]) {
        let temp = target.with_file_name("foreign.tmp");
        fs::write(&temp, bytes).unwrap();
        fs::rename(&temp, target).unwrap();
    }

    /// Run a test hook once, at `point`.
    fn hook_once(point: Point, f: impl FnOnce() + 'static) {
        let mut f = Some(f);
        hook::set(move |p| {
            if p == point {
                if let Some(f) = f.take() {
                    f();
                }
            }
        });
    }

    async fn semantics(store: &LocalStore, root: &Path) {
        assert!(store.conditional_writes());
        for key in ["k", "deep/er/k"] {
            let v1 = store.set_if(key, b(b"one"), Precondition::Absent).await.unwrap();
            assert_eq!(version(store, key).await, v1, "returned version is the stored one");
            let again = store.set_if(key, b(b"two"), Precondition::Absent).await;
            assert!(is_conflict(&again), "{again:?}");
            assert_eq!(value(store, key).await.unwrap(), b(b"one"));

            // Same size, within the same timestamp tick: the version must still change.
            let v2 = store
                .set_if(key, b(b"two"), Precondition::Version(v1.clone()))
                .await
                .unwrap();
            assert_ne!(v1, v2);
            assert_eq!(version(store, key).await, v2);
            assert_eq!(value(store, key).await.unwrap(), b(b"two"));
            let stale = store.set_if(key, b(b"three"), Precondition::Version(v1.clone())).await;
            assert!(is_conflict(&stale), "{stale:?}");
            assert_eq!(value(store, key).await.unwrap(), b(b"two"));

            let v3 = store.set_if(key, b(b"any"), Precondition::Any).await.unwrap();
            assert!(v3 != v1 && v3 != v2);
            assert_eq!(version(store, key).await, v3);

            assert!(is_conflict(&store.erase_if(key, Precondition::Absent).await));
            assert!(is_conflict(
                &store.erase_if(key, Precondition::Version(v2.clone())).await
            ));
            assert_eq!(value(store, key).await.unwrap(), b(b"any"));
            store.erase_if(key, Precondition::Version(v3.clone())).await.unwrap();
            assert!(value(store, key).await.is_none());
            store.erase_if(key, Precondition::Absent).await.unwrap();
            assert!(is_conflict(
                &store.erase_if(key, Precondition::Version(v3.clone())).await
            ));
            let missing = store.set_if(key, b(b"x"), Precondition::Version(v3)).await;
            assert!(is_conflict(&missing), "{missing:?}");
            assert!(value(store, key).await.is_none());
            store.set_if(key, b(b"back"), Precondition::Any).await.unwrap();
            store.erase_if(key, Precondition::Any).await.unwrap();
            assert!(value(store, key).await.is_none());
        }
        // A missing directory: no such value, and nothing is created for a refused write.
        let v = store.set_if("other", b(b"o"), Precondition::Any).await.unwrap();
        let r = store.set_if("nodir/k", b(b"x"), Precondition::Version(v.clone())).await;
        assert!(is_conflict(&r), "{r:?}");
        assert!(is_conflict(&store.erase_if("nodir/k", Precondition::Version(v)).await));
        store.erase_if("nodir/k", Precondition::Absent).await.unwrap();
        assert!(!root.join("nodir").exists());
        // A directory under the key is not a value.
        let r = store.set_if("deep", b(b"x"), Precondition::Absent).await;
        assert!(matches!(r, Err(StoreError::IsDirectory { .. })), "{r:?}");
        store.erase_if("deep", Precondition::Absent).await.unwrap();
        assert!(store.set_if("../x", b(b"x"), Precondition::Absent).await.is_err());
        assert_eq!(temp_files(root), Vec::<PathBuf>::new());
    }

    #[tokio::test]
    async fn conditional_writes_check_the_precondition() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        semantics(&store, dir.path()).await;
    }

    #[tokio::test]
    async fn conditional_writes_without_renameat2_flags() {
        hook::set_no_rename_flags(true);
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        semantics(&store, dir.path()).await;
        // Nor hard links: check and rename under the lock.
        hook::set_no_links(true);
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        semantics(&store, dir.path()).await;
        hook::clear();
    }

    #[tokio::test]
    async fn read_only_store_refuses_conditional_writes() {
        let dir = tempfile::tempdir().unwrap();
        let ro = LocalStore::new(dir.path(), false).unwrap();
        assert!(matches!(
            ro.set_if("x", b(b"x"), Precondition::Absent).await,
            Err(StoreError::ReadOnly)
        ));
        assert!(matches!(
            ro.erase_if("x", Precondition::Absent).await,
            Err(StoreError::ReadOnly)
        ));
    }

    #[tokio::test]
    async fn stale_version_after_a_foreign_rename_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        let v1 = store.set_if("a/k", b(b"ours"), Precondition::Absent).await.unwrap();
        let foreign: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        foreign_replace(&dir.path().join("a/k"), &foreign);
        let r = store
            .set_if("a/k", b(b"lost?"), Precondition::Version(v1.clone()))
            .await;
        assert!(is_conflict(&r), "{r:?}");
        assert!(is_conflict(&store.erase_if("a/k", Precondition::Version(v1)).await));
        assert_eq!(fs::read(dir.path().join("a/k")).unwrap(), foreign);
        assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
    }

    /// A foreign rename lands after the check under the lock, before the exchange: the exchange
    /// brings back a value of another version, which is put back byte for byte.
    #[tokio::test]
    async fn foreign_rename_inside_the_window_is_undone() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        let target = dir.path().join("a/k");
        let v1 = store.set_if("a/k", b(b"original"), Precondition::Absent).await.unwrap();
        let foreign: Vec<u8> = (0..=255u8).rev().cycle().take(4099).collect();
        let (t, f) = (target.clone(), foreign.clone());
        hook_once(Point::BeforeReplace, move || foreign_replace(&t, &f));
        let r = store
            .set_if("a/k", b(b"refused value"), Precondition::Version(v1.clone()))
            .await;
        hook::clear();
        assert!(is_conflict(&r), "{r:?}");
        assert_eq!(fs::read(&target).unwrap(), foreign, "the foreign value must survive");
        assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
        // With the current version the write goes through.
        let current = version(&store, "a/k").await;
        assert_ne!(current, v1);
        store
            .set_if("a/k", b(b"next"), Precondition::Version(current))
            .await
            .unwrap();
        assert_eq!(value(&store, "a/k").await.unwrap(), b(b"next"));
    }

    /// Two foreign renames: one before our exchange, one replacing our value before we undo it.
    /// The newest foreign value must end under the key.
    #[tokio::test]
    async fn foreign_renames_on_both_sides_of_the_exchange() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        let target = dir.path().join("k");
        let v1 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
        let (t, mut step) = (target.clone(), 0);
        hook::set(move |p| {
            step += 1;
            match (step, p) {
                (1, Point::BeforeReplace) => foreign_replace(&t, b"foreign X"),
                (2, Point::BeforeRestore) => foreign_replace(&t, b"foreign Y, newest"),
                (3, Point::BeforeRestore) => {}
                other => panic!("unexpected hook {other:?}"),
            }
        });
        let r = store.set_if("k", b(b"refused"), Precondition::Version(v1)).await;
        hook::clear();
        assert!(is_conflict(&r), "{r:?}");
        assert_eq!(fs::read(&target).unwrap(), b"foreign Y, newest");
        assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
    }

    #[tokio::test]
    async fn foreign_removal_inside_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        let target = dir.path().join("k");
        // Removed before our exchange.
        let v1 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
        let t = target.clone();
        hook_once(Point::BeforeReplace, move || fs::remove_file(&t).unwrap());
        let r = store.set_if("k", b(b"refused"), Precondition::Version(v1)).await;
        hook::clear();
        assert!(is_conflict(&r), "{r:?}");
        assert!(!target.exists());
        // Replaced before our exchange, then (our value) removed before we undo it: the
        // removal is the newest write.
        let v2 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
        let (t, mut step) = (target.clone(), 0);
        hook::set(move |p| {
            step += 1;
            match (step, p) {
                (1, Point::BeforeReplace) => foreign_replace(&t, b"foreign X"),
                (2, Point::BeforeRestore) => fs::remove_file(&t).unwrap(),
                other => panic!("unexpected hook {other:?}"),
            }
        });
        let r = store.set_if("k", b(b"refused"), Precondition::Version(v2)).await;
        hook::clear();
        assert!(is_conflict(&r), "{r:?}");
        assert!(!target.exists());
        assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
    }

    #[tokio::test]
    async fn foreign_creation_beats_absent() {
        // With renameat2 flags; without (then with a hard link, which fails as atomically).
        for no_flags in [false, true] {
            hook::set_no_rename_flags(no_flags);
            let dir = tempfile::tempdir().unwrap();
            let store = LocalStore::new(dir.path(), true).unwrap();
            let t = dir.path().join("k");
            hook_once(Point::BeforeReplace, move || foreign_replace(&t, b"foreign first"));
            let r = store.set_if("k", b(b"refused"), Precondition::Absent).await;
            hook::clear();
            assert!(is_conflict(&r), "no_flags {no_flags}: {r:?}");
            assert_eq!(fs::read(dir.path().join("k")).unwrap(), b"foreign first");
            assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
        }
    }

    #[tokio::test]
    async fn foreign_rename_during_a_conditional_erase_is_put_back() {
        // With renameat2 flags; without (then the put-back is a hard link).
        for no_flags in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let store = LocalStore::new(dir.path(), true).unwrap();
            let target = dir.path().join("k");
            let v1 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
            hook::set_no_rename_flags(no_flags);
            let t = target.clone();
            hook_once(Point::BeforeReplace, move || foreign_replace(&t, b"foreign"));
            let r = store.erase_if("k", Precondition::Version(v1)).await;
            hook::clear();
            assert!(is_conflict(&r), "no_flags {no_flags}: {r:?}");
            assert_eq!(fs::read(&target).unwrap(), b"foreign", "no_flags {no_flags}");
            assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());

            // And a value created while the moved one is out is newer: it stays.
            let v2 = version(&store, "k").await;
            hook::set_no_rename_flags(no_flags);
            let (t, mut step) = (target.clone(), 0);
            hook::set(move |p| {
                step += 1;
                match (step, p) {
                    (1, Point::BeforeReplace) => foreign_replace(&t, b"foreign X"),
                    (2, Point::BeforeRestore) => foreign_replace(&t, b"foreign Y, newest"),
                    other => panic!("unexpected hook {other:?}"),
                }
            });
            let r = store.erase_if("k", Precondition::Version(v2)).await;
            hook::clear();
            assert!(is_conflict(&r), "no_flags {no_flags}: {r:?}");
            assert_eq!(fs::read(&target).unwrap(), b"foreign Y, newest", "no_flags {no_flags}");
            assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
        }
    }

    /// Read-modify-write increments of one counter from many threads, spread over two stores on
    /// one directory (as two mounts would be): not one increment may be lost.
    fn increments(no_rename_flags_nor_links: bool) {
        let dir = tempfile::tempdir().unwrap();
        let stores = [
            Arc::new(LocalStore::new(dir.path(), true).unwrap()),
            Arc::new(LocalStore::new(dir.path(), true).unwrap()),
        ];
        let (threads, per_thread) = (8, 40);
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let store = stores[i % 2].clone();
                std::thread::spawn(move || {
                    hook::set_no_rename_flags(no_rename_flags_nor_links);
                    hook::set_no_links(no_rename_flags_nor_links);
                    futures::executor::block_on(async {
                        let mut conflicts = 0u64;
                        for _ in 0..per_thread {
                            loop {
                                let got = store.get("c/counter", GetOptions::default()).await.unwrap();
                                let (n, condition) = match got {
                                    Some(r) => (
                                        std::str::from_utf8(&r.bytes).unwrap().parse::<u64>().unwrap(),
                                        Precondition::Version(r.meta.version),
                                    ),
                                    None => (0, Precondition::Absent),
                                };
                                let next = Bytes::from((n + 1).to_string());
                                match store.set_if("c/counter", next, condition).await {
                                    Ok(_) => break,
                                    Err(StoreError::Conflict { .. }) => conflicts += 1,
                                    Err(e) => panic!("{e}"),
                                }
                            }
                        }
                        conflicts
                    })
                })
            })
            .collect();
        let conflicts: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        let total = fs::read_to_string(dir.path().join("c/counter")).unwrap();
        assert_eq!(total, (threads * per_thread).to_string(), "{conflicts} conflicts");
        assert!(conflicts > 0, "the writers never raced; the test proves nothing");
        assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
    }

    #[test]
    fn concurrent_increments_lose_nothing() {
        increments(false);
    }

    #[test]
    fn concurrent_increments_lose_nothing_without_renameat2_flags() {
        increments(true);
    }

    /// Quick same-size rewrites of one key (inode numbers get reused, timestamps are coarse):
    /// no version may come back.
    #[tokio::test]
    async fn versions_never_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        let mut seen = std::collections::HashSet::new();
        let mut v = store.set_if("k", b(b"0"), Precondition::Absent).await.unwrap();
        seen.insert(v.clone());
        for i in 0..500u32 {
            let value = Bytes::from((i % 10).to_string());
            v = store.set_if("k", value, Precondition::Version(v)).await.unwrap();
            assert!(seen.insert(v.clone()), "version {v:?} repeated after {i} rewrites");
        }
    }

    /// The mtime of a conditionally written value is above the one it replaced, even one from
    /// the future (clock skew, a restored backup): what keeps versions from repeating where the
    /// filesystem's timestamps are coarse and inode numbers are reused.
    #[tokio::test]
    async fn mtimes_of_a_key_strictly_increase() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        store.set("k", b(b"old")).await.unwrap();
        let future = SystemTime::now() + std::time::Duration::from_secs(3600);
        File::options()
            .write(true)
            .open(dir.path().join("k"))
            .unwrap()
            .set_modified(future)
            .unwrap();
        let old = store.head("k").await.unwrap().unwrap();
        let v = store
            .set_if("k", b(b"new"), Precondition::Version(old.version.clone()))
            .await
            .unwrap();
        let new = store.head("k").await.unwrap().unwrap();
        assert_eq!(new.version, v);
        assert_eq!(new.mtime_ns.unwrap(), old.mtime_ns.unwrap() + 1);
        let v2 = store.set_if("k", b(b"any"), Precondition::Any).await.unwrap();
        let newer = store.head("k").await.unwrap().unwrap();
        assert_eq!(newer.version, v2);
        assert!(newer.mtime_ns > new.mtime_ns);
    }

    /// Foreign renames keep replacing the value between our exchanges: after a bounded number
    /// of exchanges the newest foreign value is put back plainly.
    #[tokio::test]
    async fn restore_gives_up_after_bounded_exchanges() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path(), true).unwrap();
        let target = dir.path().join("k");
        let v1 = store.set_if("k", b(b"original"), Precondition::Absent).await.unwrap();
        let (t, mut n) = (target.clone(), 0);
        hook::set(move |_| {
            n += 1;
            foreign_replace(&t, format!("foreign {n}").as_bytes());
        });
        let r = store.set_if("k", b(b"refused"), Precondition::Version(v1)).await;
        hook::clear();
        assert!(is_conflict(&r), "{r:?}");
        let last = format!("foreign {}", RESTORE_ATTEMPTS + 1);
        assert_eq!(fs::read_to_string(&target).unwrap(), last);
        assert_eq!(temp_files(dir.path()), Vec::<PathBuf>::new());
    }
}
