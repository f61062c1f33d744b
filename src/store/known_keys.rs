//! What a remote store holds at single keys, as far as the mount knows: keys found missing, and
//! values the mount wrote (their size and version), kept for the metadata TTL.
//!
//! Lookups of names that do not exist are common (a client probing for `.zarray` next to
//! `zarr.json`, a chunk whose shard was never written, a walk of a source that cannot be
//! listed, where every directory is found by asking), and on a remote store each costs a
//! request. So do lookups of what the mount has just written: the kernel looks a name up before
//! a rename onto it or an unlink of it, an open confirms the version of what it opens, and
//! zarr-python reads back the group document it wrote before each array it adds. The store's
//! answer to the write said it already.
//!
//! This decorator remembers a `head` or `get` that found nothing, a directory that does not
//! exist, and the size and version of a value written through it (and its bytes when it is
//! small: a document, not a shard: at most [`MAX_KEPT_VALUE`] each, [`MAX_KEPT_BYTES`] in
//! all), for the TTL (the same `--metadata-ttl` that bounds how long metadata, indexes and
//! listings are trusted), at most [`MAX_KEYS`] names of each, least recently used first out. Any other write, erase or rename
//! through the mount forgets what it touches; another writer's change shows once the TTL has
//! passed, as for metadata. A written value shows the mount's clock at the write as its time,
//! as in the listings kept (`list_cache`), until the TTL has passed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;

use super::invalidating::invalidating_store;
use bytes::Bytes;

use super::{ByteRange, Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Store, StoreResult, Version};

/// Names (keys, or directory prefixes ending in `/`) remembered as missing, and keys
/// remembered as written.
const MAX_KEYS: usize = 1 << 16;
/// The largest value written whose bytes are kept, and the bytes kept in all.
pub const MAX_KEPT_VALUE: usize = 64 << 10;
pub const MAX_KEPT_BYTES: usize = 8 << 20;

/// A value the mount wrote: what the store said of it, and its bytes if they are kept.
#[derive(Debug)]
struct Written {
    meta: ObjectMeta,
    bytes: Option<Bytes>,
    at: Instant,
}

#[derive(Debug)]
struct State {
    missing: LruCache<String, Instant>,
    written: LruCache<String, Written>,
    /// Bytes of the values kept in `written`.
    kept_bytes: usize,
    /// Writes under way, by key: how many, and whether anything else changed the key while
    /// one was (then none of them is remembered: their answers may come in another order than
    /// the store applied them).
    writing: HashMap<String, (u32, bool)>,
    /// Bumped by every write: a miss found while a write ran is not remembered.
    generation: u64,
}

impl State {
    fn forget_written(&mut self, key: &str) {
        if let Some(old) = self.written.pop(key) {
            self.kept_bytes -= old.bytes.as_ref().map_or(0, Bytes::len);
        }
    }
}

#[derive(Debug)]
pub struct KnownKeys {
    inner: Arc<dyn Store>,
    ttl: Duration,
    state: Mutex<State>,
}

