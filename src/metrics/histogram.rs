//! A latency histogram cheap enough for every request: buckets of powers of two of
//! microseconds in atomics, plus the sum, so recording is three relaxed additions and no lock.
//!
//! Bucket `i` holds durations in `[2^(i-1), 2^i)` µs (bucket 0 holds `[0, 1)`); the last one is
//! open-ended. The same buckets give `zarrfs stats` its p50/p99 (the upper edge of the bucket a
//! percentile falls in, exact to a factor of two) and the Prometheus endpoint its `le` bounds:
//! Prometheus wants few buckets per series, so [`Snapshot::prometheus_buckets`] merges them
//! four to one (16 µs, 256 µs, 4 ms, 65 ms, 1 s, 17 s), with every other power in between.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Buckets: `[0, 1)`, `[1, 2)`, `[2, 4)`, … µs, the last one open-ended (past 2^38 µs).
pub const BUCKETS: usize = 40;

/// The `le` bounds served, as bucket indexes (upper edge 2^i µs): 4 µs to about 67 s.
const EXPORTED: [usize; 13] = [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26];

#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_micros: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_micros: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn record(&self, elapsed: Duration) {
        self.record_micros(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn record_micros(&self, micros: u64) {
        let bucket = (u64::BITS - micros.leading_zeros()) as usize;
        self.buckets[bucket.min(BUCKETS - 1)].fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(micros, Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            counts: std::array::from_fn(|i| self.buckets[i].load(Relaxed)),
            sum_micros: self.sum_micros.load(Relaxed),
        }
    }
}

/// The counts of a histogram at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Per bucket (not cumulative).
    pub counts: [u64; BUCKETS],
    pub sum_micros: u64,
}

impl Snapshot {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The upper edge (µs) of the bucket holding the given fraction of the requests; `None`
    /// when there were none.
    pub fn percentile_edge(&self, fraction: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * fraction).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(1u64 << i);
            }
        }
        Some(1u64 << (BUCKETS - 1))
    }

    /// `(le in seconds, count in (previous le, le])` for the served bounds; what lies above
    /// the last one is only in the total (`+Inf`).
    pub fn prometheus_buckets(&self) -> Vec<(f64, u64)> {
        let mut out = Vec::with_capacity(EXPORTED.len());
        let mut from = 0;
        for &upper in &EXPORTED {
            let count = self.counts[from..=upper].iter().sum();
            out.push(((1u64 << upper) as f64 / 1e6, count));
            from = upper + 1;
        }
        out
    }

    pub fn sum_seconds(&self) -> f64 {
        self.sum_micros as f64 / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_sum_and_served_bounds() {
        let h = Histogram::default();
        h.record_micros(0); // [0, 1)
        h.record_micros(3); // [2, 4): le 4 µs
        h.record_micros(4); // [4, 8): le 16 µs
        h.record(Duration::from_millis(3)); // 3000 µs in [2048, 4096): le 4.096 ms
        h.record(Duration::from_secs(1_000)); // past the last bound: +Inf only
        let s = h.snapshot();
        assert_eq!(s.count(), 5);
        assert_eq!(s.sum_micros, 3 + 4 + 3000 + 1_000_000_000);
        let served = s.prometheus_buckets();
        assert_eq!(served[0], (4e-6, 2), "0 µs and 3 µs are at most 4 µs");
        assert_eq!(served[1], (16e-6, 1));
        assert_eq!(served[5], (4096e-6, 1));
        assert_eq!(served.iter().map(|b| b.1).sum::<u64>(), 4, "1000 s is above 67 s");
        assert_eq!(s.percentile_edge(0.5), Some(8), "the third of five is 4 µs, in [4, 8)");
        assert_eq!(s.percentile_edge(0.99), Some(1 << 30));
        assert_eq!(Histogram::default().snapshot().percentile_edge(0.5), None);
    }
}
