//! Object stores (S3 and compatibles, Google Cloud Storage, Azure Blob Storage, HTTP) as a
//! [`Store`], through the `object_store` crate, which does the HTTP, signing, retries and
//! backoff. This module only maps the Zarr store vocabulary onto it:
//!
//! - keys live under the source URL's path prefix;
//! - a value's [`Version`] is its ETag (else its generation, else mtime and size);
//! - pinned reads send `If-Match: <etag>`, and the server answers 412 if the object changed,
//!   which becomes [`StoreError::VersionMismatch`];
//! - conditional writes are `PutMode::Create` (absent) and `PutMode::Update` (`If-Match` on
//!   S3 and Azure, generation precondition on GCS), whose refusals become
//!   [`StoreError::Conflict`]. There is no conditional delete in `object_store`: `erase_if`
//!   checks the version and then deletes, a narrow window documented in the README;
//! - suffix ranges go out as such, except on Azure, whose client refuses them: there a HEAD
//!   gives the size and a bounded range follows;
//! - a range starting at or past the end is an empty read, as the trait promises (the server
//!   refuses such a range, so its size is looked up).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use naming::update_version;
use object_store::path::Path;
use object_store::{GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::key::validate_prefix;
use super::transport::{WireCounts, WireStats};
use super::{
    ByteRange, Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreError, StoreResult,
    Version,
};

/// Which service, where behaviour differs.
mod discovery;
mod errors;
mod hidden_documents;
mod html_index;
pub mod http_listing;
mod index_pages;
mod key_search;
pub mod learned_nodes;
mod naming;
mod read;

pub use key_search::{SearchOptions, DEFAULT_MAX_PROBE_SHARDS};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    S3,
    Gcs,
    Azure,
    Http,
}

#[derive(Debug)]
pub struct ObjectBackend {
    inner: Arc<dyn ObjectStore>,
    /// The source's path prefix ("" or "a/b", no slashes at the ends).
    prefix: String,
    flavor: Flavor,
    writable: bool,
    /// For messages: the source URL.
    name: String,
    /// Counters of the HTTP client under `inner`, when it was built with them.
    wire: Option<Arc<WireStats>>,
    /// Credentials that the client's own error messages may repeat (a URL's password), never
    /// to be passed on.
    secrets: Vec<String>,
    /// HTTP sources: whether directories are listed with WebDAV or from HTML index pages, once
    /// the first listing found out (see [`http_listing`]).
    listing: std::sync::atomic::AtomicU8,
    /// HTTP sources: the client that reads directory index pages.
    index_pages: Option<http_listing::IndexPages>,
    /// HTTP sources that cannot be listed: the keys found so far (see [`discovery`]).
    discovered: discovery::Discovered,
    /// ... the nodes their metadata documents name (see [`learned_nodes`]).
    nodes: learned_nodes::Nodes,
    /// ... the directories searched by asking for what may be there (see [`key_search`]).
    searches: key_search::Searches,
    search: SearchOptions,
    /// HTTP sources: the Zarr v2 documents their listings hide (see [`hidden_documents`]).
    hidden: hidden_documents::HiddenDocuments,
    /// HTTP sources: the server answered a range with the whole file; reads fetch whole files.
    ignores_ranges: std::sync::atomic::AtomicBool,
}

