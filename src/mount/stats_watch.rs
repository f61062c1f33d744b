//! `zarrfs stats --watch MOUNTPOINT`: the counters as a table refreshed every interval, for a
//! person at a terminal. Rates are the difference of two readings over the time between them;
//! p50 and p99 per kernel operation are those `zarrfs stats` prints (since the mount started,
//! to within a factor of two). On a terminal each table replaces the last; piped, tables follow
//! one another. It stops on Ctrl-C, or when the mount goes away.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Map, Value};

use super::mountpoint::zarrfs_mount_at;
use super::stats::{bytes, read};

/// The store's requests shown, as (counter, column heading, a byte count).
const STORE: [(&str, &str, bool); 7] = [
    ("get", "GET/s", false),
    ("get_bytes", "read/s", true),
    ("head", "HEAD/s", false),
    ("list_dir", "LIST/s", false),
    ("set", "PUT/s", false),
    ("set_bytes", "written/s", true),
    ("erase", "DELETE/s", false),
];

/// `zarrfs stats --watch DIR [--interval SECONDS]`.
pub fn run(dir: &Path, interval: Duration) -> Result<()> {
    let (path, _) = zarrfs_mount_at(dir)?;
    let terminal = std::io::stdout().is_terminal();
    let mut before = read(&path)?;
    let mut then = Instant::now();
    loop {
        std::thread::sleep(interval);
        let now = read(&path).with_context(|| format!("the mount at {} is gone", path.display()))?;
        let at = Instant::now();
        let text = table(&path, &before, &now, at.duration_since(then));
        let mut out = std::io::stdout().lock();
        if terminal {
            write!(out, "\x1b[H\x1b[2J")?; // home, clear
        }
        writeln!(out, "{text}")?;
        out.flush()?;
        (before, then) = (now, at);
    }
}

fn n(c: &Map<String, Value>, key: &str) -> u64 {
    c.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn rate(before: &Map<String, Value>, now: &Map<String, Value>, key: &str, seconds: f64) -> f64 {
    n(now, key).saturating_sub(n(before, key)) as f64 / seconds.max(1e-3)
}

fn time(us: u64) -> String {
    match us {
        0 => "-".to_string(),
        us if us >= 10_000 => format!("≤{} ms", us / 1000),
        us => format!("≤{us} µs"),
    }
}

/// One refresh: the store's request rates, then each kernel operation seen so far.
pub(crate) fn table(path: &Path, before: &Map<String, Value>, now: &Map<String, Value>, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    let mut lines = vec![format!("zarrfs mount at {} (every {seconds:.1} s)", path.display())];
    lines.push(STORE.iter().map(|(_, head, _)| format!("{head:>11}")).collect());
    lines.push(
        STORE
            .iter()
            .map(|(key, _, is_bytes)| {
                let r = rate(before, now, key, seconds);
                let cell = if *is_bytes { bytes(r as u64) } else { format!("{r:.1}") };
                format!("{cell:>11}")
            })
            .collect(),
    );
    lines.push(String::new());
    lines.push(format!(
        "{:<12}{:>10}{:>12}{:>12}{:>12}",
        "operation", "per s", "total", "p50", "p99"
    ));
    for op in crate::fs::latency::Latencies::kinds() {
        let count = format!("latency_{op}_count");
        if n(now, &count) == 0 {
            continue;
        }
        lines.push(format!(
            "{op:<12}{:>10.1}{:>12}{:>12}{:>12}",
            rate(before, now, &count, seconds),
            n(now, &count),
            time(n(now, &format!("latency_{op}_p50_us"))),
            time(n(now, &format!("latency_{op}_p99_us")))
        ));
    }
    lines.push(String::new());
    lines.push(format!(
        "open files {}, inodes {}, resident {}, journal backlog {}",
        n(now, "open_files"),
        n(now, "inodes_held"),
        bytes(n(now, "daemon_rss_bytes")),
        bytes(n(now, "journal_pending_bytes"))
    ));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_over_the_interval_and_percentiles() {
        let before: Map<String, Value> =
            serde_json::from_str(r#"{"get": 10, "get_bytes": 0, "latency_read_count": 100}"#).unwrap();
        let now: Map<String, Value> = serde_json::from_str(
            r#"{"get": 30, "get_bytes": 4194304, "latency_read_count": 150, "latency_read_p50_us": 64,
                "latency_read_p99_us": 32768, "inodes_held": 12}"#,
        )
        .unwrap();
        let text = table(Path::new("/mnt/d"), &before, &now, Duration::from_secs(2));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "zarrfs mount at /mnt/d (every 2.0 s)");
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(&cells[..3], ["10.0", "2.0", "MiB"], "{text}");
        let read: Vec<&str> = lines
            .iter()
            .find(|l| l.starts_with("read"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(read, ["read", "25.0", "150", "≤64", "µs", "≤32", "ms"], "{text}");
        assert!(!text.contains("lookup"), "operations never seen are left out: {text}");
        assert!(text.contains("inodes 12"), "{text}");
    }
}
