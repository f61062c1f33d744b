//! A local disk cache of store bytes, by object version: the block store behind `--cache DIR`
//! (the store decorator that uses it is [`store`]).
//!
//! Blocks of an object's bytes (block `n` holds the bytes from `n × block size`, or only the
//! end of them: what a read of the object's last bytes brought) are kept as files under
//! `DIR/blocks/`, one per (key, version, block), in the format of [`block`]. A block is keyed
//! by the object's version (ETag or generation), so a cached block is never served for another
//! version: a changed object is simply a miss. The cache is bounded by `max_bytes` of block
//! files, the least recently used going first; recency is kept in memory while mounted and
//! taken from the files' modification times at open, so what a remount finds is used again. A
//! torn or damaged file (a crash while writing, a bad disk) fails its checksum and is deleted,
//! never served. One mount at a time uses a cache directory: it holds `DIR/lock` (flock), and
//! a second is refused with a message.
//!
//! Every call here does blocking file I/O: callers run it off the async workers.

pub mod block;
mod ranges;
pub mod store;
mod versions;
mod writer;

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use bytes::Bytes;
use lru::LruCache;

pub use block::BlockId;
use block::Rejected;

/// Why a disk cache could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DiskCacheError {
    #[error("the cache directory {dir} is in use by another mount (one mount at a time per cache; name another with --cache)")]
    InUse { dir: PathBuf },
    #[error("cache directory {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the cache did, for `zarrfs stats`.
#[derive(Debug, Default)]
pub struct DiskCacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub hit_bytes: AtomicU64,
    pub written_bytes: AtomicU64,
    pub evictions: AtomicU64,
    /// Block files dropped for failing their checks.
    pub torn: AtomicU64,
}

/// The block files held: file name (under `blocks/`) -> size on disk, least recent first.
#[derive(Debug)]
struct Held {
    files: LruCache<String, u64>,
    bytes: u64,
}

/// An open disk cache (see the module's documentation).
#[derive(Debug)]
pub struct DiskCache {
    blocks: PathBuf,
    max_bytes: u64,
    held: Mutex<Held>,
    pub stats: DiskCacheStats,
    /// Names temporary files.
    writes: AtomicU64,
    _lock: File,
}

impl DiskCache {
    /// Open (creating) the cache in `dir`, bounded by `max_bytes`: what an earlier mount left
    /// is taken in, most recently written last, and evicted down to the bound.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<DiskCache, DiskCacheError> {
        let io = |source| DiskCacheError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        let Some(lock) = crate::sys::dir_lock::lock_dir(dir).map_err(io)? else {
            return Err(DiskCacheError::InUse { dir: dir.into() });
        };
        let blocks = dir.join("blocks");
        std::fs::create_dir_all(&blocks).map_err(io)?;
        let found = scan(&blocks).map_err(io)?;
        let mut held = Held {
            files: LruCache::unbounded(),
            bytes: 0,
        };
        for (name, size, _) in found {
            held.bytes += size;
            held.files.put(name, size);
        }
        let cache = DiskCache {
            blocks,
            max_bytes,
            held: Mutex::new(held),
            stats: DiskCacheStats::default(),
            writes: AtomicU64::new(0),
            _lock: lock,
        };
        cache.evict_to(max_bytes);
        Ok(cache)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes of block files held.
    pub fn bytes(&self) -> u64 {
        self.held().bytes
    }

    /// The cached data of `id`, if a sound block of exactly it is held.
    pub fn get(&self, id: &BlockId) -> Option<Bytes> {
        let name = id.file_name();
        let known = self.held().files.get(&name).is_some();
        let found = if known {
            match std::fs::read(self.blocks.join(&name)) {
                Ok(bytes) => match block::decode(&Bytes::from(bytes), id) {
                    Ok(data) => Some(data),
                    Err(Rejected::Other) => None,
                    Err(Rejected::Torn) => {
                        self.stats.torn.fetch_add(1, Relaxed);
                        tracing::warn!(file = %self.blocks.join(&name).display(), "a cached block failed its checks: dropped");
                        self.forget(&name);
                        None
                    }
                },
                Err(e) => {
                    if e.kind() != ErrorKind::NotFound {
                        tracing::warn!(
                            "cannot read the cached block {}: {e}",
                            self.blocks.join(&name).display()
                        );
                    }
                    self.forget(&name);
                    None
                }
            }
        } else {
            None
        };
        match &found {
            Some(data) => {
                self.stats.hits.fetch_add(1, Relaxed);
                self.stats.hit_bytes.fetch_add(data.len() as u64, Relaxed);
            }
            None => {
                self.stats.misses.fetch_add(1, Relaxed);
            }
        }
        found
    }

