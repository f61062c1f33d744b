//! The write path: files written through the view.
//!
//! Every file open for writing is buffered in memory (a [`WriteFile`], shared by all handles
//! of that path) and committed when it is closed (`flush`), synced or released: an inner
//! chunk is packed into its shard (group-committed, see `shard::commit`), a `zarr.json` is
//! handed to the view, which translates it back into what the store holds
//! (`view::metadata_write`), and any other file passes through to the store.
//!
//! The overlay that holds these files is in [`super::overlay`], renames in [`super::rename`].

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use super::handles::{FileHandle, Sink, WriteFile};
use super::{child_path, validate_name, Attr, Fs, FsError, FsResult};
use crate::store::key::dir_prefix;
use crate::view::{Node, Source, Target};

impl Fs {
    pub(super) fn check_writable(&self) -> FsResult<()> {
        if self.config.writable {
            Ok(())
        } else {
            Err(FsError::ReadOnly)
        }
    }

    /// Where bytes written at `path` go.
    pub(super) async fn sink_for(&self, path: &str) -> FsResult<Sink> {
        Ok(match self.view.target(path).await? {
            Target::Refused(_) => Sink::Staged,
            Target::Stored { .. }
                if self.view.inside_sharded(path).await? && self.view.lookup(path).await?.is_none() =>
            {
                Sink::Staged
            }
            target => Sink::Commit(target),
        })
    }

    /// Create and open a new file.
    pub async fn create(&self, parent: u64, name: &str, truncate_existing: bool) -> FsResult<(Attr, u64)> {
        self.check_writable()?;
        validate_name(name)?;
        let path = child_path(&self.path_of(parent)?, name);
        if !truncate_existing && (self.overlay_get(&path).is_some() || self.view.lookup(&path).await?.is_some()) {
            return Err(FsError::Exists);
        }
        let sink = self.sink_for(&path).await?;
        let file = match self.overlay_get(&path) {
            Some((file, _)) => file,
            None => Arc::new(WriteFile::new_empty(self.budget.clone())),
        };
        file.state.lock().await.truncate()?;
        self.overlay_open(&path, file.clone(), sink.clone());
        let ino = self.inodes.lookup(&path);
        let fh = self.files.insert(FileHandle::writer(file, true));
        // Metadata being written shows as stored (see `overlay_attr`).
        let attr = self.getattr(ino).await?;
        Ok((attr, fh))
    }

    /// Open an existing file for writing (`truncate`: O_TRUNC).
    pub(super) async fn open_write(&self, path: Arc<str>, truncate: bool, can_write: bool) -> FsResult<u64> {
        if can_write {
            self.check_writable()?;
        }
        let (file, sink) = match self.overlay_get(&path) {
            Some(found) => found,
            None => {
                let node = self.node(&path).await?;
                if node.is_dir() {
                    return Err(FsError::IsADirectory);
                }
                (
                    Arc::new(WriteFile::existing(node, self.budget.clone())),
                    self.sink_for(&path).await?,
                )
            }
        };
        if truncate {
            file.state.lock().await.truncate()?;
        }
        self.overlay_open(&path, file.clone(), sink.clone());
        Ok(self.files.insert(FileHandle::writer(file, can_write)))
    }

