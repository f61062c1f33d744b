//! Metadata documents written through the view, stored so that the store agrees with itself.
//!
//! - The view's `zarr.json` of a sharded array is translated back (its sharding configuration
//!   restored, `zarr::translate::translate_array`) and stored only if the stored document is
//!   still the one translated against (a version precondition).
//! - Any other `zarr.json` (a group, an array shown as stored, a new node) is stored as written,
//!   except that a group's consolidated entries of arrays the view shows unsharded get their
//!   stored sharding back (`translate_group`). The stored group document does not depend on
//!   the previous one, so it is written without a precondition, as the client would.
//! - An array created through the mount with sharding, or one that a written group declares
//!   sharded where none is shown unsharded, is shown as stored from then on
//!   ([`NodeCache::show_as_stored`](super::nodes::NodeCache::show_as_stored)): the client is
//!   about to write its shards as files. It is marked before its document is stored, so no
//!   lookup in between can see it unsharded.
//!
//! A document the store cannot express is refused with a log line naming the key and why, and
//! nothing is stored. What a stored `zarr.json` says the directory is, is known from the bytes
//! stored: the view does not read it back.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::Value;

use super::nodes::ShardedNode;
use super::{Place, View, ViewError, METADATA};
use crate::store::key::dir_prefix;
use crate::store::{GetOptions, Precondition};
use crate::zarr::consolidated::{array_entry_paths, declares_sharding};
use crate::zarr::draft::translate_draft_array;
use crate::zarr::translate::{to_stored_bytes, translate_array, translate_group, Refusal, Shown};

fn metadata_key(dir: &str) -> String {
    format!("{}{METADATA}", dir_prefix(dir))
}

fn refused(key: String, refusal: Refusal) -> ViewError {
    tracing::warn!(key, %refusal, "metadata write refused");
    ViewError::Refused { key, refusal }
}

impl View {
    /// Store a write of the view's metadata document of a sharded array.
    pub async fn write_array_metadata(&self, node: &ShardedNode, written: &[u8]) -> Result<(), ViewError> {
        let key = node.meta_key.clone();
        let stored = self
            .store
            .get(&key, GetOptions::default())
            .await?
            .ok_or_else(|| ViewError::NotFound(key.clone()))?;
        let translated = match node.draft {
            Some(_) if written == &node.rewritten[..] => Ok(None),
            Some(_) => translate_draft_array(&node.stored, written)
                .map(Some)
                .map_err(|r| refused(key.clone(), r)),
            None => translate_array(&stored.bytes, &node.rewritten, written).map_err(|r| refused(key.clone(), r)),
        };
        match translated {
            Ok(None) => Ok(()),
            Ok(Some(bytes)) => {
                let version = Precondition::Version(stored.meta.version);
                self.store.set_if(&key, Bytes::from(bytes), version).await?;
                self.nodes.forget(&node.dir);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// A draft array document about to be stored at `key` (a path of the view that is stored
    /// as it is): the data directory of its array, whose kind the view must look at again;
    /// and if the document declares sharding, its client will write whole shards there, so
    /// that array is shown as stored from now on.
    pub(super) async fn draft_array_written(&self, key: &str, written: &[u8]) -> Result<Option<String>, ViewError> {
        if !key.ends_with(".array.json") {
            return Ok(None);
        }
        let Some(data_dir) = self.draft_layout().await?.and_then(|l| l.data_dir_of_array_key(key)) else {
            return Ok(None);
        };
        if crate::zarr::draft::declares_sharding(written) {
            self.created(&data_dir);
        }
        Ok(Some(data_dir))
    }

    /// Store a `zarr.json` written at directory `dir`, outside sharded arrays, if `condition`
    /// holds for the stored one (`Absent`: an exclusive create, [`ViewError::Exists`] if one
    /// is stored).
    pub async fn write_node_metadata(
        &self,
        dir: &str,
        written: Bytes,
        condition: Precondition,
    ) -> Result<(), ViewError> {
        let key = metadata_key(dir);
        let doc = serde_json::from_slice::<Value>(&written).ok();
        let bytes = match doc.as_ref().and_then(|d| Some((d.get("node_type")?.as_str()?, d))) {
            Some(("array", doc)) if declares_sharding(doc) => {
                self.created(dir);
                written
            }
            Some(("group", doc)) => self.translate_group_doc(dir, &key, doc, written).await?,
            _ => written,
        };
        let write = self.nodes.writing(dir);
        match self.set_if(&key, bytes.clone(), condition).await {
            Ok(version) if !self.nodes.ttl().is_zero() && matches!(self.draft_layout().await, Ok(None)) => {
                self.nodes.stored(write, &key, bytes, version);
                Ok(())
            }
            stored => {
                self.nodes.forget(dir);
                stored.map(drop)
            }
        }
    }

    /// An array at `dir` is being created through the mount with sharding: shown as stored.
    fn created(&self, dir: &str) {
        if self.nodes.show_as_stored(dir) {
            tracing::info!(
                array = dir,
                "sharded array created through the mount: shown as stored (its shards as files) \
                 until the next mount"
            );
        }
    }

    /// The bytes to store for a group document written at `dir`.
    async fn translate_group_doc(&self, dir: &str, key: &str, doc: &Value, written: Bytes) -> Result<Bytes, ViewError> {
        let prefix = dir_prefix(dir);
        let mut shown = HashMap::new();
        for path in array_entry_paths(doc) {
            let array_dir = format!("{prefix}{path}");
            let state = match self.place(&array_dir).await? {
                Place::Sharded(node) if node.dir == array_dir => Shown::Unsharded {
                    view: serde_json::from_slice(&node.rewritten).unwrap_or_default(),
                    stored: node.stored.clone(),
                },
                _ => Shown::AsStored,
            };
            shown.insert(path, state);
        }
        let translation = translate_group(doc, &shown).map_err(|r| refused(key.to_string(), r))?;
        for path in &translation.created {
            self.created(&format!("{prefix}{path}"));
        }
        Ok(match translation.doc {
            Some(doc) => Bytes::from(to_stored_bytes(&doc)),
            None => written,
        })
    }
}