    /// Whether a block file for `id` is held with at least `len` bytes of data (a sound one
    /// is checked only when read). Recency is left alone.
    pub fn holds(&self, id: &BlockId, len: u64) -> bool {
        let wanted = block::encoded_len(id, len);
        self.held()
            .files
            .peek(&id.file_name())
            .is_some_and(|&size| size >= wanted)
    }

    /// Keep `data` as the block `id`, replacing what was held for its file unless that holds
    /// more of the block, and evict the least recently used blocks beyond the bound. A block
    /// larger than the whole bound is not kept.
    pub fn put(&self, id: &BlockId, data: &[u8]) -> std::io::Result<()> {
        if self.holds(id, data.len() as u64 + 1) {
            return Ok(());
        }
        let bytes = block::encode(id, data);
        let size = bytes.len() as u64;
        if size > self.max_bytes {
            return Ok(());
        }
        let name = id.file_name();
        let path = self.blocks.join(&name);
        let Some(subdir) = path.parent() else {
            return Ok(());
        };
        std::fs::create_dir_all(subdir)?;
        let tmp = subdir.join(format!(
            "write-{}-{}.tmp",
            std::process::id(),
            self.writes.fetch_add(1, Relaxed)
        ));
        if let Err(e) = std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, &path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        self.stats.written_bytes.fetch_add(size, Relaxed);
        {
            let mut held = self.held();
            if let Some(old) = held.files.put(name, size) {
                held.bytes = held.bytes.saturating_sub(old);
            }
            held.bytes += size;
        }
        self.evict_to(self.max_bytes);
        Ok(())
    }

    /// Remove the least recently used block files until at most `bound` bytes are held.
    fn evict_to(&self, bound: u64) {
        loop {
            let victim = {
                let mut held = self.held();
                if held.bytes <= bound {
                    return;
                }
                let Some((name, size)) = held.files.pop_lru() else {
                    return;
                };
                held.bytes = held.bytes.saturating_sub(size);
                name
            };
            self.stats.evictions.fetch_add(1, Relaxed);
            remove_quietly(&self.blocks.join(victim));
        }
    }

    /// Drop the block file `name` (gone, or not to be trusted).
    fn forget(&self, name: &str) {
        {
            let mut held = self.held();
            if let Some(size) = held.files.pop(name) {
                held.bytes = held.bytes.saturating_sub(size);
            }
        }
        remove_quietly(&self.blocks.join(name));
    }
}

fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != ErrorKind::NotFound {
            tracing::warn!("cannot remove the cached block {}: {e}", path.display());
        }
    }
}

/// The block files under `blocks` (name, size, modification time), oldest first; temporary
/// files of writes a crash interrupted are removed.
fn scan(blocks: &Path) -> std::io::Result<Vec<(String, u64, std::time::SystemTime)>> {
    let mut found = Vec::new();
    for sub in std::fs::read_dir(blocks)? {
        let sub = sub?;
        if !sub.file_type()?.is_dir() {
            continue;
        }
        let Some(sub_name) = sub.file_name().to_str().map(str::to_string) else {
            continue;
        };
        for file in std::fs::read_dir(sub.path())? {
            let file = file?;
            let Some(name) = file.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if name.ends_with(".tmp") {
                remove_quietly(&file.path());
                continue;
            }
            if !name.ends_with(".zcb") {
                continue;
            }
            let meta = file.metadata()?;
            let mtime = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
            found.push((format!("{sub_name}/{name}"), meta.len(), mtime));
        }
    }
    found.sort_by_key(|(_, _, mtime)| *mtime);
    Ok(found)
}

#[cfg(test)]
mod tests;
