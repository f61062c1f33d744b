//! Listings of HTTP sources. A WebDAV server answers `PROPFIND` (what object_store's HTTP client
//! lists with); most web servers do not (static sites, the public HTTPS endpoints of object
//! stores, data repositories), and answer with 405, 403 or 501. The first listing finds out:
//! if `PROPFIND` works, every listing uses it; if it fails and the directory's HTML index page
//! (nginx `autoindex`, Apache, `python -m http.server`) can be read instead, every listing
//! reads index pages from then on ([`super::html_index`]). A directory's page is its URL with a
//! trailing slash (a server redirects the URL without one there). Sizes the page does not show
//! exactly are asked for with a HEAD each, a few at a time.

use std::sync::atomic::Ordering;

use futures::StreamExt;

use super::html_index::{self, IndexEntry};
pub use super::index_pages::IndexPages;
use super::index_pages::PageError;
use super::*;
use crate::store::EntryKind;

/// How an HTTP source's directories are listed, once known.
pub(super) const LISTING_UNKNOWN: u8 = 0;
const LISTING_WEBDAV: u8 = 1;
const LISTING_INDEX: u8 = 2;
/// Neither: what exists is found by asking (see [`super::discovery`]).
pub(super) const LISTING_NONE: u8 = 3;

/// HEAD requests in flight for the sizes of one index page's files.
const SIZE_LOOKUPS: usize = 8;

impl ObjectBackend {
    /// `list_dir` of an HTTP source: WebDAV when the server offers it, else its index pages,
    /// else what has been found (a source that cannot be listed).
    pub(super) async fn list_dir_http(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        let way = self.listing.load(Ordering::Relaxed);
        if way == LISTING_NONE {
            return self.list_by_asking(prefix).await;
        }
        let mut entries = self.list_dir_listed(prefix, way).await?;
        self.add_hidden_documents(prefix, &mut entries).await?;
        Ok(entries)
    }

    /// `list_dir` of an HTTP source that lists (WebDAV or index pages), as the server lists.
    async fn list_dir_listed(&self, prefix: &str, way: u8) -> StoreResult<Vec<DirEntry>> {
        if way == LISTING_INDEX {
            return self
                .list_dir_from_index(prefix)
                .await
                .map_err(|e| self.page_error(prefix, e));
        }
        let webdav = match (&self.index_pages, way) {
            (Some(pages), LISTING_UNKNOWN) => self.probe_and_list(pages, prefix).await,
            _ => self.list_dir_webdav(prefix).await,
        };
        match webdav {
            Ok(entries) => {
                self.listing.store(LISTING_WEBDAV, Ordering::Relaxed);
                Ok(entries)
            }
            Err(e) if way == LISTING_WEBDAV => Err(e),
            Err(webdav_error) => match self.list_dir_from_index(prefix).await {
                Ok(entries) => {
                    tracing::info!(
                        source = %self.name,
                        "the server does not list with WebDAV PROPFIND ({}); listing from its HTML index pages",
                        first_line(&webdav_error.to_string())
                    );
                    self.listing.store(LISTING_INDEX, Ordering::Relaxed);
                    Ok(entries)
                }
                Err(PageError::Refused(_, refused)) => {
                    tracing::warn!(
                        source = %self.name,
                        "the server lists no directory: no WebDAV PROPFIND ({}) and no HTML directory index page ({}). \
                         Nodes and chunks are found by name (their metadata and shard indexes); \
                         a listing shows only what has been found so far",
                        first_line(&webdav_error.to_string()),
                        first_line(&refused),
                    );
                    self.listing.store(LISTING_NONE, Ordering::Relaxed);
                    self.learn_consolidated().await;
                    self.list_by_asking(prefix).await
                }
                Err(index_error) => Err(StoreError::io(
                    prefix,
                    std::io::Error::other(format!(
                        "cannot list {}/{prefix}: no WebDAV PROPFIND ({}) and no HTML directory index page ({})",
                        self.name.trim_end_matches('/'),
                        first_line(&webdav_error.to_string()),
                        first_line(&index_error.to_string()),
                    )),
                )),
            },
        }
    }

