//! A decorator that counts requests and bytes per operation, so tests (and later the
//! observability counters) can assert on I/O: "a chunk read costs one ranged GET".

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::{Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreResult, Version};

/// A snapshot of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub get: u64,
    pub get_bytes: u64,
    pub head: u64,
    pub set: u64,
    pub set_bytes: u64,
    pub erase: u64,
    pub list: u64,
    pub list_dir: u64,
}

#[derive(Debug, Default)]
struct Counters {
    get: AtomicU64,
    get_bytes: AtomicU64,
    head: AtomicU64,
    set: AtomicU64,
    set_bytes: AtomicU64,
    erase: AtomicU64,
    list: AtomicU64,
    list_dir: AtomicU64,
}

#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn Store>,
    counters: Counters,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        CountingStore {
            inner,
            counters: Counters::default(),
        }
    }

    pub fn counts(&self) -> Counts {
        let c = &self.counters;
        Counts {
            get: c.get.load(Relaxed),
            get_bytes: c.get_bytes.load(Relaxed),
            head: c.head.load(Relaxed),
            set: c.set.load(Relaxed),
            set_bytes: c.set_bytes.load(Relaxed),
            erase: c.erase.load(Relaxed),
            list: c.list.load(Relaxed),
            list_dir: c.list_dir.load(Relaxed),
        }
    }

    pub fn reset(&self) {
        let c = &self.counters;
        for counter in [
            &c.get,
            &c.get_bytes,
            &c.head,
            &c.set,
            &c.set_bytes,
            &c.erase,
            &c.list,
            &c.list_dir,
        ] {
            counter.store(0, Relaxed);
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for CountingStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        self.counters.get.fetch_add(1, Relaxed);
        let result = self.inner.get(key, opts).await?;
        if let Some(r) = &result {
            self.counters.get_bytes.fetch_add(r.bytes.len() as u64, Relaxed);
        }
        Ok(result)
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.counters.head.fetch_add(1, Relaxed);
        self.inner.head(key).await
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.counters.set.fetch_add(1, Relaxed);
        self.counters.set_bytes.fetch_add(value.len() as u64, Relaxed);
        self.inner.set(key, value).await
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.counters.erase.fetch_add(1, Relaxed);
        self.inner.erase(key).await
    }

    /// Counted as a `set` (whether or not the precondition holds).
    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        self.counters.set.fetch_add(1, Relaxed);
        self.counters.set_bytes.fetch_add(value.len() as u64, Relaxed);
        self.inner.set_if(key, value, condition).await
    }

    /// Counted as an `erase`.
    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        self.counters.erase.fetch_add(1, Relaxed);
        self.inner.erase_if(key, condition).await
    }

    /// Counted as one `get` per request.
    async fn get_partial_values(&self, requests: &[(String, super::ByteRange)]) -> StoreResult<Vec<Option<GetResult>>> {
        self.counters.get.fetch_add(requests.len() as u64, Relaxed);
        let results = self.inner.get_partial_values(requests).await?;
        let bytes: usize = results.iter().flatten().map(|r| r.bytes.len()).sum();
        self.counters.get_bytes.fetch_add(bytes as u64, Relaxed);
        Ok(results)
    }

    /// Counted as one `erase` per key.
    async fn erase_values(&self, keys: &[String]) -> StoreResult<()> {
        self.counters.erase.fetch_add(keys.len() as u64, Relaxed);
        self.inner.erase_values(keys).await
    }

    /// Counted as a `list` and an `erase` (the store below does the rest its own way).
    async fn erase_prefix(&self, prefix: &str) -> StoreResult<()> {
        self.counters.list.fetch_add(1, Relaxed);
        self.counters.erase.fetch_add(1, Relaxed);
        self.inner.erase_prefix(prefix).await
    }

    async fn list(&self) -> StoreResult<Vec<String>> {
        self.counters.list.fetch_add(1, Relaxed);
        self.inner.list().await
    }

    async fn set_partial_values(&self, values: &[(String, u64, Bytes)]) -> StoreResult<()> {
        self.counters.set.fetch_add(values.len() as u64, Relaxed);
        let bytes: usize = values.iter().map(|(_, _, b)| b.len()).sum();
        self.counters.set_bytes.fetch_add(bytes as u64, Relaxed);
        self.inner.set_partial_values(values).await
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.counters.set.fetch_add(1, Relaxed);
        self.inner.rename(from, to).await
    }

    async fn create_dir(&self, prefix: &str) -> StoreResult<()> {
        self.inner.create_dir(prefix).await
    }

    async fn remove_dir(&self, prefix: &str) -> StoreResult<()> {
        self.inner.remove_dir(prefix).await
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        self.counters.head.fetch_add(1, Relaxed);
        self.inner.dir_exists(prefix).await
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.counters.list.fetch_add(1, Relaxed);
        self.inner.list_prefix(prefix).await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.counters.list_dir.fetch_add(1, Relaxed);
        self.inner.list_dir(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::store::StoreError;

    #[tokio::test]
    async fn conditional_writes_are_forwarded_and_counted() {
        let store = CountingStore::new(Arc::new(MemoryStore::new()));
        assert!(store.capabilities().conditional_writes);
        let v = store
            .set_if("k", Bytes::from_static(b"abc"), Precondition::Absent)
            .await
            .unwrap();
        let refused = store.set_if("k", Bytes::from_static(b"de"), Precondition::Absent).await;
        assert!(matches!(refused, Err(StoreError::Conflict { .. })));
        store.erase_if("k", Precondition::Version(v)).await.unwrap();
        let counts = store.counts();
        assert_eq!((counts.set, counts.set_bytes, counts.erase), (2, 5, 1));
        assert!(store.head("k").await.unwrap().is_none());
    }
}
