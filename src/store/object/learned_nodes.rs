//! What the metadata documents read from a source that cannot be listed say about its nodes:
//! which directories are Zarr nodes, of which kind and version (so that a listing asks for
//! their other documents, such as a v2 node's `.zattrs`), and, for arrays, their chunk grids
//! (so that a listing can ask for their chunk keys, see [`super::key_search`]).
//!
//! A node document (`zarr.json`, `.zarray`, `.zgroup`) read whole names its own node;
//! consolidated metadata (a v3 group's `consolidated_metadata`, a v2 `.zmetadata`) names
//! every node below its group with its metadata, so their grids are known without reading
//! their documents. A node document found by a HEAD names its node's kind only.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::zarr::chunk_keys::KeyGrid;
use crate::zarr::metadata::{parse_node, NodeMetadata};
use crate::zarr::sharding::{analyse, Sharding};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    V3Group,
    V3Array,
    V2Group,
    V2Array,
}

impl NodeKind {
    pub fn is_array(self) -> bool {
        matches!(self, NodeKind::V3Array | NodeKind::V2Array)
    }

    /// The node's own metadata document.
    pub fn document(self) -> &'static str {
        match self {
            NodeKind::V3Group | NodeKind::V3Array => "zarr.json",
            NodeKind::V2Group => ".zgroup",
            NodeKind::V2Array => ".zarray",
        }
    }

    /// The kind a node document's name says.
    pub fn of_document(name: &str) -> Option<NodeKind> {
        match name {
            ".zgroup" => Some(NodeKind::V2Group),
            ".zarray" => Some(NodeKind::V2Array),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownNode {
    pub kind: NodeKind,
    /// An array's chunk grid, when known and its chunk keys are to be searched for here.
    pub grid: Option<KeyGrid>,
    /// Whether its own document was read whole (then known with its real size).
    pub read: bool,
}

/// Which arrays' chunk keys a listing searches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GridScope {
    /// Every array's (the raw view: a sharded array's shards are its chunk keys).
    #[default]
    All,
    /// Not sharded arrays': the layer above lists their chunks from their shard indexes.
    Unsharded,
}

/// A node of a v3 document (its own, or an entry of consolidated metadata).
fn v3_node(doc: &Value, read: bool, scope: GridScope) -> Option<KnownNode> {
    match parse_node(doc.clone()).ok()? {
        NodeMetadata::Group { .. } => Some(KnownNode {
            kind: NodeKind::V3Group,
            grid: None,
            read,
        }),
        NodeMetadata::Array(meta) => {
            let listed_above = scope == GridScope::Unsharded && matches!(analyse(&meta), Sharding::Sharded(_));
            Some(KnownNode {
                kind: NodeKind::V3Array,
                grid: KeyGrid::from_v3(&meta).ok().filter(|_| !listed_above),
                read,
            })
        }
    }
}

fn v2_array(doc: &Value, read: bool) -> KnownNode {
    KnownNode {
        kind: NodeKind::V2Array,
        grid: KeyGrid::from_zarray(doc).ok(),
        read,
    }
}

fn v2_group(read: bool) -> KnownNode {
    KnownNode {
        kind: NodeKind::V2Group,
        grid: None,
        read,
    }
}

/// The nodes a document read whole names, by directory (`""` or `a/b/`): the node whose
/// document it is (`dir` is its directory) and the nodes its consolidated metadata names.
pub fn nodes_of(dir: &str, name: &str, doc: &Value, scope: GridScope) -> Vec<(String, KnownNode)> {
    let mut out = Vec::new();
    match name {
        "zarr.json" => {
            out.extend(v3_node(doc, true, scope).map(|n| (dir.to_string(), n)));
            let consolidated = doc
                .pointer("/consolidated_metadata/metadata")
                .and_then(Value::as_object);
            for (path, meta) in consolidated.into_iter().flatten() {
                out.extend(v3_node(meta, false, scope).map(|n| (format!("{dir}{path}/"), n)));
            }
        }
        ".zarray" => out.push((dir.to_string(), v2_array(doc, true))),
        ".zgroup" => out.push((dir.to_string(), v2_group(true))),
        ".zmetadata" => {
            for (key, meta) in doc.get("metadata").and_then(Value::as_object).into_iter().flatten() {
                let (path, doc_name) = key.rsplit_once('/').map_or(("", key.as_str()), |(p, n)| (p, n));
                let node_dir = if path.is_empty() {
                    dir.to_string()
                } else {
                    format!("{dir}{path}/")
                };
                match doc_name {
                    ".zarray" => out.push((node_dir, v2_array(meta, false))),
                    ".zgroup" => out.push((node_dir, v2_group(false))),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    out
}

/// Nodes known so far, by directory.
#[derive(Debug, Default)]
pub struct Nodes(std::sync::Mutex<BTreeMap<String, KnownNode>>);

impl Nodes {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, KnownNode>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, dir: &str) -> Option<KnownNode> {
        self.map().get(dir).cloned()
    }

    /// Learn nodes; what a node's own document said is not replaced by what another
    /// document said of it.
    pub fn learn(&self, nodes: Vec<(String, KnownNode)>) {
        let mut map = self.map();
        for (dir, node) in nodes {
            match map.get(&dir) {
                Some(known) if known.read && !node.read => {}
                Some(known) if known.grid.is_some() && node.grid.is_none() && known.kind == node.kind => {}
                _ => {
                    map.insert(dir, node);
                }
            }
        }
    }

    /// A node whose document was found by a HEAD: its kind, unless more is known.
    pub fn learn_kind(&self, dir: &str, kind: NodeKind) {
        self.map().entry(dir.to_string()).or_insert(KnownNode {
            kind,
            grid: None,
            read: false,
        });
    }

    /// The nearest node strictly above directory `dir` (`a/b/`), with its directory.
    pub fn nearest_above(&self, dir: &str) -> Option<(String, KnownNode)> {
        let map = self.map();
        let above = dir
            .trim_end_matches('/')
            .rmatch_indices('/')
            .map(|(i, _)| &dir[..=i])
            .chain(std::iter::once("").filter(|_| !dir.is_empty()));
        for at in above {
            if let Some(node) = map.get(at) {
                return Some((at.to_string(), node.clone()));
            }
        }
        None
    }

    /// The nearest array at or above directory `dir` (`a/b/`), with its directory.
    pub fn array_around(&self, dir: &str) -> Option<(String, KnownNode)> {
        let map = self.map();
        let ancestors = std::iter::once(dir)
            .chain(dir.trim_end_matches('/').rmatch_indices('/').map(|(i, _)| &dir[..=i]))
            .chain(std::iter::once(""));
        for at in ancestors {
            if let Some(node) = map.get(at).filter(|n| n.kind.is_array()) {
                return Some((at.to_string(), node.clone()));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn array_v3(codecs: Value) -> Value {
        json!({"zarr_format": 3, "node_type": "array", "shape": [10, 10], "data_type": "uint8",
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 4]}},
               "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": codecs})
    }

    fn sharded() -> Value {
        array_v3(json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [5, 2], "codecs": [{"name": "bytes"}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]))
    }

    #[test]
    fn a_v3_group_names_its_consolidated_nodes() {
        let root = json!({"zarr_format": 3, "node_type": "group", "consolidated_metadata": {
        "kind": "inline", "must_understand": false, "metadata": {
            "g": {"zarr_format": 3, "node_type": "group"},
            "g/a": array_v3(json!([{"name": "bytes"}])),
            "s": sharded(),
            "bad": {"zarr_format": 3}
        }}});
        let nodes = nodes_of("", "zarr.json", &root, GridScope::Unsharded);
        let by_dir: BTreeMap<_, _> = nodes.into_iter().collect();
        assert_eq!(by_dir.len(), 4, "{by_dir:?}");
        assert!(by_dir[""].read && by_dir[""].kind == NodeKind::V3Group);
        let a = &by_dir["g/a/"];
        assert_eq!((a.kind, a.read), (NodeKind::V3Array, false));
        assert_eq!(a.grid.as_ref().unwrap().grid, [2, 3]);
        assert_eq!(by_dir["s/"].grid, None, "listed from its shard indexes above");
        let raw = nodes_of("", "zarr.json", &root, GridScope::All);
        let s = raw.iter().find(|(d, _)| d == "s/").unwrap();
        assert_eq!(
            s.1.grid.as_ref().unwrap().grid,
            [2, 3],
            "shards are chunk keys in the raw view"
        );
    }

    #[test]
    fn v2_documents_and_consolidated_metadata() {
        let zmeta = json!({"zarr_consolidated_format": 1, "metadata": {
            ".zgroup": {"zarr_format": 2}, "v2/.zgroup": {"zarr_format": 2},
            "v2/dots/.zarray": {"shape": [6, 5], "chunks": [4, 4], "zarr_format": 2},
            "v2/dots/.zattrs": {}}});
        let nodes: BTreeMap<_, _> = nodes_of("x/", ".zmetadata", &zmeta, GridScope::All)
            .into_iter()
            .collect();
        assert_eq!(nodes.keys().collect::<Vec<_>>(), ["x/", "x/v2/", "x/v2/dots/"]);
        assert_eq!(nodes["x/v2/dots/"].grid.as_ref().unwrap().grid, [2, 2]);
        assert!(!nodes["x/v2/dots/"].read);
        let own = nodes_of("d/", ".zarray", &json!({"shape": [4], "chunks": [4]}), GridScope::All);
        assert!(own[0].1.read);
        assert!(nodes_of("d/", ".zattrs", &json!({}), GridScope::All).is_empty());
    }

    #[test]
    fn the_nearest_array_above_a_directory() {
        let known = Nodes::default();
        known.learn(nodes_of(
            "a/b/",
            ".zarray",
            &json!({"shape": [4], "chunks": [2]}),
            GridScope::All,
        ));
        known.learn(vec![("a/".into(), v2_group(true))]);
        assert_eq!(known.array_around("a/b/0/").unwrap().0, "a/b/");
        assert_eq!(known.array_around("a/b/").unwrap().0, "a/b/");
        assert!(known.array_around("a/").is_none());
        assert!(known.array_around("").is_none());
        assert_eq!(known.nearest_above("a/b/0/").unwrap().0, "a/b/");
        assert_eq!(known.nearest_above("a/b/").unwrap().0, "a/");
        assert!(known.nearest_above("a/").is_none() && known.nearest_above("").is_none());
        // What another document says does not replace what the node's own said.
        known.learn(vec![("a/b/".into(), v2_array(&json!({}), false))]);
        assert!(known.get("a/b/").unwrap().read && known.get("a/b/").unwrap().grid.is_some());
    }
}
