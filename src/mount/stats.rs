//! `zarrfs stats MOUNTPOINT`: the counters a live mount publishes (requests to the store and
//! their bytes, what went over the wire, cache hits, shard commits and conflicts, requests
//! from the kernel, what it holds open now), printed for a person or as JSON. They are read
//! with the mount's stats ioctl on its root directory; mounts of zarrfs versions before it
//! published them only as the extended attribute `user.zarrfs.stats`, which is the fallback.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Map, Value};

use super::mountpoint::zarrfs_mount_at;
use crate::fs::{STATS_IOCTL, STATS_IOCTL_SIZE, XATTR_STATS};

/// The counters' JSON through the stats ioctl; `Ok(None)` when the mount does not know it.
fn read_ioctl(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::fd::AsRawFd;
    let dir = std::fs::File::open(path)?;
    let mut buf = vec![0u8; STATS_IOCTL_SIZE];
    // SAFETY: the request declares a read of STATS_IOCTL_SIZE bytes into `buf`, which is that
    // long and outlives the call.
    let n = unsafe { libc::ioctl(dir.as_raw_fd(), STATS_IOCTL as _, buf.as_mut_ptr()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOTTY | libc::ENOSYS | libc::EINVAL) => Ok(None),
            _ => Err(e),
        };
    }
    buf.truncate(usize::try_from(n).unwrap_or(0));
    Ok(Some(buf))
}

/// The counters of the zarrfs mount at `path` (absolute, checked to be a zarrfs mount).
pub(crate) fn read(path: &Path) -> Result<Map<String, Value>> {
    let cannot = || format!("cannot read the counters of {}", path.display());
    let raw = match read_ioctl(path).with_context(cannot)? {
        Some(raw) => raw,
        None => xattr::get(path, XATTR_STATS)
            .with_context(cannot)?
            .with_context(|| format!("{} publishes no counters (an older zarrfs?)", path.display()))?,
    };
    match serde_json::from_slice(&raw) {
        Ok(Value::Object(map)) => Ok(map),
        _ => anyhow::bail!("{}: the counters are not a JSON object", path.display()),
    }
}

/// `1536` -> `1.5 KiB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn hit_rate(hits: u64, misses: u64) -> String {
    match hits + misses {
        0 => "unused".to_string(),
        total => format!(
            "{hits} hits, {misses} misses ({:.0}% hits)",
            100.0 * hits as f64 / total as f64
        ),
    }
}

/// The counters as lines for a person.
pub fn to_text(mountpoint: &Path, source: &str, c: &Map<String, Value>) -> String {
    let n = |k: &str| c.get(k).and_then(Value::as_u64).unwrap_or(0);
    let lines = [
        format!("zarrfs mount at {} ({source})", mountpoint.display()),
        format!(
            "store requests  {} get ({}), {} head, {} list_dir, {} list, {} set ({}), {} erase",
            n("get"),
            bytes(n("get_bytes")),
            n("head"),
            n("list_dir"),
            n("list"),
            n("set"),
            bytes(n("set_bytes")),
            n("erase")
        ),
        format!(
            "over the wire   {} HTTP requests, {} transient failures, {} retries",
            n("http_requests"),
            n("http_failures"),
            n("retries")
        ),
        format!(
            "index cache     {}",
            hit_rate(n("index_cache_hits"), n("index_cache_misses"))
        ),
        format!(
            "shard cache     {}",
            hit_rate(n("data_cache_hits"), n("data_cache_misses"))
        ),
        format!(
            "metadata ahead  {} listings and {} documents fetched ahead, {} of them used; {} requests \
             joined one in flight",
            n("prefetch_listings"),
            n("prefetch_documents"),
            n("prefetch_used"),
            n("requests_joined")
        ),
        format!(
            "writes          {} shard commits, {} conflicts (lost races, retried)",
            n("shard_commits"),
            n("commit_conflicts")
        ),
        format!(
            "kernel requests {} lookup, {} getattr, {} open, {} read, {} opendir ({} listed from \
             the kernel's kept listing), {} readdir, {} getxattr (what the kernel's caches did not \
             answer)",
            n("fuse_lookups"),
            n("fuse_getattrs"),
            n("fuse_opens"),
            n("fuse_reads"),
            n("fuse_opendirs"),
            n("kernel_listings_kept"),
            n("fuse_readdirs"),
            n("fuse_getxattrs")
        ),
        format!(
            "open now        {} files, {} directories; {} files held for writing ({} in memory, \
             {} spilled to disk)",
            n("open_files"),
            n("open_dirs"),
            n("held_files"),
            bytes(n("write_buffer_bytes")),
            n("spilled_files")
        ),
    ];
    let mut lines = lines.to_vec();
    if c.contains_key("inodes_held") {
        lines.push(format!(
            "memory          {} resident; {} inodes held ({} in the inode table); {} in open listings",
            bytes(n("daemon_rss_bytes")),
            n("inodes_held"),
            bytes(n("inode_table_bytes")),
            bytes(n("listing_bytes_kept"))
        ));
    }
    let time = |us: u64| match us {
        us if us >= 10_000 => format!("{} ms", us / 1000),
        us => format!("{us} µs"),
    };
    let timed: Vec<String> = crate::fs::latency::Latencies::kinds()
        .iter()
        .filter(|op| n(&format!("latency_{op}_count")) > 0)
        .map(|op| {
            let (p50, p99) = (n(&format!("latency_{op}_p50_us")), n(&format!("latency_{op}_p99_us")));
            let count = n(&format!("latency_{op}_count"));
            format!("{op} {count} (p50 ≤ {}, p99 ≤ {})", time(p50), time(p99))
        })
        .collect();
    if !timed.is_empty() {
        lines.push(format!("daemon time     {}", timed.join(", ")));
    }
    if c.contains_key("journal_pending_files") {
        lines.push(format!(
            "journal         {} files ({}) closed and durable on local disk, not yet committed to the store",
            n("journal_pending_files"),
            bytes(n("journal_pending_bytes"))
        ));
    }
    if c.contains_key("disk_cache_hits") {
        lines.push(format!(
            "disk cache      {} reads served ({}), {} sent to the store, {} versions confirmed by HEAD; \
             holds {}, {} written, {} evicted blocks, {} damaged blocks dropped",
            n("disk_cache_hits"),
            bytes(n("disk_cache_hit_bytes")),
            n("disk_cache_misses"),
            n("disk_cache_revalidations"),
            bytes(n("disk_cache_bytes")),
            bytes(n("disk_cache_written_bytes")),
            n("disk_cache_evictions"),
            n("disk_cache_torn")
        ));
    }
    lines.join("\n") + "\n"
}

