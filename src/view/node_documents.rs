//! How a directory's metadata document is read for its kind (`nodes.rs`): whole, or, for a
//! big root group, its end alone (`group_doc.rs`), so that opening one array of a hierarchy
//! of thousands does not read the root's consolidated metadata.

use std::sync::Arc;

use super::group_doc::{big_group_from_end, GroupNode, BIG_DOCUMENT};
use super::nodes::NodeCache;
use crate::store::{ByteRange, GetOptions, GetResult, StoreError, Version};

/// A directory's metadata document as read: whole, or a big group's end alone.
pub(super) enum Fetched {
    Whole(GetResult),
    BigGroup(Arc<GroupNode>, Version),
}

impl NodeCache {
    /// A metadata document, whole.
    pub(super) async fn document(&self, key: &str) -> Result<Option<GetResult>, StoreError> {
        self.stats.document_sent();
        self.store.get(key, GetOptions::default()).await
    }

    /// The document of `dir`, or the group a big one is from its end alone (see
    /// `group_doc.rs`). For the root's (where consolidated metadata of a whole hierarchy is),
    /// its last [`BIG_DOCUMENT`] bytes are read first where that is one request, which is all
    /// of any smaller document. Other documents are read whole: a ranged read of an empty
    /// object is refused by some services (S3 answers it whole, which `object_store` takes for
    /// an error) and taken by others for a server that ignores ranges, and a client writes
    /// empty and odd `zarr.json` files anywhere; a refused read of the root's end is read again
    /// whole.
    pub(super) async fn document_or_group(&self, dir: &str, key: &str) -> Result<Option<Fetched>, StoreError> {
        if !dir.is_empty() || !self.store.capabilities().suffix_reads {
            return Ok(self.document(key).await?.map(Fetched::Whole));
        }
        self.stats.document_sent();
        let end = GetOptions::range(ByteRange::Suffix(BIG_DOCUMENT as u64));
        let got = match self.store.get(key, end).await {
            Ok(got) => got,
            Err(e) => {
                tracing::debug!(
                    key,
                    "the end of the root's document was not read ({e}); reading it whole"
                );
                return Ok(self.document(key).await?.map(Fetched::Whole));
            }
        };
        let Some(got) = got else {
            return Ok(None);
        };
        if got.offset == 0 {
            return Ok(Some(Fetched::Whole(got)));
        }
        let as_stored = self.shown_as_stored_below(dir);
        if let Some(node) = big_group_from_end(&got, self.store.clone(), key, as_stored) {
            return Ok(Some(Fetched::BigGroup(node, got.meta.version)));
        }
        // Its end does not say it is a group: read whole.
        Ok(self.document(key).await?.map(Fetched::Whole))
    }
}
