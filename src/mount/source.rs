//! Opening a mount's source: its store (local directory or remote backend), the check that
//! it answers before the mount goes live, and the caches stacked on remote stores.
//!
//! A local directory is also looked through for Zarr before mounting ([`look_for_zarr`]): one
//! with none is most often a mistyped path. It is still mounted writable (a hierarchy is
//! created through the mount), with a warning; read-only it would show nothing Zarr, and is
//! refused. The look stops at the first metadata document and after [`LOOK_ENTRIES`] entries,
//! so a large tree costs a bounded walk, never a refusal.

use std::collections::{HashSet, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::settings::{MountSettings, SourceSpec};
use crate::store::known_keys::KnownKeys;
use crate::store::list_cache::ListCache;
use crate::store::local::watch::{SourceWatch, WatchError};
use crate::store::local::{LocalStore, OwnChanges};
use crate::store::object::learned_nodes::GridScope;
use crate::store::object::SearchOptions;
use crate::store::prefetch::PrefetchStats;
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
/// and so are names that do not exist and values the mount has just written, so all three are
/// kept for the metadata TTL. What the metadata warm-up lists is counted in `prefetch`.
pub fn with_caches(
    counted: Arc<dyn Store>,
    source: &SourceSpec,
    ttl: Duration,
    prefetch: Arc<PrefetchStats>,
) -> Arc<dyn Store> {
    match source {
        SourceSpec::Remote { url, .. } => {
            let known = Arc::new(KnownKeys::new(counted, ttl));
            let cache = ListCache::new(known, ttl).with_prefetch_stats(prefetch);
            Arc::new(if crate::store::remote::is_http_url(url) {
                cache.incomplete_listings()
            } else {
                cache
            })
        }
        SourceSpec::Local(_) => counted,
    }
}

/// The watch of a local source, when the mount is to be told of its changes instead of
/// trusting what it read for `--metadata-ttl` (none was given; see `store/local/watch.rs`). A
/// source that cannot be watched keeps the TTL, and the log says why. A writable mount's watch
/// leaves out the mount's own changes, which its store is to record ([`SourceWatch::own`]).
pub fn start_watch(settings: &MountSettings) -> Option<SourceWatch> {
    let SourceSpec::Local(path) = &settings.source else {
        return None;
    };
    if !settings.watch {
        return None;
    }
    let ttl = settings.metadata_ttl.as_secs_f64();
    match SourceWatch::start(path) {
        Ok(watch) => {
            let watch = match settings.writable {
                true => watch.skipping_own(Arc::new(OwnChanges::default())),
                false => watch,
            };
            tracing::info!(
                directories = watch.watched(),
                "watching the source: its changes show at once"
            );
            Some(watch)
        }
        Err(e @ WatchError::NotLocal(..)) => {
            tracing::info!("changes to the source show within --metadata-ttl ({ttl} s): {e}");
            None
        }
        Err(e) => {
            tracing::warn!("changes to the source show within --metadata-ttl ({ttl} s): {e}");
            None
        }
    }
}

/// What a mount is told of the source's changes by its watch.
pub fn change_feed(mut watch: SourceWatch) -> crate::fuse::watching::ChangeFeed {
    Box::new(move |wait| {
        Ok(watch.wait(wait)?.map(|changed| {
            let shown: Vec<&String> = changed.keys.iter().take(8).collect();
            tracing::debug!(
                keys = changed.keys.len(),
                everything = changed.everything,
                "source changes: {shown:?}"
            );
            (changed.keys, changed.everything)
        }))
    })
}

/// A source's store, with the counters of what its client sends over the wire (remote ones).
pub type Opened = (Arc<dyn Store>, Option<Arc<WireStats>>);

/// Open the store a source names.
/// A local store records its own changes in `own`, if given (see `store/local/own_changes.rs`).
pub fn open_store(
    source: &SourceSpec,
    writable: bool,
    search: SearchOptions,
    own: Option<Arc<OwnChanges>>,
) -> Result<Opened> {
    match source {
        SourceSpec::Local(path) => {
            let mut store =
                LocalStore::new(path, writable).with_context(|| format!("cannot open source {}", path.display()))?;
            if let Some(own) = own {
                store = store.recording_own_changes(own);
            }
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

/// Directory entries a look for Zarr in a local source reads at most.
pub const LOOK_ENTRIES: usize = 10_000;

/// The names of Zarr metadata documents (v3 and its drafts' entry point, v2), as said in messages.
const ZARR_DOCUMENTS: &str = "zarr.json, .zgroup, .zarray or .zmetadata";

/// A v1 array's `meta` document is read only up to this size (a larger file is something else).
const V1_META_BYTES: u64 = 1 << 20;

/// What a look through a local source found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZarrPresence {
    /// A Zarr metadata document, at the root or below it.
    Found,
    /// None anywhere in the tree.
    Absent,
    /// None in the first this many entries, where the look stopped.
    NotInFirst(usize),
}

/// Look through the directory `root` (breadth first, symlinks followed as the mount shows
/// them, each directory once) for a Zarr metadata document: `zarr.json` (v3, and the entry
/// point of the v3 drafts), `.zgroup`, `.zarray`, `.zmetadata` (v2), or a v1 array's `meta`.
/// Unreadable subdirectories are passed over; an unreadable root is an error.
pub fn look_for_zarr(root: &Path, max_entries: usize) -> std::io::Result<ZarrPresence> {
    let mut pending = VecDeque::from([root.to_path_buf()]);
    let mut seen = HashSet::new();
    let mut entries = 0usize;
    while let Some(dir) = pending.pop_front() {
        let listing = match std::fs::read_dir(&dir) {
            Ok(listing) => listing,
            Err(e) if dir == root => return Err(e),
            Err(_) => continue,
        };
        for entry in listing.flatten() {
            entries += 1;
            if entries > max_entries {
                return Ok(ZarrPresence::NotInFirst(max_entries));
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // Plain files other than the documents' names cost no stat.
            let plain_file = entry.file_type().is_ok_and(|t| t.is_file());
            if plain_file && !DOCUMENT_NAMES.contains(&&*name) {
                continue;
            }
            let path = entry.path();
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                if seen.insert((meta.dev(), meta.ino())) {
                    pending.push_back(path);
                }
            } else if meta.is_file() && is_zarr_document(&name, &path, &meta) {
                return Ok(ZarrPresence::Found);
            }
        }
    }
    Ok(ZarrPresence::Absent)
}

/// The names a Zarr metadata document may have (a `meta` is checked to be v1's).
const DOCUMENT_NAMES: [&str; 5] = ["zarr.json", ".zgroup", ".zarray", ".zmetadata", "meta"];

fn is_zarr_document(name: &str, path: &Path, meta: &std::fs::Metadata) -> bool {
    match name {
        "zarr.json" | ".zgroup" | ".zarray" | ".zmetadata" => true,
        // A file named `meta` need not be Zarr v1's.
        "meta" if meta.len() <= V1_META_BYTES => {
            std::fs::read(path).is_ok_and(|bytes| crate::zarr::legacy::parse_legacy_array(&bytes, true).is_ok())
        }
        _ => false,
    }
}

/// What to say about a local source with no Zarr found in it: `Ok(None)` when there is some;
/// `Ok(Some(warning))` for a mount that goes ahead; an error for a read-only mount of a tree
/// with none at all.
pub fn zarr_warning(root: &Path, writable: bool, max_entries: usize) -> Result<Option<String>> {
    let found = look_for_zarr(root, max_entries).with_context(|| format!("cannot list source {}", root.display()))?;
    let root = root.display();
    match found {
        ZarrPresence::Found => Ok(None),
        ZarrPresence::NotInFirst(n) => Ok(Some(format!(
            "no Zarr hierarchy found in the first {n} entries of {root} (no {ZARR_DOCUMENTS}); mounting it anyway"
        ))),
        ZarrPresence::Absent if writable => Ok(Some(format!(
            "no Zarr hierarchy found at {root}: no {ZARR_DOCUMENTS} in it or below it; mounting it writable (a \
             hierarchy can be created through the mount)"
        ))),
        ZarrPresence::Absent => bail!(
            "no Zarr hierarchy found at {root}: no {ZARR_DOCUMENTS} in it or below it; not mounting it read-only \
             (check the source path, or mount it writable to create a hierarchy in it)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(root: &Path) -> ZarrPresence {
        look_for_zarr(root, LOOK_ENTRIES).unwrap()
    }

    #[test]
    fn finds_zarr_at_the_root_or_below() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        assert_eq!(look(root), ZarrPresence::Absent);
        std::fs::write(root.join("notes.txt"), "not zarr").unwrap();
        assert_eq!(look(root), ZarrPresence::Absent);
        for name in ["zarr.json", ".zgroup", ".zarray", ".zmetadata"] {
            let dir = root.join(format!("deep/{name}-holder/x.zarr"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), "{}").unwrap();
            assert_eq!(look(root), ZarrPresence::Found, "{name}");
            std::fs::remove_dir_all(root.join("deep")).unwrap();
        }
        // A directory named like a document is not one.
        std::fs::create_dir(root.join("zarr.json")).unwrap();
        assert_eq!(look(root), ZarrPresence::Absent);
    }

    #[test]
    fn a_v1_meta_counts_only_when_it_is_one() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("meta"), "some notes").unwrap();
        assert_eq!(look(root), ZarrPresence::Absent);
        let v1 = r#"{"zarr_format": 1, "shape": [4], "chunks": [2], "dtype": "<i4", "compression": "zlib",
                     "fill_value": 0, "order": "C"}"#;
        std::fs::write(root.join("meta"), v1).unwrap();
        assert_eq!(look(root), ZarrPresence::Found);
    }

    #[test]
    fn the_look_is_bounded_and_survives_symlink_loops() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::os::unix::fs::symlink(root, root.join("loop")).unwrap();
        assert_eq!(look(root), ZarrPresence::Absent);
        for i in 0..20 {
            std::fs::write(root.join(format!("f{i}")), "").unwrap();
        }
        assert_eq!(look_for_zarr(root, 10).unwrap(), ZarrPresence::NotInFirst(10));
        assert!(zarr_warning(root, false, 10)
            .unwrap()
            .unwrap()
            .contains("in the first 10 entries"));
    }

    #[test]
    fn warns_when_writable_and_refuses_when_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let warning = zarr_warning(root, true, LOOK_ENTRIES).unwrap().unwrap();
        assert!(warning.starts_with(&format!("no Zarr hierarchy found at {}: ", root.display())));
        let refusal = zarr_warning(root, false, LOOK_ENTRIES).unwrap_err().to_string();
        assert!(refusal.contains("not mounting it read-only"), "{refusal}");
        std::fs::create_dir(root.join("a.zarr")).unwrap();
        std::fs::write(root.join("a.zarr/zarr.json"), "{}").unwrap();
        assert_eq!(zarr_warning(root, false, LOOK_ENTRIES).unwrap(), None);
    }
}
