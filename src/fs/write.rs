//! The write path: files written through the view.
//!
//! Every file open for writing is buffered in memory (a [`WriteFile`], held by its inode and
//! shared by all handles of that name) and committed to its target when it is closed
//! (`flush`), synced or released. What committing means is the view's: an inner chunk is
//! packed into its shard (group-committed), a `zarr.json` is translated back into what the
//! store holds, any other file passes through.
//!
//! How held files show is in [`super::overlay`], renames in [`super::rename`], directories in
//! [`super::dirs`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::handles::{FileHandle, Sink, WriteFile, WriteHandle};
use super::inodes::Retired;
use super::{child_path, validate_name, Attr, Fs, FsError, FsResult};
use crate::view::Located;

impl Fs {
    pub(super) fn check_writable(&self) -> FsResult<()> {
        if self.config.writable {
            Ok(())
        } else {
            Err(FsError::ReadOnly)
        }
    }

    /// A setattr that changes nothing stored (modes, owners, times): accepted on a writable
    /// mount, the attributes shown as before.
    pub async fn setattr_unchanged(&self, ino: u64) -> FsResult<Attr> {
        self.check_writable()?;
        self.attr_now(ino).await
    }

    /// Create and open a new file.
    pub async fn create(&self, parent: u64, name: &str, truncate_existing: bool) -> FsResult<(Attr, u64)> {
        let _changing = self.changing();
        self.check_writable()?;
        validate_name(name)?;
        let path = child_path(&self.path_of(parent)?, name);
        let at = self.view.locate(&path).await?;
        let held = self.inodes.file_at(&path);
        if !truncate_existing && (held.is_some() || self.view.node(&at).await?.is_some()) {
            return Err(FsError::Exists);
        }
        let sink = self.sink_for(&at, true).await?;
        let file = match held {
            Some((file, _)) => file,
            None => Arc::new(WriteFile::new_empty(self.budget.clone())),
        };
        // The file held at the name once this handle holds it: another open may have put its
        // own there since it was looked for above.
        let (held_ino, file) = self.inodes.open_file(&path, file, sink);
        self.reopened(held_ino, &file);
        if let Err(e) = file.state.lock().await.truncate() {
            self.inodes.close_file(held_ino, &file);
            return Err(e.into());
        }
        // The reply hands the kernel the inode: one lookup.
        let ino = self.inodes.lookup(&path);
        let fh = self.files.insert(FileHandle::writer(ino, file, true));
        // Metadata being written shows as stored (see `local_attr`).
        let attr = self.attr_now(ino).await?;
        self.made(parent, name);
        Ok((attr, fh))
    }

    /// Open an existing file for writing (`truncate`: O_TRUNC).
    /// `ino`: the kernel's inode, when the open names one (not a truncate by path): if a rename
    /// replaced it meanwhile, the handle is that replaced file's (see `open_replaced`).
    pub(super) async fn open_write(
        &self,
        ino: Option<u64>,
        at: &Located,
        truncate: bool,
        can_write: bool,
    ) -> FsResult<u64> {
        if can_write {
            self.check_writable()?;
        }
        let (file, sink) = match self.inodes.file_at(at.path()) {
            Some(found) => found,
            None => {
                // A file removed elsewhere (another mount) since the kernel looked its name
                // up: an open that truncates makes the empty file O_CREAT would have made
                // (the kernel does not pass O_CREAT on). Removed through this mount, the open
                // raced the removal: ENOENT, as making it again here showed readers of the
                // name an empty file after the write had landed (the model test found it).
                let file = match self.node(at).await {
                    Ok(node) if node.is_dir() => return Err(FsError::IsADirectory),
                    Ok(node) => WriteFile::existing(node, self.budget.clone()),
                    Err(FsError::NotFound)
                        if truncate && can_write && ino.is_some_and(|i| !self.inodes.was_unlinked(i)) =>
                    {
                        WriteFile::new_empty(self.budget.clone())
                    }
                    Err(e) => return Err(e),
                };
                (Arc::new(file), self.sink_for(at, true).await?)
            }
        };
        // The handle is of the file held at the name once it holds it, which another open
        // may have put there since `file_at` above.
        let (ino, file) = match ino {
            Some(ino) => match self.inodes.open_file_of(ino, at.path(), file, sink) {
                Ok(Some(held)) => held,
                Ok(None) if self.inodes.open_goes_nowhere(ino) => return self.open_replaced(ino, truncate),
                // The name leads elsewhere for another reason (nothing this mount did to it
                // that the kernel knows of): look again, never write where no name leads.
                Ok(None) => {
                    tracing::debug!(
                        ino,
                        path = at.path(),
                        "an open for writing through an inode its name left: look again"
                    );
                    return Err(FsError::Replaced);
                }
                // A cached inode never changes size: the kernel looks the name up again and
                // finds the inode to write through (see `fs/inodes/caching.rs`).
                Err(Retired) => {
                    tracing::debug!(
                        ino,
                        path = at.path(),
                        "an open for writing of a retired inode: look again"
                    );
                    return Err(FsError::Replaced);
                }
            },
            None => self.inodes.open_file(at.path(), file, sink),
        };
        #[cfg(test)]
        super::hooks::reached(super::hooks::Point::Held);
        if can_write {
            self.reopened(ino, &file);
        }
        if truncate {
            if let Err(e) = file.state.lock().await.truncate() {
                self.inodes.close_file(ino, &file);
                return Err(e.into());
            }
        }
        Ok(self.files.insert(FileHandle::writer(ino, file, can_write)))
    }

