//! How a stored metadata document becomes a directory's kind: a v3 `zarr.json` (an array,
//! sharded or not, a group, possibly rewritten, a draft hierarchy's entry point) or a draft
//! array's document. Bad metadata is logged and the node shown as stored (`nodes.rs` caches
//! what these say, once per version).

use std::sync::Arc;

use bytes::Bytes;

use super::super::group_doc::{big_group, group, Found, BIG_DOCUMENT};
use super::{NodeCache, NodeInfo, ShardedNode};
use crate::shard::ShardedArray;
use crate::store::key::dir_prefix;
use crate::store::GetResult;
use crate::zarr::draft::{parse_draft_array, rewrite_draft_unsharded, DraftLayout};
use crate::zarr::metadata::{parse_zarr_json, ArrayMetadata, NodeMetadata};
use crate::zarr::sharding::{analyse, rewrite_unsharded, ShardLayout, Sharding};

impl NodeCache {
    pub(super) fn load(&self, dir: &str, key: &str, got: &GetResult) -> NodeInfo {
        // Before the draft's check: a big document is scanned once (a draft's entry point is
        // no v3 group).
        if let Some(node) = big_group(&got.bytes, got.meta.mtime_ns, self.shown_as_stored_below(dir)) {
            return NodeInfo::Group(node);
        }
        if dir.is_empty() {
            if let Some(layout) = DraftLayout::of_entry_point(&got.bytes) {
                return NodeInfo::Draft(layout);
            }
        }
        let meta = match parse_zarr_json(&got.bytes) {
            Ok(NodeMetadata::Array(_)) if self.is_shown_as_stored(dir) => return NodeInfo::Array,
            Ok(NodeMetadata::Array(meta)) => meta,
            Ok(NodeMetadata::Group { raw }) => {
                let info = self.group(dir, raw, got.meta.mtime_ns);
                if got.bytes.len() >= BIG_DOCUMENT {
                    crate::sys::allocator::give_back_freed_memory();
                }
                return info;
            }
            Err(e) => {
                tracing::warn!(key, reason = %e, "unreadable metadata; node shown as stored");
                return NodeInfo::Plain;
            }
        };
        let layout = match analyse(&meta) {
            Sharding::None => return NodeInfo::Array,
            Sharding::Unsupported(reason) => {
                tracing::warn!(key, %reason, "array cannot be shown unsharded; shown as stored");
                return NodeInfo::Array;
            }
            Sharding::Sharded(layout) => layout,
        };
        let rewritten = Bytes::from(rewrite_unsharded(&meta, &layout));
        self.sharded(dir, key, None, &meta, layout, rewritten, got.meta.mtime_ns)
    }

    pub(super) fn load_draft(&self, dir: &str, key: &str, got: &GetResult, layout: DraftLayout) -> NodeInfo {
        if self.is_shown_as_stored(dir) {
            return NodeInfo::Array;
        }
        let array = match parse_draft_array(&got.bytes) {
            Ok(array) => array,
            Err(e) => {
                tracing::warn!(key, reason = %e, "unreadable draft array metadata; shown as stored");
                return NodeInfo::Array;
            }
        };
        let Some(sharding) = array.sharding else {
            return NodeInfo::Array;
        };
        let rewritten = Bytes::from(rewrite_draft_unsharded(&array.meta.raw));
        self.sharded(
            dir,
            key,
            Some(layout),
            &array.meta,
            sharding,
            rewritten,
            got.meta.mtime_ns,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn sharded(
        &self,
        dir: &str,
        key: &str,
        draft: Option<DraftLayout>,
        meta: &ArrayMetadata,
        layout: ShardLayout,
        rewritten: Bytes,
        mtime_ns: Option<i128>,
    ) -> NodeInfo {
        let array = ShardedArray::new(
            self.store.clone(),
            dir_prefix(dir),
            meta,
            layout,
            self.index_cache.clone(),
            self.shard_options.clone(),
        );
        match array {
            Ok(array) => NodeInfo::Sharded(Arc::new(ShardedNode {
                dir: dir.to_string(),
                meta_key: key.to_string(),
                draft,
                array: array.shared(),
                rewritten,
                stored: meta.raw.clone(),
                mtime_ns,
            })),
            Err(e) => {
                tracing::warn!(key, reason = %e, "sharded array cannot be unsharded; shown as stored");
                NodeInfo::Array
            }
        }
    }

    /// A group's kind: rewritten when its consolidated metadata describes arrays the view
    /// shows unsharded (`group_doc.rs`).
    fn group(&self, dir: &str, raw: serde_json::Value, mtime_ns: Option<i128>) -> NodeInfo {
        let prefix = dir_prefix(dir);
        match group(raw, mtime_ns, &|path: &str| {
            self.is_shown_as_stored(&format!("{prefix}{path}"))
        }) {
            Found::Plain => NodeInfo::Plain,
            Found::Group(node) => NodeInfo::Group(node),
        }
    }
}
