//! Counting what remote sources send over the wire, retries included.
//!
//! `object_store` retries transient failures (5xx, 408, 429, connection errors, bodies broken
//! mid-stream) inside its client, with backoff, and offers no hook to observe them. It does let
//! a builder take an [`HttpConnector`]: this module wraps the default (reqwest) connector in
//! one whose service counts each request it sends, each transient failure it sees, and each
//! request that repeats, same method and URI, one that failed: a retry. (A retried ranged GET
//! resumes with another `Range` header but the same URI.) The counters are published with the
//! mount's other counters (`user.zarrfs.stats`).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpResponseBody, HttpService,
    ReqwestConnector,
};

/// Failed requests remembered while waiting for their retry; past this the memory is dropped
/// (a failure object_store gave up on is never retried, and must not pile up).
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
}

#[derive(Debug, Default)]
pub struct WireStats {
    requests: AtomicU64,
    failures: AtomicU64,
    retries: AtomicU64,
    /// "METHOD URI" of failed requests not yet repeated, with how many.
    failed: Mutex<HashMap<String, u32>>,
}

impl WireStats {
    pub fn counts(&self) -> WireCounts {
        WireCounts {
            http_requests: self.requests.load(Relaxed),
            http_failures: self.failures.load(Relaxed),
            retries: self.retries.load(Relaxed),
        }
    }

    fn sent(&self, request: &str) {
        self.requests.fetch_add(1, Relaxed);
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = failed.get_mut(request) {
            *n -= 1;
            if *n == 0 {
                failed.remove(request);
            }
            self.retries.fetch_add(1, Relaxed);
        }
    }

    fn failed(&self, request: &str) {
        self.failures.fetch_add(1, Relaxed);
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        if failed.len() >= MAX_REMEMBERED_FAILURES {
            failed.clear();
        }
        *failed.entry(request.to_string()).or_insert(0) += 1;
    }
}

/// Whether an answer is one object_store retries.
fn transient(status: http::StatusCode) -> bool {
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
        self.stats.sent(&request);
        match self.inner.execute(req).await {
            Ok(response) => {
                if transient(response.status()) {
                    self.stats.failed(&request);
                }
                let stats = self.stats.clone();
                Ok(response.map(|body| {
                    HttpResponseBody::new(WatchedBody {
                        inner: body,
                        request,
                        stats,
                    })
                }))
            }
            Err(e) => {
                self.stats.failed(&request);
                Err(e)
            }
        }
    }
}

/// A response body that reports an error mid-stream as a failure of its request.
struct WatchedBody {
    inner: HttpResponseBody,
    request: String,
    stats: Arc<WireStats>,
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(_))) = &polled {
            self.stats.failed(&self.request);
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

    #[test]
    fn a_repeat_of_a_failed_request_is_a_retry() {
        let stats = WireStats::default();
        stats.sent("GET /a");
        stats.failed("GET /a");
        stats.sent("GET /b"); // another request: not a retry
        stats.sent("GET /a");
        stats.sent("GET /a"); // the failure was used up by the first repeat
        assert_eq!(
            stats.counts(),
            WireCounts {
                http_requests: 4,
                http_failures: 1,
                retries: 1
            }
        );
    }

    #[test]
    fn what_is_transient() {
        assert!(transient(http::StatusCode::SERVICE_UNAVAILABLE) && transient(http::StatusCode::TOO_MANY_REQUESTS));
        assert!(!transient(http::StatusCode::PRECONDITION_FAILED) && !transient(http::StatusCode::NOT_FOUND));
    }
}
