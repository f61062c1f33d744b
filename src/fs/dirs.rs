//! Making and removing directories. Chunk directories of sharded arrays are implicit: one made
//! by `mkdir` is held by its inode (see [`super::inodes`]) until a chunk below it is stored,
//! and removing one stores nothing. Other directories are the store's.

use std::time::SystemTime;

use super::{child_path, validate_name, Attr, Fs, FsError, FsResult};
use crate::view::{DirMade, Node};

impl Fs {
    /// Make a directory.
    pub async fn mkdir(&self, parent: u64, name: &str) -> FsResult<Attr> {
        let _changing = self.changing();
        self.check_writable()?;
        validate_name(name)?;
        let path = child_path(&self.path_of(parent)?, name);
        let at = self.view.locate(&path).await?;
        // An implicit directory "exists" as soon as a shard covers it, which a client that just
        // saw it missing cannot know, so making one always succeeds.
        if self.view.make_dir(&at).await? == DirMade::Implicit {
            self.inodes.make_dir(&path);
        }
        let ino = self.inodes.lookup(&path);
        let mut attr = self.attr(ino, &Node::dir());
        attr.mtime = SystemTime::now();
        Ok(attr)
    }

    /// Remove an empty directory.
    pub async fn rmdir(&self, parent: u64, name: &str) -> FsResult<()> {
        let _changing = self.changing();
        self.check_writable()?;
        validate_name(name)?;
        let path = child_path(&self.path_of(parent)?, name);
        let at = self.view.locate(&path).await?;
        let node = match self.node(&at).await {
            // A chunk directory whose last chunk went is gone already: nothing to remove.
            Err(FsError::NotFound) if at.is_chunk_dir() => return Ok(()),
            other => other?,
        };
        if !node.is_dir() {
            return Err(FsError::NotADirectory);
        }
        let unstored = self.unstored_below(&path);
        let mut entries = self.view.list(&path).await?;
        self.add_unstored(unstored, &mut entries).await;
        if !entries.is_empty() {
            return Err(FsError::NotEmpty);
        }
        self.inodes.unmake_dir(&path);
        Ok(self.view.remove_dir(&at).await?)
    }
}