    /// Load the current content of a file opened for writing, the first time it is needed.
    pub(super) async fn load<'a>(
        &self,
        file: &'a WriteFile,
    ) -> FsResult<tokio::sync::MutexGuard<'a, super::handles::WriteState>> {
        let mut state = file.state.lock().await;
        if !state.loaded {
            let bytes = match &state.base {
                Some(node) => self.view.read(node, 0, u64::MAX).await?,
                None => Bytes::new(),
            };
            state.data.replace(&bytes)?;
            state.loaded = true;
        }
        Ok(state)
    }

    pub(super) async fn read_writer(&self, file: &WriteFile, offset: u64, size: u32) -> FsResult<Bytes> {
        let state = self.load(file).await?;
        Ok(state.data.read(offset, u64::from(size))?)
    }

    pub async fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        let handle = self.files.get(fh).ok_or(FsError::BadHandle)?;
        let file = handle.committer().ok_or(FsError::BadHandle)?;
        let mut state = self.load(file).await?;
        let end = offset.checked_add(data.len() as u64).ok_or(FsError::FileTooLarge)?;
        if end > self.config.max_file_size as u64 {
            return Err(FsError::FileTooLarge);
        }
        state.data.write_at(offset, data)?;
        state.touch();
        Ok(u32::try_from(data.len()).unwrap_or(u32::MAX))
    }

    /// Commit a handle's file if it changed (close, fsync).
    pub async fn flush(&self, fh: u64) -> FsResult<()> {
        let handle = self.files.get(fh).ok_or(FsError::BadHandle)?;
        let Some(file) = handle.committer() else {
            return Ok(());
        };
        // Wherever the file is now; an unlinked file has nowhere to go.
        let Some((path, sink)) = file.place() else {
            return Ok(());
        };
        let Sink::Commit(target) = &sink else { return Ok(()) };
        let mut state = file.state.lock().await;
        if !state.dirty {
            return Ok(());
        }
        if self.defers(&sink) {
            drop(state);
            self.defer(&path);
            return Ok(());
        }
        let data = state.data.to_bytes()?;
        self.commit(target, data).await?;
        state.dirty = false;
        Ok(())
    }

    /// Make a file's changes durable: in write-back mode everything pending is committed.
    pub async fn fsync(&self, fh: u64) -> FsResult<()> {
        self.flush(fh).await?;
        if self.writeback.is_some() {
            self.write_back(true).await?;
        }
        Ok(())
    }

    /// Release a handle: commit what is left (errors can only be logged here), drop it.
    pub async fn release(&self, fh: u64) {
        if let Err(e) = self.flush(fh).await {
            self.fail("release", 0, &e);
        }
        let Some(file) = self.files.remove(fh).and_then(|h| h.written().cloned()) else {
            return;
        };
        if let Some((path, _)) = file.place() {
            self.overlay_close(&path, &file);
        }
    }

    pub(super) async fn commit(&self, target: &Target, data: Bytes) -> FsResult<()> {
        match target {
            Target::Chunk { array, coords } => Ok(array.write_chunk(coords, Some(data)).await?),
            Target::Stored { key } => {
                self.view.store().set(key, data).await?;
                Ok(())
            }
            Target::Metadata(node) => Ok(self.view.write_array_metadata(node, &data).await?),
            Target::NodeMetadata { dir } => Ok(self.view.write_node_metadata(dir, data).await?),
            Target::Refused(_) => Err(FsError::NotPermitted),
        }
    }

    /// Change a file's size (truncate), through a handle or by path.
    pub async fn truncate(&self, ino: u64, size: u64, fh: Option<u64>) -> FsResult<Attr> {
        self.check_writable()?;
        let path = self.path_of(ino)?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= self.config.max_file_size)
            .ok_or(FsError::FileTooLarge)?;
        let handle = match fh.and_then(|fh| self.files.get(fh)).filter(|h| h.written().is_some()) {
            Some(handle) => handle,
            // Open for writing elsewhere: change the shared content; its close commits it.
            None if self
                .overlay_get(&path)
                .is_some_and(|(_, sink)| !matches!(sink, Sink::Staged)) =>
            {
                let (file, _) = self.overlay_get(&path).ok_or(FsError::NotFound)?;
                let mut state = self.load(&file).await?;
                state.data.resize(size as u64)?;
                state.touch();
                drop(state);
                return self.getattr(ino).await;
            }
            None => {
                let fh = self.open_write(path.clone(), false, true).await?;
                let handle = self.files.get(fh).ok_or(FsError::BadHandle)?;
                self.resize(&handle, size).await?;
                let result = self.flush(fh).await;
                self.release(fh).await;
                result?;
                return self.getattr(ino).await;
            }
        };
        self.resize(&handle, size).await?;
        self.getattr(ino).await
    }

    async fn resize(&self, handle: &FileHandle, size: usize) -> FsResult<()> {
        let file = handle.written().ok_or(FsError::BadHandle)?;
        let mut state = self.load(file).await?;
        state.data.resize(size as u64)?;
        state.touch();
        Ok(())
    }

    /// Remove a file: a chunk's index entry is emptied (its shard erased when nothing is left).
    pub async fn unlink(&self, parent: u64, name: &str) -> FsResult<()> {
        self.check_writable()?;
        validate_name(name)?;
        let path = child_path(&self.path_of(parent)?, name);
        if let Some(entry) = self.overlay_take(&path) {
            // Staged, being written or pending: its bytes go nowhere now (open handles keep
            // writing into a file that no longer has a place); a stored version is removed too.
            entry.file.set_place(None);
            if entry.pending.is_some() {
                self.undefer(&entry.sink);
            }
            if matches!(entry.sink, Sink::Staged) {
                return Ok(());
            }
            let Some(node) = self.view.lookup(&path).await? else {
                return Ok(());
            };
            return self.remove_node(&path, &node).await;
        }
        let node = self.node(&path).await?;
        self.remove_node(&path, &node).await
    }

    pub(super) async fn remove_node(&self, path: &str, node: &Node) -> FsResult<()> {
        match &node.source {
            Source::Dir => Err(FsError::IsADirectory),
            Source::Chunk { array, coords } => Ok(array.write_chunk(coords, None).await?),
            Source::Stored { key } => Ok(self.view.store().erase(key).await?),
            Source::Memory(_) => {
                // The view's zarr.json of a sharded array: removing it removes the stored one.
                let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
                self.view
                    .store()
                    .erase(&format!("{}zarr.json", dir_prefix(dir)))
                    .await?;
                self.view.forget_dir(dir);
                Ok(())
            }
        }
    }
    /// Make a directory: chunk directories are implicit (nothing is stored for them).
    pub async fn mkdir(&self, parent: u64, name: &str) -> FsResult<Attr> {
        self.check_writable()?;
        validate_name(name)?;
        let path = child_path(&self.path_of(parent)?, name);
        if self.view.is_chunk_dir(&path).await? {
            // Implicit: it "exists" as soon as a shard covers it, which a client that just saw
            // it missing cannot know, so making it always succeeds.
            self.made_dirs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(path.clone());
        } else if self.view.lookup(&path).await?.is_some() {
            return Err(FsError::Exists);
        } else {
            self.view.store().create_dir(&dir_prefix(&path)).await?;
        }
        let ino = self.inodes.lookup(&path);
        let mut attr = self.attr(ino, &Node::dir());
        attr.mtime = SystemTime::now();
        Ok(attr)
    }

    /// Remove an empty directory.
    pub async fn rmdir(&self, parent: u64, name: &str) -> FsResult<()> {
        self.check_writable()?;
        validate_name(name)?;
        let path = child_path(&self.path_of(parent)?, name);
        let node = match self.node(&path).await {
            // A chunk directory whose last chunk went is gone already: nothing to remove.
            Err(FsError::NotFound) if self.view.is_chunk_dir(&path).await? => return Ok(()),
            other => other?,
        };
        if !node.is_dir() {
            return Err(FsError::NotADirectory);
        }
        let mut entries = self.view.list(&path).await?;
        self.add_unstored(&path, &mut entries).await;
        if !entries.is_empty() {
            return Err(FsError::NotEmpty);
        }
        self.made_dirs.lock().unwrap_or_else(|e| e.into_inner()).remove(&path);
        if !self.view.is_chunk_dir(&path).await? {
            self.view.store().remove_dir(&dir_prefix(&path)).await?;
        }
        Ok(())
    }
}