    /// The first listing of a server not known to speak WebDAV: the listing goes out together
    /// with the one-request question whether it does (see [`IndexPages::offers_webdav`]), and
    /// is dropped (with the retries object_store's client would make of a 501) if it does not.
    /// One round trip, where asking first took two.
    async fn probe_and_list(&self, pages: &IndexPages, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        let path = self.raw_path(prefix);
        let probe = pages.offers_webdav(&path);
        let listing = self.list_dir_webdav(prefix);
        let listed = match futures::future::select(std::pin::pin!(probe), std::pin::pin!(listing)).await {
            futures::future::Either::Left((Some(false), _)) => {
                Err(StoreError::Unsupported("WebDAV PROPFIND (the server refuses it)"))
            }
            futures::future::Either::Left((_, listing)) => listing.await,
            futures::future::Either::Right((listed, _)) => listed,
        };
        listed
    }

    /// Whether the URL of `key` with a trailing slash is an HTML index page (a directory).
    pub(super) async fn is_directory_page(&self, key: &str) -> bool {
        let Some(pages) = &self.index_pages else {
            return false;
        };
        matches!(pages.get(&self.raw_path(key)).await, Ok(Some(page)) if html_index::is_html(&page))
    }

    fn page_error(&self, prefix: &str, e: PageError) -> StoreError {
        StoreError::io(prefix, std::io::Error::other(self.scrubbed(e.to_string())))
    }

    /// The direct children of a directory from its index page; a missing directory is empty.
    async fn list_dir_from_index(&self, prefix: &str) -> Result<Vec<DirEntry>, PageError> {
        let Some(pages) = &self.index_pages else {
            return Err(PageError::Failed("no client for index pages".into()));
        };
        let Some(page) = pages.get(&self.raw_path(prefix)).await? else {
            return Ok(Vec::new());
        };
        if !html_index::is_html(&page) {
            // The URL names a stored file, not a directory: nothing is below it.
            return Ok(Vec::new());
        }
        let entries = html_index::parse(&String::from_utf8_lossy(&page));
        let sized = futures::stream::iter(entries)
            .map(|entry| self.sized(prefix, entry))
            .buffered(SIZE_LOOKUPS)
            .collect::<Vec<_>>()
            .await;
        let mut out = Vec::with_capacity(sized.len());
        for entry in sized {
            out.extend(entry.map_err(|e| PageError::Failed(e.to_string()))?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// An index entry as a listing entry; a file whose size the page does not show is asked
    /// for with a HEAD (`None`: it went away meanwhile).
    async fn sized(&self, prefix: &str, entry: IndexEntry) -> StoreResult<Option<DirEntry>> {
        if entry.dir {
            return Ok(Some(DirEntry::dir(entry.name)));
        }
        if let Some(size) = entry.size {
            return Ok(Some(DirEntry::file(entry.name, size, None)));
        }
        let key = format!("{prefix}{}", entry.name);
        match self.inner.head(&self.raw_path(&key)).await {
            Ok(meta) => Ok(Some(DirEntry::file(
                entry.name,
                meta.size,
                self.meta_of(&meta).mtime_ns,
            ))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(&key, e)),
        }
    }

    /// Every key under `prefix` (a walk of `list_dir`), for HTTP sources listed from index pages.
    pub(super) async fn list_prefix_by_walk(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let dir = prefix.rfind('/').map_or("", |i| &prefix[..=i]);
        let mut keys = Vec::new();
        let mut pending = vec![dir.to_string()];
        while let Some(dir) = pending.pop() {
            for entry in self.list_dir(&dir).await? {
                let key = format!("{dir}{}", entry.name);
                match entry.kind {
                    EntryKind::Dir => pending.push(format!("{key}/")),
                    EntryKind::File { .. } => keys.push(key),
                }
            }
        }
        keys.retain(|k| k.starts_with(prefix));
        keys.sort();
        Ok(keys)
    }

    /// Whether deep listings of this source go directory by directory: an HTTP source not (yet)
    /// known to answer WebDAV (index pages are one directory each).
    pub(super) fn lists_by_walk(&self) -> bool {
        self.flavor == Flavor::Http && self.listing.load(Ordering::Relaxed) != LISTING_WEBDAV
    }
}

/// The first line of an error message, at most 200 characters (a server's error page can
/// follow it).
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}
