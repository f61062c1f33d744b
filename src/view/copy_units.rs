//! The view cut into units of work for `zarrfs copy`: directories as the view lists them, but
//! a sharded array's chunk tree as its stored shards, each with its stored size, found by
//! listing the store alone. A copy can then be split over machines by whole shards, balanced by
//! bytes, before any index is read, and each machine reads only the indexes of its own shards
//! ([`View::shard_files`]). The files a shard yields are the chunk files the view lists, with
//! the same paths, sizes and bytes (their nodes carry where their bytes are, so reading them
//! locates nothing again).

use std::sync::Arc;

use bytes::Bytes;

use super::nodes::ShardedNode;
use super::{At, Node, Place, Source, View, ViewError};
use crate::store::key::dir_prefix;
use crate::store::GetOptions;

/// A stored shard of a sharded array the view shows unsharded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardUnit {
    /// The array's directory in the view (and the store).
    pub array_dir: String,
    /// The shard's coordinates in the shard grid.
    pub coords: Vec<u64>,
    /// The shard's store key.
    pub key: String,
    /// The shard's stored size.
    pub size: u64,
}

/// One directory of the view, for a copy.
#[derive(Debug, Default)]
pub struct CopyListing {
    /// Files, by path from the root.
    pub files: Vec<(String, Node)>,
    /// Subdirectories to walk, by path from the root (chunk trees excepted).
    pub dirs: Vec<String>,
    /// The stored shards of the array whose directory this is, if it is a sharded array's.
    pub shards: Vec<ShardUnit>,
}

impl View {
    /// Directory `dir` for a copy (see the module notes): the array directory of a sharded
    /// array lists its other entries as usual and its chunk tree as shards; with
    /// `chunk_files`, every directory is listed as the view lists it, chunk trees included
    /// (packing needs every chunk file).
    pub async fn list_for_copy(&self, dir: &str, chunk_files: bool) -> Result<CopyListing, ViewError> {
        let placed = if self.remote {
            // The directory's listing is asked for while its node is found (one round trip,
            // not two): the listing caches keep it for the listing below.
            let prefix = dir_prefix(dir);
            let (placed, _) = futures::join!(self.place(dir), self.store.list_dir(&prefix));
            placed
        } else {
            self.place(dir).await
        };
        let (entries, array) = match placed? {
            Place::Sharded(node) if node.dir == dir && !chunk_files => {
                (self.list_array_dir_stored(&node).await?, Some(node))
            }
            _ => (self.list(dir).await?, None),
        };
        let mut out = CopyListing::default();
        let prefix = dir_prefix(dir);
        for (name, node) in entries {
            let path = format!("{prefix}{name}");
            if node.is_dir() {
                out.dirs.push(path);
            } else {
                out.files.push((path, node));
            }
        }
        if let Some(node) = array {
            out.shards = Self::shard_units(&node).await?;
        }
        Ok(out)
    }

    async fn shard_units(node: &ShardedNode) -> Result<Vec<ShardUnit>, ViewError> {
        let array = &node.array;
        Ok(array
            .stored_shards_sized()
            .await?
            .into_iter()
            .map(|(coords, size)| ShardUnit {
                array_dir: node.dir.clone(),
                key: array.shard_key(&coords),
                coords,
                size,
            })
            .collect())
    }

    /// The chunk files a stored shard shows, by path from the root, in C order (its index is
    /// read; an empty shard, or one gone since it was listed, shows none).
    pub async fn shard_files(&self, unit: &ShardUnit) -> Result<Vec<(String, Node)>, ViewError> {
        let node: Arc<ShardedNode> = match self.place(&unit.array_dir).await? {
            Place::Sharded(node) if node.dir == unit.array_dir => node,
            _ => return Err(ViewError::NotFound(unit.key.clone())),
        };
        let array = &node.array;
        let prefix = dir_prefix(&node.dir);
        Ok(array
            .chunks_of_shard(&unit.coords)
            .await?
            .into_iter()
            .map(|(coords, loc)| {
                let path = format!("{prefix}{}", array.encoding().encode(&coords));
                let node = Node {
                    size: loc.nbytes,
                    mtime_ns: loc.mtime_ns,
                    source: Source::Chunk {
                        array: array.clone(),
                        coords: coords.into(),
                        at: Some(loc),
                    },
                };
                (path, node)
            })
            .collect())
    }

    /// The whole of the file at `path`, for a copy that kept the paths of what it listed and
    /// not their nodes (`--shard` gathering millions of chunk files): a file the store holds
    /// under that name is read with one request, nothing looked up first; any other file is
    /// looked up and read. `None`: no file there.
    pub async fn read_path(&self, path: &str) -> Result<Option<Bytes>, ViewError> {
        let at = self.locate(path).await?;
        if let At::Stored { within: None } = &at.at {
            return Ok(self.store.get(path, GetOptions::default()).await?.map(|got| got.bytes));
        }
        match self.node(&at).await? {
            Some(node) if !node.is_dir() => Ok(Some(self.read(&node, 0, node.size).await?)),
            _ => Ok(None),
        }
    }
}
