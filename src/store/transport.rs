//! Counting what remote sources send over the wire, retries included.
//!
//! `object_store` retries transient failures inside its client, with backoff, and offers no
//! hook to observe them. It does let a builder take an [`HttpConnector`]: this module wraps the
//! default (reqwest) connector in one whose service counts each request it sends and each
//! transient failure it sees (5xx, 408 and 429 answers, transport errors, bodies broken off).
//!
//! A retry is a request that repeats, same method and URI, one that failed in a way the client
//! retries (a retried ranged GET resumes with another `Range` header but the same URI). The
//! client's rules are mirrored so that a failure it gives up on is not taken for awaiting a
//! retry: transport errors before sending, or timeouts of safe methods; broken bodies of GETs
//! that carry an ETag (the client resumes only those) or are directory index pages (read again
//! by `object::http_listing`); and never more than `max_retries` in a
//! row, nor after the retry budget. The counters are published with the mount's other counters
//! (`zarrfs stats`).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpResponseBody,
    HttpService, ReqwestConnector,
};

/// Failed requests remembered while waiting for their retry; past this, those older than the
/// retry budget are dropped.
const MAX_REMEMBERED_FAILURES: usize = 1024;

/// A snapshot of the wire counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WireCounts {
    /// Requests sent, retries included.
    pub http_requests: u64,
    /// Transient failures seen: 5xx, 408 or 429 answers, transport errors, broken bodies.
    pub http_failures: u64,
    /// Requests that repeat one that failed.
    pub retries: u64,
    /// Directories looked for by name on a source that cannot be listed (a few requests each).
    pub dir_probes: u64,
    /// Keys asked for by name to list a directory of a source that cannot be listed (a HEAD
    /// each).
    pub key_probes: u64,
    /// Requests sent and not yet answered whole (their body still arriving), now.
    pub requests_in_flight: u64,
    /// The most requests in flight at once since the mount.
    pub requests_in_flight_peak: u64,
}

#[derive(Debug)]
pub struct WireStats {
    requests: AtomicU64,
    failures: AtomicU64,
    retries: AtomicU64,
    dir_probes: AtomicU64,
    key_probes: AtomicU64,
    in_flight: AtomicU64,
    in_flight_peak: AtomicU64,
    /// As the client is configured: retries per operation, and their time budget.
    max_retries: u32,
    budget: Duration,
    /// "METHOD URI" of requests that failed, with their run of failures.
    failed: Mutex<HashMap<String, Run>>,
}

/// Failures in a row of one request.
#[derive(Debug)]
struct Run {
    failures: u32,
    first: Instant,
    /// The last failure is one the client retries, and the retry has not been sent yet.
    awaiting_retry: bool,
}

impl WireStats {
    pub fn new(max_retries: usize, budget: Duration) -> Self {
        WireStats {
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            dir_probes: AtomicU64::new(0),
            key_probes: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            in_flight_peak: AtomicU64::new(0),
            max_retries: u32::try_from(max_retries).unwrap_or(u32::MAX),
            budget,
            failed: Mutex::new(HashMap::new()),
        }
    }

    pub fn counts(&self) -> WireCounts {
        WireCounts {
            http_requests: self.requests.load(Relaxed),
            http_failures: self.failures.load(Relaxed),
            retries: self.retries.load(Relaxed),
            dir_probes: self.dir_probes.load(Relaxed),
            key_probes: self.key_probes.load(Relaxed),
            requests_in_flight: self.in_flight.load(Relaxed),
            requests_in_flight_peak: self.in_flight_peak.load(Relaxed),
        }
    }

    /// A directory is looked for by name (a source that cannot be listed).
    pub fn probed(&self) {
        self.dir_probes.fetch_add(1, Relaxed);
    }

    /// A key is asked for to list a directory (a source that cannot be listed).
    pub fn probed_key(&self) {
        self.key_probes.fetch_add(1, Relaxed);
    }

