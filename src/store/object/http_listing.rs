//! Listings of HTTP sources. A WebDAV server answers `PROPFIND` (what object_store's HTTP client
//! lists with); most web servers do not (static sites, the public HTTPS endpoints of object
//! stores, data repositories), and answer with 405, 403 or 501. The first listing finds out:
//! if `PROPFIND` works, every listing uses it; if it fails and the directory's HTML index page
//! (nginx `autoindex`, Apache, `python -m http.server`) can be read instead, every listing
//! reads index pages from then on ([`super::html_index`]). A directory's page is its URL with a
//! trailing slash (a server redirects the URL without one there). Sizes the page does not show
//! exactly are asked for with a HEAD each, a few at a time.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use object_store::client::{HttpClient, HttpErrorKind, HttpRequestBody};

use super::html_index::{self, IndexEntry};
use super::*;
use crate::store::EntryKind;

/// How an HTTP source's directories are listed, once known.
pub(super) const LISTING_UNKNOWN: u8 = 0;
const LISTING_WEBDAV: u8 = 1;
const LISTING_INDEX: u8 = 2;
/// Neither: what exists is found by asking (see [`super::discovery`]).
pub(super) const LISTING_NONE: u8 = 3;

/// Why an index page could not be read.
#[derive(Debug)]
pub(super) enum PageError {
    /// The server answered, with this status: it shows no page there.
    Refused(http::StatusCode, String),
    /// The request failed (connection, timeout, a broken body).
    Failed(String),
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PageError::Refused(_, message) | PageError::Failed(message) => f.write_str(message),
        }
    }
}

/// HEAD requests in flight for the sizes of one index page's files.
const SIZE_LOOKUPS: usize = 8;

/// Reads index pages. object_store's HTTP client cannot: it wants a `Content-Length`, and
/// servers stream generated pages without one. This is a client from the same connector (so
/// its requests are counted with the others) that GETs a directory's URL with its trailing
/// slash, and retries what object_store's clients retry (transport errors, 5xx, 408, 429, a
/// body broken off) with the same bounds: a few times, with doubling backoff, within a budget.
#[derive(Debug)]
pub struct IndexPages {
    client: HttpClient,
    /// The server's base URL (scheme, host, port), to which object paths are appended.
    base: url::Url,
    max_retries: usize,
    budget: Duration,
}

/// The first wait before a retry; each next one doubles, up to the last.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const LAST_BACKOFF: Duration = Duration::from_secs(15);

/// How one request for a page ended, when not with the page.
enum Attempt {
    /// Worth another try.
    Transient(String),
    Final(PageError),
}

impl IndexPages {
    pub fn new(client: HttpClient, base: url::Url, max_retries: usize, budget: Duration) -> Self {
        IndexPages {
            client,
            base,
            max_retries,
            budget,
        }
    }

    /// The page of the directory at `path`; `Ok(None)` when there is no such directory.
    pub(super) async fn get(&self, path: &Path) -> Result<Option<bytes::Bytes>, PageError> {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(path.parts()).push("");
        }
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut retries = 0;
        loop {
            match self.get_once(&url).await {
                Ok(page) => return Ok(page),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Transient(message)) => {
                    if retries >= self.max_retries || started.elapsed() + backoff > self.budget {
                        let tries = retries + 1;
                        return Err(PageError::Failed(format!("{message} (after {tries} tries)")));
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(LAST_BACKOFF);
                    retries += 1;
                }
            }
        }
    }

    async fn get_once(&self, url: &url::Url) -> Result<Option<bytes::Bytes>, Attempt> {
        let request = http::Request::get(url.as_str())
            .body(HttpRequestBody::empty())
            .map_err(|e| Attempt::Final(PageError::Failed(e.to_string())))?;
        let response = self.client.execute(request).await.map_err(|e| {
            let message = format!("{url}: {}", super::errors::described(&e));
            if message.contains("certificate") {
                return Attempt::Final(PageError::Failed(message));
            }
            match e.kind() {
                HttpErrorKind::Connect
                | HttpErrorKind::Request
                | HttpErrorKind::Timeout
                | HttpErrorKind::Interrupted => Attempt::Transient(message),
                _ => Attempt::Final(PageError::Failed(message)),
            }
        })?;
        let status = response.status();
        if status == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if crate::store::transport::transient(status) {
            return Err(Attempt::Transient(format!("{url}: {status}")));
        }
        if !status.is_success() {
            return Err(Attempt::Final(PageError::Refused(status, format!("{url}: {status}"))));
        }
        let body = response.into_body().bytes().await;
        body.map(Some)
            .map_err(|e| Attempt::Transient(format!("{url}: the page broke off: {e}")))
    }
}

impl ObjectBackend {
    /// `list_dir` of an HTTP source: WebDAV when the server offers it, else its index pages,
    /// else what has been found (a source that cannot be listed).
    pub(super) async fn list_dir_http(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        let way = self.listing.load(Ordering::Relaxed);
        if way == LISTING_NONE {
            return self.list_by_asking(prefix).await;
        }
        if way == LISTING_INDEX {
            return self
                .list_dir_from_index(prefix)
                .await
                .map_err(|e| self.page_error(prefix, e));
        }
        let webdav = self.list_dir_webdav(prefix).await;
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
