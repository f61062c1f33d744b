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
//! File I/O runs inline, blocking the calling thread: reads of local files are served from
//! the page cache in microseconds, and handing each one to another thread would cost as much
//! as the read itself. The FUSE adapter runs requests on its own worker threads first, so the
//! blocking happens at the FUSE boundary; other callers (inspect, tests) accept a short block.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::num::NonZeroUsize;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use lru::LruCache;

use super::key::{validate, validate_prefix};
use super::{
    Capabilities, DirEntry, EntryKind, GetOptions, GetResult, ObjectMeta, Store, StoreError, StoreResult, Version,
};

/// Names of in-flight temporary files start with this; listings hide them.
const TEMP_MARKER: &str = ".zarrfs-tmp.";

/// Open files kept for pinned reads.
const OPEN_FILES: usize = 64;

#[derive(Debug)]
pub struct LocalStore {
    root: PathBuf,
    writable: bool,
    temp_counter: AtomicU64,
    /// Open files for pinned reads, with the version each was opened at.
    open_files: Mutex<LruCache<String, (Arc<File>, Version)>>,
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
            temp_counter: AtomicU64::new(0),
            open_files: Mutex::new(LruCache::new(capacity)),
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
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("value");
        target.with_file_name(format!("{TEMP_MARKER}{name}.{}.{n}", std::process::id()))
    }
}

/// The version of an open or stat'ed file.
pub fn meta_of(m: &fs::Metadata) -> ObjectMeta {
    let mtime_ns = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    ObjectMeta {
        size: m.len(),
        version: Version(format!("{:x}-{:x}-{:x}", m.ino(), m.len(), mtime_ns)),
        mtime_ns: Some(mtime_ns),
    }
}

/// Errors that mean "no value under this key".
fn is_missing(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// Run file I/O inline (see the module docs for why not on a blocking pool).
async fn blocking<T>(f: impl FnOnce() -> StoreResult<T>) -> StoreResult<T> {
    f()
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
}
