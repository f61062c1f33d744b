//! What a change to the source means for the view, when the mount is told of changes instead
//! of asking again after a TTL (a watched local source, see `store/local/watch.rs`): what the
//! view forgets, and which of its paths may now show something else.
//!
//! A path stands for everything below it, so the answer is coarse where being exact would
//! need the view to know what the kernel holds: anything below an array (a shard, a chunk, its
//! own metadata) is the array's directory; a metadata document is its directory; anything
//! else is its own path. The root's path `""` stands for the root's documents only. A shard's
//! chunk files are also named one by one: the kernel keeps a name that is in use when its
//! directory is dropped (a read in flight), and gives it back with the directory's next lookup.

use std::collections::BTreeSet;

use std::sync::atomic::Ordering;

use std::sync::Arc;

use super::nodes::{NodeCache, NodeInfo, ShardedNode};
use super::v2::V2Nodes;
use super::View;
use crate::store::key::dir_prefix;

/// The documents whose change changes what their directory is.
const METADATA_NAMES: [&str; 5] = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];

/// Keys in one batch beyond which everything is forgotten instead (each key's indexes are
/// looked for through the whole index cache).
const MANY_KEYS: usize = 4096;

/// Chunk files of a changed shard named one by one; a larger shard's stand on its array's
/// directory alone (a read of one of them in flight as the change is handled may then keep
/// the kernel's entry, and ESTALE, until the kernel forgets it).
const FILES_PER_SHARD: u64 = 1 << 16;

/// The paths of the view that changed with a batch of keys.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ChangedPaths {
    /// No path contains another; `""` is the root's documents.
    pub paths: Vec<String>,
    /// Anything may have changed: the whole tree.
    pub everything: bool,
    /// The chunk files of the shards that changed, each also below one of `paths`: a name
    /// the kernel holds there must be dropped by itself, as one in use (a read in flight)
    /// outlives the drop of its directory and comes back with it.
    pub files: Vec<String>,
}

impl View {
    /// Forget what is kept of the changed `keys` (with `everything`, of all of them), and say
    /// which paths changed.
    pub fn source_changed(&self, keys: &BTreeSet<String>, everything: bool) -> ChangedPaths {
        // Many keys at once (a copy into the source): forgetting all is cheaper than each.
        if everything || keys.len() > MANY_KEYS || keys.iter().any(|k| is_draft_metadata(k)) {
            self.forget_everything();
            return ChangedPaths {
                paths: Vec::new(),
                everything: true,
                files: Vec::new(),
            };
        }
        let mut paths = BTreeSet::new();
        let mut files = Vec::new();
        for key in keys {
            paths.insert(self.forget_key(key, &mut files));
        }
        ChangedPaths {
            paths: outermost(paths),
            everything: false,
            files,
        }
    }

    fn forget_everything(&self) {
        self.nodes.forget_all();
        self.v2.forget(None);
    }

    /// Forget what is kept of `key`; the path that changed with it. A shard's chunk files go
    /// to `files`.
    fn forget_key(&self, key: &str, files: &mut Vec<String>) -> String {
        let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
        if METADATA_NAMES.contains(&name) {
            self.nodes.forget(dir);
            self.v2.forget(Some(dir));
            return self.array_above(dir).unwrap_or(dir).to_string();
        }
        // A shard (or any object) replaced: its indexes and bytes; a directory: its kind.
        self.nodes.forget_stored(key);
        self.nodes.forget(key);
        self.v2.forget(Some(key));
        let Some(array_dir) = self.array_above(key) else {
            return key.to_string();
        };
        if let Some(node) = self.nodes.sharded_at(array_dir) {
            let prefix = dir_prefix(&node.dir);
            let chunks = node.array.chunks_of_key(key, FILES_PER_SHARD).unwrap_or_default();
            files.extend(
                chunks
                    .iter()
                    .map(|c| format!("{prefix}{}", node.array.encoding().encode(c))),
            );
        }
        array_dir.to_string()
    }

    /// The outermost directory at or above `path` known as an array.
    fn array_above<'a>(&self, path: &'a str) -> Option<&'a str> {
        let mut found = None;
        let mut at = path;
        loop {
            if self.nodes.known_array(at) {
                found = Some(at);
            }
            match at.rsplit_once('/') {
                Some((parent, _)) => at = parent,
                None if !at.is_empty() => at = "",
                None => return found,
            }
        }
    }
}

impl V2Nodes {
    /// Forget the node of `dir` (`None`: every node) and the consolidated `.zmetadata` built
    /// from them.
    pub fn forget(&self, dir: Option<&str>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match dir {
            Some(dir) => {
                entries.pop(dir);
            }
            None => entries.clear(),
        }
        *self.zmetadata.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl NodeCache {
    /// Forget every directory's kind and every shard index (the source changed in ways not
    /// known). Shard bytes are kept: they are tied to the version they were read from.
    pub fn forget_all(&self) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        entries.clear();
        self.writes.disturb_all();
        self.index_cache.clear();
    }

    /// Forget the indexes and bytes kept of stored object `key` (a shard someone replaced).
    pub fn forget_stored(&self, key: &str) {
        self.index_cache.invalidate_shard(key);
        if let Some(data) = &self.shard_options.data_cache {
            data.forget(key);
        }
    }

    /// The sharded array known at `dir`, however long ago.
    fn sharded_at(&self, dir: &str) -> Option<Arc<ShardedNode>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match &entries.peek(dir)?.info {
            NodeInfo::Sharded(node) => Some(node.clone()),
            _ => None,
        }
    }

    /// Whether `dir` is known as an array (of any kind), however long ago.
    pub fn known_array(&self, dir: &str) -> bool {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .peek(dir)
            .is_some_and(|c| matches!(c.info, NodeInfo::Array | NodeInfo::Sharded(_)))
    }
}

/// The paths of `paths` that are not below another one of them (`""`, the root's documents,
/// contains nothing).
fn outermost(paths: BTreeSet<String>) -> Vec<String> {
    let below_another = |path: &str| path.match_indices('/').any(|(i, _)| paths.contains(&path[..i]));
    paths.iter().filter(|p| !below_another(p)).cloned().collect()
}

/// A metadata document of a draft hierarchy (`meta/*.json`): it places arrays elsewhere, so
/// whatever it changes is not known.
fn is_draft_metadata(key: &str) -> bool {
    key.starts_with("meta/") && key.ends_with(".json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn outermost_keeps_no_path_below_another() {
        assert_eq!(
            outermost(set(&["", "a", "a/c/0", "a.b", "ab/c", "b/x", "b/x/y/z", "b/xy"])),
            ["", "a", "a.b", "ab/c", "b/x", "b/xy"]
        );
    }
}
