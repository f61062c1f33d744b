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

use lru::LruCache;

use super::invalidating::invalidating_store;
use super::{Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Store, StoreResult};

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

    /// A key (or a directory prefix, ending in `/`) changes: forget it and the directories
    /// above it; a whole directory prefix also forgets everything below it (one pass over the
    /// names kept, only then).
    /// A value is written at `key`: as any change.
    fn created(&self, key: &str, _stored: Option<u64>) {
        self.changed(key);
    }

    fn changed(&self, key: &str) {
        let mut state = self.state();
        state.generation += 1;
        state.missing.pop(key);
        for (i, _) in key.match_indices('/') {
            state.missing.pop(&key[..=i]);
        }
        if key.is_empty() || key.ends_with('/') {
            for name in crate::store::key::keys_under(&state.missing, key) {
                state.missing.pop(&name);
            }
        }
    }

    /// Answer a lookup of `name` from what is kept, or with `fetch`, remembering a miss.
    async fn ask<T>(
        &self,
        name: &str,
        fetch: impl std::future::Future<Output = StoreResult<Option<T>>>,
    ) -> StoreResult<Option<T>> {
        if self.known_missing(name) {
            return Ok(None);
        }
        let started = (Instant::now(), self.generation());
        let found = fetch.await?;
        if found.is_none() {
            self.remember(name, started);
        }
        Ok(found)
    }
}

invalidating_store! {
#[deny(clippy::missing_trait_methods)]
impl Store for MissingCache {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        self.ask(key, self.inner.get(key, opts)).await
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.ask(key, self.inner.head(key)).await
    }

    async fn get_partial_values(&self, requests: &[(String, super::ByteRange)]) -> StoreResult<Vec<Option<GetResult>>> {
        self.inner.get_partial_values(requests).await
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.inner.list_prefix(prefix).await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.inner.list_dir(prefix).await
    }

    async fn list(&self) -> StoreResult<Vec<String>> {
        self.inner.list().await
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        let name = if prefix.is_empty() || prefix.ends_with('/') {
            prefix.to_string()
        } else {
            format!("{prefix}/")
        };
        let exists = async { Ok(self.inner.dir_exists(prefix).await?.then_some(())) };
        Ok(self.ask(&name, exists).await?.is_some())
    }
}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counting::CountingStore;
    use crate::store::memory::MemoryStore;
    use crate::store::Precondition;
    use bytes::Bytes;

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

        // A conditional write refused because someone else created the key forgets the miss,
        // so the writer's re-read sees the other's value.
        assert!(cache.head("c").await.unwrap().is_none());
        counting.set("c", Bytes::from_static(b"theirs")).await.unwrap();
        assert!(cache.head("c").await.unwrap().is_none(), "kept for the TTL");
        let refused = cache
            .set_if("c", Bytes::from_static(b"ours"), Precondition::Absent)
            .await;
        assert!(
            matches!(refused, Err(crate::store::StoreError::Conflict { .. })),
            "{refused:?}"
        );
        let got = cache.get("c", GetOptions::default()).await.unwrap().unwrap();
        assert_eq!(&got.bytes[..], b"theirs");

        let short = MissingCache::new(counting.clone(), Duration::ZERO);
        let before = counting.counts().head;
        assert!(short.head("z").await.unwrap().is_none());
        assert!(short.head("z").await.unwrap().is_none());
        assert_eq!(counting.counts().head - before, 2, "a TTL of 0 keeps nothing");
    }
}
