//! An HTTP source whose server answers ranged reads with the whole file (as python's
//! `http.server` does) is found out at its first such answer, and read whole from then on. An
//! empty file answered whole says nothing of the server (a range of nothing cannot be served),
//! so it does not mark a server that honours ranges as one that ignores them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use zarrfs::store::remote::{open, RemoteOptions};
use zarrfs::store::{ByteRange, GetOptions, Store};

/// Every GET seen: its path and whether it carried a `Range` header.
type Seen = Arc<Mutex<Vec<(String, bool)>>>;

/// A server of `files` that ignores `Range` headers: every GET gets the whole file.
async fn serve(files: HashMap<&'static str, &'static [u8]>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (files, log) = (files.clone(), log.clone());
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let mut ranged = false;
                    loop {
                        let mut h = String::new();
                        if stream.read_line(&mut h).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if h.trim_end().is_empty() {
                            break;
                        }
                        ranged |= h.to_ascii_lowercase().starts_with("range:");
                    }
                    let name = path.trim_start_matches("/data/");
                    let answer = match files.get(name) {
                        Some(body) => {
                            log.lock().unwrap().push((name.to_string(), ranged));
                            let mut a = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nETag: \"{name}-1\"\r\n\
                                 Last-Modified: Tue, 01 Sep 2026 00:00:00 GMT\r\n\r\n",
                                body.len()
                            )
                            .into_bytes();
                            a.extend_from_slice(body);
                            a
                        }
                        None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
                    };
                    if stream.get_mut().write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/data"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_file_answered_whole_does_not_mark_the_server_as_ignoring_ranges() {
    let files = HashMap::from([("empty", &b""[..]), ("full", &b"abcdefgh"[..])]);
    let (url, seen) = serve(files).await;
    let store = open(&url, &RemoteOptions::default(), false).expect("HTTP backend");
    let requests = |seen: &Seen| -> Vec<(String, bool)> { std::mem::take(&mut *seen.lock().unwrap()) };
    let asked = |name: &str, ranged: bool| (name.to_string(), ranged);

    let empty = store
        .get("empty", GetOptions::range(ByteRange::Suffix(16)))
        .await
        .unwrap()
        .unwrap();
    assert!(empty.bytes.is_empty());
    assert_eq!(requests(&seen), [asked("empty", true), asked("empty", false)]);

    // Still asked with a range: the empty answer did not mark the server. The whole answer to
    // it is cut, and marks the server.
    let part = store.get("full", GetOptions::range(ByteRange::Range { offset: 2, length: 3 }));
    assert_eq!(&part.await.unwrap().unwrap().bytes[..], b"cde");
    assert_eq!(requests(&seen), [asked("full", true), asked("full", false)]);

    // From then on every read is of the whole file, in one request.
    let part = store.get("full", GetOptions::range(ByteRange::Suffix(2)));
    assert_eq!(&part.await.unwrap().unwrap().bytes[..], b"gh");
    assert_eq!(requests(&seen), [asked("full", false)]);
    assert!(!store.capabilities().suffix_reads);
}
