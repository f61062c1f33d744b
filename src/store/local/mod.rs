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
//! File I/O runs where blocking is allowed. A FUSE worker thread polling a request (and any
//! caller outside a tokio task) runs it inline: reads of local files are served from the page
//! cache in microseconds, and handing each one to another thread would cost as much as the read
//! itself. Inside a task on the runtime's workers — a group commit or a write-back pass, with
//! their `flock` waits and `fsync`s — it runs through `block_in_place`, which first hands the
//! worker's other tasks to another thread, so no request waits behind this I/O.
//!
//! The cache of open files holds at most a sixteenth of the process's descriptor limit, and
//! gives its descriptors back whenever an operation finds none left (EMFILE, ENFILE), so a low
//! `ulimit -n` costs failed operations while descriptors are short, never a store stuck
//! failing after the load is gone.
//!
//! The module's parts: [`read`] serves reads (pinned ones through a cache of open files),
//! [`replace`] writes conditionally (the protocol against cooperating and foreign writers) and
//! [`erase`] erases conditionally, [`version`] says what a version is and keeps versions from
//! repeating, [`listing`] walks directories.

mod erase;
mod listing;
mod own_changes;
mod read;
mod replace;
mod version;
pub mod watch;

use listing::*;
pub use own_changes::OwnChanges;
use read::*;
use replace::*;
pub use version::meta_of;
use version::*;

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

/// Open files kept for pinned reads, at most; and at most this fraction of the process's
/// descriptor limit (a cache must never be what leaves the process without descriptors).
const OPEN_FILES: usize = 64;
const OPEN_FILES_SHARE_OF_LIMIT: u64 = 16;

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
    /// Where the store's own changes are recorded, when its source is watched.
    own: Option<Arc<OwnChanges>>,
}

