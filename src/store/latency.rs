//! A store decorator that makes every read wait one round trip, as a remote store does, and
//! logs when each request went out: for tests of what a workload sends together and what it
//! sends one after another, without a network (the delaying proxy does the same for real
//! mounts, `zarrfs-delay-proxy`).
//!
//! [`LatencyStore::waves`] counts round trips of wall time the way the proxy's tests do:
//! requests sent within half a round trip of the one before belong to the same wave. Writes
//! are forwarded at once (no test here measures them).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;

use super::{Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreResult, Version};

/// One request as it went out: its operation (`get`, `head`, `list_dir`, `list_prefix`,
/// `dir_exists`), its key and when.
#[derive(Debug, Clone)]
pub struct Sent {
    pub op: &'static str,
    pub key: String,
    pub at: Instant,
}

#[derive(Debug)]
pub struct LatencyStore {
    inner: Arc<dyn Store>,
    rtt: Duration,
    sent: Mutex<Vec<Sent>>,
}

impl LatencyStore {
    pub fn new(inner: Arc<dyn Store>, rtt: Duration) -> Self {
        LatencyStore {
            inner,
            rtt,
            sent: Mutex::default(),
        }
    }

    /// Every request sent so far, in the order sent.
    pub fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `op key` of each request sent from position `since` on.
    pub fn requests(&self, since: usize) -> Vec<String> {
        self.sent()
            .iter()
            .skip(since)
            .map(|s| format!("{} {}", s.op, s.key))
            .collect()
    }

    /// Round trips of wall time taken by the requests from position `since` on.
    pub fn waves(&self, since: usize) -> usize {
        let sent = self.sent();
        let times: Vec<Instant> = sent.iter().skip(since).map(|s| s.at).collect();
        let gap = self.rtt / 2;
        times
            .iter()
            .enumerate()
            .filter(|(i, t)| *i == 0 || t.saturating_duration_since(times[i - 1]) > gap)
            .count()
    }

    async fn trip(&self, op: &'static str, key: &str) {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).push(Sent {
            op,
            key: key.to_string(),
            at: Instant::now(),
        });
        tokio::time::sleep(self.rtt).await;
    }
}

#[async_trait]
impl Store for LatencyStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        self.trip("get", key).await;
        self.inner.get(key, opts).await
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.trip("head", key).await;
        self.inner.head(key).await
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.inner.set(key, value).await
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        self.inner.set_if(key, value, condition).await
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.inner.erase(key).await
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.trip("list_prefix", prefix).await;
        self.inner.list_prefix(prefix).await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.trip("list_dir", prefix).await;
        self.inner.list_dir(prefix).await
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        self.trip("dir_exists", prefix).await;
        self.inner.dir_exists(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn requests_sent_together_are_one_wave() {
        let store = LatencyStore::new(Arc::new(MemoryStore::new()), Duration::from_millis(30));
        let (a, b) = tokio::join!(store.head("a"), store.list_dir(""));
        assert!(a.unwrap().is_none() && b.unwrap().is_empty());
        store.head("b").await.unwrap();
        assert_eq!(store.waves(0), 2);
        assert_eq!(store.waves(2), 1);
        assert_eq!(store.requests(1), ["list_dir ", "head b"]);
    }
}
