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

use super::locate::{At, Located};
use super::target::{Dest, Target};
use super::types::Source;
use super::{Node, View, ViewError};
use crate::store::key::dir_prefix;

/// What making a directory did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirMade {
    /// Stored (a directory of the store, or nothing where the store has no directories).
    Stored,
    /// A chunk directory: implicit, it exists once a chunk below it does. Nothing was stored;
    /// the caller keeps it until then.
    Implicit,
}

impl View {
    /// Store `data` as the file at `target`.
    pub async fn commit(&self, target: &Target, data: Bytes) -> Result<(), ViewError> {
        match &target.0 {
            Dest::Chunk { node, coords } => Ok(node.array.write_chunk(coords, Some(data)).await?),
            Dest::Stored { key } => {
                let draft_array = self.draft_array_written(key, &data).await?;
                let stored = self.store.set(key, data).await;
                if let Some(dir) = draft_array {
                    self.nodes.forget(&dir);
                }
                stored?;
                Ok(())
            }
            Dest::ArrayDoc(node) => self.write_array_metadata(node, &data).await,
            Dest::NodeDoc { dir } => self.write_node_metadata(dir, data).await,
        }
    }

    /// Commit several files at once: chunks of one array are handed over together (one
    /// rewrite per shard), other files one by one. Returns the indexes of the files committed
    /// together with the outcome they share.
    pub async fn commit_together(&self, files: Vec<(Target, Bytes)>) -> Vec<(Vec<usize>, Result<(), ViewError>)> {
        let mut arrays: HashMap<usize, (Arc<crate::shard::ShardedArray>, Vec<usize>, Vec<_>)> = HashMap::new();
        let mut outcomes = Vec::new();
        for (i, (target, data)) in files.into_iter().enumerate() {
            match target.0 {
                Dest::Chunk { node, coords } => {
                    let entry = arrays
                        .entry(Arc::as_ptr(&node.array) as usize)
                        .or_insert_with(|| (node.array.clone(), Vec::new(), Vec::new()));
                    entry.1.push(i);
                    entry.2.push((coords, Some(data)));
                }
                dest => outcomes.push((vec![i], self.commit(&Target(dest), data).await)),
            }
        }
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
            Source::Stored { key, .. } => Ok(self.store.erase(key).await?),
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
            (Source::Stored { key, .. }, Dest::Stored { key: dest }) => Ok(self.store.rename(key, dest).await?),
            (Source::Stored { key, .. }, Dest::Chunk { .. } | Dest::ArrayDoc(_) | Dest::NodeDoc { .. }) => {
                let data = self.read(node, 0, u64::MAX).await?;
                self.commit(to, data).await?;
                Ok(self.store.erase(key).await?)
            }
            _ => Err(ViewError::CannotMove(self.describe_key(node))),
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
        self.store.create_dir(&dir_prefix(at.path())).await?;
        Ok(DirMade::Stored)
    }

    /// Remove the directory at `at`, which the caller found empty. Chunk directories are
    /// implicit: nothing is stored for them.
    pub async fn remove_dir(&self, at: &Located) -> Result<(), ViewError> {
        if matches!(at.at, At::ChunkDir { .. }) {
            return Ok(());
        }
        Ok(self.store.remove_dir(&dir_prefix(at.path())).await?)
    }
}
