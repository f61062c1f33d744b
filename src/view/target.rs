//! What writing a file at a path of the view means, and how such writes group.
//!
//! A [`Target`] is decided by the path's place ([`Located::target`](super::Located)) and is
//! opaque to callers: they commit bytes to it through the view, ask whether it is metadata
//! (shown as stored until accepted), whether its commit may be deferred, and whether a
//! file may keep its bytes as they are when it moves to another target. Chunk targets name the
//! [`Batch`] they commit in: the shard that holds them, so a caller that defers commits can
//! tell when a whole shard is waiting without knowing what a shard is.

use std::sync::Arc;

use super::nodes::ShardedNode;

/// Where bytes written at a path go.
#[derive(Debug, Clone)]
pub struct Target(pub(super) Dest);

#[derive(Debug, Clone)]
pub(super) enum Dest {
    /// An inner chunk of a sharded array: packed into its shard.
    Chunk { node: Arc<ShardedNode>, coords: Vec<u64> },
    /// The view's `zarr.json` of a sharded array: translated back.
    ArrayDoc(Arc<ShardedNode>),
    /// A `zarr.json` outside sharded arrays (a group, an array shown as stored, a new node):
    /// translated back where it describes arrays shown unsharded.
    NodeDoc { dir: String },
    /// Any other file: passed through to the store under this key.
    Stored { key: String },
}

/// The commit batch of a chunk target: the chunks of one stored shard, which one rewrite of
/// it commits together; `capacity` is how many inner chunks that shard can hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Batch {
    shard: String,
    pub capacity: u64,
}

impl Target {
    /// Whether this is a metadata document the view may translate (shown as stored until its
    /// write is accepted).
    pub fn is_metadata(&self) -> bool {
        matches!(self.0, Dest::ArrayDoc(_) | Dest::NodeDoc { .. })
    }

    /// Whether a write-back mount may defer this target's commit: an inner chunk (batched by
    /// its shard), or a file passed through as it is, unless it is JSON (a metadata document of
    /// another format or layout, which the view may read from the store to place what is below
    /// it, and which tells other readers what the files are: stored when closed, as
    /// `zarr.json` is).
    pub fn may_defer(&self) -> bool {
        match &self.0 {
            Dest::Chunk { .. } => true,
            Dest::Stored { key } => {
                let name = key.rsplit('/').next().unwrap_or(key);
                !(name.ends_with(".json") || matches!(name, ".zarray" | ".zgroup" | ".zattrs" | ".zmetadata"))
            }
            Dest::ArrayDoc(_) | Dest::NodeDoc { .. } => false,
        }
    }

    /// The batch a chunk target commits in; `None` for other targets (and chunks outside the
    /// grid, whose commit fails on its own).
    pub fn batch(&self) -> Option<Batch> {
        let Dest::Chunk { node, coords } = &self.0 else {
            return None;
        };
        Some(Batch {
            shard: node.array.shard_key_of(coords)?,
            capacity: node.array.chunks_in_shard_of(coords),
        })
    }

    /// Whether a copy of a file written for this target may be stored at `to`: a chunk's bytes
    /// onto a chunk key only within its array (see [`View::may_copy_to`]).
    ///
    /// [`View::may_copy_to`]: super::View::may_copy_to
    pub fn may_copy_to(&self, to: &Target) -> bool {
        match (&self.0, &to.0) {
            (Dest::Chunk { node: a, .. }, Dest::Chunk { node: b, .. }) => Arc::ptr_eq(&a.array, &b.array),
            _ => true,
        }
    }

    /// Whether a file being written for this target may move to `to` with its bytes as they
    /// are: a chunk to another chunk of the same array (its bytes are encoded for that array
    /// only), a stored file onto a stored file or a node's `zarr.json`.
    pub fn may_move_to(&self, to: &Target) -> bool {
        match (&self.0, &to.0) {
            (Dest::Chunk { node: a, .. }, Dest::Chunk { node: b, .. }) => Arc::ptr_eq(&a.array, &b.array),
            (Dest::Stored { .. }, Dest::Stored { .. } | Dest::NodeDoc { .. }) => true,
            _ => false,
        }
    }
}
