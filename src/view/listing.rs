//! Directory listings of the view: a sharded array's directory (its rewritten `zarr.json`,
//! its chunk tree, whatever else is stored there), its chunk directories (from shard listings
//! and indexes, never a listing of every chunk key), and every other directory as stored, with
//! a group's rewritten `zarr.json` in place of the stored one.
//!
//! Every listing is in [`listing_order`]: names that are decimal numbers first, by value, then
//! the rest by their bytes. That is the order in which a last-level chunk directory comes out
//! of its shards' indexes, one shard after another, so such a directory can be listed a page
//! at a time ([`View::list_paged`]), its first page read from the first shard's index alone,
//! where the order of names ("10" before "9") would need every index before the first name.

use std::cmp::Ordering;
use std::sync::Arc;

use super::nodes::ShardedNode;
use super::{relative, Node, Place, Source, View, ViewError, METADATA};
use crate::shard::{LeafPages, ShardedArray};
use crate::store::key::dir_prefix;
use crate::store::{DirEntry, EntryKind};
use crate::zarr::key_encoding::ChunkPath;

/// The node of a listed store entry.
fn stored_node(prefix: &str, entry: &DirEntry) -> Node {
    match entry.kind {
        EntryKind::Dir => Node::dir(),
        EntryKind::File { size } => Node {
            size,
            mtime_ns: entry.mtime_ns,
            source: Source::Stored {
                key: format!("{prefix}{}", entry.name),
                version: None,
            },
        },
    }
}

/// Whether `name` is a decimal number as a chunk coordinate is written: digits, with no
/// leading zero.
fn is_number(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty() && b.iter().all(u8::is_ascii_digit) && (b.len() == 1 || b[0] != b'0')
}

/// The order of the view's listings: names that are decimal numbers (no leading zero) first,
/// by value, then the rest by their bytes (see the module's documentation). A total order:
/// such a number has one name.
pub fn listing_order(a: &str, b: &str) -> Ordering {
    match (is_number(a), is_number(b)) {
        // Numbers with no leading zero: the longer is the larger, else the digits decide.
        (true, true) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => a.cmp(b),
    }
}

/// A directory's listing, in [`listing_order`]: whole, or a page at a time.
#[derive(Debug)]
pub enum Listing {
    Whole(Vec<(String, Node)>),
    Paged(Pages),
}

/// Where a page of a [`Pages`] listing starts (see [`Pages::at`]).
pub type PagePosition = crate::shard::LeafPosition;

/// A last-level chunk directory listed a page at a time, each page from one shard's index.
#[derive(Debug, Clone)]
pub struct Pages {
    array: Arc<ShardedArray>,
    prefix: Vec<u64>,
    pages: LeafPages,
}

impl Pages {
    /// The next page (never empty), or `None` at the end.
    pub async fn next_page(&mut self) -> Result<Option<Vec<(String, Node)>>, ViewError> {
        let page = self.pages.next_page().await?;
        Ok(page.map(|entries| self.nodes(entries)))
    }

    /// Whether every page was taken (the listing may still end sooner).
    pub fn done(&self) -> bool {
        self.pages.done()
    }

    /// Where the next page starts.
    pub fn position(&self) -> PagePosition {
        self.pages.position()
    }

    /// The same listing from `position` on: a page taken before, taken again.
    pub fn at(&self, position: PagePosition) -> Pages {
        Pages {
            array: self.array.clone(),
            prefix: self.prefix.clone(),
            pages: self.pages.at(position),
        }
    }

    /// Every page left.
    pub async fn rest(self) -> Result<Vec<(String, Node)>, ViewError> {
        let (array, prefix) = (self.array, self.prefix);
        let entries = self.pages.rest().await?;
        Ok(leaf_nodes(&array, &prefix, entries))
    }

    fn nodes(&self, entries: Vec<DirEntry>) -> Vec<(String, Node)> {
        leaf_nodes(&self.array, &self.prefix, entries)
    }
}

