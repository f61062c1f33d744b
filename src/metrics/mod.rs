//! What a monitoring system scrapes: `--metrics-address` serves `/metrics` in the Prometheus
//! text exposition format (docs/metrics.md).
//!
//! - [`histogram`]: the lock-free latency histogram every layer records into (it has no
//!   dependency, so `fs`, `store` and `shard` use it alike);
//! - [`exposition`]: one scrape's text, from the same counters `zarrfs stats --json` prints
//!   and the histograms;
//! - [`address`]: `--metrics-address` parsed and bound (loopback unless allowed);
//! - [`server`]: the small HTTP server answering scrapes.

pub mod address;
pub mod exposition;
pub mod histogram;
pub mod server;