impl ObjectBackend {
    pub fn new(inner: Arc<dyn ObjectStore>, prefix: &str, flavor: Flavor, writable: bool, name: String) -> Self {
        let prefix = prefix.trim_matches('/').to_string();
        let writable = writable && flavor != Flavor::Http;
        ObjectBackend {
            inner,
            prefix,
            flavor,
            writable,
            name,
            wire: None,
            secrets: Vec::new(),
            listing: std::sync::atomic::AtomicU8::new(http_listing::LISTING_UNKNOWN),
            index_pages: None,
            discovered: discovery::Discovered::default(),
            nodes: learned_nodes::Nodes::default(),
            searches: key_search::Searches::default(),
            search: SearchOptions::default(),
            hidden: hidden_documents::HiddenDocuments::default(),
            ignores_ranges: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// How listings of a source that cannot be listed search for what may be there.
    pub fn with_search(mut self, search: SearchOptions) -> Self {
        self.search = search;
        self
    }

    /// Scrub these strings from every error message.
    pub fn with_secrets(mut self, secrets: Vec<String>) -> Self {
        self.secrets = secrets.into_iter().filter(|s| !s.is_empty()).collect();
        self
    }

    /// What went over the wire: requests, transient failures, retries.
    pub fn wire_counts(&self) -> Option<WireCounts> {
        self.wire.as_ref().map(|w| w.counts())
    }

    /// The counters themselves, for whoever publishes them (the mount's statistics).
    pub fn wire_stats(&self) -> Option<Arc<WireStats>> {
        self.wire.clone()
    }

    /// Publish the counters the client's connector keeps (see [`super::transport`]).
    pub fn with_wire_stats(mut self, wire: Arc<WireStats>) -> Self {
        self.wire = Some(wire);
        self
    }

    /// HTTP sources: read directory index pages with this client where WebDAV is missing.
    pub fn with_index_pages(mut self, pages: http_listing::IndexPages) -> Self {
        self.index_pages = Some(pages);
        self
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    fn readonly(&self) -> StoreResult<()> {
        if self.writable {
            Ok(())
        } else {
            Err(StoreError::ReadOnly)
        }
    }
}

#[async_trait]
impl Store for ObjectBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            readable: true,
            writable: self.writable,
            listable: !self.discovering(),
            // If-Match / generation / create-only: every writable backend (HTTP is read-only).
            conditional_writes: self.writable,
            directories: false,
            // A server found to ignore ranges sends the whole value for any of them.
            suffix_reads: self.flavor != Flavor::Azure
                && !self.ignores_ranges.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        if self.discovering() && self.searched_and_missing(key) {
            return Ok(None);
        }
        // A read that needs the size first (HEAD, then a bounded range) pins the range to the
        // version the HEAD saw; if the object changed in between, it starts over.
        // A body broken off is read again too.
        for attempt in 0..4 {
            match self.get_attempt(key, &opts).await {
                Err(StoreError::VersionMismatch { .. }) if opts.if_version.is_none() => continue,
                Err(StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::UnexpectedEof && attempt < 3 =>
                {
                    tracing::debug!(key, "body broken off: reading again: {source}");
                    continue;
                }
                Ok(Some(got)) => {
                    self.remember(key, got.meta.size);
                    if opts.range.is_none() {
                        self.learn_from(key, &got.bytes);
                    }
                    return Ok(Some(got));
                }
                other => return other,
            }
        }
        let source = std::io::Error::other("the object kept changing while being read");
        Err(StoreError::Io {
            key: key.to_string(),
            source,
        })
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if self.discovering() {
            if self.searched_and_missing(key) {
                return Ok(None);
            }
            if let Some(meta) = self.found_by_search(key) {
                return Ok(Some(meta));
            }
        }
        let path = self.path(key)?;
        match self.size_of(&path, key).await {
            Ok(Some(m)) => {
                self.remember(key, m.size);
                Ok(Some(self.meta_of(&m)))
            }
            Ok(None) => Ok(None),
            // A directory the server will not list (see `discovery`): remembered as one.
            Err(StoreError::PermissionDenied { .. }) if self.discovering() => {
                self.discovered.add_dir(format!("{key}/"));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        if self.discovering() {
            return self.probe_dir(prefix).await;
        }
        Ok(prefix.is_empty() || !self.list_dir(prefix).await?.is_empty())
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.set_if(key, value, Precondition::Any).await
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        self.readonly()?;
        let path = self.path(key)?;
        let mode = match &condition {
            Precondition::Any => PutMode::Overwrite,
            Precondition::Absent => PutMode::Create,
            Precondition::Version(v) => PutMode::Update(update_version(v)),
        };
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        let put = self
            .inner
            .put_opts(&path, PutPayload::from(value), opts)
            .await
            .map_err(|e| self.error(key, e))?;
        match (put.e_tag, put.version) {
            (_, Some(generation)) if self.flavor == Flavor::Gcs => Ok(Version(format!("g:{generation}"))),
            (Some(etag), _) => Ok(Version(etag)),
            (None, Some(generation)) => Ok(Version(format!("g:{generation}"))),
            (None, None) => Ok(self
                .head(key)
                .await?
                .map(|m| m.version)
                .unwrap_or(Version(String::new()))),
        }
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.readonly()?;
        let path = self.path(key)?;
        match self.inner.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(key, e)),
        }
    }

    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        self.readonly()?;
        let current = self.head(key).await?.map(|m| m.version);
        match (&condition, current) {
            (Precondition::Any, _) => self.erase(key).await,
            (Precondition::Absent, None) => Ok(()),
            (Precondition::Version(v), Some(current)) if *v == current => self.erase(key).await,
            _ => Err(StoreError::Conflict { key: key.to_string() }),
        }
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        if self.lists_by_walk() {
            return self.list_prefix_by_walk(prefix).await;
        }
        // object_store lists whole path segments; list the directory and filter by the name.
        let dir = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        let root = self.raw_path(dir);
        let listed: Vec<object_store::ObjectMeta> = self
            .inner
            .list(Some(&root))
            .try_collect()
            .await
            .map_err(|e| self.error(prefix, e))?;
        let mut keys: Vec<String> = listed
            .iter()
            .filter_map(|m| self.key_of(&m.location))
            .filter(|k| k.starts_with(prefix))
            .collect();
        keys.sort();
        Ok(keys)
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        validate_prefix(prefix)?;
        if self.flavor == Flavor::Http {
            return self.list_dir_http(prefix).await;
        }
        self.list_dir_webdav(prefix).await
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.readonly()?;
        let (from_path, to_path) = (self.path(from)?, self.path(to)?);
        self.inner
            .rename(&from_path, &to_path)
            .await
            .map_err(|e| self.error(from, e))
    }
}

impl ObjectBackend {
    /// `list_dir` through object_store's listing (for HTTP sources: WebDAV `PROPFIND`).
    async fn list_dir_webdav(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        let dir = self.raw_path(prefix);

        let listed = self
            .inner
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(|e| self.error(prefix, e))?;
        let name = |p: &Path| p.filename().map(str::to_string);
        let mut out: Vec<DirEntry> = listed
            .common_prefixes
            .iter()
            .filter_map(name)
            .map(DirEntry::dir)
            .collect();
        for meta in &listed.objects {
            if let Some(n) = name(&meta.location) {
                out.push(DirEntry::file(n, meta.size, self.meta_of(meta).mtime_ns));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn backend(prefix: &str) -> ObjectBackend {
        ObjectBackend::new(Arc::new(InMemory::new()), prefix, Flavor::S3, true, "memory://".into())
    }

    #[tokio::test]
    async fn the_store_contract_over_object_store() {
        let s = backend("data/set.zarr");
        assert!(s.get("a/b", GetOptions::default()).await.unwrap().is_none());
        let v1 = s
            .set_if("a/b", Bytes::from_static(b"0123456789"), Precondition::Absent)
            .await
            .unwrap();
        assert!(matches!(
            s.set_if("a/b", Bytes::from_static(b"x"), Precondition::Absent).await,
            Err(StoreError::Conflict { .. })
        ));
        let got = s
            .get("a/b", GetOptions::range(ByteRange::Suffix(3)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((&got.bytes[..], got.offset, got.meta.size), (&b"789"[..], 7, 10));
        let got = s
            .get(
                "a/b",
                GetOptions::pinned(ByteRange::Range { offset: 2, length: 3 }, v1.clone()),
            )
            .await;
        assert_eq!(&got.unwrap().unwrap().bytes[..], b"234");
        let past = s
            .get("a/b", GetOptions::range(ByteRange::Range { offset: 50, length: 3 }))
            .await
            .unwrap()
            .unwrap();
        assert!(past.bytes.is_empty());
        let v2 = s
            .set_if("a/b", Bytes::from_static(b"new"), Precondition::Version(v1.clone()))
            .await
            .unwrap();
        assert_ne!(v1, v2);
        assert!(matches!(
            s.set_if("a/b", Bytes::from_static(b"lost"), Precondition::Version(v1.clone()))
                .await,
            Err(StoreError::Conflict { .. })
        ));
        let stale = s.get("a/b", GetOptions::pinned(ByteRange::Full, v1.clone())).await;
        assert!(matches!(stale, Err(StoreError::VersionMismatch { .. })), "{stale:?}");
        s.set("a/c/d", Bytes::from_static(b"1")).await.unwrap();
        s.set("a.txt", Bytes::from_static(b"22")).await.unwrap();
        let names: Vec<_> = s
            .list_dir("a/")
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        assert_eq!(
            names,
            vec![
                ("b".into(), crate::store::EntryKind::File { size: 3 }),
                ("c".into(), crate::store::EntryKind::Dir)
            ]
        );
        assert_eq!(s.list_prefix("a").await.unwrap(), vec!["a.txt", "a/b", "a/c/d"]);
        assert_eq!(s.list_prefix("a/").await.unwrap(), vec!["a/b", "a/c/d"]);
        assert!(s.dir_exists("a/c/").await.unwrap());
        assert!(matches!(
            s.erase_if("a/b", Precondition::Version(v1)).await,
            Err(StoreError::Conflict { .. })
        ));
        s.erase_if("a/b", Precondition::Version(v2)).await.unwrap();
        assert!(s.head("a/b").await.unwrap().is_none());
        s.rename("a.txt", "z/a.txt").await.unwrap();
        assert_eq!(s.list().await.unwrap(), vec!["a/c/d", "z/a.txt"]);
        assert!(s.get("../x", GetOptions::default()).await.is_err());
    }

    #[tokio::test]
    async fn keys_with_spaces_and_non_ascii_names_round_trip() {
        let s = backend("p");
        s.set("plain/naïve array/zarr.json", Bytes::from_static(b"{}"))
            .await
            .unwrap();
        let names: Vec<_> = s
            .list_dir("plain/")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, vec!["naïve array".to_string()]);
        let got = s
            .get("plain/naïve array/zarr.json", GetOptions::default())
            .await
            .unwrap();
        assert_eq!(&got.unwrap().bytes[..], b"{}");
        assert_eq!(
            s.list_prefix("plain/").await.unwrap(),
            vec!["plain/naïve array/zarr.json"]
        );
    }

    #[tokio::test]
    async fn http_sources_are_read_only() {
        let s = ObjectBackend::new(Arc::new(InMemory::new()), "", Flavor::Http, true, "http://x".into());
        assert!(!s.capabilities().writable);
        assert!(matches!(s.set("k", Bytes::new()).await, Err(StoreError::ReadOnly)));
    }
}