/// The nodes of the chunk files of a last-level directory, named by their last coordinate.
fn leaf_nodes(array: &Arc<ShardedArray>, prefix: &[u64], entries: Vec<DirEntry>) -> Vec<(String, Node)> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        // Every entry of a page is a file named by its coordinate.
        let (EntryKind::File { size }, Some(last)) = (&e.kind, e.name.parse::<u64>().ok()) else {
            continue;
        };
        let mut coords = super::types::Coords::from_slice(prefix);
        coords.push(last);
        let node = View::chunk_file(array, *size, e.mtime_ns, coords);
        out.push((e.name, node));
    }
    out
}

impl View {
    /// The entries of directory `dir`, with their nodes (no request per entry), in
    /// [`listing_order`].
    pub async fn list(&self, dir: &str) -> Result<Vec<(String, Node)>, ViewError> {
        match self.list_paged(dir).await? {
            Listing::Whole(entries) => Ok(entries),
            Listing::Paged(pages) => pages.rest().await,
        }
    }

    /// The entries of directory `dir` as [`list`](Self::list) gives them, a page at a time for
    /// a last-level chunk directory named by coordinates (no index is read yet), whole for
    /// any other.
    pub async fn list_paged(&self, dir: &str) -> Result<Listing, ViewError> {
        if let Some(pages) = self.leaf_pages(dir).await? {
            return Ok(Listing::Paged(pages));
        }
        let mut entries = self.list_any(dir).await?;
        if !entries.is_sorted_by(|a, b| listing_order(&a.0, &b.0).is_le()) {
            entries.sort_by(|a, b| listing_order(&a.0, &b.0));
        }
        Ok(Listing::Whole(entries))
    }

    /// The pages of `dir`, if it is a last-level chunk directory named by coordinates.
    async fn leaf_pages(&self, dir: &str) -> Result<Option<Pages>, ViewError> {
        if self.mode == super::ViewMode::V2 {
            return Ok(None);
        }
        let Place::Sharded(node) = self.place(dir).await? else {
            return Ok(None);
        };
        let array = &node.array;
        if node.dir == dir {
            return Ok(None);
        }
        let ChunkPath::Dir(prefix) = array.encoding().classify(relative(&node.dir, dir), array.ndim()) else {
            return Ok(None);
        };
        let pages = array.leaf_pages(&prefix).await?;
        Ok(pages.map(|pages| Pages {
            array: array.clone(),
            prefix,
            pages,
        }))
    }

    /// The entries of directory `dir`, in no particular order.
    async fn list_any(&self, dir: &str) -> Result<Vec<(String, Node)>, ViewError> {
        if self.mode == super::ViewMode::V2 {
            return self.v2_list(dir).await;
        }
        let node = match self.place(dir).await? {
            Place::Sharded(node) => node,
            Place::Stored { group } => {
                let mut entries = self.list_stored(dir).await?;
                self.show_draft_array_docs(dir, &mut entries).await?;
                if let Some(group) = group.filter(|_| entries.iter().any(|(name, _)| name == METADATA)) {
                    match group.rewritten().await? {
                        Some(shown) => {
                            for (_, node) in entries.iter_mut().filter(|(name, _)| name == METADATA) {
                                *node = Self::group_node(dir, shown.clone(), group.mtime_ns);
                            }
                        }
                        // A big document, gone since its end was read.
                        None => {
                            entries.retain(|(name, _)| name != METADATA);
                            self.nodes.forget(dir);
                        }
                    }
                }
                return Ok(entries);
            }
        };
        let array = &node.array;
        if node.dir == dir {
            return self.list_array_dir(&node).await;
        }
        let rel = relative(&node.dir, dir);
        match array.encoding().classify(rel, array.ndim()) {
            ChunkPath::Dir(prefix) => {
                let entries = array.list_chunk_dir(&prefix).await?;
                let leaf = prefix.len() + 1 == array.ndim();
                Ok(entries
                    .into_iter()
                    .map(|e| {
                        // A chunk file of the last level is named by its last coordinate (the
                        // listing made the name from it): no path to build and parse again.
                        let coordinate = e.name.parse::<u64>().ok().filter(|_| leaf);
                        let node = match (&e.kind, coordinate) {
                            (EntryKind::File { size }, Some(last)) => {
                                let mut coords = super::types::Coords::from_slice(&prefix);
                                coords.push(last);
                                Self::chunk_file(array, *size, e.mtime_ns, coords)
                            }
                            _ => self.chunk_node(array, &format!("{rel}/{}", e.name), &e),
                        };
                        (e.name, node)
                    })
                    .collect())
            }
            ChunkPath::Chunk(_) => Err(ViewError::NotADirectory(dir.to_string())),
            ChunkPath::Other => self.list_stored(dir).await,
        }
    }

