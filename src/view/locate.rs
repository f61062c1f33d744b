//! Placing a path: one walk from the root through the node cache turns a path of the view into
//! a [`Located`] — what the path means (a stored file or directory, a chunk of an array at
//! these coordinates, a chunk directory, an array's or a group's `zarr.json`) with the nodes
//! it depends on. Lookups, opens, writes, renames and directory changes all start from it, so
//! an operation walks once however many questions it asks. Placing costs no request beyond
//! the node cache's (one `zarr.json` per directory per TTL); what exists there is asked
//! separately ([`View::node`](super::View::node)).

use std::sync::Arc;

use super::nodes::{GroupNode, NodeInfo, ShardedNode};
use super::target::{Dest, Target};
use super::{relative, split_parent, View, ViewError, ViewMode, METADATA};
use crate::zarr::draft::DraftLayout;
use crate::zarr::key_encoding::ChunkPath;

/// A path of the view and what it means there.
#[derive(Debug, Clone)]
pub struct Located {
    path: String,
    pub(super) at: At,
}

#[derive(Debug, Clone)]
pub(super) enum At {
    /// The mount's root.
    Root,
    /// Passes through to the store under the same path. `within`: the sharded array whose
    /// directory holds it (names there that nothing stores are kept by the mount).
    Stored { within: Option<Arc<ShardedNode>> },
    /// The `zarr.json` of a node outside sharded arrays; `group` when the view rewrites it.
    NodeDoc { group: Option<Arc<GroupNode>> },
    /// The view's `zarr.json` of a sharded array.
    ArrayDoc(Arc<ShardedNode>),
    /// An inner chunk of a sharded array.
    Chunk { node: Arc<ShardedNode>, coords: Vec<u64> },
    /// A directory of a sharded array's chunk tree (implicit: it exists when a chunk below
    /// it does).
    ChunkDir { node: Arc<ShardedNode>, prefix: Vec<u64> },
    /// A name inside a chunk tree that is no chunk key: nothing can be stored there.
    NotAChunk(Arc<ShardedNode>),
    /// A path of the v2 view (read-only).
    V2(super::v2::V2At),
}

/// Where a directory lies, as far as the meaning of paths in it goes.
pub(super) enum Place {
    /// At or below a sharded array shown unsharded.
    Sharded(Arc<ShardedNode>),
    /// Elsewhere: the store shows through, except the directory's own group document when the
    /// view rewrites it.
    Stored { group: Option<Arc<GroupNode>> },
}

impl Located {
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether this is a directory of a sharded array's chunk tree, which needs no storing.
    pub fn is_chunk_dir(&self) -> bool {
        matches!(self.at, At::ChunkDir { .. })
    }

    /// What writing a file here means; `None` where no file can be stored (a chunk directory,
    /// a name inside a chunk tree that is no chunk key, the root).
    pub(super) fn dest(&self) -> Option<Target> {
        let dest = match &self.at {
            At::Root | At::ChunkDir { .. } | At::NotAChunk(_) | At::V2(_) => return None,
            At::Stored { .. } => Dest::Stored { key: self.path.clone() },
            At::NodeDoc { .. } => Dest::NodeDoc {
                dir: split_parent(&self.path).0.to_string(),
            },
            At::ArrayDoc(node) => Dest::ArrayDoc(node.clone()),
            At::Chunk { node, coords } => Dest::Chunk {
                node: node.clone(),
                coords: coords.clone(),
            },
        };
        Some(Target(dest))
    }

    /// The sharded array whose directory holds this path, if any.
    pub(super) fn array_node(&self) -> Option<&Arc<ShardedNode>> {
        match &self.at {
            At::Stored { within } => within.as_ref(),
            At::ArrayDoc(node) | At::Chunk { node, .. } | At::ChunkDir { node, .. } | At::NotAChunk(node) => Some(node),
            At::Root | At::NodeDoc { .. } | At::V2(_) => None,
        }
    }
}

/// Whether the last name of `path` is a temporary name zarr-python (3.1 and later) writes a
/// file under before renaming it into place: `<name>.<32 hex digits>.partial`.
pub(super) fn is_client_temporary(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some(rest) = name.strip_suffix(".partial") else {
        return false;
    };
    let Some((stem, token)) = rest.rsplit_once('.') else {
        return false;
    };
    !stem.is_empty() && token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit())
}

impl View {
    /// Place `path` (see the module notes).
    pub async fn locate(&self, path: &str) -> Result<Located, ViewError> {
        let at = self.place_path(path).await?;
        Ok(Located {
            path: path.to_string(),
            at,
        })
    }