    /// Open for writing an inode a rename replaced, reached through a name the kernel looked up
    /// before: as on any filesystem, that is the file that was replaced, which no name leads to
    /// any more. Truncated, it is written to and closed with no effect (the open is ordered
    /// before the rename); its old content is gone, so anything else is ESTALE. Never the
    /// file now at its path: that one's kernel inode would not see the change.
    pub(super) fn open_replaced(&self, ino: u64, truncate: bool) -> FsResult<u64> {
        if !truncate {
            return Err(FsError::Replaced);
        }
        self.check_writable()?;
        tracing::debug!(
            ino,
            "a truncating open of a replaced inode: written where no name leads"
        );
        let file = Arc::new(WriteFile::new_empty(self.budget.clone()));
        Ok(self.files.insert(FileHandle::writer(ino, file, true)))
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
        let _changing = self.changing();
        let handle = self.files.get(fh).ok_or(FsError::BadHandle)?;
        let writer = handle.committer().ok_or(FsError::BadHandle)?;
        writer.unflushed.store(true, Ordering::SeqCst);
        let mut state = self.load(&writer.file).await?;
        let end = offset.checked_add(data.len() as u64).ok_or(FsError::FileTooLarge)?;
        if end > self.config.max_file_size as u64 {
            return Err(FsError::FileTooLarge);
        }
        state.write_at(offset, data)?;
        Ok(u32::try_from(data.len()).unwrap_or(u32::MAX))
    }

    /// A FLUSH from the kernel (a close()): counted, then [`flush`](Self::flush).
    pub async fn flush_request(&self, fh: u64) -> FsResult<()> {
        self.ops.count(&self.ops.flushes);
        self.flush(fh).await
    }

    /// Commit a handle's file if it changed (close, fsync, a release left unflushed).
    pub async fn flush(&self, fh: u64) -> FsResult<()> {
        let _changing = self.changing();
        let handle = self.files.get(fh).ok_or(FsError::BadHandle)?;
        let Some(writer) = handle.committer() else {
            return Ok(());
        };
        // Cleared first: a write through this handle while the flush runs sets it again.
        writer.unflushed.store(false, Ordering::SeqCst);
        let flushed = self.flush_file(writer).await;
        if flushed.is_err() {
            writer.unflushed.store(true, Ordering::SeqCst);
        }
        flushed
    }

    /// The flush of a writable handle: its file's content committed (or deferred) where the
    /// file is now.
    async fn flush_file(&self, writer: &WriteHandle) -> FsResult<()> {
        self.journal_room().await?;
        // Wherever the file is once its content is ours: a rename moves the name without the
        // content's lock, so a place read before locking may already be the old name (whose
        // stored copy the rename removes). An unlinked file has nowhere to go.
        let mut state = writer.file.state.lock().await;
        let Some((path, sink)) = self.inodes.place_of(writer.ino, &writer.file) else {
            tracing::debug!(
                ino = writer.ino,
                dirty = state.dirty,
                "a flush of a file with no name: nothing committed"
            );
            return Ok(());
        };
        let Sink::Commit(target) = &sink else { return Ok(()) };
        // A file a write failed to is not committed, and every close of it says so.
        state.check_whole()?;
        if !state.dirty {
            return Ok(());
        }
        if self.defers(&sink) {
            // Durable in the journal (when there is one) before the close returns.
            self.journal_content(&path, &mut state, None).await?;
            drop(state);
            self.defer(&path);
            return Ok(());
        }
        let data = state.content()?;
        let committed = self.view.commit(target, data).await;
        // Committed or refused, this close says which; a refused commit (a full disk, a
        // conflict that outlasted its attempts) is not tried again by the release or at
        // unmount behind the writer's back. Writing the file again commits it.
        state.dirty = false;
        Ok(committed?)
    }

    /// Make a file's changes durable: in write-back mode everything pending is committed.
    pub async fn fsync(&self, fh: u64) -> FsResult<()> {
        self.flush(fh).await?;
        if self.writeback.is_some() {
            self.write_back(true).await?;
        }
        Ok(())
    }

