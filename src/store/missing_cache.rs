//! Keys of a remote store found missing, kept for the metadata TTL.
//!
//! Lookups of names that do not exist are common (a client probing for `.zarray` next to
//! `zarr.json`, a chunk whose shard was never written, a walk of a source that cannot be
//! listed, where every directory is found by asking), and on a remote store each costs a
//! request. This decorator remembers a `head` or `get` that found nothing, and a directory that
//! does not exist, for the TTL (the same `--metadata-ttl` that bounds how long metadata,
//! indexes and listings are trusted), at most [`MAX_MISSING`] names, least recently used first
//! out. A write, erase or rename through the mount forgets what it touches; another writer's
//! new key shows once the TTL has passed, as for metadata.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use lru::LruCache;

use super::{Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreResult, Version};

/// Names (keys, or directory prefixes ending in `/`) remembered as missing.
const MAX_MISSING: usize = 1 << 16;

#[derive(Debug)]
struct State {
    missing: LruCache<String, Instant>,
    /// Bumped by every write: a miss found while a write ran is not remembered.
    generation: u64,
}

#[derive(Debug)]
pub struct MissingCache {
    inner: Arc<dyn Store>,
    ttl: Duration,
    state: Mutex<State>,
}

impl MissingCache {
    pub fn new(inner: Arc<dyn Store>, ttl: Duration) -> Self {
        MissingCache {
            inner,
            ttl,
            state: Mutex::new(State {
                missing: LruCache::unbounded(),
                generation: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn generation(&self) -> u64 {
        self.state().generation
    }

    /// Whether `name` was found missing less than the TTL ago.
    fn known_missing(&self, name: &str) -> bool {
        let mut state = self.state();
        match state.missing.get(name) {
            Some(at) if at.elapsed() < self.ttl => true,
            Some(_) => {
                state.missing.pop(name);
                false
            }
            None => false,
        }
    }

    /// Remember `name` as missing, unless a write came since the request `started`.
    fn remember(&self, name: &str, started: (Instant, u64)) {
        let mut state = self.state();
        if state.generation != started.1 {
            return;
        }
        state.missing.put(name.to_string(), started.0);
        while state.missing.len() > MAX_MISSING {
            state.missing.pop_lru();
        }
    }

    /// A key (or a directory prefix) changes: forget it and everything above or below it.
    fn changed(&self, key: &str) {
        let mut state = self.state();
        state.generation += 1;
        let touched: Vec<String> = state
            .missing
            .iter()
            .filter(|(name, _)| key.starts_with(name.as_str()) || name.starts_with(key))
            .map(|(name, _)| name.clone())
            .collect();
        for name in touched {
            state.missing.pop(&name);
        }
    }

    fn started(&self) -> (Instant, u64) {
        (Instant::now(), self.generation())
    }
}

#[async_trait]
impl Store for MissingCache {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        if self.known_missing(key) {
            return Ok(None);
        }
        let started = self.started();
        let got = self.inner.get(key, opts).await?;
        if got.is_none() {
            self.remember(key, started);
        }
        Ok(got)
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if self.known_missing(key) {
            return Ok(None);
        }
        let started = self.started();
        let meta = self.inner.head(key).await?;
        if meta.is_none() {
            self.remember(key, started);
        }
        Ok(meta)
    }

    async fn get_partial_values(&self, requests: &[(String, super::ByteRange)]) -> StoreResult<Vec<Option<GetResult>>> {
        self.inner.get_partial_values(requests).await
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        let result = self.inner.set(key, value).await;
        self.changed(key);
        result
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        let result = self.inner.set_if(key, value, condition).await;
        self.changed(key);
        result
    }

    async fn set_partial_values(&self, values: &[(String, u64, Bytes)]) -> StoreResult<()> {
        let result = self.inner.set_partial_values(values).await;
        for (key, _, _) in values {
            self.changed(key);
        }
        result
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        let result = self.inner.erase(key).await;
        self.changed(key);
        result
    }

    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        let result = self.inner.erase_if(key, condition).await;
        self.changed(key);
        result
    }

    async fn erase_values(&self, keys: &[String]) -> StoreResult<()> {
        let result = self.inner.erase_values(keys).await;
        for key in keys {
            self.changed(key);
        }
        result
    }

    async fn erase_prefix(&self, prefix: &str) -> StoreResult<()> {
        let result = self.inner.erase_prefix(prefix).await;
        self.changed(prefix);
        result
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.inner.list_prefix(prefix).await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.inner.list_dir(prefix).await
    }

    async fn create_dir(&self, prefix: &str) -> StoreResult<()> {
        let result = self.inner.create_dir(prefix).await;
        self.changed(prefix);
        result
    }

    async fn remove_dir(&self, prefix: &str) -> StoreResult<()> {
        let result = self.inner.remove_dir(prefix).await;
        self.changed(prefix);
        result
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        let result = self.inner.rename(from, to).await;
        self.changed(from);
        self.changed(to);
        result
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        let name = if prefix.is_empty() || prefix.ends_with('/') {
            prefix.to_string()
        } else {
            format!("{prefix}/")
        };
        if self.known_missing(&name) {
            return Ok(false);
        }
        let started = self.started();
        let exists = self.inner.dir_exists(prefix).await?;
        if !exists {
            self.remember(&name, started);
        }
        Ok(exists)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counting::CountingStore;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn a_miss_is_asked_once_per_ttl_and_forgotten_on_write() {
        let counting = Arc::new(CountingStore::new(Arc::new(MemoryStore::new())));
        let cache = MissingCache::new(counting.clone(), Duration::from_secs(60));
        for _ in 0..3 {
            assert!(cache.head("a/zarr.json").await.unwrap().is_none());
            assert!(cache.get("a/zarr.json", GetOptions::default()).await.unwrap().is_none());
            assert!(!cache.dir_exists("b/").await.unwrap());
        }
        let c = counting.counts();
        // One request for the key (the get then knows it is missing), one for the directory.
        assert_eq!(c.head + c.get + c.list_dir, 2, "misses asked again: {c:?}");
        cache.set("a/zarr.json", Bytes::from_static(b"{}")).await.unwrap();
        assert!(
            cache.head("a/zarr.json").await.unwrap().is_some(),
            "a write is seen at once"
        );
        cache.set("b/c", Bytes::from_static(b"x")).await.unwrap();
        assert!(
            cache.dir_exists("b/").await.unwrap(),
            "a directory made by a write is seen at once"
        );

        let short = MissingCache::new(counting.clone(), Duration::ZERO);
        let before = counting.counts().head;
        assert!(short.head("z").await.unwrap().is_none());
        assert!(short.head("z").await.unwrap().is_none());
        assert_eq!(counting.counts().head - before, 2, "a TTL of 0 keeps nothing");
    }
}