    async fn place_path(&self, path: &str) -> Result<At, ViewError> {
        if path.is_empty() {
            return Ok(At::Root);
        }
        if self.mode == ViewMode::V2 {
            return Ok(At::V2(self.v2_locate(path).await?));
        }
        if let Some(node) = self.draft_array_doc(path).await? {
            return Ok(At::ArrayDoc(node));
        }
        let (parent, name) = split_parent(path);
        let node = match self.place(parent).await? {
            Place::Sharded(node) => node,
            Place::Stored { group } if name == METADATA && self.mode != ViewMode::Raw => {
                return Ok(At::NodeDoc { group })
            }
            Place::Stored { .. } => return Ok(At::Stored { within: None }),
        };
        let rel = relative(&node.dir, path);
        if rel == METADATA && node.draft.is_none() {
            return Ok(At::ArrayDoc(node));
        }
        let (encoding, ndim) = (node.array.encoding(), node.array.ndim());
        Ok(match encoding.classify(rel, ndim) {
            ChunkPath::Chunk(coords) => At::Chunk { node, coords },
            ChunkPath::Dir(prefix) => At::ChunkDir { node, prefix },
            // Inside the chunk tree only chunk keys exist; elsewhere the store shows through.
            ChunkPath::Other => match encoding.classify(split_parent(rel).0, ndim) {
                ChunkPath::Dir(_) | ChunkPath::Chunk(_) => At::NotAChunk(node),
                ChunkPath::Other => At::Stored { within: Some(node) },
            },
        })
    }

    /// The draft layout of the hierarchy, if it is a draft's (its root's entry point says).
    pub(super) async fn draft_layout(&self) -> Result<Option<DraftLayout>, ViewError> {
        if self.mode == ViewMode::Raw {
            return Ok(None);
        }
        Ok(match self.nodes.info("").await? {
            NodeInfo::Draft(layout) => Some(layout),
            _ => None,
        })
    }

    /// The sharded array whose stored metadata document is at `path`, in a draft hierarchy
    /// (`meta/…array.json`: the view shows its rewritten document there).
    pub(super) async fn draft_array_doc(&self, path: &str) -> Result<Option<Arc<ShardedNode>>, ViewError> {
        if !path.ends_with(".array.json") {
            return Ok(None);
        }
        let Some(layout) = self.draft_layout().await? else {
            return Ok(None);
        };
        let Some(data_dir) = layout.data_dir_of_array_key(path) else {
            return Ok(None);
        };
        Ok(match self.place(&data_dir).await? {
            Place::Sharded(node) if node.dir == data_dir && node.meta_key == path => Some(node),
            _ => None,
        })
    }

    /// Where directory `dir` lies: the nearest sharded array at or above it, walking from the
    /// root, or else `dir`'s own rewritten group document. Nothing below an array is a node, so
    /// the walk stops at the first array of any kind.
    pub(super) async fn place(&self, dir: &str) -> Result<Place, ViewError> {
        if self.mode == ViewMode::Raw {
            return Ok(Place::Stored { group: None });
        }
        let components = dir.match_indices('/').map(|(i, _)| i);
        let ends = std::iter::once(0)
            .chain(components)
            .chain((!dir.is_empty()).then_some(dir.len()));
        let mut group = None;
        let mut draft = None;
        for end in ends {
            let info = match draft {
                Some(layout) => self.nodes.draft_info(&dir[..end], layout).await?,
                None => self.nodes.info(&dir[..end]).await?,
            };
            match info {
                NodeInfo::Sharded(node) => return Ok(Place::Sharded(node)),
                NodeInfo::Array => return Ok(Place::Stored { group: None }),
                NodeInfo::Group(node) if end == dir.len() => group = Some(node),
                NodeInfo::Draft(layout) => draft = Some(layout),
                NodeInfo::Plain | NodeInfo::Group(_) => {}
            }
        }
        Ok(Place::Stored { group })
    }
}

#[cfg(test)]
mod tests {
    use super::is_client_temporary;

    #[test]
    fn zarr_pythons_temporary_names_are_told_from_others() {
        assert!(is_client_temporary(
            "d.zarr/x/c/0.5788c13c8d524e6bb094441e6f6d19b2.partial"
        ));
        assert!(is_client_temporary("zarr.af41325932ec4c8dae9ea1ac81db525d.partial"));
        for name in [
            "d/0.partial",
            "d/.af41325932ec4c8dae9ea1ac81db525d.partial",
            "d/zarr.af41325932ec4c8dae9ea1ac81db525.partial",
            "d/zarr.af41325932ec4c8dae9ea1ac81db525g.partial",
            "d/zarr.af41325932ec4c8dae9ea1ac81db525d.partial/0",
            "d/zarr.json",
        ] {
            assert!(!is_client_temporary(name), "{name}");
        }
    }
}
