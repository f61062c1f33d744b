//! How long the daemon takes to answer each kind of kernel request, from the request's arrival
//! to its reply (what `zarrfs stats` prints as p50 and p99 per operation).
//!
//! Each operation kind has a histogram of powers of two of microseconds, in atomics: recording
//! is two relaxed additions, with no lock, on every request. A percentile is read as the upper
//! edge of the bucket it falls in, so it is exact to within a factor of two, which is what a
//! person looking for the slow operation needs (a request answered from memory takes
//! microseconds, one that waits on a store milliseconds).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Buckets: `[0, 1)`, `[1, 2)`, `[2, 4)`, … µs, the last one open-ended (past 2^38 µs, ~3 days).
const BUCKETS: usize = 40;

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

#[derive(Debug)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS],
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn record(&self, micros: u64) {
        let bucket = (u64::BITS - micros.leading_zeros()) as usize;
        self.buckets[bucket.min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// The count, and the upper edge (µs) of the buckets holding the 50th and 99th percentiles.
    fn summary(&self) -> Option<(u64, u64, u64)> {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let edge = |fraction: f64| {
            let rank = ((total as f64) * fraction).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, count) in counts.iter().enumerate() {
                seen += count;
                if seen >= rank {
                    return 1u64 << i;
                }
            }
            1u64 << (BUCKETS - 1)
        };
        Some((total, edge(0.5), edge(0.99)))
    }
}

/// The daemon's time per operation kind.
#[derive(Debug)]
pub struct Latencies {
    ops: Vec<Histogram>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            ops: OPS.iter().map(|_| Histogram::new()).collect(),
        }
    }
}

impl Latencies {
    /// A request of kind `op` took `elapsed` from its arrival to its reply.
    pub fn record(&self, op: &str, elapsed: Duration) {
        let kind = OPS.iter().position(|o| *o == op).unwrap_or(OPS.len() - 1);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        if let Some(histogram) = self.ops.get(kind) {
            histogram.record(micros);
        }
    }

    /// `latency_OP_count`, `latency_OP_p50_us` and `latency_OP_p99_us` for every kind (0 for
    /// one never asked for): flat numbers and always the same keys, as every other counter
    /// (scripts subtract two snapshots).
    pub fn snapshot(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut out = serde_json::Map::new();
        for (op, histogram) in OPS.iter().zip(&self.ops) {
            let (count, p50, p99) = histogram.summary().unwrap_or((0, 0, 0));
            out.insert(format!("latency_{op}_count"), count.into());
            out.insert(format!("latency_{op}_p50_us"), p50.into());
            out.insert(format!("latency_{op}_p99_us"), p99.into());
        }
        out
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
        assert_eq!(l.snapshot()["latency_read_p50_us"], 1u64 << (BUCKETS - 1));
    }
}
