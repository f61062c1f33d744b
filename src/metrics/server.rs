//! The HTTP server of `/metrics`: a few lines over tokio's TCP listener rather than a web
//! framework. A scrape is one `GET /metrics` per interval from one client; the server reads the
//! request head, answers with the exposition and closes the connection (HTTP/1.1 with
//! `Connection: close`, which every Prometheus version accepts), so it needs no keep-alive,
//! chunking or routing. The exposition is built on a blocking thread: it reads `/proc` and
//! takes the filesystem's locks, which async workers must not wait on.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What answers a scrape: the exposition text.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// A request head longer than this is refused (a scrape's is a few hundred bytes).
const MAX_HEAD: usize = 8 << 10;
/// A client that sends nothing for this long is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve `/metrics` on `listener` (bound already) from the runtime of `handle`, until the
/// runtime stops.
pub fn spawn(listener: std::net::TcpListener, handle: &tokio::runtime::Handle, render: Render) -> std::io::Result<()> {
    let _context = handle.enter();
    let listener = TcpListener::from_std(listener)?;
    handle.spawn(accept(listener, render));
    Ok(())
}

async fn accept(listener: TcpListener, render: Render) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(answer(stream, render.clone()));
            }
            Err(e) => {
                tracing::debug!("metrics: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(mut stream: TcpStream, render: Render) {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Some(head)) => head,
        _ => return,
    };
    let response = respond(&head, render).await;
    if let Err(e) = stream.write_all(&response).await {
        tracing::debug!("metrics: reply not sent: {e}");
    }
    let _ = stream.shutdown().await;
}

/// The request's head (up to the blank line), `None` if the client went away or sent too much.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() + n > MAX_HEAD {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The whole response to a request head.
async fn respond(head: &str, render: Render) -> Vec<u8> {
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let body = tokio::task::spawn_blocking(move || render()).await.unwrap_or_default();
            let body = if method == "HEAD" { String::new() } else { body };
            reply("200 OK", super::exposition::CONTENT_TYPE, &body)
        }
        ("GET" | "HEAD", "/") => reply("200 OK", "text/plain; charset=utf-8", "zarrfs: metrics at /metrics\n"),
        ("GET" | "HEAD", _) => reply(
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found; metrics at /metrics\n",
        ),
        _ => reply("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET\n"),
    }
}

fn reply(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: std::net::SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serves_the_exposition_at_metrics_only() {
        let listener = super::super::address::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        spawn(
            listener,
            &tokio::runtime::Handle::current(),
            Arc::new(|| "zarrfs_x 1\n".to_string()),
        )
        .unwrap();
        let ok = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Type: text/plain; version=0.0.4"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nzarrfs_x 1\n"), "{ok}");
        assert!(ok.contains("Content-Length: 11\r\n"), "{ok}");
        let missing = get(addr, "GET /other HTTP/1.1\r\n\r\n").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let posted = get(addr, "POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(posted.starts_with("HTTP/1.1 405"), "{posted}");
    }
}