    /// fsync of a directory (`sync DIR`, `zarrfs unmount` before unmounting): everything
    /// pending write-back, journaled or not, is committed.
    pub async fn fsyncdir(&self) -> FsResult<()> {
        self.write_back(true).await
    }

    /// Release a handle: commit what it left unflushed (errors can only be logged here), drop it.
    pub async fn release(&self, fh: u64) {
        let _changing = self.changing();
        let unflushed = self
            .files
            .get(fh)
            .and_then(|h| h.written().map(|w| w.unflushed.load(Ordering::SeqCst)));
        if unflushed != Some(false) {
            if let Err(e) = self.flush(fh).await {
                self.fail("release", 0, &e);
            }
        }
        if let Some(handle) = self.files.remove(fh) {
            match &*handle {
                FileHandle::Write(writer) => self.inodes.close_file(writer.ino, &writer.file),
                FileHandle::Read(r) if r.cached.load(Ordering::SeqCst) => self.inodes.cached_reader_closed(r.ino),
                FileHandle::Read(_) => {}
            }
        }
    }

    /// Change a file's size (truncate), through a handle or by path.
    pub async fn truncate(&self, ino: u64, size: u64, fh: Option<u64>) -> FsResult<Attr> {
        let _changing = self.changing();
        self.check_writable()?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= self.config.max_file_size)
            .ok_or(FsError::FileTooLarge)?;
        // Through a handle first: the file may have no name any more (see `unlinked.rs`).
        if let Some(handle) = fh.and_then(|fh| self.files.get(fh)).filter(|h| h.written().is_some()) {
            self.resize(&handle, size).await?;
            return self.attr_now(ino).await;
        }
        let path = self.path_of(ino)?;
        // By path: a cached inode never changes size; the kernel looks the name up again and
        // truncates the inode it then finds (see `fs/inodes/caching.rs`).
        if self.inodes.begin_write(ino, &path).is_err() {
            return Err(FsError::Replaced);
        }
        if let Some((file, Sink::Commit(_))) = self.inodes.file_at(&path) {
            // Open for writing elsewhere: change the shared content; its close commits it.
            self.load(&file).await?.resize(size as u64)?;
            return self.attr_now(ino).await;
        }
        let at = self.view.locate(&path).await?;
        let fh = self.open_write(None, &at, false, true).await?;
        let handle = self.files.get(fh).ok_or(FsError::BadHandle)?;
        self.resize(&handle, size).await?;
        let result = self.flush(fh).await;
        self.release(fh).await;
        result?;
        self.attr_now(ino).await
    }

    async fn resize(&self, handle: &FileHandle, size: usize) -> FsResult<()> {
        let writer = handle.written().ok_or(FsError::BadHandle)?;
        writer.unflushed.store(true, Ordering::SeqCst);
        self.load(&writer.file).await?.resize(size as u64)
    }

    /// Remove a file: what the mount holds for it goes, and what is stored.
    pub async fn unlink(&self, parent: u64, name: &str) -> FsResult<()> {
        let _changing = self.changing();
        self.check_writable()?;
        validate_name(name)?;
        let path = child_path(&self.path_of(parent)?, name);
        self.keep_readers(&path).await?;
        self.remove_file(&path).await?;
        self.inodes.unlink(&path);
        Ok(())
    }

    async fn remove_file(&self, path: &str) -> FsResult<()> {
        let path = path.to_string();
        let at = self.view.locate(&path).await?;
        // Writes and commits of the file held here wait until the stored version is gone too
        // (see `rename`): until then the name still shows it.
        // Waiting as long as it takes: a write-back commit of the file holds it until its
        // bytes are stored, and the removal must come after them, or they would bring it back.
        let held_file = self.inodes.file_at(&path).map(|(file, _)| file);
        let _held_back = match &held_file {
            Some(file) => Some(file.state.lock().await),
            None => None,
        };
        if _held_back.as_ref().is_some_and(|state| state.journaled.is_some()) {
            self.journal_removed(&path).await?;
        }
        if let Some((_, sink)) = self.inodes.file_at(&path) {
            // Staged, being written or pending: its bytes go nowhere now (open handles keep
            // writing into a file that no longer has a place). A stored version is removed
            // first, the file still held: until it is gone, readers of the name see the held
            // content, never the older stored one.
            if !matches!(sink, Sink::Staged) {
                if let Some(node) = self.view.node(&at).await? {
                    self.view.remove(&node).await?;
                }
            }
            if let Some(held) = self.inodes.take_file(&path) {
                if held.pending.is_some() {
                    self.undefer(&held.sink);
                }
            }
            return Ok(());
        }
        let node = self.node(&at).await?;
        Ok(self.view.remove(&node).await?)
    }
}
