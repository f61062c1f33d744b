//! A mount's `/metrics` (`--metrics-address`): the listener bound before the mount went live,
//! served from the mount's runtime with what the filesystem and the store stack measure. The
//! counters come from `Fs::stats_json`, what `zarrfs stats --json` prints.

use std::net::TcpListener;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::fs::Fs;
use crate::metrics::exposition::{self, Scrape};
use crate::store::timed::StoreTimings;

/// Serve the metrics of `fs` (and of the store below it, `store`) on `listener`.
pub(crate) fn serve(
    listener: TcpListener,
    runtime: &tokio::runtime::Handle,
    fs: Arc<Fs>,
    store: Arc<StoreTimings>,
) -> Result<()> {
    let addr = listener.local_addr().context("the metrics listener has no address")?;
    let render = Arc::new(move || exposition::encode(scrape(&fs, &store)));
    crate::metrics::server::spawn(listener, runtime, render)
        .with_context(|| format!("cannot serve metrics on {addr}"))?;
    tracing::info!("serving metrics at http://{addr}/metrics");
    Ok(())
}

/// What the mount measures now.
fn scrape(fs: &Fs, store: &StoreTimings) -> Scrape {
    let stats = match fs.stats_json().map(|json| serde_json::from_slice(&json)) {
        Ok(Ok(serde_json::Value::Object(map))) => map,
        _ => serde_json::Map::new(),
    };
    let timings = fs.timings();
    Scrape {
        stats,
        fuse: timings.fuse,
        store: store.snapshots(),
        commit: Some(timings.commit),
        journal_append: timings.journal_append,
    }
}
