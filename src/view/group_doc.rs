//! A group whose document the view rewrites: its consolidated metadata describes sharded
//! arrays, whose entries the view shows unsharded (`zarr/consolidated.rs`).
//!
//! A big group document (from [`BIG_DOCUMENT`]: consolidated metadata of thousands of arrays,
//! tens of MB) is rewritten when its bytes are first asked for, not when the group is found:
//! every path below the root is placed through the root's kind, and opening one array of a
//! hierarchy of ten thousand would otherwise wait for the whole root document to be parsed,
//! rewritten and serialized (most of a second), though the client never reads it. Finding the
//! kind of such a document only scans it for its `node_type` (no tree is built), and for the
//! root's, where a read of a value's end is one request, only its last [`BIG_DOCUMENT`] bytes
//! are read for it (`nodes.rs`): the rest is fetched, pinned to the version the end came from,
//! when the document is read. A small document is rewritten at once, and shown as stored when
//! nothing in it needs rewriting.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::Deserialize;

use crate::store::{GetOptions, GetResult, Store, StoreError, Version};
use crate::zarr::consolidated::rewrite_group;
use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};

/// A group document from this size on (its consolidated metadata describes thousands of
/// nodes) is rewritten when first read, and leaves a parsed tree of about five times its size
/// freed behind it. Also how much of a document's end is read first (see the module docs).
pub const BIG_DOCUMENT: usize = 1 << 20;

/// The longest string member name or value the tail of a document is read back through.
const MAX_STRING: usize = 64;

/// A group whose document the view rewrites (or, for a big one, may rewrite: see the module
/// docs).
#[derive(Debug)]
pub struct GroupNode {
    doc: Mutex<Doc>,
    /// Held while a big document's bytes are fetched, so that they are fetched once.
    fetching: tokio::sync::Mutex<()>,
    pub mtime_ns: Option<i128>,
}

#[derive(Debug)]
enum Doc {
    /// Only the end of a big document was read: the rest is fetched when it is asked for.
    End(Unread),
    /// The stored document, with the paths (relative to the group) of the arrays shown as
    /// stored when it was found.
    Stored { bytes: Bytes, as_stored: Vec<String> },
    /// What the view shows.
    Shown(Bytes),
}

/// Where a big document whose end alone was read is, and which version of it that end was.
#[derive(Debug, Clone)]
struct Unread {
    store: Arc<dyn Store>,
    key: String,
    version: Version,
    as_stored: Vec<String>,
}

impl Unread {
    /// The whole document, of the version its end was read from; `None` if it is gone.
    async fn fetch(&self) -> Result<Option<Bytes>, StoreError> {
        let pinned = GetOptions {
            range: None,
            if_version: Some(self.version.clone()),
        };
        match self.store.get(&self.key, pinned).await {
            Ok(got) => Ok(got.map(|got| got.bytes)),
            // Replaced since: the document stored now is the one shown, as when a kind is read
            // again after its time-to-live.
            Err(StoreError::VersionMismatch { .. }) => {
                let got = self.store.get(&self.key, GetOptions::default()).await?;
                Ok(got.map(|got| got.bytes))
            }
            Err(e) => Err(e),
        }
    }
}

