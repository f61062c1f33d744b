//! The stack a mount (and `zarrfs copy`) reads its source through, built from the settings:
//! the backend, the request counters, the disk cache (`--cache`), the listing and miss caches
//! of remote sources, and the view with its index and shard-data caches. One place, so that a
//! copy reads exactly as a mount of the same source would.

use std::sync::Arc;

use anyhow::Result;

use super::settings::{MountSettings, SourceSpec};
use super::source::{open_store, search_options, source_name, with_caches};
use crate::store::counting::CountingStore;
use crate::store::disk_cache::store::DiskCachedStore;
use crate::store::local::OwnChanges;
use crate::store::prefetch::PrefetchStats;
use crate::store::timed::{StoreTimings, TimedStore};
use crate::store::transport::WireStats;
use crate::store::Store;
use crate::view::{View, ViewOptions};

/// A source opened for reading.
pub struct Reading {
    pub view: View,
    /// What the view reads through (the top of the store stack).
    pub store: Arc<dyn Store>,
    pub counters: StoreCounters,
}

/// The counters of the store stack, for `zarrfs stats`.
#[derive(Debug)]
pub struct StoreCounters {
    /// The requests that reach the source.
    pub store: Arc<CountingStore>,
    /// What a remote source's client sent over the wire.
    pub wire: Option<Arc<WireStats>>,
    /// What the metadata warm-up fetched and what of it was used; requests joined.
    pub prefetch: Arc<PrefetchStats>,
    /// The disk cache, closed at unmount.
    pub disk_cache: Option<Arc<DiskCachedStore>>,
    /// How long the source took to answer, by request kind and outcome (`--metrics-address`).
    pub timings: Arc<StoreTimings>,
}

impl crate::fs::Counters for StoreCounters {
    fn snapshot(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut stats = as_object(serde_json::to_value(self.store.counts()));
        stats.extend(as_object(serde_json::to_value(self.prefetch.counts())));
        if let Some(wire) = &self.wire {
            stats.extend(as_object(serde_json::to_value(wire.counts())));
        }
        if let Some(cached) = &self.disk_cache {
            stats.extend(as_object(serde_json::to_value(cached.counts())));
        }
        stats
    }
}

/// The fields of a serialised counter struct (none if it did not serialise to an object).
fn as_object(value: serde_json::Result<serde_json::Value>) -> serde_json::Map<String, serde_json::Value> {
    match value {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

/// Open the source of `settings` and the view over it (nothing is asked of the source yet).
pub fn open(settings: &MountSettings) -> Result<Reading> {
    open_recording(settings, None)
}

/// [`open`], a local store recording its own changes in `own` (for the source's watch).
pub fn open_recording(settings: &MountSettings, own: Option<Arc<OwnChanges>>) -> Result<Reading> {
    let (backend, wire) = open_store(&settings.source, settings.writable, search_options(settings), own)?;
    let timings = Arc::new(StoreTimings::default());
    let timed = Arc::new(TimedStore::new(backend, timings.clone()));
    let counted = Arc::new(CountingStore::new(timed));
    let prefetch = Arc::new(PrefetchStats::default());
    let disk_cache = match &settings.disk_cache {
        Some((dir, max_bytes)) => Some(Arc::new(DiskCachedStore::open(
            counted.clone(),
            dir,
            *max_bytes,
            &source_name(&settings.source),
            settings.metadata_ttl,
        )?)),
        None => None,
    };
    let read_through: Arc<dyn Store> = match &disk_cache {
        Some(cached) => cached.clone(),
        None => counted.clone(),
    };
    let store = with_caches(read_through, &settings.source, settings.metadata_ttl, prefetch.clone());
    let view = View::new(store.clone(), &view_options(settings, prefetch.clone()));
    Ok(Reading {
        view,
        store,
        counters: StoreCounters {
            store: counted,
            wire,
            prefetch,
            disk_cache,
            timings,
        },
    })
}

fn view_options(settings: &MountSettings, prefetch: Arc<PrefetchStats>) -> ViewOptions {
    let remote = matches!(settings.source, SourceSpec::Remote { .. });
    // Shard bytes are cached where requests are dear (remote sources, or when asked for with
    // --prefetch-size): three quarters of the cache, indexes the rest.
    let cache_shard_bytes = remote || settings.prefetch_bytes > 0;
    let data_cache_bytes = if cache_shard_bytes {
        settings.cache_bytes - settings.cache_bytes / 4
    } else {
        0
    };
    ViewOptions {
        mode: settings.view,
        index_cache_bytes: settings.cache_bytes - data_cache_bytes,
        data_cache_bytes,
        prefetch_bytes: settings.prefetch_bytes,
        metadata_ttl: settings.metadata_ttl,
        remote,
        max_probe_shards: settings.max_probe_shards,
        v2_compressor: settings.v2_compressor,
        open_snapshot_bytes: settings.cache_bytes as u64,
        prefetch_stats: prefetch,
    }
}