impl KnownKeys {
    pub fn new(inner: Arc<dyn Store>, ttl: Duration) -> Self {
        KnownKeys {
            inner,
            ttl,
            state: Mutex::new(State {
                missing: LruCache::unbounded(),
                written: LruCache::unbounded(),
                kept_bytes: 0,
                writing: HashMap::new(),
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

    /// What the mount wrote at `key` less than the TTL ago, and its bytes if they are kept.
    fn known_written(&self, key: &str) -> Option<(ObjectMeta, Option<Bytes>)> {
        let mut state = self.state();
        match state.written.get(key) {
            Some(w) if w.at.elapsed() < self.ttl => Some((w.meta.clone(), w.bytes.clone())),
            Some(_) => {
                state.forget_written(key);
                None
            }
            None => None,
        }
    }

    /// Remember `name` as missing, unless a write came since the request `started`.
    fn remember(&self, name: &str, started: (Instant, u64)) {
        let mut state = self.state();
        if state.generation != started.1 {
            return;
        }
        state.missing.put(name.to_string(), started.0);
        while state.missing.len() > MAX_KEYS {
            state.missing.pop_lru();
        }
    }

    /// A value is about to be written at `key`.
    fn writing(&self, key: &str) {
        let mut state = self.state();
        let (count, contended) = state.writing.entry(key.to_string()).or_default();
        *contended |= *count > 0;
        *count += 1;
    }

    /// The value `stored` is written at `key`, at that version: remembered, after the change,
    /// unless something else changed the key meanwhile (`None`: the write failed, and may have
    /// changed anything: as any change).
    fn created(&self, key: &str, stored: Option<(&Bytes, &Version)>) {
        let contended = {
            let mut state = self.state();
            match state.writing.get_mut(key) {
                Some((count, contended)) => {
                    let was = *contended;
                    *count -= 1;
                    if *count == 0 {
                        state.writing.remove(key);
                    }
                    was
                }
                None => true,
            }
        };
        self.changed(key);
        let Some((value, version)) = stored.filter(|_| !contended && !self.ttl.is_zero() && !key.ends_with('/')) else {
            return;
        };
        let written = Written {
            meta: ObjectMeta {
                size: value.len() as u64,
                version: version.clone(),
                mtime_ns: super::now_ns(),
            },
            bytes: (value.len() <= MAX_KEPT_VALUE).then(|| value.clone()),
            at: Instant::now(),
        };
        let mut state = self.state();
        state.kept_bytes += written.bytes.as_ref().map_or(0, Bytes::len);
        state.written.put(key.to_string(), written);
        while state.written.len() > MAX_KEYS || state.kept_bytes > MAX_KEPT_BYTES {
            let Some((_, old)) = state.written.pop_lru() else { break };
            state.kept_bytes -= old.bytes.as_ref().map_or(0, Bytes::len);
        }
    }

    /// A value is erased at `key`: as any change.
    fn erased(&self, key: &str, _gone: bool) {
        self.changed(key);
    }

    /// A key (or a directory prefix, ending in `/`) changes: forget it and the directories
    /// above it; a whole directory prefix also forgets everything below it (one pass over the
    /// names kept, only then).
    fn changed(&self, key: &str) {
        let mut state = self.state();
        state.generation += 1;
        let whole_dir = key.is_empty() || key.ends_with('/');
        for (name, (_, contended)) in state.writing.iter_mut() {
            if name == key || (whole_dir && name.starts_with(key)) {
                *contended = true;
            }
        }
        state.missing.pop(key);
        state.forget_written(key);
        for (i, _) in key.match_indices('/') {
            state.missing.pop(&key[..=i]);
        }
        if key.is_empty() || key.ends_with('/') {
            for name in crate::store::key::keys_under(&state.missing, key) {
                state.missing.pop(&name);
            }
            for name in crate::store::key::keys_under(&state.written, key) {
                state.forget_written(&name);
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
impl Store for KnownKeys {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    /// A small value the mount wrote is answered from its bytes, unless the read is pinned to
    /// another version.
    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        if let Some((meta, Some(bytes))) = self.known_written(key) {
            if opts.if_version.as_ref().is_none_or(|v| *v == meta.version) {
                let (start, end) = opts.range.unwrap_or(ByteRange::Full).resolve(meta.size);
                let bytes = bytes.slice(start as usize..end as usize);
                return Ok(Some(GetResult { bytes, offset: start, meta }));
            }
        }
        self.ask(key, self.inner.get(key, opts)).await
    }

    /// A value the mount wrote is answered with the size and version the store gave it.
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if let Some((meta, _)) = self.known_written(key) {
            return Ok(Some(meta));
        }
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
        let cache = KnownKeys::new(counting.clone(), Duration::from_secs(60));
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

        let short = KnownKeys::new(counting.clone(), Duration::ZERO);
        let before = counting.counts().head;
        assert!(short.head("z").await.unwrap().is_none());
        assert!(short.head("z").await.unwrap().is_none());
        assert_eq!(counting.counts().head - before, 2, "a TTL of 0 keeps nothing");
    }

    fn setup(ttl: Duration) -> (Arc<CountingStore>, KnownKeys) {
        let counting = Arc::new(CountingStore::new(Arc::new(MemoryStore::new())));
        let cache = KnownKeys::new(counting.clone(), ttl);
        (counting, cache)
    }

    #[tokio::test]
    async fn a_value_written_is_looked_up_without_a_request_for_the_ttl() {
        let (counting, cache) = setup(Duration::from_millis(300));
        let v1 = cache.set("a/zarr.json", Bytes::from_static(b"{}")).await.unwrap();
        let v2 = cache
            .set_if("a/c/0", Bytes::from_static(b"abc"), Precondition::Absent)
            .await
            .unwrap();
        for _ in 0..3 {
            let meta = cache.head("a/zarr.json").await.unwrap().unwrap();
            assert_eq!((meta.size, &meta.version), (2, &v1));
            let meta = cache.head("a/c/0").await.unwrap().unwrap();
            assert_eq!((meta.size, &meta.version), (3, &v2));
        }
        assert_eq!(counting.counts().head, 0);
        // The store agrees with what was kept.
        assert_eq!(counting.head("a/c/0").await.unwrap().unwrap().version, v2);
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert!(cache.head("a/zarr.json").await.unwrap().is_some());
        assert_eq!(counting.counts().head, 2, "asked again once the TTL has passed");
    }

    #[tokio::test]
    async fn other_changes_forget_what_was_written() {
        let (counting, cache) = setup(Duration::from_secs(600));
        for key in ["a/0", "a/1", "a/b/2", "c"] {
            cache.set(key, Bytes::from_static(b"x")).await.unwrap();
        }
        cache.erase("a/0").await.unwrap();
        assert!(cache.head("a/0").await.unwrap().is_none());
        cache.rename("a/1", "d").await.unwrap();
        assert!(cache.head("a/1").await.unwrap().is_none());
        assert_eq!(cache.head("d").await.unwrap().map(|m| m.size), Some(1));
        cache.erase_prefix("a/").await.unwrap();
        assert!(cache.head("a/b/2").await.unwrap().is_none());
        assert_eq!(counting.counts().head, 4, "each asked");
        // A failed conditional write may mean someone else wrote: forgotten.
        let refused = cache.set_if("c", Bytes::from_static(b"yy"), Precondition::Absent).await;
        assert!(refused.is_err());
        assert_eq!(cache.head("c").await.unwrap().map(|m| m.size), Some(1));
        assert_eq!(counting.counts().head, 5);
    }

    #[tokio::test]
    async fn a_zero_ttl_keeps_nothing() {
        let (counting, cache) = setup(Duration::ZERO);
        cache.set("k", Bytes::from_static(b"x")).await.unwrap();
        assert!(cache.head("k").await.unwrap().is_some());
        assert_eq!(counting.counts().head, 1);
    }

    #[tokio::test]
    async fn a_small_value_written_is_read_from_its_bytes() {
        let (counting, cache) = setup(Duration::from_secs(600));
        let doc = Bytes::from_static(b"{\"node_type\": \"group\"}");
        let v = cache.set("g/zarr.json", doc.clone()).await.unwrap();
        let big = Bytes::from(vec![7u8; MAX_KEPT_VALUE + 1]);
        cache.set("a/c/0", big.clone()).await.unwrap();
        let whole = cache.get("g/zarr.json", GetOptions::default()).await.unwrap().unwrap();
        assert_eq!(
            (whole.bytes, whole.offset, whole.meta.version),
            (doc.clone(), 0, v.clone())
        );
        let part = cache
            .get(
                "g/zarr.json",
                GetOptions::range(ByteRange::Range {
                    offset: 2,
                    length: 1 << 20,
                }),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!((part.bytes, part.offset), (doc.slice(2..), 2));
        let tail = cache
            .get("g/zarr.json", GetOptions::range(ByteRange::Suffix(3)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(tail.bytes, doc.slice(doc.len() - 3..));
        assert_eq!(counting.counts().get, 0, "the document's bytes were kept");
        // A value larger than a document is read from the store.
        assert_eq!(
            cache.get("a/c/0", GetOptions::default()).await.unwrap().unwrap().bytes,
            big
        );
        assert_eq!(counting.counts().get, 1);
        // A read pinned to another version is the store's to answer.
        let pinned = GetOptions {
            range: None,
            if_version: Some(Version("another".into())),
        };
        assert!(cache.get("g/zarr.json", pinned).await.is_err());
        assert_eq!(counting.counts().get, 2);
        // The bytes kept are bounded: the least recently written go first.
        for i in 0..(MAX_KEPT_BYTES / MAX_KEPT_VALUE + 1) {
            cache
                .set(&format!("d/{i}"), Bytes::from(vec![0u8; MAX_KEPT_VALUE]))
                .await
                .unwrap();
        }
        assert!(cache.state().kept_bytes <= MAX_KEPT_BYTES);
        cache.get("d/0", GetOptions::default()).await.unwrap();
        assert_eq!(counting.counts().get, 3, "the first one's bytes went");
    }

    #[tokio::test]
    async fn writes_of_one_key_that_overlap_are_not_remembered() {
        let memory = Arc::new(MemoryStore::new());
        let plan = crate::store::fault::FaultPlan {
            seed: 7,
            max_latency: Duration::from_millis(30),
            ..Default::default()
        };
        let slow = Arc::new(crate::store::fault::FaultStore::new(memory.clone(), plan));
        let counting = Arc::new(CountingStore::new(slow));
        let cache = KnownKeys::new(counting.clone(), Duration::from_secs(600));
        let (a, b) = tokio::join!(
            cache.set("k", Bytes::from_static(b"a")),
            cache.set("k", Bytes::from_static(b"bb"))
        );
        a.unwrap();
        b.unwrap();
        let got = cache.head("k").await.unwrap().unwrap();
        assert_eq!(
            counting.counts().head,
            1,
            "their answers may come in another order than the store applied them"
        );
        assert_eq!(got.version, memory.head("k").await.unwrap().unwrap().version);
        // An erase while a write is under way: neither is remembered.
        let (a, b) = tokio::join!(cache.set("k", Bytes::from_static(b"c")), cache.erase("k"));
        a.unwrap();
        b.unwrap();
        assert_eq!(
            cache.head("k").await.unwrap().map(|m| m.size),
            memory.head("k").await.unwrap().map(|m| m.size)
        );
        assert_eq!(counting.counts().head, 2);
        // A write alone is remembered again.
        let v = cache.set("k", Bytes::from_static(b"ddd")).await.unwrap();
        assert_eq!(cache.head("k").await.unwrap().map(|m| m.version), Some(v));
        assert_eq!(counting.counts().head, 2);
    }
}
