//! Making and removing directories. Chunk directories of sharded arrays are implicit, and so
//! is every directory of a store that keeps none (an object store, where a directory is a
//! prefix of stored keys): one made by `mkdir` is held by its inode (see [`super::inodes`])
//! until removed, showing while nothing is stored below it, and removing one stores nothing;
//! one emptied by removing what it held is gone already, and removing it succeeds. Other
//! directories are the store's. A removed directory's name is free at once.

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
        if !at.is_chunk_dir() && self.inodes.is_local_dir(&path) {
            return Err(FsError::Exists);
        }
        // An implicit chunk directory "exists" as soon as a shard covers it, which a client
        // that just saw it missing cannot know, so making one always succeeds.
        if self.view.make_dir(&at).await? == DirMade::Implicit {
            self.inodes.make_dir(&path);
        }
        let ino = self.inodes.lookup(&path);
        let mut attr = self.attr(ino, &Node::dir());
        attr.mtime = SystemTime::now();
        self.made(parent, name);
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
            // So is any directory of a store that keeps none (an object store), once emptied.
            Err(FsError::NotFound) if at.is_chunk_dir() || !self.view.keeps_dirs() => {
                self.inodes.unlink(&path);
                return Ok(());
            }
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
        self.view.remove_dir(&at).await?;
        // The name is free at once: a new directory or file made there is another inode.
        self.inodes.unlink(&path);
        Ok(())
    }
}
