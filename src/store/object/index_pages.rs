//! Reading a web server's directory index pages (and asking it once whether it speaks
//! WebDAV), with a client of object_store's connector so that requests are counted with the
//! others, retried like object_store retries its own.

use std::time::{Duration, Instant};

use object_store::client::{HttpClient, HttpErrorKind, HttpRequestBody};
use object_store::path::Path;

/// Why an index page could not be read.
#[derive(Debug)]
pub enum PageError {
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
        let url = self.dir_url(path);
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

    /// Whether the server answers WebDAV `PROPFIND` (207 Multi-Status) for the directory at
    /// `path`; `None` when the request failed. One request, no retry: servers without WebDAV
    /// refuse it at once (405, 501, 403), and object_store's client would retry a 501.
    pub(super) async fn offers_webdav(&self, path: &Path) -> Option<bool> {
        let url = self.dir_url(path);
        let method = http::Method::from_bytes(b"PROPFIND").ok()?;
        let request = http::Request::builder()
            .method(method)
            .uri(url.as_str())
            .header("Depth", "0")
            .body(HttpRequestBody::empty())
            .ok()?;
        let response = self.client.execute(request).await.ok()?;
        Some(response.status() == http::StatusCode::MULTI_STATUS)
    }

    fn dir_url(&self, path: &Path) -> url::Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(path.parts()).push("");
        }
        url
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
