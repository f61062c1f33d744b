//! `--cache DIR`: a store decorator that keeps what reads fetch on local disk, by object
//! version, and serves later reads from it.
//!
//! It sits right above the request counters, so everything above (the sharding transformer's
//! index and data caches, the listing caches) reads through it unchanged, and `zarrfs stats`
//! counts only what still goes to the store.
//!
//! - **Blocks.** Fetched bytes are kept in blocks of [`BLOCK`](super::ranges::BLOCK) bytes (block `n` holds the
//!   object's bytes from `n × BLOCK`); a read with an uncached range asks the store for the
//!   whole blocks around it, so what it brings can be kept. A read of an object's last bytes
//!   whose size is not known yet (a shard's end-located index) cannot be aligned: the end of
//!   the block it starts in is kept as a partial block, which serves any later read inside it.
//! - **Versions.** Every block is keyed by the version it was read from. A read pinned to a
//!   version is served from that version's blocks while the version is the one last confirmed
//!   (see [`super::versions`]); a read that names none (an index, a metadata document) is
//!   served from the blocks of the object's known version while it was confirmed less than
//!   the metadata TTL ago. After that, one HEAD confirms it (when the blocks needed are held);
//!   a changed object is then read from the store like any miss. So a cached range is never
//!   served for another version, and changes made elsewhere show after the TTL, as with the
//!   memory caches. The mount's own writes forget what was known of the keys they touch.
//! - **Off the read path.** Fetched blocks go to the disk from a background thread
//!   ([`super::writer`]); disk reads run on tokio's blocking threads.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use serde::Serialize;

use super::ranges::{blocks_of, widen, BLOCK};
use super::versions::{Known, Versions};
use super::writer::Writer;
use super::{BlockId, DiskCache};
use crate::store::{
    ByteRange, Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreError, StoreResult,
    Version,
};

/// Requests the cache answered or passed on, for `zarrfs stats`.
#[derive(Debug, Default)]
struct Counts {
    hits: AtomicU64,
    hit_bytes: AtomicU64,
    misses: AtomicU64,
    revalidations: AtomicU64,
}

/// The counters of `zarrfs stats`.
#[derive(Debug, Serialize)]
pub struct DiskCacheCounts {
    pub disk_cache_hits: u64,
    pub disk_cache_hit_bytes: u64,
    pub disk_cache_misses: u64,
    pub disk_cache_revalidations: u64,
    pub disk_cache_bytes: u64,
    pub disk_cache_written_bytes: u64,
    pub disk_cache_evictions: u64,
    pub disk_cache_torn: u64,
    pub disk_cache_dropped_writes: u64,
}

/// A store read through a disk cache (see the module's documentation).
#[derive(Debug)]
pub struct DiskCachedStore {
    inner: Arc<dyn Store>,
    cache: Arc<DiskCache>,
    versions: Arc<Versions>,
    writer: Writer,
    /// Prefixed to keys in the cache, so that one directory may cache several sources.
    namespace: String,
    ttl: Duration,
    counts: Counts,
}

impl DiskCachedStore {
    /// Read `inner` through the cache in `dir` (one mount at a time), bounded by `max_bytes`;
    /// `namespace` names the source.
    pub fn open(
        inner: Arc<dyn Store>,
        dir: &std::path::Path,
        max_bytes: u64,
        namespace: &str,
        ttl: Duration,
    ) -> Result<DiskCachedStore, super::DiskCacheError> {
        let cache = Arc::new(DiskCache::open(dir, max_bytes)?);
        let io = |source| super::DiskCacheError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        // A record per block the bound holds, at least a few thousand.
        let capacity = usize::try_from(max_bytes / BLOCK).unwrap_or(usize::MAX).max(4096);
        let versions = Arc::new(Versions::open(dir, capacity).map_err(io)?);
        let writer = Writer::start(cache.clone(), versions.clone()).map_err(io)?;
        Ok(DiskCachedStore {
            inner,
            cache,
            versions,
            writer,
            namespace: format!("{namespace}\n"),
            ttl,
            counts: Counts::default(),
        })
    }

    /// Write what waits and save the known versions for the next mount (at unmount).
    pub fn close(&self) {
        self.writer.close();
    }

    /// Wait until what reads fetched is on disk (tests).
    #[cfg(test)]
    pub fn settle(&self) {
        self.writer.settle();
    }

