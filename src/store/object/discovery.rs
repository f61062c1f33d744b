//! Sources that cannot be listed at all: an HTTP server with neither WebDAV nor directory
//! index pages. Zarr needs no listing to be read (metadata names the nodes, the chunk grid
//! names every chunk key), so such a source is still mounted, and what exists is found by
//! asking for it:
//!
//! - consolidated metadata (the `consolidated_metadata` of a v3 `zarr.json`, a v2
//!   `.zmetadata`) names the nodes below its group: the root's is read at once, a subgroup's
//!   when its document is read; their directories are then known, so groups list their
//!   children and xarray finds every array;
//! - a key read or HEADed successfully is remembered, and a listing shows what has been found
//!   under a directory so far (the log says once that listings are partial, and why);
//! - a directory exists when something below it is known, when the server answers its URL
//!   with 403 (a directory it will not list, as nginx and Apache do) rather than 404, or when
//!   it holds one of the documents of a Zarr node (`zarr.json`, `.zgroup`, `.zarray`);
//! - a 403 for a key is not a file (it is the directory answer above).
//!
//! A listing asks for what may be there ([`super::key_search`]): a node's metadata documents,
//! and the chunk keys of an array's grid. The sharding layer finds the shards of a chunk
//! directory by reading the indexes of the grid's shards instead ([`Capabilities::listable`]
//! is false here).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use super::http_listing::LISTING_NONE;
use super::index_pages::PageError;
use super::learned_nodes::{nodes_of, NodeKind};
use super::*;

/// The documents a Zarr node's directory holds (v3, v2 group, v2 array).
const NODE_DOCUMENTS: [&str; 3] = ["zarr.json", ".zgroup", ".zarray"];

/// Keys found on a source that cannot be listed, with their sizes, and directories named by
/// consolidated metadata (`a/b/`).
#[derive(Debug, Default)]
pub struct Discovered {
    known: Mutex<BTreeMap<String, u64>>,
    dirs: Mutex<std::collections::BTreeSet<String>>,
}

impl Discovered {
    fn known(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dirs(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A directory found (its URL answered 403).
    pub fn add_dir(&self, dir: String) {
        self.dirs().insert(dir);
    }

    /// Whether `key` was found.
    pub fn knows(&self, key: &str) -> bool {
        self.known().contains_key(key)
    }

    /// Whether something is known at or below directory `prefix` (ending in `/`).
    pub fn has_below(&self, prefix: &str) -> bool {
        let below = |k: &String| k.starts_with(prefix);
        self.known()
            .range(prefix.to_string()..)
            .next()
            .is_some_and(|(k, _)| below(k))
            || self.dirs().range(prefix.to_string()..).next().is_some_and(below)
    }
}

/// The directories of the nodes that consolidated metadata names: the keys of a v3
/// `consolidated_metadata.metadata` (node paths) or of a v2 `.zmetadata`'s `metadata`
/// (document keys, `a/b/.zarray`), each with the directories above it, ending in `/`.
pub fn consolidated_dirs(doc: &serde_json::Value) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut add = |path: &str| {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push_str(part);
            at.push('/');
            out.insert(at.clone());
        }
    };
    if let Some(nodes) = doc
        .pointer("/consolidated_metadata/metadata")
        .and_then(|m| m.as_object())
    {
        for path in nodes.keys() {
            add(path);
        }
    }
    if let Some(docs) = doc.get("metadata").and_then(|m| m.as_object()) {
        for key in docs.keys() {
            if let Some((dir, _)) = key.rsplit_once('/') {
                add(dir);
            }
        }
    }
    out.into_iter().collect()
}

impl ObjectBackend {
    /// Whether this source cannot be listed, so that what exists is found by asking.
    pub(super) fn discovering(&self) -> bool {
        self.flavor == Flavor::Http && self.listing.load(Ordering::Relaxed) == LISTING_NONE
    }

    /// Remember a key found to exist (on a source that cannot be listed).
    pub(super) fn remember(&self, key: &str, size: u64) {
        if self.discovering() {
            self.discovered.known().insert(key.to_string(), size);
            let (dir, name) = key.rfind('/').map_or(("", key), |i| (&key[..=i], &key[i + 1..]));
            if let Some(kind) = NodeKind::of_document(name) {
                self.nodes.learn_kind(dir, kind);
            }
        }
    }

