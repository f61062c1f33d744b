//! Changes through the view: committing a file's bytes to its [`Target`], alone or with
//! others in batches; removing a node; moving one; making and removing directories.
//!
//! Chunks go through the sharding transformer (packed into their shard by a conditional
//! rewrite, group-committed per shard), `zarr.json` documents through [`super::metadata_write`],
//! anything else to the store under its own key. Several chunks committed together are handed
//! to the transformer at once per array, so the chunks of one shard cost one rewrite.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;

use super::locate::{At, Located};
use super::target::{Dest, Target};
use super::types::Source;
use super::{Node, View, ViewError};
use crate::store::key::dir_prefix;
use crate::store::{Precondition, StoreError, Version};

/// How many files other than chunks [`View::commit_together`] stores at once.
const TOGETHER: usize = 32;

/// What making a directory did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirMade {
    /// Stored (a directory of the store, or nothing where the store has no directories).
    Stored,
    /// Implicit: it exists once something is stored below it (a chunk directory, or any
    /// directory of a store that keeps none, such as an object store). Nothing was stored;
    /// the caller keeps it until then.
    Implicit,
}

impl View {
    /// Store `data` as the file at `target`.
    pub async fn commit(&self, target: &Target, data: Bytes) -> Result<(), ViewError> {
        match &target.0 {
            Dest::Chunk { node, coords } => Ok(node.array.write_chunk(coords, Some(data)).await?),
            Dest::Stored { key } => self.write_stored(key, data, Precondition::Any).await,
            Dest::ArrayDoc(node) => self.write_array_metadata(node, &data).await,
            Dest::NodeDoc { dir } => self.write_node_metadata(dir, data, Precondition::Any).await,
        }
    }

    /// Store `data` as the file at `target` only if nothing is there: [`ViewError::Exists`]
    /// otherwise. What `link(2)` onto a new name does (clients create files exclusively that
    /// way). The store decides where it can — a create-if-absent write, or for a chunk the
    /// conditional rewrite of its shard — so of two creators, also on two mounts, one wins.
    pub async fn commit_new(&self, target: &Target, data: Bytes) -> Result<(), ViewError> {
        match &target.0 {
            Dest::Chunk { node, coords } => Ok(node.array.create_chunk(coords, data).await?),
            Dest::Stored { key } => self.write_stored(key, data, Precondition::Absent).await,
            // The array is there, so its document is.
            Dest::ArrayDoc(node) => Err(ViewError::Exists(node.meta_key.clone())),
            Dest::NodeDoc { dir } => self.write_node_metadata(dir, data, Precondition::Absent).await,
        }
    }

    /// Store a file passed through under its own key, if `condition` holds.
    async fn write_stored(&self, key: &str, data: Bytes, condition: Precondition) -> Result<(), ViewError> {
        let draft_array = self.draft_array_written(key, &data).await?;
        let stored = self.set_if(key, data, condition).await;
        if let Some(dir) = draft_array {
            self.nodes.forget(&dir);
        }
        stored.map(drop)
    }

