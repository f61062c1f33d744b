//! Zarr v2's metadata documents in the listings of web servers that hide dot files.
//!
//! Web servers leave names starting with a dot out of their listings: nginx's WebDAV and
//! `autoindex`, Apache's default `IndexIgnore`. Zarr v2 keeps its metadata in exactly such
//! names (`.zarray`, `.zgroup`, `.zattrs`, `.zmetadata`), so without them a listed v2 node
//! would look like a plain directory and `cp -r` of it would copy chunks without metadata.
//! A listed directory that holds no `zarr.json` and is not inside a known array is therefore
//! asked for `.zarray` and `.zgroup` (a HEAD each), and a v2 node found so for `.zattrs` (and a
//! group for `.zmetadata`); what is found joins the listing. The answer is kept for the
//! metadata TTL, so a directory costs these requests once. Directories inside an array need
//! no looking: a v3 node seen in a listing is known to be one once its `zarr.json` is read
//! (by the view, usually, or here when a directory below it is listed).

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Instant;

use lru::LruCache;

use super::learned_nodes::NodeKind;
use super::*;

/// Directories whose hidden documents are remembered.
const DIRECTORIES_KEPT: usize = 16_384;

/// The hidden documents found per directory, and when they were looked for.
#[derive(Debug)]
pub struct HiddenDocuments(Mutex<LruCache<String, (Vec<DirEntry>, Instant)>>);

impl Default for HiddenDocuments {
    fn default() -> Self {
        let cap = NonZeroUsize::new(DIRECTORIES_KEPT).unwrap_or(NonZeroUsize::MIN);
        HiddenDocuments(Mutex::new(LruCache::new(cap)))
    }
}

impl ObjectBackend {
    /// Add the Zarr v2 documents the server's listing of `prefix` may have hidden (module
    /// docs).
    pub(super) async fn add_hidden_documents(&self, prefix: &str, entries: &mut Vec<DirEntry>) -> StoreResult<()> {
        // A source that cannot be listed asks for them itself (`key_search`); an empty listing
        // is a missing directory as often as not (an index page's 404 lists nothing).
        if self.discovering() || entries.is_empty() {
            return Ok(());
        }
        if entries.iter().any(|e| e.name == "zarr.json") {
            // A v3 node: whether it is an array is read from its document when a directory
            // below it is listed (by then the view has usually read it).
            self.nodes.learn_kind(prefix, NodeKind::V3Group);
            return Ok(());
        }
        if self.inside_an_array(prefix).await? {
            return Ok(());
        }
        let found = match self.kept_hidden(prefix) {
            Some(found) => found,
            None => {
                let found = self.look_for_hidden(prefix).await?;
                let mut kept = self.hidden.0.lock().unwrap_or_else(|e| e.into_inner());
                kept.put(prefix.to_string(), (found.clone(), Instant::now()));
                found
            }
        };
        for entry in found {
            if !entries.iter().any(|e| e.name == entry.name) {
                entries.push(entry);
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(())
    }

    /// Whether the nearest node above directory `prefix` is an array (nothing inside one is a
    /// node); a v3 node listed but not read is read first.
    async fn inside_an_array(&self, prefix: &str) -> StoreResult<bool> {
        match self.nodes.nearest_above(prefix) {
            Some((dir, node)) if node.kind == NodeKind::V3Group && !node.read => {
                tracing::debug!(dir, "reading a listed node's zarr.json");
                self.get(&format!("{dir}zarr.json"), GetOptions::default()).await?;
                Ok(self.nodes.get(&dir).is_some_and(|n| n.kind.is_array()))
            }
            Some((_, node)) => Ok(node.kind.is_array()),
            None => Ok(false),
        }
    }

    fn kept_hidden(&self, prefix: &str) -> Option<Vec<DirEntry>> {
        let mut kept = self.hidden.0.lock().unwrap_or_else(|e| e.into_inner());
        match kept.get(prefix) {
            Some((found, at)) if at.elapsed() < self.search.ttl => Some(found.clone()),
            _ => None,
        }
    }

    async fn look_for_hidden(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        tracing::debug!(dir = prefix, "looking for Zarr v2 documents the listing may hide");
        let mut found = Vec::new();
        let mut kind = None;
        for candidate in [NodeKind::V2Array, NodeKind::V2Group] {
            let name = candidate.document();
            if let Some(meta) = self.head(&format!("{prefix}{name}")).await? {
                found.push(DirEntry::file(name, meta.size, meta.mtime_ns));
                self.nodes.learn_kind(prefix, candidate);
                kind = Some(candidate);
                break;
            }
        }
        let others: &[&str] = match kind {
            Some(NodeKind::V2Array) => &[".zattrs"],
            Some(NodeKind::V2Group) => &[".zattrs", ".zmetadata"],
            _ => &[],
        };
        for name in others {
            if let Some(meta) = self.head(&format!("{prefix}{name}")).await? {
                found.push(DirEntry::file(*name, meta.size, meta.mtime_ns));
            }
        }
        Ok(found)
    }
}
