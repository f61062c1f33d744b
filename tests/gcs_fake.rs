//! The real `object_store` GCS client and our object backend against an in-process fake of the
//! GCS XML API.
//!
//! - Generation preconditions: no local GCS emulator enforces them (fake-gcs-server ignores
//!   `x-goog-if-generation-match`), so this fake does, and checks the request path: the headers
//!   our conditional writes send, the generations our versions carry, and how refusals come
//!   back (conflicts, never silent overwrites).
//! - Transient failures: the fake answers 503 or breaks a body off on demand, and the wire
//!   counters must show each failure and each retry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use zarrfs::store::object::ObjectBackend;
use zarrfs::store::remote::{open, RemoteOptions};
use zarrfs::store::transport::WireCounts;
use zarrfs::store::{ByteRange, GetOptions, Precondition, Store, StoreError};

/// Objects by path, with their generation; every request seen (method, path, precondition).
#[derive(Default)]
struct Fake {
    objects: HashMap<String, (Vec<u8>, u64)>,
    next_generation: u64,
    seen: Vec<(String, String, Option<String>)>,
    /// Requests still to be answered `503 Service Unavailable`.
    fail_next: u32,
    /// Full GETs still to be broken off after half their body.
    break_next_body: u32,
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

async fn read_request(stream: &mut BufReader<tokio::net::TcpStream>) -> Option<Request> {
    let mut line = String::new();
    stream.read_line(&mut line).await.ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        stream.read_line(&mut h).await.ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    stream.read_exact(&mut body).await.ok()?;
    let (path, query) = target
        .split_once('?')
        .map_or((target.clone(), String::new()), |(p, q)| (p.into(), q.into()));
    Some(Request {
        method,
        path: percent_decode(&path),
        query,
        headers,
        body,
    })
}

/// Object names arrive percent-encoded (`data%2Ezarr%2Fc...`); GCS stores them decoded.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn response(status: &str, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

fn handle(fake: &Mutex<Fake>, req: Request) -> Vec<u8> {
    let mut fake = fake.lock().unwrap();
    let precondition = req.headers.get("x-goog-if-generation-match").cloned();
    fake.seen
        .push((req.method.clone(), req.path.clone(), precondition.clone()));
    if fake.fail_next > 0 {
        fake.fail_next -= 1;
        return response("503 Service Unavailable", &[], b"<Error><Code>SlowDown</Code></Error>");
    }
    let current = fake.objects.get(&req.path).map(|(_, g)| *g);
    match req.method.as_str() {
        "PUT" => {
            if let Some(want) = precondition {
                let ok = match want.parse::<u64>() {
                    Ok(0) => current.is_none(),
                    Ok(g) => current == Some(g),
                    Err(_) => false,
                };
                if !ok {
                    return response(
                        "412 Precondition Failed",
                        &[],
                        b"<Error><Code>PreconditionFailed</Code></Error>",
                    );
                }
            }
            fake.next_generation += 1;
            let generation = fake.next_generation;
            fake.objects.insert(req.path, (req.body, generation));
            let h = vec![
                ("x-goog-generation".into(), generation.to_string()),
                ("ETag".into(), format!("\"e{generation}\"")),
            ];
            response("200 OK", &h, b"")
        }
        "GET" | "HEAD" => {
            let Some((data, generation)) = fake.objects.get(&req.path).cloned() else {
                return response("404 Not Found", &[], b"");
            };
            let asked = req.query.split('&').find_map(|kv| kv.strip_prefix("generation="));
            if asked.is_some_and(|g| g != generation.to_string()) {
                return response("404 Not Found", &[], b""); // that generation no longer exists
            }
            let mut h = vec![
                ("x-goog-generation".into(), generation.to_string()),
                ("ETag".into(), format!("\"e{generation}\"")),
                ("Last-Modified".into(), "Sat, 21 Nov 2026 00:00:00 GMT".into()),
            ];
            let total = data.len();
            let range = req
                .headers
                .get("range")
                .and_then(|r| r.strip_prefix("bytes="))
                .map(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, ""));
                    match (a.parse::<usize>().ok(), b.parse::<usize>().ok()) {
                        (None, Some(n)) => (total.saturating_sub(n), total),
                        (Some(a), Some(b)) => (a.min(total), (b + 1).min(total)),
                        (Some(a), None) => (a.min(total), total),
                        _ => (0, total),
                    }
                });
            let body = if req.method == "HEAD" { Vec::new() } else { data.clone() };
            match range {
                Some((a, b)) if req.method == "GET" => {
                    h.push((
                        "Content-Range".into(),
                        format!("bytes {a}-{}/{total}", b.saturating_sub(1)),
                    ));
                    response("206 Partial Content", &h, &data[a..b])
                }
                _ if req.method == "GET" && fake.break_next_body > 0 => {
                    fake.break_next_body -= 1;
                    let mut r = response("200 OK", &h, &body);
                    r.truncate(r.len() - body.len() / 2); // the connection closes mid-body
                    r
                }
                _ => {
                    let mut r = response("200 OK", &h, &body);
                    if req.method == "HEAD" {
                        // HEAD announces the object's length without sending it.
                        let text = String::from_utf8(r)
                            .unwrap()
                            .replace("Content-Length: 0", &format!("Content-Length: {total}"));
                        r = text.into_bytes();
                    }
                    r
                }
            }
        }
        "DELETE" => {
            fake.objects.remove(&req.path);
            response("204 No Content", &[], b"")
        }
        _ => response("405 Method Not Allowed", &[], b""),
    }
}