    /// `set_if` of the store, where a refused `Absent` is [`ViewError::Exists`]. A store that
    /// cannot write conditionally (plain HTTP) is asked whether the key is there first: as far
    /// as it can tell. Returns the version stored.
    pub(super) async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> Result<Version, ViewError> {
        let absent = matches!(condition, Precondition::Absent);
        let written = match self.store.set_if(key, value.clone(), condition).await {
            Err(StoreError::Unsupported(_)) if absent => match self.store.head(key).await? {
                Some(_) => Err(StoreError::Conflict { key: key.to_string() }),
                None => self.store.set(key, value).await,
            },
            other => other,
        };
        match written {
            Ok(version) => Ok(version),
            Err(StoreError::Conflict { .. }) if absent => Err(ViewError::Exists(key.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// Commit several files at once: chunks of one array are handed over together (one
    /// rewrite per shard), other files [`TOGETHER`] at a time (each is a request of its own to
    /// the store). Returns the indexes of the files committed together with the outcome they
    /// share.
    pub async fn commit_together(&self, files: Vec<(Target, Bytes)>) -> Vec<(Vec<usize>, Result<(), ViewError>)> {
        let mut arrays: HashMap<usize, (Arc<crate::shard::ShardedArray>, Vec<usize>, Vec<_>)> = HashMap::new();
        let mut others = Vec::new();
        for (i, (target, data)) in files.into_iter().enumerate() {
            match target.0 {
                Dest::Chunk { node, coords } => {
                    let entry = arrays
                        .entry(Arc::as_ptr(&node.array) as usize)
                        .or_insert_with(|| (node.array.clone(), Vec::new(), Vec::new()));
                    entry.1.push(i);
                    entry.2.push((coords, Some(data)));
                }
                dest => others.push((i, Target(dest), data)),
            }
        }
        let mut outcomes: Vec<_> = futures::stream::iter(others)
            .map(|(i, target, data)| async move { (vec![i], self.commit(&target, data).await) })
            .buffer_unordered(TOGETHER)
            .collect()
            .await;
        for (_, (array, indexes, chunks)) in arrays {
            let result = array.write_chunks(chunks).await.map_err(ViewError::from);
            outcomes.push((indexes, result));
        }
        outcomes
    }

    /// Remove a file: a chunk's index entry is emptied (its shard erased when nothing is left);
    /// removing the view's `zarr.json` of a node removes the stored one.
    pub async fn remove(&self, node: &Node) -> Result<(), ViewError> {
        match &node.source {
            Source::Dir => Err(ViewError::IsADirectory),
            Source::Chunk { array, coords, .. } => Ok(array.write_chunk(coords, None).await?),
            Source::Stored { key, .. } => {
                let erased = self.store.erase(key).await;
                self.forget_node_of(key);
                Ok(erased?)
            }
            Source::Rewritten { dir, key, .. } => {
                self.store.erase(key).await?;
                self.nodes.forget(dir);
                Ok(())
            }
            Source::Unstored => Ok(()),
        }
    }

    /// Move the file `node` to `to`, where nothing of the mount's own is:
    /// - a chunk onto another chunk key of the same array (its bytes are encoded for that
    ///   array only);
    /// - a stored file by the store's rename onto a stored name, or onto a chunk key or a
    ///   `zarr.json`, where it is committed like a write of it;
    /// - anything else (directories, chunks between arrays, metadata) cannot move.
    pub async fn move_node(&self, node: &Node, to: &Target) -> Result<(), ViewError> {
        match (&node.source, &to.0) {
            (Source::Chunk { array, .. }, Dest::Chunk { node: dest, .. }) if Arc::ptr_eq(array, &dest.array) => {
                let data = self.read(node, 0, u64::MAX).await?;
                self.commit(to, data).await?;
                self.remove(node).await
            }
            (Source::Stored { key, .. }, Dest::Stored { key: dest }) if dest.ends_with(".array.json") => {
                // A draft array's document put in place (as clients write files): looked at
                // like a write of it.
                let data = self.read(node, 0, u64::MAX).await?;
                let draft_array = self.draft_array_written(dest, &data).await?;
                let moved = self.store.rename(key, dest).await;
                if let Some(dir) = draft_array {
                    self.nodes.forget(&dir);
                }
                Ok(moved?)
            }
            (Source::Stored { key, .. }, Dest::Stored { key: dest }) => {
                let moved = self.store.rename(key, dest).await;
                self.forget_node_of(key);
                Ok(moved?)
            }
            (Source::Stored { .. }, Dest::Chunk { .. } | Dest::ArrayDoc(_) | Dest::NodeDoc { .. }) => {
                let data = self.read(node, 0, u64::MAX).await?;
                self.commit(to, data).await?;
                self.remove(node).await
            }
            _ => Err(ViewError::CannotMove(self.describe_key(node))),
        }
    }

    /// Whether a copy of `node`'s bytes may be stored at `to`: a chunk's bytes are encoded for
    /// its own array, so onto a chunk key they go only within it (anything else is a file).
    pub fn may_copy_to(&self, node: &Node, to: &Target) -> bool {
        match (&node.source, &to.0) {
            (Source::Chunk { array, .. }, Dest::Chunk { node: dest, .. }) => Arc::ptr_eq(array, &dest.array),
            _ => true,
        }
    }

    /// Whether `node` is a chunk of the array whose directory holds `at` (it may then be kept
    /// under that name by the mount until renamed back onto a chunk key).
    pub fn is_chunk_of_array_at(&self, node: &Node, at: &Located) -> bool {
        match (&node.source, at.array_node()) {
            (Source::Chunk { array, .. }, Some(dest)) => Arc::ptr_eq(array, &dest.array),
            _ => false,
        }
    }

    /// Make a directory at `at` (nothing must be there).
    pub async fn make_dir(&self, at: &Located) -> Result<DirMade, ViewError> {
        if at.is_chunk_dir() {
            return Ok(DirMade::Implicit);
        }
        if self.node(at).await?.is_some() {
            return Err(ViewError::Exists(at.path().to_string()));
        }
        if !self.keeps_dirs() {
            return Ok(DirMade::Implicit);
        }
        self.store.create_dir(&dir_prefix(at.path())).await?;
        Ok(DirMade::Stored)
    }

    /// Whether the store keeps directories of its own (see [`Capabilities::directories`]):
    /// elsewhere a directory exists while something is stored below it.
    ///
    /// [`Capabilities::directories`]: crate::store::Capabilities::directories
    pub fn keeps_dirs(&self) -> bool {
        self.store.capabilities().directories
    }

    /// Remove the directory at `at`, which the caller found empty. Chunk directories are
    /// implicit: nothing is stored for them.
    pub async fn remove_dir(&self, at: &Located) -> Result<(), ViewError> {
        if matches!(at.at, At::ChunkDir { .. }) {
            return Ok(());
        }
        let removed = self.store.remove_dir(&dir_prefix(at.path())).await;
        self.nodes.forget(at.path());
        Ok(removed?)
    }

    /// A stored file went away or moved: if it was a node's `zarr.json`, what the view knew of
    /// that node's kind goes too, so the directory shows as it is now (a removed group is no
    /// directory any more once empty, and a new one can be made at its name at once).
    fn forget_node_of(&self, key: &str) {
        if let Some(dir) = key.strip_suffix(super::METADATA) {
            if dir.is_empty() || dir.ends_with('/') {
                self.nodes.forget(dir.trim_end_matches('/'));
            }
        }
    }
}
