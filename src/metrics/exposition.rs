//! One scrape's text in the Prometheus text exposition format (version 0.0.4), encoded by the
//! `prometheus-client` crate (the Prometheus project's own Rust client: it escapes names,
//! help and label values, formats floats as Go does, and writes `_total`, `_bucket`, `_sum`
//! and `_count` lines as Prometheus expects; we only describe the values).
//!
//! The values are not kept in the crate's registry: each scrape takes the mount's counters
//! from `stats_json` (what `zarrfs stats --json` prints, so the two cannot disagree) and the
//! histograms' snapshots, and hands them to a fresh registry through a [`Collector`]. Every
//! key of the counters becomes a metric: a counter (`zarrfs_<key>_total`) unless it is one of
//! the [`GAUGES`]; `latency_*` keys are left out (the histograms say more). Labels are fixed
//! words (operation, kind, outcome), never a path or key.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use serde_json::{Map, Value};

use super::histogram::Snapshot;

/// The content type of what [`encode`] writes.
pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Counters' keys that say how much is held now (gauges), with what they mean.
pub const GAUGES: [(&str, &str); 15] = [
    ("open_files", "Files open now"),
    ("open_dirs", "Directories open now"),
    (
        "held_files",
        "Files whose content the mount holds (being written or waiting for commit)",
    ),
    ("write_buffer_bytes", "Memory held by written files not yet committed"),
    ("spilled_files", "Written files spilled to temporary files on disk"),
    ("read_snapshot_bytes", "Memory held by open files' read snapshots"),
    ("inodes_held", "Inodes the mount holds for the kernel"),
    ("inode_table_bytes", "Memory of the inode table"),
    ("listing_bytes_kept", "Memory of the listings open directories keep"),
    ("daemon_rss_bytes", "Resident memory of the daemon"),
    ("disk_cache_bytes", "Bytes the --cache directory holds"),
    (
        "journal_pending_bytes",
        "Bytes in the journal not yet committed to the store",
    ),
    (
        "journal_pending_files",
        "Files in the journal not yet committed to the store",
    ),
    ("source_watched", "1 if the local source is watched for changes"),
    (
        "missing_names_kept",
        "Names the kernel was told are missing and may keep so",
    ),
];

/// Keys of ages in milliseconds, served as gauges in seconds: the name (before its unit) and
/// what it means. Present only where the mount has a journal, or write-back.
const AGES: [(&str, &str, &str); 2] = [
    (
        "journal_oldest_pending_ms",
        "zarrfs_journal_oldest_pending",
        "How long the oldest write not yet committed to the store has waited in the journal (0: none)",
    ),
    (
        "write_back_oldest_pending_ms",
        "zarrfs_write_back_oldest_pending",
        "How long the oldest closed file waiting for write-back has waited (0: none)",
    ),
];

/// The store request counters, named as requests (the other keys keep their own names).
const RENAMED: [(&str, &str, &str); 8] = [
    (
        "get",
        "store_get_requests",
        "GET requests sent to the store (ranged reads included)",
    ),
    ("get_bytes", "store_get_bytes", "Bytes received from the store"),
    (
        "head",
        "store_head_requests",
        "HEAD requests (and directory probes) sent to the store",
    ),
    (
        "set",
        "store_put_requests",
        "PUT requests (conditional ones included) sent to the store",
    ),
    ("set_bytes", "store_put_bytes", "Bytes sent to the store"),
    ("erase", "store_delete_requests", "DELETE requests sent to the store"),
    ("list", "store_list_requests", "Recursive listings asked of the store"),
    (
        "list_dir",
        "store_list_dir_requests",
        "Directory listings asked of the store",
    ),
];

/// What one scrape serves.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// The mount's counters, as `zarrfs stats --json` prints them.
    pub stats: Map<String, Value>,
    /// FUSE request latency by operation.
    pub fuse: Vec<(&'static str, Snapshot)>,
    /// Store request latency by kind and outcome.
    pub store: Vec<(&'static str, &'static str, Snapshot)>,
    pub commit: Option<Snapshot>,
    pub journal_append: Option<Snapshot>,
}

/// The scrape as Prometheus text.
pub fn encode(scrape: Scrape) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut out = String::new();
    // Writing into a String cannot fail; an encoder error would be a bug of ours (a bad name).
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
        tracing::warn!("metrics could not be encoded: {e}");
    }
    out
}

/// A metric name's unit, and the name without it (the encoder appends it).
fn split_unit(name: &str) -> (&str, Option<Unit>) {
    match name.strip_suffix("_bytes") {
        Some(stem) => (stem, Some(Unit::Bytes)),
        None => (name, None),
    }
}

fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Vec<(&str, &str)>, &Snapshot)],
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for (labels, snapshot) in series {
        let buckets = snapshot.prometheus_buckets();
        family.encode_family(labels)?.encode_histogram::<NoLabelSet>(
            snapshot.sum_seconds(),
            snapshot.count(),
            &buckets,
            None,
        )?;
    }
    Ok(())
}

