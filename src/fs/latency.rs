//! How long the daemon takes to answer each kind of kernel request, from the request's arrival
//! to its reply (what `zarrfs stats` prints as p50 and p99 per operation).
//!
//! Each operation kind has a histogram of powers of two of microseconds, in atomics
//! ([`Histogram`]): recording is three relaxed additions, with no lock, on every request. A percentile is read as the upper
//! edge of the bucket it falls in, so it is exact to within a factor of two, which is what a
//! person looking for the slow operation needs (a request answered from memory takes
//! microseconds, one that waits on a store milliseconds).

use std::time::Duration;

use crate::metrics::histogram::{Histogram, Snapshot};

/// The operation kinds timed, as the FUSE adapter names them; anything else is "other".
const OPS: [&str; 16] = [
    "lookup",
    "getattr",
    "setattr",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "readdirplus",
    "create",
    "unlink",
    "rename",
    "other",
];

/// The daemon's time per operation kind.
#[derive(Debug)]
pub struct Latencies {
    ops: Vec<Histogram>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            ops: OPS.iter().map(|_| Histogram::default()).collect(),
        }
    }
}

impl Latencies {
    /// A request of kind `op` took `elapsed` from its arrival to its reply.
    pub fn record(&self, op: &str, elapsed: Duration) {
        let kind = OPS.iter().position(|o| *o == op).unwrap_or(OPS.len() - 1);
        if let Some(histogram) = self.ops.get(kind) {
            histogram.record(elapsed);
        }
    }

    /// `latency_OP_count`, `latency_OP_p50_us` and `latency_OP_p99_us` for every kind (0 for
    /// one never asked for): flat numbers and always the same keys, as every other counter
    /// (scripts subtract two snapshots).
    pub fn snapshot(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut out = serde_json::Map::new();
        for (op, histogram) in OPS.iter().zip(&self.ops) {
            let s = histogram.snapshot();
            let (count, p50, p99) = (s.count(), s.percentile_edge(0.5), s.percentile_edge(0.99));
            let (p50, p99) = (p50.unwrap_or(0), p99.unwrap_or(0));
            out.insert(format!("latency_{op}_count"), count.into());
            out.insert(format!("latency_{op}_p50_us"), p50.into());
            out.insert(format!("latency_{op}_p99_us"), p99.into());
        }
        out
    }

    /// Each kind's histogram now (the Prometheus endpoint's `zarrfs_fuse_request_duration_seconds`).
    pub fn snapshots(&self) -> Vec<(&'static str, Snapshot)> {
        OPS.iter().zip(&self.ops).map(|(op, h)| (*op, h.snapshot())).collect()
    }

    /// The kinds timed, in the order `zarrfs stats` prints them.
    pub fn kinds() -> &'static [&'static str] {
        &OPS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_the_edges_of_their_buckets() {
        let l = Latencies::default();
        for _ in 0..98 {
            l.record("lookup", Duration::from_micros(3)); // bucket [2, 4)
        }
        l.record("lookup", Duration::from_micros(900)); // [512, 1024)
        l.record("lookup", Duration::from_millis(40)); // [32768, 65536)
        l.record("mystery", Duration::from_micros(0));
        let s = l.snapshot();
        assert_eq!(s["latency_lookup_count"], 100);
        assert_eq!(s["latency_lookup_p50_us"], 4);
        assert_eq!(s["latency_lookup_p99_us"], 1024);
        assert_eq!(s["latency_other_count"], 1);
        assert_eq!(s["latency_other_p99_us"], 1);
        assert!(s.values().all(|v| v.is_u64()), "every value a number: {s:?}");
        assert_eq!(s["latency_read_count"], 0, "kinds never asked for count 0");
        assert_eq!(s.len(), 3 * OPS.len(), "the same keys whatever was asked");
        l.record("read", Duration::from_secs(u64::MAX));
        assert_eq!(
            l.snapshot()["latency_read_p50_us"],
            1u64 << (crate::metrics::histogram::BUCKETS - 1)
        );
    }
}