async fn serve(fake: Arc<Mutex<Fake>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let fake = fake.clone();
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                if let Some(req) = read_request(&mut stream).await {
                    let bytes = handle(&fake, req);
                    let _ = stream.get_mut().write_all(&bytes).await;
                }
            });
        }
    });
    format!("http://{addr}")
}

/// A fake GCS server, and our backend for `gs://bucket/data.zarr` on it.
async fn fake_gcs() -> (Arc<Mutex<Fake>>, ObjectBackend) {
    let fake = Arc::new(Mutex::new(Fake::default()));
    let endpoint = serve(fake.clone()).await;
    let options = RemoteOptions {
        endpoint: Some(endpoint),
        no_sign_request: true,
        ..Default::default()
    };
    let store = open("gs://bucket/data.zarr", &options, true).expect("GCS backend");
    (fake, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcs_writes_carry_generation_preconditions_and_refusals_are_conflicts() {
    let (fake, store) = fake_gcs().await;

    let v1 = store
        .set_if("c/0/0", Bytes::from_static(b"one"), Precondition::Absent)
        .await
        .unwrap();
    assert_eq!(v1.0, "g:1", "GCS versions are generations");
    let again = store
        .set_if("c/0/0", Bytes::from_static(b"x"), Precondition::Absent)
        .await;
    assert!(matches!(again, Err(StoreError::Conflict { .. })), "{again:?}");
    let v2 = store
        .set_if("c/0/0", Bytes::from_static(b"two"), Precondition::Version(v1.clone()))
        .await
        .unwrap();
    assert_eq!(v2.0, "g:2");
    let lost = store
        .set_if("c/0/0", Bytes::from_static(b"lost"), Precondition::Version(v1.clone()))
        .await;
    assert!(
        matches!(lost, Err(StoreError::Conflict { .. })),
        "a stale generation must be refused: {lost:?}"
    );

    // Reads: the version seen is the generation; a pinned read asks for that generation.
    let got = store
        .get(
            "c/0/0",
            GetOptions::pinned(ByteRange::Range { offset: 1, length: 2 }, v2.clone()),
        )
        .await;
    assert_eq!(got.unwrap().map(|g| g.bytes.to_vec()), Some(b"wo".to_vec()));
    let stale = store
        .get("c/0/0", GetOptions::pinned(ByteRange::Full, v1.clone()))
        .await;
    assert!(
        !matches!(stale, Ok(Some(_))),
        "bytes of a replaced generation: {stale:?}"
    );
    assert_eq!(store.head("c/0/0").await.unwrap().map(|m| m.version), Some(v2.clone()));

    let seen = fake.lock().unwrap().seen.clone();
    let puts: Vec<Option<String>> = seen
        .iter()
        .filter(|(m, _, _)| m == "PUT")
        .map(|(_, _, p)| p.clone())
        .collect();
    assert_eq!(
        puts,
        vec![Some("0".into()), Some("0".into()), Some("1".into()), Some("1".into())]
    );
    assert!(
        seen.iter()
            .all(|(_, path, _)| path.starts_with("/bucket/data.zarr/c/0/0")),
        "{seen:?}"
    );
    assert_eq!(fake.lock().unwrap().objects["/bucket/data.zarr/c/0/0"].0, b"two");
}

fn wire(store: &ObjectBackend) -> WireCounts {
    store.wire_counts().expect("remote backends count what they send")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_are_retried_and_counted() {
    let (fake, store) = fake_gcs().await;
    let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    store.set("c/0", Bytes::from(data.clone())).await.unwrap();
    let start = wire(&store);
    assert_eq!((start.http_failures, start.retries), (0, 0), "{start:?}");

    // Two 503s, then the answer: three requests, two failures, two retries.
    fake.lock().unwrap().fail_next = 2;
    let got = store.get("c/0", GetOptions::default()).await.unwrap().unwrap();
    assert_eq!(got.bytes.to_vec(), data);
    let after_503 = wire(&store);
    assert_eq!(
        (
            after_503.http_requests - start.http_requests,
            after_503.http_failures,
            after_503.retries
        ),
        (3, 2, 2),
        "{after_503:?}"
    );

    // A body broken off halfway: the client resumes the rest with a ranged request.
    fake.lock().unwrap().break_next_body = 1;
    let got = store.get("c/0", GetOptions::default()).await.unwrap().unwrap();
    assert_eq!(got.bytes.to_vec(), data, "resumed body");
    let after_break = wire(&store);
    assert_eq!(
        (
            after_break.http_requests - after_503.http_requests,
            after_break.http_failures - after_503.http_failures,
            after_break.retries - after_503.retries
        ),
        (2, 1, 1),
        "{after_break:?}"
    );

    // A request failing for good: the retry budget (4) is spent, then the read fails.
    fake.lock().unwrap().fail_next = 100;
    let failed = store.get("c/0", GetOptions::default()).await;
    assert!(failed.is_err(), "{failed:?}");
    let after_give_up = wire(&store);
    assert_eq!(after_give_up.retries - after_break.retries, 4, "{after_give_up:?}");
    assert_eq!(after_give_up.http_failures - after_break.http_failures, 5);
}
