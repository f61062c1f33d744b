//! A store decorator that injects faults, for reliability tests: transient errors, latency
//! (before an operation, and after a write before its answer),
//! truncated bodies (a read that returns fewer bytes than its range), and changes of a value
//! between two reads (another writer's new version, put in place just before a read). What it
//! injects is counted, so a test can say how many faults its workload went through.
//!
//! Faults are drawn from a seeded generator (a fixed seed replays a run). Writes are never
//! failed after the fact: a refused write is refused before it reaches the store, so an
//! acknowledged write is a stored one.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreError, StoreResult, Version,
};

/// How often each fault happens, in percent of the operations it applies to.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    pub seed: u64,
    /// Reads, listings and writes failing with a transient I/O error.
    pub error_percent: u64,
    /// Ranged reads returning a prefix of what was asked.
    pub truncate_percent: u64,
    /// Up to this much latency before an operation.
    pub max_latency: Duration,
    /// Up to this much latency after a write is applied, before its answer: answers of
    /// overlapping writes may come back in another order than the store applied them.
    pub max_reply_latency: Duration,
    /// Before a read of a key with a replacement, the replacement is put in place.
    pub replace_percent: u64,
}

/// What a run injected.
#[derive(Debug, Default)]
pub struct FaultCounts {
    pub errors: AtomicU64,
    pub truncated: AtomicU64,
    pub replaced: AtomicU64,
}

#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn Store>,
    plan: FaultPlan,
    rng: Mutex<u64>,
    /// Values another writer may put in place at a key, at random, before a read.
    replacements: Mutex<std::collections::HashMap<String, Vec<Bytes>>>,
    /// Every write refused while set (a test's store failing at a moment it chooses).
    refusing_writes: std::sync::atomic::AtomicBool,
    pub counts: FaultCounts,
}

impl FaultStore {
    pub fn new(inner: Arc<dyn Store>, plan: FaultPlan) -> Self {
        let seed = plan.seed.max(1);
        FaultStore {
            inner,
            plan,
            rng: Mutex::new(seed),
            replacements: Mutex::default(),
            refusing_writes: std::sync::atomic::AtomicBool::new(false),
            counts: FaultCounts::default(),
        }
    }

    /// Values another writer may put at `key` (each a whole valid value).
    pub fn may_replace(&self, key: &str, values: Vec<Bytes>) {
        self.replacements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), values);
    }

    /// Refuse every write (set, conditional set, erase) from now on, or stop refusing.
    pub fn refuse_writes(&self, refuse: bool) {
        self.refusing_writes.store(refuse, Relaxed);
    }

    /// A write's fault: refused outright while [`refuse_writes`](Self::refuse_writes) is on.
    async fn before_write(&self, key: &str) -> StoreResult<()> {
        if self.refusing_writes.load(Relaxed) {
            self.counts.errors.fetch_add(1, Relaxed);
            return Err(StoreError::io(
                key,
                std::io::Error::other("injected fault: writes refused"),
            ));
        }
        self.before(key).await
    }

    /// A write's answer, late by up to `max_reply_latency`.
    async fn reply<T>(&self, answer: StoreResult<T>) -> StoreResult<T> {
        if !self.plan.max_reply_latency.is_zero() {
            let nanos = self.plan.max_reply_latency.as_nanos().max(1) as u64;
            tokio::time::sleep(Duration::from_nanos(self.next() % nanos)).await;
        }
        answer
    }

    /// xorshift64*: enough for test faults, and the same sequence for the same seed.
    fn next(&self) -> u64 {
        let mut s = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        s.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn chance(&self, percent: u64) -> bool {
        percent > 0 && self.next() % 100 < percent
    }

    async fn before(&self, key: &str) -> StoreResult<()> {
        if !self.plan.max_latency.is_zero() {
            let nanos = self.plan.max_latency.as_nanos().max(1) as u64;
            tokio::time::sleep(Duration::from_nanos(self.next() % nanos)).await;
        }
        if self.chance(self.plan.error_percent) {
            self.counts.errors.fetch_add(1, Relaxed);
            return Err(StoreError::io(key, std::io::Error::other("injected fault")));
        }
        Ok(())
    }

    async fn maybe_replace(&self, key: &str) -> StoreResult<()> {
        if !self.chance(self.plan.replace_percent) {
            return Ok(());
        }
        let value = {
            let replacements = self.replacements.lock().unwrap_or_else(|e| e.into_inner());
            match replacements.get(key) {
                Some(values) if !values.is_empty() => values[(self.next() % values.len() as u64) as usize].clone(),
                _ => return Ok(()),
            }
        };
        self.inner.set(key, value).await?;
        self.counts.replaced.fetch_add(1, Relaxed);
        Ok(())
    }
}

#[async_trait]
impl Store for FaultStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        self.before(key).await?;
        self.maybe_replace(key).await?;
        let ranged = opts.range.is_some();
        let mut got = self.inner.get(key, opts).await?;
        if let Some(g) = got.as_mut() {
            if ranged && g.bytes.len() > 1 && self.chance(self.plan.truncate_percent) {
                self.counts.truncated.fetch_add(1, Relaxed);
                let keep = (self.next() % g.bytes.len() as u64) as usize;
                g.bytes = g.bytes.slice(..keep);
            }
        }
        Ok(got)
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.before(key).await?;
        self.inner.head(key).await
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.before_write(key).await?;
        let answer = self.inner.set(key, value).await;
        self.reply(answer).await
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        self.before_write(key).await?;
        let answer = self.inner.set_if(key, value, condition).await;
        self.reply(answer).await
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.before_write(key).await?;
        let answer = self.inner.erase(key).await;
        self.reply(answer).await
    }

    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        self.before_write(key).await?;
        let answer = self.inner.erase_if(key, condition).await;
        self.reply(answer).await
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.before(prefix).await?;
        self.inner.list_prefix(prefix).await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.before(prefix).await?;
        self.inner.list_dir(prefix).await
    }
}