    pub fn counts(&self) -> DiskCacheCounts {
        let c = &self.counts;
        let s = &self.cache.stats;
        DiskCacheCounts {
            disk_cache_hits: c.hits.load(Relaxed),
            disk_cache_hit_bytes: c.hit_bytes.load(Relaxed),
            disk_cache_misses: c.misses.load(Relaxed),
            disk_cache_revalidations: c.revalidations.load(Relaxed),
            disk_cache_bytes: self.cache.bytes(),
            disk_cache_written_bytes: s.written_bytes.load(Relaxed),
            disk_cache_evictions: s.evictions.load(Relaxed),
            disk_cache_torn: s.torn.load(Relaxed),
            disk_cache_dropped_writes: self.writer.dropped.load(Relaxed),
        }
    }

    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.namespace)
    }

    fn block_id(&self, name: &str, version: &Version, block: u64) -> BlockId {
        BlockId {
            key: name.to_string(),
            version: version.0.clone(),
            block,
        }
    }

    /// Whether the blocks of `[start, end)` of the known version are held.
    fn holds(&self, name: &str, meta: &ObjectMeta, (start, end): (u64, u64)) -> bool {
        blocks_of(start, end, meta.size).all(|(n, lo, hi)| {
            self.cache
                .holds(&self.block_id(name, &meta.version, n), hi - lo.max(start))
        })
    }

    /// `[start, end)` of the known version from disk, if every block of it is held and sound.
    async fn read_disk(&self, name: &str, meta: &ObjectMeta, (start, end): (u64, u64)) -> Option<GetResult> {
        let result = |bytes: Bytes| GetResult {
            bytes,
            offset: start,
            meta: meta.clone(),
        };
        if start >= end {
            return Some(result(Bytes::new()));
        }
        let ids: Vec<(BlockId, u64, u64)> = blocks_of(start, end, meta.size)
            .map(|(n, lo, hi)| (self.block_id(name, &meta.version, n), lo, hi))
            .collect();
        // One blocking read per block, all at once: a cold disk serves them in parallel.
        let reads = ids.into_iter().map(|(id, lo, hi)| {
            let cache = self.cache.clone();
            tokio::task::spawn_blocking(move || {
                let data = cache.get(&id)?;
                // The block's data ends at `hi` (a partial block holds only its end).
                let data_start = hi.checked_sub(data.len() as u64)?;
                let (from, to) = (lo.max(start), hi.min(end));
                if data_start > from || data_start < lo {
                    return None;
                }
                Some(data.slice((from - data_start) as usize..(to - data_start) as usize))
            })
        });
        let mut parts = Vec::new();
        for read in futures::future::join_all(reads).await {
            parts.push(read.ok()??);
        }
        let bytes = match <[Bytes; 1]>::try_from(parts) {
            Ok([one]) => one,
            Err(parts) => {
                let mut joined = BytesMut::with_capacity((end - start) as usize);
                for part in parts {
                    joined.extend_from_slice(&part);
                }
                joined.freeze()
            }
        };
        self.counts.hits.fetch_add(1, Relaxed);
        self.counts.hit_bytes.fetch_add(bytes.len() as u64, Relaxed);
        Some(result(bytes))
    }

    /// Run `write` of `keys`, forgetting what was known of them before it starts and after it
    /// ends (a read that began in between records nothing: see `Versions::record`).
    async fn writing<'k, T>(
        &self,
        keys: impl IntoIterator<Item = &'k str> + Clone,
        write: impl std::future::Future<Output = T>,
    ) -> T {
        let forget = || {
            keys.clone()
                .into_iter()
                .for_each(|k| self.versions.forget(&self.name(k)))
        };
        forget();
        let done = write.await;
        forget();
        done
    }

    /// Confirm with a HEAD that `known` is still the object's version; the version found is
    /// recorded either way. `None` when the object is gone.
    async fn revalidate(&self, key: &str, name: &str) -> StoreResult<Option<Known>> {
        self.counts.revalidations.fetch_add(1, Relaxed);
        let mark = self.versions.mark();
        match self.inner.head(key).await? {
            Some(meta) => {
                self.versions.record(name, &meta, mark);
                Ok(Some(Known {
                    meta,
                    checked_ms: super::versions::now_ms(),
                }))
            }
            None => {
                self.versions.drop_record(name);
                Ok(None)
            }
        }
    }

    /// Ask the store for `want` widened to whole blocks, keep the blocks it brings, and return
    /// `want` of them.
    async fn fetch(
        &self,
        key: &str,
        name: &str,
        want: ByteRange,
        pin: Option<Version>,
        size: Option<u64>,
    ) -> StoreResult<Option<GetResult>> {
        self.counts.misses.fetch_add(1, Relaxed);
        let mark = self.versions.mark();
        let got = self
            .inner
            .get(
                key,
                GetOptions {
                    range: Some(widen(want, size)),
                    if_version: pin,
                },
            )
            .await;
        let got = match got {
            Ok(Some(got)) => got,
            Ok(None) => {
                self.versions.drop_record(name);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        self.versions.record(name, &got.meta, mark);
        let end = got.offset + got.bytes.len() as u64;
        for (n, lo, hi) in blocks_of(got.offset, end, got.meta.size) {
            // Whole, or the end of a block (a suffix read); a block's start alone is not kept.
            if hi <= end {
                let from = (lo.max(got.offset) - got.offset) as usize;
                let id = self.block_id(name, &got.meta.version, n);
                self.writer.write(id, got.bytes.slice(from..(hi - got.offset) as usize));
            }
        }
        let (start, stop) = want.resolve(got.meta.size);
        let (start, stop) = (start.max(got.offset), stop.min(end).max(start.max(got.offset)));
        Ok(Some(GetResult {
            bytes: got
                .bytes
                .slice((start - got.offset) as usize..(stop - got.offset) as usize),
            offset: start,
            meta: got.meta,
        }))
    }
}

#[async_trait]
impl Store for DiskCachedStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        let name = self.name(key);
        let want = opts.byte_range();
        // A read pinned to another version than the one known goes to the store, which says.
        let pinned_elsewhere = |k: &Known| opts.if_version.as_ref().is_some_and(|pin| *pin != k.meta.version);
        if let Some(mut known) = self.versions.get(&name).filter(|k| !pinned_elsewhere(k)) {
            let mut usable = known.fresh(self.ttl);
            if !usable && self.holds(&name, &known.meta, want.resolve(known.meta.size)) {
                match self.revalidate(key, &name).await? {
                    Some(current) if current.meta.version == known.meta.version => usable = true,
                    Some(current) if !pinned_elsewhere(&current) => known = current,
                    _ => return self.fetch(key, &name, want, opts.if_version, None).await,
                }
            }
            if usable {
                if let Some(hit) = self.read_disk(&name, &known.meta, want.resolve(known.meta.size)).await {
                    return Ok(Some(hit));
                }
            }
            // Pinned to the known version, whose size aligns the request to whole blocks.
            let pin = Some(known.meta.version.clone());
            match self.fetch(key, &name, want, pin, Some(known.meta.size)).await {
                Err(StoreError::VersionMismatch { .. }) if opts.if_version.is_none() => {
                    self.versions.drop_record(&name)
                }
                done => return done,
            }
        }
        self.fetch(key, &name, want, opts.if_version, None).await
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        let name = self.name(key);
        if let Some(known) = self.versions.get(&name).filter(|k| k.fresh(self.ttl)) {
            return Ok(Some(known.meta));
        }
        let mark = self.versions.mark();
        let found = self.inner.head(key).await?;
        match &found {
            Some(meta) => self.versions.record(&name, meta, mark),
            None => self.versions.drop_record(&name),
        }
        Ok(found)
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.writing([key], self.inner.set(key, value)).await
    }

    async fn set_partial_values(&self, values: &[(String, u64, Bytes)]) -> StoreResult<()> {
        let keys = values.iter().map(|(k, _, _)| k.as_str());
        self.writing(keys, self.inner.set_partial_values(values)).await
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.writing([key], self.inner.erase(key)).await
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        self.writing([key], self.inner.set_if(key, value, condition)).await
    }

    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        self.writing([key], self.inner.erase_if(key, condition)).await
    }

    async fn erase_values(&self, keys: &[String]) -> StoreResult<()> {
        self.writing(keys.iter().map(String::as_str), self.inner.erase_values(keys))
            .await
    }

    async fn erase_prefix(&self, prefix: &str) -> StoreResult<()> {
        let names = self.name(prefix);
        self.versions.forget_prefix(&names);
        let done = self.inner.erase_prefix(prefix).await;
        self.versions.forget_prefix(&names);
        done
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.inner.list_prefix(prefix).await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.inner.list_dir(prefix).await
    }

    async fn create_dir(&self, prefix: &str) -> StoreResult<()> {
        self.inner.create_dir(prefix).await
    }

    async fn remove_dir(&self, prefix: &str) -> StoreResult<()> {
        self.inner.remove_dir(prefix).await
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.writing([from, to], self.inner.rename(from, to)).await
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        self.inner.dir_exists(prefix).await
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