impl LocalStore {
    /// A store rooted at an existing directory.
    pub fn new(root: impl Into<PathBuf>, writable: bool) -> std::io::Result<Self> {
        let root = root.into();
        let meta = fs::metadata(&root)?;
        if !meta.is_dir() {
            return Err(std::io::Error::new(ErrorKind::NotADirectory, "not a directory"));
        }
        let share = crate::sys::fd_limit::soft().map_or(OPEN_FILES, |limit| {
            usize::try_from(limit / OPEN_FILES_SHARE_OF_LIMIT).unwrap_or(usize::MAX)
        });
        let capacity = NonZeroUsize::new(OPEN_FILES.min(share)).unwrap_or(NonZeroUsize::MIN);
        Ok(LocalStore {
            root,
            writable,
            open_files: Mutex::new(LruCache::new(capacity)),
            sweeper: Default::default(),
            own: None,
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
}

/// Errors that mean "no value under this key".
fn is_missing(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// Run file I/O where blocking is allowed (see the module docs).
async fn blocking<T>(f: impl FnOnce() -> StoreResult<T>) -> StoreResult<T> {
    if crate::sys::threads::on_runtime_worker() {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// Whether an operation failed for want of a file descriptor (the process's or the system's).
fn out_of_descriptors<T>(result: &StoreResult<T>) -> bool {
    matches!(result, Err(StoreError::Io { source, .. })
        if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)))
}

impl LocalStore {
    /// [`blocking`] for an operation that changes nothing: out of descriptors, the cache of
    /// open files gives its own back and the operation runs once more. (Without this, a cache
    /// that filled what a low limit leaves would fail every other open for good.)
    async fn reading<T>(&self, f: impl Fn() -> StoreResult<T>) -> StoreResult<T> {
        blocking(|| {
            let first = f();
            if out_of_descriptors(&first) && self.close_cached_files() {
                return f();
            }
            first
        })
        .await
    }

    /// [`blocking`] for an operation that writes: out of descriptors, the cache of open files
    /// gives its own back for the next operation (this one is not repeated: it may have got
    /// half way).
    async fn writing<T>(&self, f: impl FnOnce() -> StoreResult<T>) -> StoreResult<T> {
        let result = blocking(f).await;
        if out_of_descriptors(&result) {
            self.close_cached_files();
        }
        result
    }

    /// Empty the cache of open files; whether it held any.
    fn close_cached_files(&self) -> bool {
        let mut cached = self.open_files.lock().unwrap_or_else(|e| e.into_inner());
        let held = !cached.is_empty();
        cached.clear();
        held
    }
}

#[async_trait]
impl Store for LocalStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            readable: true,
            writable: self.writable,
            listable: true,
            conditional_writes: true,
            directories: true,
            suffix_reads: true,
        }
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        let path = self.path(key)?;
        self.reading(|| match &opts.if_version {
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
        self.reading(move || match fs::metadata(&path) {
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
        let _change = self.begin(&[key]);
        let path = self.path(key)?;
        let temp = self.temp_path(&path);
        let key = key.to_string();
        let version = self.writing(|| write_atomically(&path, &temp, &key, &value)).await?;
        self.note(|own| own.wrote(&key, &version));
        Ok(version)
    }

    /// Writes in place (not atomic): for stores of values that are not shared with readers.
    async fn set_partial_values(&self, values: &[(String, u64, Bytes)]) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        for (key, offset, bytes) in values {
            let path = self.path(key)?;
            self.writing(|| {
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
        let _change = self.begin(&[key]);
        let path = self.path(key)?;
        self.writing(|| match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(StoreError::io(key, e)),
        })
        .await?;
        self.note(|own| own.removed(key));
        Ok(())
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _change = self.begin(&[key]);
        let version = self.writing(|| self.set_if_blocking(key, &value, &condition)).await?;
        self.note(|own| own.wrote(key, &version));
        Ok(version)
    }

    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _change = self.begin(&[key]);
        match condition {
            Precondition::Any => self.erase(key).await,
            Precondition::Absent => self.writing(|| self.erase_absent_blocking(key)).await,
            Precondition::Version(expected) => {
                self.writing(|| self.erase_version_blocking(key, &expected)).await?;
                self.note(|own| own.removed(key));
                Ok(())
            }
        }
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        // Walk the deepest directory the prefix names, then filter by the partial name.
        let dir_part = match prefix.rfind('/') {
            Some(i) => &prefix[..=i],
            None => "",
        };
        let dir = self.dir_path(dir_part)?;
        let (dir_part, prefix) = (dir_part.to_string(), prefix.to_string());
        self.reading(move || {
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
        self.reading(move || list_dir_blocking(&dir, &prefix)).await
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _change = self.begin(&[from, to]);
        let (from_path, to_path) = (self.path(from)?, self.path(to)?);
        // What `from` holds is looked at before the rename: a value replaced in between then
        // differs from the one recorded, and its event counts as a change.
        let before = self.own.as_ref().and_then(|_| own_changes::state(&from_path));
        self.writing(|| {
            if let Some(parent) = to_path.parent() {
                fs::create_dir_all(parent).map_err(|e| StoreError::io(to, e))?;
            }
            fs::rename(&from_path, &to_path).map_err(|e| StoreError::io(from, e))
        })
        .await?;
        self.note(|own| own.moved(from, to, before));
        Ok(())
    }

    async fn create_dir(&self, prefix: &str) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _change = self.begin(&[prefix]);
        let dir = self.dir_path(prefix)?;
        self.writing(|| fs::create_dir_all(&dir).map_err(|e| StoreError::io(prefix, e)))
            .await?;
        self.note(|own| own.made_dir(prefix));
        Ok(())
    }

    async fn remove_dir(&self, prefix: &str) -> StoreResult<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _change = self.begin(&[prefix]);
        let dir = self.dir_path(prefix)?;
        self.writing(|| match fs::remove_dir(&dir) {
            Ok(()) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(StoreError::io(prefix, e)),
        })
        .await?;
        self.note(|own| own.removed(prefix));
        Ok(())
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        let dir = self.dir_path(prefix)?;
        let prefix = prefix.to_string();
        self.reading(move || match fs::metadata(&dir) {
            Ok(m) => Ok(m.is_dir()),
            Err(e) if is_missing(&e) => Ok(false),
            Err(e) => Err(StoreError::io(&prefix, e)),
        })
        .await
    }
}

#[cfg(test)]
mod tests;
