//! An in-memory store for tests: a sorted map from key to bytes, with a counter as version.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use super::key::{validate, validate_prefix};
use super::{Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Store, StoreError, StoreResult, Version};

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
        }
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        validate(key)?;
        let inner = self.lock();
        let Some((bytes, version)) = inner.values.get(key) else {
            return Ok(None);
        };
        let meta = meta(bytes, *version);
        if let Some(expected) = &opts.if_version {
            if *expected != meta.version {
                return Err(StoreError::VersionMismatch {
                    key: key.to_string(),
                    expected: expected.0.clone(),
                });
            }
        }
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
}
