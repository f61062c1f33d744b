//! A decorator that times every request to the store below it, by kind (`get`, `put`, `list`,
//! `head`, `delete`) and outcome (`ok`, `not_found`, `conflict`, `error`), for the Prometheus
//! endpoint's `zarrfs_store_request_duration_seconds`.
//!
//! It sits right on the backend, under the request counters, so it times what the source
//! itself took (the wire, retries included, for remote sources), not what the caches above
//! answered. The labels are a fixed set of words, never a key: a series per kind and outcome.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    ByteRange, Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreError, StoreResult,
    Version,
};
use crate::metrics::histogram::{Histogram, Snapshot};

/// The kinds of request, as labelled.
pub const KINDS: [&str; 5] = ["get", "put", "list", "head", "delete"];
/// The outcomes, as labelled.
pub const OUTCOMES: [&str; 4] = ["ok", "not_found", "conflict", "error"];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Get = 0,
    Put = 1,
    List = 2,
    Head = 3,
    Delete = 4,
}

/// The time of the store's requests, per kind and outcome.
#[derive(Debug, Default)]
pub struct StoreTimings {
    histograms: [[Histogram; OUTCOMES.len()]; KINDS.len()],
}

impl StoreTimings {
    /// `(kind, outcome, histogram)` for every pair.
    pub fn snapshots(&self) -> Vec<(&'static str, &'static str, Snapshot)> {
        let mut out = Vec::with_capacity(KINDS.len() * OUTCOMES.len());
        for (kind, row) in KINDS.iter().zip(&self.histograms) {
            for (outcome, h) in OUTCOMES.iter().zip(row) {
                out.push((*kind, *outcome, h.snapshot()));
            }
        }
        out
    }
}

/// What a request's result says of its outcome.
trait Outcome {
    fn outcome(&self) -> usize;
}

impl<T: Found> Outcome for StoreResult<T> {
    fn outcome(&self) -> usize {
        match self {
            Ok(v) if v.found() => 0,
            Ok(_) => 1,
            Err(StoreError::Conflict { .. } | StoreError::VersionMismatch { .. }) => 2,
            Err(_) => 3,
        }
    }
}

/// Whether a successful answer found what was asked for (`None` from `get` or `head` did not).
trait Found {
    fn found(&self) -> bool {
        true
    }
}
impl<T> Found for Option<T> {
    fn found(&self) -> bool {
        self.is_some()
    }
}
impl Found for () {}
impl Found for bool {}
impl Found for Version {}
impl<T> Found for Vec<T> {}

#[derive(Debug)]
pub struct TimedStore {
    inner: Arc<dyn Store>,
    timings: Arc<StoreTimings>,
}

impl TimedStore {
    pub fn new(inner: Arc<dyn Store>, timings: Arc<StoreTimings>) -> Self {
        TimedStore { inner, timings }
    }

    async fn timed<T: Found>(&self, kind: Kind, request: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        self.timed_n(kind, 1, request).await
    }

    /// `n` requests sent together, each timed as the whole (as the request counters count
    /// them one by one, so the two agree).
    async fn timed_n<T: Found>(
        &self,
        kind: Kind,
        n: usize,
        request: impl Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let start = Instant::now();
        let result = request.await;
        let elapsed = start.elapsed();
        let histogram = &self.timings.histograms[kind as usize][result.outcome()];
        for _ in 0..n {
            histogram.record(elapsed);
        }
        result
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for TimedStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        self.timed(Kind::Get, self.inner.get(key, opts)).await
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.timed(Kind::Head, self.inner.head(key)).await
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.timed(Kind::Put, self.inner.set(key, value)).await
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        self.timed(Kind::Put, self.inner.set_if(key, value, condition)).await
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.timed(Kind::Delete, self.inner.erase(key)).await
    }

    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        self.timed(Kind::Delete, self.inner.erase_if(key, condition)).await
    }

    /// Timed as one `get` per request, each taking the whole (they go out together).
    async fn get_partial_values(&self, requests: &[(String, ByteRange)]) -> StoreResult<Vec<Option<GetResult>>> {
        let n = requests.len();
        self.timed_n(Kind::Get, n, self.inner.get_partial_values(requests))
            .await
    }

    async fn erase_values(&self, keys: &[String]) -> StoreResult<()> {
        self.timed_n(Kind::Delete, keys.len(), self.inner.erase_values(keys))
            .await
    }

    async fn erase_prefix(&self, prefix: &str) -> StoreResult<()> {
        self.timed(Kind::Delete, self.inner.erase_prefix(prefix)).await
    }

    async fn list(&self) -> StoreResult<Vec<String>> {
        self.timed(Kind::List, self.inner.list()).await
    }

    async fn set_partial_values(&self, values: &[(String, u64, Bytes)]) -> StoreResult<()> {
        self.timed_n(Kind::Put, values.len(), self.inner.set_partial_values(values))
            .await
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.timed(Kind::Put, self.inner.rename(from, to)).await
    }

    async fn create_dir(&self, prefix: &str) -> StoreResult<()> {
        self.inner.create_dir(prefix).await
    }

    async fn remove_dir(&self, prefix: &str) -> StoreResult<()> {
        self.inner.remove_dir(prefix).await
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        self.timed(Kind::Head, self.inner.dir_exists(prefix)).await
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.timed(Kind::List, self.inner.list_prefix(prefix)).await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.timed(Kind::List, self.inner.list_dir(prefix)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    fn count(t: &StoreTimings, kind: &str, outcome: &str) -> u64 {
        let s = t.snapshots();
        let (_, _, snap) = s.iter().find(|(k, o, _)| *k == kind && *o == outcome).unwrap();
        snap.count()
    }

    #[tokio::test]
    async fn requests_are_timed_by_kind_and_outcome() {
        let timings = Arc::new(StoreTimings::default());
        let store = TimedStore::new(Arc::new(MemoryStore::new()), timings.clone());
        store.set("a", Bytes::from_static(b"x")).await.unwrap();
        assert!(store.get("a", GetOptions::default()).await.unwrap().is_some());
        assert!(store.get("b", GetOptions::default()).await.unwrap().is_none());
        let lost = store.set_if("a", Bytes::from_static(b"y"), Precondition::Absent).await;
        assert!(lost.is_err());
        store.list_dir("").await.unwrap();
        store.erase("a").await.unwrap();
        assert_eq!(count(&timings, "put", "ok"), 1);
        assert_eq!(count(&timings, "get", "ok"), 1);
        assert_eq!(count(&timings, "get", "not_found"), 1);
        assert_eq!(count(&timings, "put", "conflict"), 1);
        assert_eq!(count(&timings, "list", "ok"), 1);
        assert_eq!(count(&timings, "delete", "ok"), 1);
        assert_eq!(count(&timings, "head", "ok"), 0);
        assert_eq!(timings.snapshots().len(), 20, "every pair, always");
    }
}