impl GroupNode {
    fn new(doc: Doc, mtime_ns: Option<i128>) -> Arc<GroupNode> {
        Arc::new(GroupNode {
            doc: Mutex::new(doc),
            fetching: tokio::sync::Mutex::new(()),
            mtime_ns,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Doc> {
        self.doc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The view's `zarr.json` of the group; `None` when a big document whose end alone was
    /// read is gone from the store since.
    pub async fn rewritten(&self) -> Result<Option<Bytes>, StoreError> {
        let _fetching = self.fetching.lock().await;
        let unread = match &*self.lock() {
            Doc::End(unread) => Some(unread.clone()),
            _ => None,
        };
        if let Some(unread) = unread {
            let Some(bytes) = unread.fetch().await? else {
                return Ok(None);
            };
            *self.lock() = Doc::Stored {
                bytes,
                as_stored: unread.as_stored,
            };
        }
        Ok(Some(self.shown()))
    }

    /// Whether only the end of its document was read: showing the rest means fetching it.
    pub fn read_by_its_end(&self) -> bool {
        matches!(*self.lock(), Doc::End(_))
    }

    /// The view's `zarr.json` of a group whose stored document is held.
    fn shown(&self) -> Bytes {
        let mut doc = self.lock();
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
            Doc::End(_) => Bytes::new(),
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
    let is_group = match tail_kind(bytes) {
        Some(kind) => kind == "group",
        None => {
            let kind: Kind = serde_json::from_slice(bytes).ok()?;
            kind.zarr_format == Some(3) && kind.node_type.as_deref() == Some("group")
        }
    };
    is_group.then(|| {
        GroupNode::new(
            Doc::Stored {
                bytes: bytes.clone(),
                as_stored,
            },
            mtime_ns,
        )
    })
}

/// A group from the last bytes of a document bigger than them (`got`, read from `key` of
/// `store`), when they say so (see [`tail_kind`]); the rest is read when the document is.
pub fn big_group_from_end(
    got: &GetResult,
    store: Arc<dyn Store>,
    key: &str,
    as_stored: Vec<String>,
) -> Option<Arc<GroupNode>> {
    (tail_kind(&got.bytes)? == "group").then(|| {
        let unread = Unread {
            store,
            key: key.to_string(),
            version: got.meta.version.clone(),
            as_stored,
        };
        GroupNode::new(Doc::End(unread), got.meta.mtime_ns)
    })
}

/// The `node_type` of a document whose last members say it, read backwards from its end
/// without looking at the rest: zarr-python writes `node_type` last (after the consolidated
/// metadata, which is most of a big document), tensorstore's sorted keys put it before a last
/// `zarr_format`. `None` when the end is laid out otherwise, or a `zarr_format` there is not 3;
/// the caller then scans the whole document.
///
/// Read from the end, `"node_type": "group" }` can only be the top-level object's last member
/// of a valid document: the quotes found are preceded by `:`, `,` or `{`, never by a backslash,
/// so each opens or closes a string as it seems to. An invalid document that ends so is taken
/// for a group, and its bytes are still shown as stored, since rewriting it parses it whole.
fn tail_kind(bytes: &[u8]) -> Option<&'static str> {
    let mut tail = Tail {
        bytes,
        end: bytes.len(),
    };
    tail.expect(b'}')?;
    for _ in 0..2 {
        let value = tail.scalar()?;
        tail.expect(b':')?;
        let key = tail.string()?;
        let separator = tail.byte()?;
        if !matches!(separator, b',' | b'{') {
            return None;
        }
        match (key, value) {
            (b"node_type", b"\"group\"") => return Some("group"),
            (b"node_type", b"\"array\"") => return Some("array"),
            (b"node_type", _) => return None,
            // The member before it ends where the separator was read.
            (b"zarr_format", b"3") if separator == b',' => {}
            _ => return None,
        }
    }
    None
}

/// A cursor reading a JSON document's tokens backwards from its end (see [`tail_kind`]).
struct Tail<'a> {
    bytes: &'a [u8],
    end: usize,
}

impl<'a> Tail<'a> {
    /// The byte before the cursor, after any whitespace.
    fn byte(&mut self) -> Option<u8> {
        while self.end > 0 && self.bytes[self.end - 1].is_ascii_whitespace() {
            self.end -= 1;
        }
        self.end = self.end.checked_sub(1)?;
        Some(self.bytes[self.end])
    }

    fn expect(&mut self, want: u8) -> Option<()> {
        (self.byte()? == want).then_some(())
    }

    /// A string without escapes (its quotes excluded), ending at the cursor.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let close = self.end;
        // Only the 64 bytes before the closing quote are looked at: a longer string is no
        // member this reads, and a document ending in one is not scanned back to its start.
        let from = close.saturating_sub(MAX_STRING + 1);
        let open = from + self.bytes[from..close].iter().rposition(|&b| b == b'"')?;
        let inner = &self.bytes[open + 1..close];
        if inner.contains(&b'\\') || inner.len() > MAX_STRING {
            return None;
        }
        self.end = open;
        Some(inner)
    }

    /// A short string (with its quotes) or an unsigned integer, ending at the cursor.
    fn scalar(&mut self) -> Option<&'a [u8]> {
        let last = self.byte()?;
        self.end += 1;
        if last == b'"' {
            let close = self.end;
            self.string()?;
            return Some(&self.bytes[self.end..close]);
        }
        let close = self.end;
        while self.end > 0 && self.bytes[self.end - 1].is_ascii_digit() && close - self.end < 20 {
            self.end -= 1;
        }
        (self.end < close).then(|| &self.bytes[self.end..close])
    }
}

/// A parsed group document, rewritten now: `Plain` when nothing in it needs rewriting.
pub fn group(mut raw: serde_json::Value, mtime_ns: Option<i128>, as_stored: &dyn Fn(&str) -> bool) -> Found {
    if !rewrite_group(&mut raw, as_stored) {
        return Found::Plain;
    }
    Found::Group(GroupNode::new(
        Doc::Shown(Bytes::from(serde_json::to_vec_pretty(&raw).unwrap_or_default())),
        mtime_ns,
    ))
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
        let shown: serde_json::Value = serde_json::from_slice(&lazy.shown()).unwrap();
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
        assert_eq!(eager.shown(), lazy.shown());

        assert!(big_group(&doc(3), None, vec![]).is_none(), "small: found the usual way");
        let array = Bytes::from(serde_json::to_vec(&sharded_entry()).unwrap()).slice(..);
        assert!(big_group(&array, None, vec![]).is_none());
    }

