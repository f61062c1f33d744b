//! Conditional erases of the local store (`erase_if`), by the protocol described in
//! [`super::replace`]: `Absent` is a check; `Version(v)` moves the value to a temporary name
//! under the directory lock, checks what it moved, and puts back anything that was not `v`.

use super::*;

impl LocalStore {
    pub(super) fn erase_absent_blocking(&self, key: &str) -> StoreResult<()> {
        let (dir_path, name) = self.split(key)?;
        match fs::metadata(dir_path.join(name)) {
            Ok(m) if !m.is_dir() => Err(conflict(key)),
            Ok(_) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(StoreError::io(key, e)),
        }
    }

    pub(super) fn erase_version_blocking(&self, key: &str, expected: &Version) -> StoreResult<()> {
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

/// `erase_if(Version(expected))`: under the lock, check, move the value to a temporary name,
/// verify what was moved, and put it back if it was not the expected version.
pub(super) fn remove_version(dir: &Dir, name: &str, expected: &Version) -> Result<(), Refused> {
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
pub(super) fn put_back(dir: &Dir, name: &str, temp: &str) -> Result<(), Refused> {
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