/// `zarrfs stats DIR [--json]`.
pub fn print(dir: &Path, json: bool) -> Result<()> {
    let (path, entry) = zarrfs_mount_at(dir)?;
    let counters = read(&path)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(counters))?);
        return Ok(());
    }
    let source = entry
        .source
        .strip_prefix(crate::fuse::mount_table::SOURCE_PREFIX)
        .unwrap_or(&entry.source);
    print!("{}", to_text(&path, source, &counters));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_lines() {
        let counters: Map<String, Value> = serde_json::from_str(
            r#"{"get": 4, "get_bytes": 8477, "head": 3, "index_cache_hits": 4, "index_cache_misses": 1, "shard_commits": 2}"#,
        )
        .unwrap();
        let text = to_text(Path::new("/mnt/d"), "/data/x.zarr", &counters);
        assert!(text.starts_with("zarrfs mount at /mnt/d (/data/x.zarr)\n"), "{text}");
        assert!(text.contains("4 get (8.3 KiB), 3 head"), "{text}");
        assert!(text.contains("4 hits, 1 misses (80% hits)"), "{text}");
        assert!(text.contains("shard cache     unused"), "{text}");
        assert!(text.contains("2 shard commits, 0 conflicts"), "{text}");
        assert!(
            text.contains("metadata ahead  0 listings and 0 documents fetched ahead, 0 of them used"),
            "{text}"
        );
        assert!(
            text.contains("kernel requests 0 lookup, 0 getattr, 0 open, 0 read"),
            "{text}"
        );
        assert!(!text.contains("journal"), "no journal, no line: {text}");
        let mut journaled = counters.clone();
        journaled.insert("journal_pending_files".into(), 3.into());
        journaled.insert("journal_pending_bytes".into(), 3072.into());
        let text = to_text(Path::new("/mnt/d"), "s3://b/x", &journaled);
        assert!(
            text.contains("journal         3 files (3.0 KiB) closed and durable"),
            "{text}"
        );
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        let mut held = counters.clone();
        held.insert("inodes_held".into(), 1_000_001.into());
        held.insert("inode_table_bytes".into(), (82u64 << 20).into());
        held.insert("listing_bytes_kept".into(), (12u64 << 20).into());
        held.insert("daemon_rss_bytes".into(), (200u64 << 20).into());
        held.insert("latency_lookup_count".into(), 12.into());
        held.insert("latency_lookup_p50_us".into(), 16.into());
        held.insert("latency_lookup_p99_us".into(), 32768.into());
        let text = to_text(Path::new("/mnt/d"), "/data/x.zarr", &held);
        assert!(
            text.contains(
                "memory          200.0 MiB resident; 1000001 inodes held (82.0 MiB in the inode table); \
                 12.0 MiB in open listings"
            ),
            "{text}"
        );
        assert!(
            text.contains("daemon time     lookup 12 (p50 ≤ 16 µs, p99 ≤ 32 ms)"),
            "{text}"
        );
    }
}