impl Scrape {
    fn counters_and_gauges(&self, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        for (key, value) in &self.stats {
            // The p50/p99 keys are left to the histograms; the ages are gauges in seconds,
            // below (a counter may never go down).
            if key.starts_with("latency_") || AGES.iter().any(|(k, _, _)| k == key) {
                continue;
            }
            let Some(value) = value.as_u64().or(value.as_bool().map(u64::from)) else {
                continue;
            };
            if let Some((_, help)) = GAUGES.iter().find(|(k, _)| k == key) {
                let name = format!("zarrfs_{key}");
                let (name, unit) = split_unit(&name);
                let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
                gauge.encode(encoder.encode_descriptor(name, help, unit.as_ref(), gauge.metric_type())?)?;
                continue;
            }
            let (name, help) = match RENAMED.iter().find(|(k, _, _)| k == key) {
                Some((_, name, help)) => (format!("zarrfs_{name}"), help.to_string()),
                None => (format!("zarrfs_{key}"), format!("`{key}` of zarrfs stats")),
            };
            let (name, unit) = split_unit(&name);
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(name, &help, unit.as_ref(), counter.metric_type())?)?;
        }
        for (key, name, help) in AGES {
            let Some(ms) = self.stats.get(key).and_then(Value::as_u64) else {
                continue;
            };
            let gauge = ConstGauge::new(ms as f64 / 1000.0);
            let descriptor = encoder.encode_descriptor(name, help, Some(&Unit::Seconds), gauge.metric_type())?;
            gauge.encode(descriptor)?;
        }
        Ok(())
    }

    fn histograms(&self, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        let fuse: Vec<_> = self.fuse.iter().map(|(op, s)| (vec![("operation", *op)], s)).collect();
        histogram(
            encoder,
            "zarrfs_fuse_request_duration",
            "Time from a kernel request's arrival to its reply, by operation",
            &fuse,
        )?;
        let store: Vec<_> = self
            .store
            .iter()
            .map(|(kind, outcome, s)| (vec![("kind", *kind), ("outcome", *outcome)], s))
            .collect();
        histogram(
            encoder,
            "zarrfs_store_request_duration",
            "Time of the requests to the store, by kind and outcome",
            &store,
        )?;
        if let Some(commit) = &self.commit {
            histogram(
                encoder,
                "zarrfs_shard_commit_duration",
                "Time of a shard commit (read, repack, conditional write; retries included)",
                &[(vec![], commit)],
            )?;
        }
        if let Some(append) = &self.journal_append {
            histogram(
                encoder,
                "zarrfs_journal_append_duration",
                "Time of a journal append, fsync included (what a close() waits for)",
                &[(vec![], append)],
            )?;
        }
        Ok(())
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let info = prometheus_client::metrics::info::Info::new([("version", env!("CARGO_PKG_VERSION"))]);
        info.encode(encoder.encode_descriptor(
            "zarrfs_build",
            "The zarrfs build serving the mount",
            None,
            info.metric_type(),
        )?)?;
        self.counters_and_gauges(&mut encoder)?;
        self.histograms(&mut encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::histogram::Histogram;
    use std::time::Duration;

    #[test]
    fn counters_gauges_and_histograms() {
        let stats: Map<String, Value> = serde_json::from_str(
            r#"{"get": 7, "get_bytes": 4096, "shard_commits": 2, "open_files": 3, "daemon_rss_bytes": 1048576,
                "latency_read_count": 5, "source_watched": true, "journal_oldest_pending_ms": 2500,
                "write_back_oldest_pending_ms": 750}"#,
        )
        .unwrap();
        let read = Histogram::default();
        read.record(Duration::from_micros(100)); // le 256 µs
        read.record(Duration::from_millis(3)); // le 4.096 ms
        let text = encode(Scrape {
            stats,
            fuse: vec![("read", read.snapshot()), ("lookup", Histogram::default().snapshot())],
            store: vec![("get", "ok", read.snapshot())],
            commit: Some(Histogram::default().snapshot()),
            journal_append: None,
        });
        for line in [
            "# TYPE zarrfs_store_get_requests_total counter",
            "zarrfs_store_get_requests_total 7",
            "zarrfs_store_get_bytes_total 4096",
            "zarrfs_shard_commits_total 2",
            "# TYPE zarrfs_open_files gauge",
            "zarrfs_open_files 3",
            "zarrfs_daemon_rss_bytes 1048576",
            "zarrfs_source_watched 1",
            "zarrfs_journal_oldest_pending_seconds 2.5",
            "# TYPE zarrfs_write_back_oldest_pending_seconds gauge",
            "zarrfs_write_back_oldest_pending_seconds 0.75",
            "# TYPE zarrfs_fuse_request_duration_seconds histogram",
            "zarrfs_fuse_request_duration_seconds_bucket{operation=\"read\",le=\"0.000256\"} 1",
            "zarrfs_fuse_request_duration_seconds_bucket{operation=\"read\",le=\"0.004096\"} 2",
            "zarrfs_fuse_request_duration_seconds_bucket{operation=\"read\",le=\"+Inf\"} 2",
            "zarrfs_fuse_request_duration_seconds_sum{operation=\"read\"} 0.0031",
            "zarrfs_fuse_request_duration_seconds_count{operation=\"lookup\"} 0",
            "zarrfs_store_request_duration_seconds_count{kind=\"get\",outcome=\"ok\"} 2",
            "zarrfs_shard_commit_duration_seconds_count 0",
            &format!("zarrfs_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION")),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
        }
        assert!(
            !text.contains("latency_read"),
            "the p50/p99 keys are left to the histograms"
        );
        assert!(!text.contains("journal_append"), "no journal, no histogram");
        assert!(
            !text.contains("pending_ms"),
            "the ages are gauges in seconds, never counters:\n{text}"
        );
    }
}