    /// A request starts; it is in flight until the guard is dropped.
    fn start(self: &Arc<Self>) -> InFlight {
        let now = self.in_flight.fetch_add(1, Relaxed) + 1;
        self.in_flight_peak.fetch_max(now, Relaxed);
        InFlight(self.clone())
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Run>> {
        self.failed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sent(&self, request: &str) {
        self.requests.fetch_add(1, Relaxed);
        let mut runs = self.runs();
        let Some(run) = runs.get_mut(request) else {
            return;
        };
        if run.awaiting_retry && run.first.elapsed() <= self.budget {
            run.awaiting_retry = false;
            self.retries.fetch_add(1, Relaxed);
        } else {
            runs.remove(request); // a new request for the same object
        }
    }

    /// A transient failure; `retried` whether the client retries such a failure at all.
    fn failed(&self, request: &str, retried: bool) {
        self.failures.fetch_add(1, Relaxed);
        let mut runs = self.runs();
        if runs.len() >= MAX_REMEMBERED_FAILURES {
            runs.retain(|_, run| run.first.elapsed() <= self.budget);
            if runs.len() >= MAX_REMEMBERED_FAILURES {
                runs.clear();
            }
        }
        let run = runs.entry(request.to_string()).or_insert(Run {
            failures: 0,
            first: Instant::now(),
            awaiting_retry: false,
        });
        run.failures += 1;
        run.awaiting_retry = retried && run.failures <= self.max_retries;
        if !run.awaiting_retry {
            runs.remove(request); // given up
        }
    }

    /// An answer the client takes: the run of failures of this request is over.
    fn answered(&self, request: &str) {
        let mut runs = self.runs();
        if !runs.is_empty() {
            runs.remove(request);
        }
    }
}

/// A request sent whose answer has not come: if its caller drops it (a question raced by
/// another and no longer needed), the log says so, so that every request counted is in it.
struct Unanswered(Option<String>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(shown) = self.0.take() {
            tracing::debug!("{shown} dropped before its answer");
        }
    }
}

/// One request in flight, counted until dropped (its body read or abandoned).
#[derive(Debug)]
struct InFlight(Arc<WireStats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// A URI as the log shows it: no user or password, and no value of a query parameter that
/// may carry a secret (signatures, SAS tokens, credentials).
fn redacted(uri: &http::Uri) -> String {
    let mut out = format!("{}://{}", uri.scheme_str().unwrap_or("http"), uri.host().unwrap_or(""));
    if let Some(port) = uri.port_u16() {
        out.push_str(&format!(":{port}"));
    }
    out.push_str(uri.path());
    if let Some(query) = uri.query() {
        let secret = |k: &str| {
            let k = k.to_ascii_lowercase();
            ["sig", "token", "credential", "key", "secret", "auth"]
                .iter()
                .any(|s| k.contains(s))
        };
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if secret(k) => format!("{k}=REDACTED"),
                _ => p.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// Whether an answer is one object_store retries.
pub(crate) fn transient(status: http::StatusCode) -> bool {
    status.is_server_error()
        || status == http::StatusCode::TOO_MANY_REQUESTS
        || status == http::StatusCode::REQUEST_TIMEOUT
}

/// The connector handed to each service's builder.
#[derive(Debug)]
pub struct CountingConnector {
    stats: Arc<WireStats>,
}

impl CountingConnector {
    pub fn new(stats: Arc<WireStats>) -> Self {
        CountingConnector { stats }
    }
}

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(CountingService {
            inner,
            stats: self.stats.clone(),
        }))
    }
}

#[derive(Debug)]
struct CountingService {
    inner: HttpClient,
    stats: Arc<WireStats>,
}

#[async_trait]
impl HttpService for CountingService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let request = format!("{} {}", req.method(), req.uri());
        let shown = format!("{} {}", req.method(), redacted(req.uri()));
        // In the log a ranged read shows its range (a retry keeps the URI, not always the range).
        let shown = match req.headers().get(http::header::RANGE).and_then(|r| r.to_str().ok()) {
            Some(range) => format!("{shown} {range}"),
            None => shown,
        };
        let safe = req.method() == http::Method::GET || req.method() == http::Method::HEAD;
        let req_is_page = req.method() == http::Method::GET && req.uri().path().ends_with('/');
        self.stats.sent(&request);
        let in_flight = self.stats.start();
        let sent = Instant::now();
        let mut unanswered = Unanswered(Some(shown.clone()));
        let answer = self.inner.execute(req).await;
        unanswered.0 = None;
        let ms = sent.elapsed().as_secs_f64() * 1e3;
        match answer {
            Ok(response) => {
                tracing::debug!(status = response.status().as_u16(), ms, "{shown}");
                if transient(response.status()) {
                    self.stats.failed(&request, true);
                } else {
                    self.stats.answered(&request);
                }
                // Only a GET with an ETag is resumed when its body breaks off, and a directory's
                // index page (the only GET of a URL ending in `/`) is read again.
                let resumable = safe && (req_is_page || response.headers().contains_key(http::header::ETAG));
                let stats = self.stats.clone();
                Ok(response.map(|body| {
                    HttpResponseBody::new(WatchedBody {
                        inner: body,
                        request,
                        resumable,
                        stats,
                        _in_flight: in_flight,
                    })
                }))
            }
            Err(e) => {
                tracing::debug!(ms, "{shown}: {e}");
                let retried = match e.kind() {
                    HttpErrorKind::Connect | HttpErrorKind::Request => true,
                    HttpErrorKind::Timeout | HttpErrorKind::Interrupted => safe,
                    _ => false,
                };
                self.stats.failed(&request, retried);
                Err(e)
            }
        }
    }
}

