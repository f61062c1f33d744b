//! Opening a mount's source: its store (local directory or remote backend), the check that
//! it answers before the mount goes live, and the caches stacked on remote stores.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::cli::{MountSettings, SourceSpec};
use crate::store::list_cache::ListCache;
use crate::store::local::LocalStore;
use crate::store::missing_cache::MissingCache;
use crate::store::object::learned_nodes::GridScope;
use crate::store::object::SearchOptions;
use crate::store::transport::WireStats;
use crate::store::Store;
use crate::view::ViewMode;

/// How listings of a source that cannot be listed search for what may be there.
pub fn search_options(settings: &MountSettings) -> SearchOptions {
    SearchOptions {
        max_keys: settings.max_probe_shards,
        ttl: settings.metadata_ttl,
        scope: match settings.view {
            ViewMode::Unsharded | ViewMode::V2 => GridScope::Unsharded,
            ViewMode::Raw => GridScope::All,
        },
    }
}

/// The store a mount reads through: remote listings are slow and asked for again and again,
/// and so are names that do not exist, so both are kept for the metadata TTL.
pub fn with_caches(counted: Arc<dyn Store>, source: &SourceSpec, ttl: Duration) -> Arc<dyn Store> {
    match source {
        SourceSpec::Remote { url, .. } => {
            let missing = Arc::new(MissingCache::new(counted, ttl));
            let cache = ListCache::new(missing, ttl);
            Arc::new(if crate::store::remote::is_http_url(url) {
                cache.incomplete_listings()
            } else {
                cache
            })
        }
        SourceSpec::Local(_) => counted,
    }
}

/// A source's store, with the counters of what its client sends over the wire (remote ones).
pub type Opened = (Arc<dyn Store>, Option<Arc<WireStats>>);

/// Open the store a source names.
pub fn open_store(source: &SourceSpec, writable: bool, search: SearchOptions) -> Result<Opened> {
    match source {
        SourceSpec::Local(path) => {
            let store =
                LocalStore::new(path, writable).with_context(|| format!("cannot open source {}", path.display()))?;
            Ok((Arc::new(store), None))
        }
        SourceSpec::Remote { url, options } => {
            let backend = crate::store::remote::open(url, options, writable)
                .map_err(|m| anyhow::anyhow!(m))?
                .with_search(search);
            let wire = backend.wire_stats();
            Ok((Arc::new(backend), wire))
        }
    }
}

/// Ask the store once before going live, so a missing bucket, bad credentials or an unreachable
/// endpoint are reported by `mount` rather than by the first `ls`.
pub async fn check_reachable(store: &dyn Store, source: &SourceSpec) -> Result<()> {
    let SourceSpec::Remote { url, .. } = source else {
        return Ok(());
    };
    let listed: String = match store.list_dir("").await {
        // An empty prefix of a writable store is a place to create a hierarchy in.
        Ok(entries) if !entries.is_empty() || store.capabilities().writable => return Ok(()),
        Ok(_) => "nothing is listed there".to_string(),
        Err(e) => e.to_string(),
    };
    // Plain HTTP servers may refuse listings; a readable root metadata document will do.
    let mut tried = Vec::new();
    let mut failed = None;
    for key in ROOT_METADATA {
        match store.head(key).await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => tried.push(format!("{key}: not found (404)")),
            Err(e) => {
                tried.push(format!("{key}: {e}"));
                failed.get_or_insert(e);
            }
        }
    }
    // Nothing answered (an unreachable server, an untrusted certificate): one reason is enough.
    if let (Some(e), true) = (failed, tried.iter().all(|t| !t.ends_with("(404)"))) {
        bail!("cannot read {}: {e}", crate::store::remote::redact_url(url));
    }
    bail!(
        "cannot read {}: {listed}, and it has no Zarr metadata at its root ({})",
        crate::store::remote::redact_url(url),
        tried.join("; ")
    )
}

/// The documents that make a URL the root of a Zarr hierarchy (v3, then v2 group, array and
/// consolidated metadata).
const ROOT_METADATA: [&str; 4] = ["zarr.json", ".zgroup", ".zarray", ".zmetadata"];

/// A short name of the source for /proc/mounts and messages; never with credentials.
pub fn source_name(source: &SourceSpec) -> String {
    match source {
        SourceSpec::Local(path) => path.display().to_string(),
        SourceSpec::Remote { url, .. } => crate::store::remote::redact_url(url),
    }
}
