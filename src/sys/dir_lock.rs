//! One process at a time per directory: the `lock` file in it, held with `flock` for as long as
//! the returned file is open (a write journal and a disk cache each belong to one mount). The
//! kernel lets go when the process ends however it ends, so a crash leaves nothing to clean up.

use std::fs::{File, OpenOptions};
use std::path::Path;

/// Create `dir` if need be and take its lock: `Ok(None)` when another process holds it.
pub fn lock_dir(dir: &Path) -> std::io::Result<Option<File>> {
    std::fs::create_dir_all(dir)?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))?;
    match lock.try_lock() {
        Ok(()) => Ok(Some(lock)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_holder_at_a_time() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("made");
        let first = super::lock_dir(&dir).unwrap();
        assert!(first.is_some());
        assert!(super::lock_dir(&dir).unwrap().is_none(), "held");
        drop(first);
        assert!(super::lock_dir(&dir).unwrap().is_some(), "let go");
    }
}
