//! An in-memory store for tests: a sorted map from key to bytes, with a counter as version.
//! Conditional writes check and write under the one mutex, so they are exact.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use super::key::{validate, validate_prefix};
use super::{
    Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreError, StoreResult, Version,
};

#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    values: BTreeMap<String, (Bytes, u64)>,
    next_version: u64,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Insert a value synchronously (test setup).
    pub fn insert(&self, key: &str, value: impl Into<Bytes>) {
        let mut inner = self.lock();
        inner.next_version += 1;
        let v = inner.next_version;
        inner.values.insert(key.to_string(), (value.into(), v));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-updated; keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Whether `condition` holds for `key` now.
    fn holds(&self, key: &str, condition: &Precondition) -> bool {
        let current = self.values.get(key).map(|(_, v)| Version(v.to_string()));
        match condition {
            Precondition::Any => true,
            Precondition::Absent => current.is_none(),
            Precondition::Version(expected) => current.as_ref() == Some(expected),
        }
    }
}

fn conflict(key: &str) -> StoreError {
    StoreError::Conflict { key: key.to_string() }
}

fn meta(bytes: &Bytes, version: u64) -> ObjectMeta {
    ObjectMeta {
        size: bytes.len() as u64,
        version: Version(version.to_string()),
        mtime_ns: None,
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            readable: true,
            writable: true,
            listable: true,
            conditional_writes: true,
            directories: false,
            suffix_reads: true,
        }
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        validate(key)?;
        let inner = self.lock();
        let Some((bytes, version)) = inner.values.get(key) else {
            return Ok(None);
        };
        let meta = meta(bytes, *version);
        opts.check_version(key, &meta.version)?;
        let (start, end) = opts.byte_range().resolve(meta.size);
        let bytes = bytes.slice(start as usize..end as usize);
        Ok(Some(GetResult {
            bytes,
            offset: start,
            meta,
        }))
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        validate(key)?;
        Ok(self.lock().values.get(key).map(|(b, v)| meta(b, *v)))
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        validate(key)?;
        let mut inner = self.lock();
        inner.next_version += 1;
        let v = inner.next_version;
        inner.values.insert(key.to_string(), (value, v));
        Ok(Version(v.to_string()))
    }

    async fn set_partial_values(&self, values: &[(String, u64, Bytes)]) -> StoreResult<()> {
        let mut inner = self.lock();
        for (key, offset, bytes) in values {
            validate(key)?;
            let mut value = inner.values.get(key).map(|(b, _)| b.to_vec()).unwrap_or_default();
            let start = usize::try_from(*offset).map_err(|_| StoreError::Unsupported("offset beyond memory"))?;
            let end = start
                .checked_add(bytes.len())
                .ok_or(StoreError::Unsupported("offset beyond memory"))?;
            if value.len() < end {
                value.resize(end, 0);
            }
            value[start..end].copy_from_slice(bytes);
            inner.next_version += 1;
            let v = inner.next_version;
            inner.values.insert(key.clone(), (Bytes::from(value), v));
        }
        Ok(())
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        validate(key)?;
        self.lock().values.remove(key);
        Ok(())
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        validate(key)?;
        let mut inner = self.lock();
        if !inner.holds(key, &condition) {
            return Err(conflict(key));
        }
        inner.next_version += 1;
        let v = inner.next_version;
        inner.values.insert(key.to_string(), (value, v));
        Ok(Version(v.to_string()))
    }

    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        validate(key)?;
        let mut inner = self.lock();
        if !inner.holds(key, &condition) {
            return Err(conflict(key));
        }
        inner.values.remove(key);
        Ok(())
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let inner = self.lock();
        Ok(inner
            .values
            .range(prefix.to_string()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        validate_prefix(prefix)?;
        let inner = self.lock();
        let mut out: Vec<DirEntry> = Vec::new();
        for (key, (bytes, _)) in inner.values.range(prefix.to_string()..) {
            let Some(rest) = key.strip_prefix(prefix) else {
                break;
            };
            let entry = match rest.split_once('/') {
                Some((dir, _)) => DirEntry::dir(dir),
                None => DirEntry::file(rest, bytes.len() as u64, None),
            };
            if out.last() != Some(&entry) {
                out.push(entry);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ByteRange, EntryKind};

    #[tokio::test]
    async fn ranges_versions_and_listing() {
        let store = MemoryStore::new();
        let v1 = store.set("a/b/c", Bytes::from_static(b"0123456789")).await.unwrap();
        let got = store
            .get("a/b/c", GetOptions::range(ByteRange::Suffix(3)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((&got.bytes[..], got.offset), (&b"789"[..], 7));
        let got = store
            .get("a/b/c", GetOptions::range(ByteRange::Range { offset: 8, length: 10 }))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got.bytes[..], b"89");
        store
            .set_partial_values(&[("a/b/c".into(), 8, Bytes::from_static(b"XYZ"))])
            .await
            .unwrap();
        let got = store.get("a/b/c", GetOptions::default()).await.unwrap().unwrap();
        assert_eq!(&got.bytes[..], b"01234567XYZ");
        let stale = store.get("a/b/c", GetOptions::pinned(ByteRange::Full, v1)).await;
        assert!(matches!(stale, Err(StoreError::VersionMismatch { .. })));
        store.insert("a/d", "x");
        let names: Vec<_> = store
            .list_dir("a/")
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        assert_eq!(
            names,
            vec![
                ("b".to_string(), EntryKind::Dir),
                ("d".to_string(), EntryKind::File { size: 1 })
            ]
        );
        assert_eq!(store.list_prefix("a/").await.unwrap(), vec!["a/b/c", "a/d"]);
        store.erase_prefix("a/b/").await.unwrap();
        assert_eq!(store.list().await.unwrap(), vec!["a/d"]);
        assert!(store.get("a/../d", GetOptions::default()).await.is_err());
    }

    fn value(store: &MemoryStore, key: &str) -> Option<Bytes> {
        futures::executor::block_on(store.get(key, GetOptions::default()))
            .unwrap()
            .map(|r| r.bytes)
    }

    #[tokio::test]
    async fn conditional_writes_check_the_precondition() {
        let store = MemoryStore::new();
        assert!(store.capabilities().conditional_writes);
        let b = Bytes::from_static;
        let v1 = store.set_if("k", b(b"one"), Precondition::Absent).await.unwrap();
        assert_eq!(store.head("k").await.unwrap().unwrap().version, v1);
        let again = store.set_if("k", b(b"two"), Precondition::Absent).await;
        assert!(matches!(again, Err(StoreError::Conflict { .. })), "{again:?}");
        assert_eq!(value(&store, "k").unwrap(), b(b"one"));
        let v2 = store
            .set_if("k", b(b"two"), Precondition::Version(v1.clone()))
            .await
            .unwrap();
        assert_ne!(v1, v2);
        let stale = store.set_if("k", b(b"three"), Precondition::Version(v1.clone())).await;
        assert!(matches!(stale, Err(StoreError::Conflict { .. })), "{stale:?}");
        assert_eq!(value(&store, "k").unwrap(), b(b"two"));
        let missing = store.set_if("nope", b(b"x"), Precondition::Version(v2.clone())).await;
        assert!(matches!(missing, Err(StoreError::Conflict { .. })));
        assert!(value(&store, "nope").is_none());
        let v3 = store.set_if("k", b(b"any"), Precondition::Any).await.unwrap();
        assert!(v3 != v2 && v3 != v1);

        assert!(matches!(
            store.erase_if("k", Precondition::Absent).await,
            Err(StoreError::Conflict { .. })
        ));
        assert!(matches!(
            store.erase_if("k", Precondition::Version(v2)).await,
            Err(StoreError::Conflict { .. })
        ));
        assert_eq!(value(&store, "k").unwrap(), b(b"any"));
        store.erase_if("k", Precondition::Version(v3.clone())).await.unwrap();
        assert!(value(&store, "k").is_none());
        store.erase_if("k", Precondition::Absent).await.unwrap();
        assert!(matches!(
            store.erase_if("k", Precondition::Version(v3)).await,
            Err(StoreError::Conflict { .. })
        ));
        store.erase_if("k", Precondition::Any).await.unwrap();
        assert!(store.set_if("../x", b(b"x"), Precondition::Absent).await.is_err());
    }

    #[test]
    fn concurrent_increments_lose_nothing() {
        let store = std::sync::Arc::new(MemoryStore::new());
        let (threads, per_thread) = (8, 200);
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || {
                    futures::executor::block_on(async {
                        let mut conflicts = 0;
                        for _ in 0..per_thread {
                            loop {
                                let got = store.get("counter", GetOptions::default()).await.unwrap();
                                let (n, condition) = match got {
                                    Some(r) => (
                                        std::str::from_utf8(&r.bytes).unwrap().parse::<u64>().unwrap(),
                                        Precondition::Version(r.meta.version),
                                    ),
                                    None => (0, Precondition::Absent),
                                };
                                // Widen the race window between the read and the write.
                                std::thread::yield_now();
                                let next = Bytes::from((n + 1).to_string());
                                match store.set_if("counter", next, condition).await {
                                    Ok(_) => break,
                                    Err(StoreError::Conflict { .. }) => conflicts += 1,
                                    Err(e) => panic!("{e}"),
                                }
                            }
                        }
                        conflicts
                    })
                })
            })
            .collect();
        let _conflicts: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        let total = value(&store, "counter").unwrap();
        assert_eq!(std::str::from_utf8(&total).unwrap(), (threads * per_thread).to_string());
    }
}
