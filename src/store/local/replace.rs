//! Conditional writes of the local store: `set_if` / `erase_if` (the erase side is in
//! [`super::erase`]).
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

use super::*;

impl LocalStore {
    pub(super) fn set_if_blocking(&self, key: &str, value: &[u8], condition: &Precondition) -> StoreResult<Version> {
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
}

/// A fresh temporary name for a value named `name`.
pub(super) fn temp_name(name: &str) -> String {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{TEMP_MARKER}{name}.{}.{n}", std::process::id())
}

pub(super) fn conflict(key: &str) -> StoreError {
    StoreError::Conflict { key: key.to_string() }
}

/// Why a conditional replacement did not happen.
#[derive(Debug)]
pub(super) struct Refused {
    kind: RefusedKind,
    /// The temporary name holds a value that is not ours and could not be put back: keep it.
    keep_temp: bool,
}

#[derive(Debug)]
pub(super) enum RefusedKind {
    Conflict,
    IsDirectory,
    Io(std::io::Error),
}

impl Refused {
    pub(super) fn conflict() -> Self {
        Refused {
            kind: RefusedKind::Conflict,
            keep_temp: false,
        }
    }

    pub(super) fn into_store_error(self, key: &str) -> StoreError {
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
pub(super) fn write_temp(dir: &Dir, name: &str, value: &[u8]) -> std::io::Result<(String, File)> {
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

/// `Any`: a plain rename, no lock.
pub(super) fn replace_any(dir: &Dir, name: &str, temp: &str, file: &File) -> Result<(), Refused> {
    let old = dir.stat(name)?.map(|st| meta_of_stat(&st));
    advance_mtime(file, old.and_then(|m| m.mtime_ns));
    dir.rename(temp, name, 0)?;
    Ok(())
}

/// `Absent`: `RENAME_NOREPLACE`, or `link` where that flag is unsupported, or (neither) a check
/// and a rename under the lock.
pub(super) fn replace_absent(dir: &Dir, name: &str, temp: &str, file: &File) -> Result<(), Refused> {
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
pub(super) fn replace_version(
    dir: &Dir,
    name: &str,
    temp: &str,
    file: &File,
    expected: &Version,
) -> Result<(), Refused> {
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
pub(super) fn keep_foreign(e: std::io::Error) -> Refused {
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
pub(super) fn restore(dir: &Dir, name: &str, temp: &str, ours: u64) -> Result<(), Refused> {
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

/// `set`: write a temporary file beside the key, then rename it over the key.
pub(super) fn write_atomically(path: &Path, temp: &Path, key: &str, value: &[u8]) -> StoreResult<Version> {
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
