//! Links. A Zarr store holds no hard links, so `link(existing, new)` makes `new` a file of
//! its own holding what `existing` holds now: a copy, made exclusively. That is what clients
//! use it for: zarr-python's `LocalStore` creates a key that must not exist yet (an implicit
//! group, `mode="w-"`) by writing a temporary file, linking it to the key — which fails with
//! EEXIST if the key exists — and unlinking the temporary one.
//!
//! The new name is created the way a rename would move the file there (a chunk key packed
//! into its shard, a `zarr.json` translated, a temporary name inside an array staged), but
//! only if nothing is there: the store decides where it can (a create-if-absent write, or the
//! conditional rewrite of a chunk's shard), so of two creators, on this mount or another of
//! the same store, one wins. The two names are two inodes: each has one link (`st_nlink` 1),
//! and a later write through one does not show through the other.

use std::sync::Arc;

use bytes::Bytes;

use super::handles::{Sink, WriteFile};
use super::inodes::Written;
use super::{child_path, validate_name, Attr, Fs, FsError, FsResult};
use crate::view::Located;

impl Fs {
    /// Make `new_name` in `new_parent` a new file holding what inode `ino` holds.
    pub async fn link(&self, ino: u64, new_parent: u64, new_name: &str) -> FsResult<Attr> {
        let changing = self.changing();
        self.check_writable()?;
        validate_name(new_name)?;
        let from_at = self.view.locate(&self.path_of(ino)?).await?;
        let to = child_path(&self.path_of(new_parent)?, new_name);
        let to_at = self.view.locate(&to).await?;
        if self.inodes.file_at(&to).is_some()
            || self.inodes.is_local_dir(&to)
            || self.view.node(&to_at).await?.is_some()
        {
            return Err(FsError::Exists);
        }
        let (data, origin) = self.content_of(&from_at).await?;
        match self.sink_for(&to_at, true).await? {
            Sink::Commit(target) => {
                let may = match &origin {
                    Origin::Held(Sink::Commit(from)) => from.may_copy_to(&target),
                    Origin::Held(Sink::Staged) => true,
                    Origin::Stored(node) => self.view.may_copy_to(node, &target),
                };
                if !may {
                    return Err(FsError::CrossDevice);
                }
                self.view.commit_new(&target, data).await?
            }
            Sink::Staged => {
                let file = Arc::new(WriteFile::new_empty(self.budget.clone()));
                file.state.lock().await.data.replace(&data)?;
                if !self.inodes.put_new_file(&to, Written::new(file, Sink::Staged)) {
                    return Err(FsError::Exists);
                }
            }
        }
        drop(changing);
        let attr = self.lookup(new_parent, new_name).await?;
        self.made(new_parent, new_name);
        Ok(attr)
    }

    /// The whole content of the file at a placed path, and where it is: as the mount holds it
    /// (being written, staged or pending), else as stored. A directory cannot be linked
    /// (EPERM, as anywhere).
    async fn content_of(&self, at: &Located) -> FsResult<(Bytes, Origin)> {
        if let Some((file, sink)) = self.inodes.file_at(at.path()) {
            return Ok((self.load(&file).await?.content()?, Origin::Held(sink)));
        }
        let node = self.node(at).await?;
        if node.is_dir() {
            return Err(FsError::NotPermitted);
        }
        Ok((self.view.read(&node, 0, u64::MAX).await?, Origin::Stored(node)))
    }
}

/// Where a linked file's bytes come from: what they mean elsewhere depends on it (a chunk's
/// bytes onto a chunk key of another array would be read with the wrong codecs: EXDEV).
enum Origin {
    Held(Sink),
    Stored(crate::view::Node),
}