/// A response body that reports an error mid-stream as a failure of its request.
struct WatchedBody {
    inner: HttpResponseBody,
    request: String,
    resumable: bool,
    stats: Arc<WireStats>,
    _in_flight: InFlight,
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(_))) = &polled {
            self.stats.failed(&self.request, self.resumable);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> WireStats {
        WireStats::new(2, Duration::from_secs(30))
    }

    fn triple(c: WireCounts) -> (u64, u64, u64) {
        (c.http_requests, c.http_failures, c.retries)
    }

    #[test]
    fn a_repeat_of_a_failed_request_is_a_retry() {
        let stats = stats();
        stats.sent("GET /a");
        stats.failed("GET /a", true);
        stats.sent("GET /b"); // another request: not a retry
        stats.sent("GET /a");
        stats.answered("GET /a");
        stats.sent("GET /a"); // the run was over: a new request
        assert_eq!(triple(stats.counts()), (4, 1, 1));
    }

    #[test]
    fn a_failure_given_up_on_awaits_no_retry() {
        let stats = stats();
        for _ in 0..3 {
            stats.sent("GET /a");
            stats.failed("GET /a", true); // the third is past max_retries (2): given up
        }
        stats.sent("GET /a");
        assert_eq!(triple(stats.counts()), (4, 3, 2));
        stats.sent("PUT /b");
        stats.failed("PUT /b", false); // e.g. a timeout of a conditional PUT: not retried
        stats.sent("PUT /b");
        assert_eq!(triple(stats.counts()), (6, 4, 2));
    }

    #[test]
    fn past_the_budget_no_retry_comes() {
        let stats = WireStats::new(4, Duration::ZERO);
        stats.sent("GET /a");
        stats.failed("GET /a", true);
        std::thread::sleep(Duration::from_millis(2));
        stats.sent("GET /a");
        assert_eq!(triple(stats.counts()), (2, 1, 0));
    }

    #[test]
    fn the_log_shows_no_secret_of_a_uri() {
        let uri: http::Uri = "https://user:pw@host.example:8443/c/a.b?list-type=2&sig=abc&X-Amz-Signature=d&prefix=x"
            .parse()
            .unwrap();
        assert_eq!(
            redacted(&uri),
            "https://host.example:8443/c/a.b?list-type=2&sig=REDACTED&X-Amz-Signature=REDACTED&prefix=x"
        );
    }

    #[test]
    fn what_is_transient() {
        assert!(transient(http::StatusCode::SERVICE_UNAVAILABLE) && transient(http::StatusCode::TOO_MANY_REQUESTS));
        assert!(!transient(http::StatusCode::PRECONDITION_FAILED) && !transient(http::StatusCode::NOT_FOUND));
    }
}