    #[test]
    fn the_kind_is_read_from_the_last_members_as_zarr_python_and_tensorstore_write_them() {
        let kind = |doc: &str| tail_kind(doc.as_bytes());
        assert_eq!(
            kind(r#"{"attributes": {}, "zarr_format": 3, "node_type": "group"}"#),
            Some("group")
        );
        assert_eq!(kind("{\"node_type\" :\n \"array\" }\n"), Some("array"));
        assert_eq!(
            kind(r#"{"node_type": "group", "zarr_format": 3}"#),
            Some("group"),
            "sorted keys"
        );
        assert_eq!(kind(r#"{"node_type": "group", "zarr_format": 2}"#), None);
        assert_eq!(kind(r#"{"a": "x", "zarr_format": 3}"#), None, "not said at the end");
        assert_eq!(kind(r#"{"a": {"node_type": "group"}}"#), None, "a nested member");
        assert_eq!(kind(r#"{"a": "x\", \"node_type\": \"group"}"#), None, "inside a string");
        assert_eq!(kind(r#"{"node_type": "grou\"p"}"#), None);
        assert_eq!(kind(r#"{"node_type": "folder"}"#), None);
        // A long last string is not read back through to its start.
        let long = format!(
            r#"{{"node_type": "group", "zarr_format": 3, "x": "{}"}}"#,
            "y".repeat(65)
        );
        assert_eq!(kind(&long), None);
        let padded = format!(r#"{{"{}": 1, "node_type": "group"}}"#, "k".repeat(64));
        assert_eq!(kind(&padded), Some("group"), "a 64-byte name before it is no matter");
        for cut in [
            "",
            "}",
            "\"group\"}",
            ": \"group\"}",
            "\"node_type\": \"group\"}",
            "3}",
            ", \"zarr_format\": 3}",
        ] {
            assert_eq!(kind(cut), None, "{cut:?}");
        }
    }

    #[test]
    fn a_big_group_is_known_from_its_end_without_its_middle() {
        // The middle is not even JSON: only the last members were read to find the kind.
        let mut doc = br#"{"zarr_format": 3, "consolidated_metadata": ["#.to_vec();
        doc.resize(BIG_DOCUMENT + 10, b'[');
        doc.extend_from_slice(br#"], "node_type": "group"}"#);
        let node = big_group(&Bytes::from(doc.clone()), None, vec![]).expect("a group");
        assert_eq!(node.shown(), doc, "what cannot be parsed is shown as stored");
        // A big document that does not say its kind at its end is scanned whole.
        let mut doc = br#"{"node_type": "group", "attributes": {"pad": ""#.to_vec();
        doc.resize(BIG_DOCUMENT + 10, b'x');
        doc.extend_from_slice(br#""}, "zarr_format": 3, "extra": [1]}"#);
        assert!(
            big_group(&Bytes::from(doc), None, vec![]).is_some(),
            "found by the scan"
        );
    }

    #[test]
    fn a_big_group_with_nothing_to_rewrite_is_shown_as_stored() {
        let mut plain = serde_json::to_vec(&json!({"zarr_format": 3, "node_type": "group",
            "attributes": {"pad": "x".repeat(BIG_DOCUMENT)}}))
        .unwrap();
        plain.push(b'\n');
        let plain = Bytes::from(plain);
        assert_eq!(big_group(&plain, None, vec![]).unwrap().shown(), plain);
    }
}
