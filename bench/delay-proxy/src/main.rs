//! A TCP proxy that adds a network round trip, for measuring zarrfs (and the tools compared
//! with it) as if the test servers on 127.0.0.1 were a cloud region away. This kernel has no
//! `netem`, so the benchmarks and tests put this between the clients and nginx or moto.
//!
//! Every chunk of bytes is forwarded half a round trip after it was read, in both directions,
//! in order; nothing limits the bandwidth, so a delay never becomes a throttle. A new
//! connection costs one more round trip before its first request moves, as TCP's handshake
//! does. With `--log FILE` every chunk a client sends is logged (`micros connection bytes`),
//! which lets a test count how many round trips of wall time a workload took: requests sent
//! within half a round trip of each other went out together.
//!
//! Usage: `zarrfs-delay-proxy --listen 127.0.0.1:9300 --upstream 127.0.0.1:9100 --rtt-ms 20
//! [--log FILE] [--port-file FILE]` (port 0 picks a free port; `--port-file` receives it).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

#[derive(Parser, Debug)]
#[command(about = "A TCP proxy that adds a round trip (for zarrfs's latency benchmarks)")]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Address every connection is forwarded to.
    #[arg(long)]
    upstream: SocketAddr,
    /// Round trip added, in milliseconds (half each way).
    #[arg(long, default_value_t = 20.0)]
    rtt_ms: f64,
    /// Log each chunk a client sends: microseconds since start, connection number, bytes.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Write the port listened on to this file once listening.
    #[arg(long)]
    port_file: Option<PathBuf>,
}

type Log = Option<Arc<Mutex<std::fs::File>>>;

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> std::io::Result<()> {
    let listener = TcpListener::bind(args.listen).await?;
    let port = listener.local_addr()?.port();
    if let Some(path) = &args.port_file {
        // Written whole under another name, then renamed: a reader never sees half of it.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{port}\n"))?;
        std::fs::rename(&tmp, path)?;
    }
    let log: Log = match &args.log {
        Some(path) => Some(Arc::new(Mutex::new(std::fs::File::create(path)?))),
        None => None,
    };
    let one_way = Duration::from_secs_f64(args.rtt_ms.max(0.0) / 2000.0);
    let start = Instant::now();
    let connections = AtomicU64::new(0);
    loop {
        let (client, _) = listener.accept().await?;
        let id = connections.fetch_add(1, Ordering::Relaxed);
        let (log, upstream) = (log.clone(), args.upstream);
        tokio::spawn(async move {
            if let Err(e) = relay(client, upstream, one_way, id, start, log).await {
                eprintln!("zarrfs-delay-proxy: connection {id}: {e}");
            }
        });
    }
}

async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    one_way: Duration,
    id: u64,
    start: Instant,
    log: Log,
) -> std::io::Result<()> {
    let opened = Instant::now();
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // The handshake's round trip: nothing the client sends reaches the server before it.
    let handshake = opened + 2 * one_way;
    let up = tokio::spawn(pump(
        client_read,
        server_write,
        one_way,
        Some(handshake),
        Some((id, start, log)),
    ));
    let down = pump(server_read, client_write, one_way, None, None).await;
    let up = up.await.map_err(std::io::Error::other)?;
    up.and(down)
}

/// Forward what `from` reads to `to`, each chunk `delay` after it was read (or after
/// `not_before`, if later), logging each chunk when asked.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    delay: Duration,
    not_before: Option<Instant>,
    log: Option<(u64, Instant, Log)>,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((read_at, bytes)) = rx.recv().await {
            // Sent once the handshake is done (when there is one), then half a round trip away.
            let due = read_at.max(not_before.unwrap_or(read_at)) + delay;
            tokio::time::sleep_until(due.into()).await;
            to.write_all(&bytes).await?;
        }
        tokio::time::sleep(delay).await; // the end of the stream travels too
        to.shutdown().await
    });
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        if let Some((id, start, Some(file))) = &log {
            let line = format!("{} {id} {n}\n", now.duration_since(*start).as_micros());
            if let Ok(mut file) = file.lock() {
                let _ = file.write_all(line.as_bytes());
            }
        }
        if tx.send((now, buf[..n].to_vec())).is_err() {
            break; // the other side is gone
        }
    }
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}