    /// What has been found directly below a directory so far.
    pub(super) fn known_children(&self, prefix: &str) -> Vec<DirEntry> {
        let mut out: BTreeMap<String, DirEntry> = BTreeMap::new();
        for dir in self.discovered.dirs().range(prefix.to_string()..) {
            let Some(rest) = dir.strip_prefix(prefix) else {
                break;
            };
            if let Some((name, _)) = rest.split_once('/') {
                out.entry(name.to_string())
                    .or_insert_with(|| DirEntry::dir(name.to_string()));
            }
        }
        for (key, &size) in self.discovered.known().range(prefix.to_string()..) {
            let Some(rest) = key.strip_prefix(prefix) else {
                break;
            };
            match rest.split_once('/') {
                Some((dir, _)) => {
                    out.entry(dir.to_string())
                        .or_insert_with(|| DirEntry::dir(dir.to_string()));
                }
                None => {
                    out.insert(rest.to_string(), DirEntry::file(rest.to_string(), size, None));
                }
            }
        }
        out.into_values().collect()
    }

    /// Read the root's consolidated metadata, if any, and know the directories it names.
    pub(super) async fn learn_consolidated(&self) {
        for key in ["zarr.json", ".zmetadata"] {
            // `get` learns from what it reads (see `learn_from`).
            let _ = self.get(key, GetOptions::default()).await;
        }
    }

    /// A metadata document read whole on a source that cannot be listed: the nodes it names
    /// become known ([`super::learned_nodes`]), and so do the directories of the nodes a
    /// group's consolidated metadata names, below the group's directory (so a subgroup
    /// consolidated on its own lists too).
    pub(super) fn learn_from(&self, key: &str, bytes: &[u8]) {
        let (dir, name) = key.rsplit_once('/').map_or(("", key), |(d, n)| (d, n));
        let documents = ["zarr.json", ".zmetadata", ".zarray", ".zgroup"];
        if self.flavor != Flavor::Http || !documents.contains(&name) {
            return;
        }
        let Ok(doc) = serde_json::from_slice::<serde_json::Value>(bytes) else {
            return;
        };
        let base = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        self.nodes.learn(nodes_of(&base, name, &doc, self.search.scope));
        if !self.discovering() {
            return;
        }
        let dirs: Vec<String> = consolidated_dirs(&doc)
            .into_iter()
            .map(|d| format!("{base}{d}"))
            .collect();
        if dirs.is_empty() {
            return;
        }
        let mut known = self.discovered.dirs();
        let before = known.len();
        if !base.is_empty() {
            known.insert(base);
        }
        known.extend(dirs);
        if known.len() > before {
            tracing::info!(
                source = %self.name,
                group = dir,
                directories = known.len() - before,
                "listing from the group's consolidated metadata"
            );
        }
    }

    /// Whether a directory exists on a source that cannot be listed (see the module docs).
    pub(super) async fn probe_dir(&self, prefix: &str) -> StoreResult<bool> {
        if prefix.is_empty() {
            return Ok(true);
        }
        if self.discovered.has_below(prefix) {
            return Ok(true);
        }
        if let Some(exists) = self.chunk_dir_exists(prefix).await? {
            return Ok(exists);
        }
        if let Some(wire) = &self.wire {
            wire.probed();
        }
        if let Some(pages) = &self.index_pages {
            match pages.get(&self.raw_path(prefix)).await {
                Err(PageError::Refused(status, _)) if status == http::StatusCode::FORBIDDEN => return Ok(true),
                Ok(Some(_)) => return Ok(true),
                _ => {}
            }
        }
        for doc in NODE_DOCUMENTS {
            if self.head(&format!("{prefix}{doc}")).await?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consolidated_metadata_names_directories() {
        let v3: serde_json::Value = serde_json::json!({
            "zarr_format": 3, "node_type": "group",
            "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {
                "a": {"node_type": "group"}, "a/b c": {"node_type": "array"}, "x": {"node_type": "array"}
            }}
        });
        assert_eq!(consolidated_dirs(&v3), ["a/", "a/b c/", "x/"]);
        let v2: serde_json::Value = serde_json::json!({
            "zarr_consolidated_format": 1,
            "metadata": {".zgroup": {}, "g/.zgroup": {}, "g/arr/.zarray": {}, "g/arr/.zattrs": {}}
        });
        assert_eq!(consolidated_dirs(&v2), ["g/", "g/arr/"]);
        assert!(consolidated_dirs(&serde_json::json!({"zarr_format": 3})).is_empty());
    }
}