    /// In a draft hierarchy's metadata tree, a sharded array's document is the view's.
    async fn show_draft_array_docs(&self, dir: &str, entries: &mut [(String, Node)]) -> Result<(), ViewError> {
        if !entries.iter().any(|(name, _)| name.ends_with(".array.json")) {
            return Ok(());
        }
        let prefix = dir_prefix(dir);
        for (name, node) in entries.iter_mut().filter(|(name, _)| name.ends_with(".array.json")) {
            if let Some(array) = self.draft_array_doc(&format!("{prefix}{name}")).await? {
                let mtime_ns = node.mtime_ns;
                *node = Self::array_doc_node(&array);
                node.mtime_ns = mtime_ns;
            }
        }
        Ok(())
    }

    async fn list_stored(&self, dir: &str) -> Result<Vec<(String, Node)>, ViewError> {
        let prefix = dir_prefix(dir);
        let entries = self.store.list_dir(&prefix).await?;
        Ok(entries
            .iter()
            .map(|e| (e.name.clone(), stored_node(&prefix, e)))
            .collect())
    }

    /// A sharded array's directory: its rewritten metadata, its chunk tree, and whatever else
    /// is stored there (shards themselves, being in the chunk key space, are hidden).
    async fn list_array_dir(&self, node: &ShardedNode) -> Result<Vec<(String, Node)>, ViewError> {
        let array = &node.array;
        let mut out = self.list_array_dir_stored(node).await?;
        for entry in array.list_array_dir().await? {
            out.push((entry.name.clone(), self.chunk_node(array, &entry.name, &entry)));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The entries of a sharded array's directory outside its chunk tree: its rewritten
    /// metadata and whatever else is stored there (no index is read).
    pub(super) async fn list_array_dir_stored(&self, node: &ShardedNode) -> Result<Vec<(String, Node)>, ViewError> {
        let (encoding, ndim) = (node.array.encoding(), node.array.ndim());
        let mut out = Vec::new();
        for (name, stored) in self.list_stored(&node.dir).await? {
            if name == METADATA && node.draft.is_none() {
                let mut rewritten = Self::array_doc_node(node);
                rewritten.mtime_ns = stored.mtime_ns;
                out.push((name, rewritten));
            } else if encoding.classify(&name, ndim) == ChunkPath::Other {
                out.push((name, stored));
            }
        }
        Ok(out)
    }

    /// The node of an entry of the chunk tree, `rel` being its path relative to the array.
    fn chunk_node(&self, array: &Arc<ShardedArray>, rel: &str, entry: &DirEntry) -> Node {
        match (&entry.kind, array.encoding().classify(rel, array.ndim())) {
            (EntryKind::File { size }, ChunkPath::Chunk(coords)) => {
                Self::chunk_file(array, *size, entry.mtime_ns, coords.into())
            }
            _ => Node::dir(),
        }
    }

    fn chunk_file(array: &Arc<ShardedArray>, size: u64, mtime_ns: Option<i128>, coords: super::types::Coords) -> Node {
        Node {
            size,
            mtime_ns,
            source: Source::Chunk {
                array: array.clone(),
                coords,
                at: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::listing_order;

    #[test]
    fn numbers_first_by_value_then_the_rest_by_bytes() {
        let mut names = [
            "b",
            "10",
            "9",
            "0",
            "01",
            "a",
            "100",
            "",
            "1.0",
            "99999999999999999999999",
            "2",
        ];
        names.sort_by(|a, b| listing_order(a, b));
        let want = [
            "0",
            "2",
            "9",
            "10",
            "100",
            "99999999999999999999999",
            "",
            "01",
            "1.0",
            "a",
            "b",
        ];
        assert_eq!(names, want);
        for a in want {
            for b in want {
                assert_eq!(listing_order(a, b) == std::cmp::Ordering::Equal, a == b, "{a:?} {b:?}");
                assert_eq!(listing_order(a, b), listing_order(b, a).reverse(), "{a:?} {b:?}");
            }
        }
    }
}
