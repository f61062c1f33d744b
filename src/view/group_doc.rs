//! A group whose document the view rewrites: its consolidated metadata describes sharded
//! arrays, whose entries the view shows unsharded (`zarr/consolidated.rs`).
//!
//! A big group document (from [`BIG_DOCUMENT`]: consolidated metadata of thousands of arrays,
//! tens of MB) is rewritten when its bytes are first asked for, not when the group is found:
//! every path below the root is placed through the root's kind, and opening one array of a
//! hierarchy of ten thousand would otherwise wait for the whole root document to be parsed,
//! rewritten and serialized (most of a second), though the client never reads it. Finding the
//! kind of such a document only scans it for its `node_type` (no tree is built). A small
//! document is rewritten at once, and shown as stored when nothing in it needs rewriting.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::Deserialize;

use crate::zarr::consolidated::rewrite_group;
use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};

/// A group document from this size on (its consolidated metadata describes thousands of
/// nodes) is rewritten when first read, and leaves a parsed tree of about five times its size
/// freed behind it.
pub const BIG_DOCUMENT: usize = 1 << 20;

/// A group whose document the view rewrites (or, for a big one, may rewrite: see the module
/// docs).
#[derive(Debug)]
pub struct GroupNode {
    doc: Mutex<Doc>,
    pub mtime_ns: Option<i128>,
}

#[derive(Debug)]
enum Doc {
    /// The stored document, with the paths (relative to the group) of the arrays shown as
    /// stored when it was found.
    Stored { bytes: Bytes, as_stored: Vec<String> },
    /// What the view shows.
    Shown(Bytes),
}

impl GroupNode {
    /// The view's `zarr.json` of the group.
    pub fn rewritten(&self) -> Bytes {
        let mut doc = self.doc.lock().unwrap_or_else(|e| e.into_inner());
        if let Doc::Stored { bytes, as_stored } = &*doc {
            let shown = match parse_zarr_json(bytes) {
                Ok(NodeMetadata::Group { mut raw }) => {
                    match rewrite_group(&mut raw, &|path| as_stored.iter().any(|a| a == path)) {
                        true => Bytes::from(serde_json::to_vec_pretty(&raw).unwrap_or_default()),
                        false => bytes.clone(),
                    }
                }
                _ => bytes.clone(),
            };
            *doc = Doc::Shown(shown);
            crate::sys::allocator::give_back_freed_memory();
        }
        match &*doc {
            Doc::Shown(bytes) | Doc::Stored { bytes, .. } => bytes.clone(),
        }
    }
}

/// What a group document found at a directory is to the view.
pub enum Found {
    /// A group shown as stored.
    Plain,
    Group(Arc<GroupNode>),
}

/// The kind of a big document, from a scan that builds no tree: `Some` for a group.
pub fn big_group(bytes: &Bytes, mtime_ns: Option<i128>, as_stored: Vec<String>) -> Option<Arc<GroupNode>> {
    #[derive(Deserialize)]
    struct Kind {
        zarr_format: Option<u64>,
        node_type: Option<String>,
    }
    if bytes.len() < BIG_DOCUMENT {
        return None;
    }
    let kind: Kind = serde_json::from_slice(bytes).ok()?;
    (kind.zarr_format == Some(3) && kind.node_type.as_deref() == Some("group")).then(|| {
        Arc::new(GroupNode {
            doc: Mutex::new(Doc::Stored {
                bytes: bytes.clone(),
                as_stored,
            }),
            mtime_ns,
        })
    })
}

/// A parsed group document, rewritten now: `Plain` when nothing in it needs rewriting.
pub fn group(mut raw: serde_json::Value, mtime_ns: Option<i128>, as_stored: &dyn Fn(&str) -> bool) -> Found {
    if !rewrite_group(&mut raw, as_stored) {
        return Found::Plain;
    }
    Found::Group(Arc::new(GroupNode {
        doc: Mutex::new(Doc::Shown(Bytes::from(
            serde_json::to_vec_pretty(&raw).unwrap_or_default(),
        ))),
        mtime_ns,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sharded_entry() -> serde_json::Value {
        json!({
            "zarr_format": 3, "node_type": "array", "shape": [8], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [4], "codecs": [{"name": "bytes"}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]
        })
    }

    fn doc(arrays: usize) -> Bytes {
        let metadata: serde_json::Map<String, serde_json::Value> =
            (0..arrays).map(|i| (format!("a{i}"), sharded_entry())).collect();
        let doc = json!({"zarr_format": 3, "node_type": "group", "attributes": {},
            "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": metadata}});
        Bytes::from(serde_json::to_vec(&doc).unwrap())
    }

    #[test]
    fn a_big_group_is_rewritten_when_first_read_as_a_small_one_is_at_once() {
        let big = doc(3000);
        assert!(big.len() >= BIG_DOCUMENT, "{}", big.len());
        let lazy = big_group(&big, None, vec!["a7".into()]).expect("a big group");
        assert!(
            matches!(&*lazy.doc.lock().unwrap(), Doc::Stored { .. }),
            "not rewritten yet"
        );
        let shown: serde_json::Value = serde_json::from_slice(&lazy.rewritten()).unwrap();
        let entries = &shown["consolidated_metadata"]["metadata"];
        assert_eq!(entries["a0"]["chunk_grid"]["configuration"]["chunk_shape"], json!([4]));
        assert_eq!(
            entries["a7"]["chunk_grid"]["configuration"]["chunk_shape"],
            json!([8]),
            "shown as stored"
        );
        // The same as the eager rewrite of the same document.
        let raw: serde_json::Value = serde_json::from_slice(&big).unwrap();
        let Found::Group(eager) = group(raw, None, &|p| p == "a7") else {
            panic!("rewritten")
        };
        assert_eq!(eager.rewritten(), lazy.rewritten());

        assert!(big_group(&doc(3), None, vec![]).is_none(), "small: found the usual way");
        let array = Bytes::from(serde_json::to_vec(&sharded_entry()).unwrap()).slice(..);
        assert!(big_group(&array, None, vec![]).is_none());
    }

    #[test]
    fn a_big_group_with_nothing_to_rewrite_is_shown_as_stored() {
        let mut plain = serde_json::to_vec(&json!({"zarr_format": 3, "node_type": "group",
            "attributes": {"pad": "x".repeat(BIG_DOCUMENT)}}))
        .unwrap();
        plain.push(b'\n');
        let plain = Bytes::from(plain);
        assert_eq!(big_group(&plain, None, vec![]).unwrap().rewritten(), plain);
    }
}
