//! The write path: files written through the view.
//!
//! Every file open for writing is buffered in memory (a [`WriteFile`], shared by all handles
//! of that path) and committed when it is closed (`flush`), synced or released: an inner
//! chunk is packed into its shard (group-committed, see `shard::commit`), a `zarr.json` is
//! handed to the view, which translates it back into what the store holds
//! (`view::metadata_write`), and any other file passes through to the store.
//!
//! Names inside a sharded array that are neither chunk keys nor `zarr.json` — the temporary
//! files clients write before renaming them into place (zarr-python's `1.<uuid>.partial`,
//! rsync's `.1.XXXXXX`) — are *staged*: kept in the overlay, visible to lookups, until they are
//! renamed onto a real key (then committed there) or unlinked. Renaming a chunk file onto
//! another chunk key moves the chunk. Other renames fail with EXDEV, never losing data.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use super::handles::{FileHandle, Sink, WriteFile};
use super::{child_path, validate_name, Attr, FileKind, Fs, FsError, FsResult};
use crate::store::key::dir_prefix;
use crate::view::{Node, Source, Target};

impl Fs {
    fn check_writable(&self) -> FsResult<()> {
        if self.config.writable {
            Ok(())
        } else {
            Err(FsError::ReadOnly)
        }
    }

    /// Where bytes written at `path` go.
    async fn sink_for(&self, path: &str) -> FsResult<Sink> {
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

    pub(super) fn overlay_get(&self, path: &str) -> Option<(Arc<WriteFile>, Sink)> {
        self.overlay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .map(|e| (e.file.clone(), e.sink.clone()))
    }

    /// Register one more handle of `path` on `file`.
    fn overlay_open(&self, path: &str, file: Arc<WriteFile>, sink: Sink) {
        let mut overlay = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
        let entry = overlay.entry(path.to_string()).or_insert_with(|| super::OverlayEntry {
            file,
            sink,
            handles: 0,
            pending: None,
        });
        entry.handles += 1;
        entry.file.set_place(Some((path.to_string(), entry.sink.clone())));
    }

    /// A handle of `file` at `path` is gone; committed files leave the overlay with their last
    /// handle.
    fn overlay_close(&self, path: &str, file: &Arc<WriteFile>) {
        let mut overlay = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = overlay.get_mut(path).filter(|e| Arc::ptr_eq(&e.file, file)) {
            entry.handles = entry.handles.saturating_sub(1);
            if entry.handles == 0 && !matches!(entry.sink, Sink::Staged) && entry.pending.is_none() {
                overlay.remove(path);
            }
        }
    }

    fn overlay_remove(&self, path: &str) -> Option<Arc<WriteFile>> {
        self.overlay_take(path).map(|e| e.file)
    }

    fn overlay_take(&self, path: &str) -> Option<super::OverlayEntry> {
        self.overlay.lock().unwrap_or_else(|e| e.into_inner()).remove(path)
    }

    /// Put an entry at `path`, the file's place following it.
    fn overlay_put(&self, path: &str, entry: super::OverlayEntry) {
        entry.file.set_place(Some((path.to_string(), entry.sink.clone())));
        self.overlay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_string(), entry);
    }

    /// Whether `path` is a directory only the overlay knows of: made by mkdir, or above a file
    /// being written, staged or pending.
    pub(super) fn unstored_dir(&self, path: &str) -> bool {
        let below = format!("{path}/");
        let overlay = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
        let made = self.made_dirs.lock().unwrap_or_else(|e| e.into_inner());
        made.contains(path) || made.iter().chain(overlay.keys()).any(|p| p.starts_with(&below))
    }

    /// Attributes of a file in the overlay (being written, or staged).
    pub(super) async fn overlay_attr(&self, ino: u64, path: &str) -> Option<Attr> {
        let (file, sink) = self.overlay_get(path)?;
        // Metadata being written is shown as stored until it is accepted (sizes included), as
        // written while nothing is stored.
        if matches!(&sink, Sink::Commit(t) if t.is_metadata()) && !matches!(self.view.lookup(path).await, Ok(None)) {
            return None;
        }
        let state = file.state.lock().await;
        let size = if state.loaded {
            state.data.len()
        } else {
            state.size_hint
        };
        Some(Attr {
            ino,
            kind: FileKind::File,
            size,
            mtime: state.mtime,
            perm: 0o644,
            nlink: 1,
            uid: self.config.uid,
            gid: self.config.gid,
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
        let path: Arc<str> = Arc::from(path.as_str());
        let fh = self.files.insert(FileHandle::writer(path.clone(), file, true));
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
        Ok(self.files.insert(FileHandle::writer(path, file, can_write)))
    }

    /// Load the current content of a file opened for writing, the first time it is needed.
    async fn load<'a>(&self, file: &'a WriteFile) -> FsResult<tokio::sync::MutexGuard<'a, super::handles::WriteState>> {
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
        let handle = self.files.get(fh).filter(|h| h.can_write).ok_or(FsError::BadHandle)?;
        let file = handle.writer.as_ref().ok_or(FsError::BadHandle)?;
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
        let (Some(file), true) = (&handle.writer, handle.can_write) else {
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
        let Some(file) = self.files.remove(fh).and_then(|h| h.writer.clone()) else {
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
        let handle = match fh.and_then(|fh| self.files.get(fh)).filter(|h| h.writer.is_some()) {
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
        let file = handle.writer.as_ref().ok_or(FsError::BadHandle)?;
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

    async fn remove_node(&self, path: &str, node: &Node) -> FsResult<()> {
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

    /// Move a file. What moves is decided by where it comes from and where it goes:
    /// - a staged file (a temporary name inside a sharded array) goes anywhere a file can be
    ///   written: onto a chunk key it is committed there (or, in write-back mode, left pending);
    /// - a chunk file moves onto another chunk key of the *same* array, or to a staged name of
    ///   it (its bytes are encoded for that array only);
    /// - a stored file moves by the store's rename, or onto a chunk key / `zarr.json`, where it
    ///   is committed like a write;
    /// - anything else (directories, chunks between arrays, metadata) is EXDEV.
    pub async fn rename(
        &self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
        no_replace: bool,
    ) -> FsResult<()> {
        self.check_writable()?;
        validate_name(name)?;
        validate_name(new_name)?;
        let from = child_path(&self.path_of(parent)?, name);
        let to = child_path(&self.path_of(new_parent)?, new_name);
        if from == to {
            return Ok(());
        }
        if no_replace && (self.overlay_get(&to).is_some() || self.view.lookup(&to).await?.is_some()) {
            return Err(FsError::Exists);
        }
        let sink = self.sink_for(&to).await?;
        if self.overlay_get(&from).is_none() && self.view.lookup(&from).await?.is_none() {
            return Err(FsError::NotFound);
        }
        // The file at `to`, if in the overlay, is replaced: like an unlink, its open handles
        // keep a file that no longer has a place.
        if let Some(replaced) = self.overlay_take(&to) {
            replaced.file.set_place(None);
            if replaced.pending.is_some() {
                self.undefer(&replaced.sink);
            }
        }
        match self.overlay_get(&from) {
            Some((file, Sink::Staged)) => self.move_staged(&from, &to, file, sink).await?,
            Some((_, from_sink)) => self.move_open(&from, &to, from_sink, sink).await?,
            None => self.move_node(&from, &to, sink).await?,
        }
        self.inodes.rename(&from, &to);
        Ok(())
    }

    /// Move a staged file onto `to`.
    async fn move_staged(&self, from: &str, to: &str, file: Arc<WriteFile>, sink: Sink) -> FsResult<()> {
        if matches!(sink, Sink::Staged) || self.defers(&sink) {
            let Some(mut entry) = self.overlay_take(from) else {
                return Err(FsError::NotFound);
            };
            // Moved before anything is awaited: a release racing with this rename must commit
            // to the new name, never bring the old one back.
            entry.file.set_place(Some((to.to_string(), sink.clone())));
            let deferred = self.defers(&sink);
            if deferred {
                file.state.lock().await.touch();
            }
            entry.sink = sink;
            self.overlay_put(to, entry);
            if deferred {
                self.defer(to);
            }
            return Ok(());
        }
        let Sink::Commit(target) = sink else {
            return Err(FsError::CrossDevice);
        };
        let data = self.load(&file).await?.data.to_bytes()?;
        self.commit(&target, data).await?;
        self.overlay_remove(from);
        Ok(())
    }

    /// Move a file that is being written, or pending write-back: its content goes to `to`
    /// (a chunk key of the same array, or a stored file onto a stored file), the old name's
    /// stored version is removed, and open handles follow it there.
    async fn move_open(&self, from: &str, to: &str, from_sink: Sink, sink: Sink) -> FsResult<()> {
        let allowed = match (&from_sink, &sink) {
            (Sink::Commit(Target::Chunk { array: a, .. }), Sink::Commit(Target::Chunk { array: b, .. })) => {
                Arc::ptr_eq(a, b)
            }
            (
                Sink::Commit(Target::Stored { .. }),
                Sink::Commit(Target::Stored { .. } | Target::NodeMetadata { .. }),
            ) => true,
            _ => false,
        };
        if !allowed {
            return Err(FsError::CrossDevice);
        }
        let Some(mut entry) = self.overlay_take(from) else {
            return Err(FsError::NotFound);
        };
        // Moved before anything is awaited: a release racing with this rename must commit
        // to the new name, never bring the old one back.
        entry.file.set_place(Some((to.to_string(), sink.clone())));
        // The content must be whole before the old name's stored version goes.
        let loaded = self.load(&entry.file).await.map(|mut state| state.touch());
        if let Err(e) = loaded {
            entry.file.set_place(Some((from.to_string(), from_sink.clone())));
            self.overlay
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(from.to_string(), entry);
            return Err(e);
        }
        if entry.pending.take().is_some() {
            self.undefer(&from_sink);
        }
        if let Some(node) = self.view.lookup(from).await? {
            self.remove_node(from, &node).await?;
        }
        let (file, handles) = (entry.file.clone(), entry.handles);
        entry.sink = sink.clone();
        self.overlay_put(to, entry);
        if self.defers(&sink) {
            self.defer(to);
            return Ok(());
        }
        // Committed now, not when the open handles close: the kernel releases files
        // asynchronously, and a release that never comes (unmount) must not lose the content.
        let Sink::Commit(target) = &sink else { return Ok(()) };
        let mut state = file.state.lock().await;
        let data = state.data.to_bytes()?;
        self.commit(target, data).await?;
        state.dirty = false;
        drop(state);
        if handles == 0 {
            self.overlay_remove(to);
        }
        Ok(())
    }

    /// Move a stored file or a chunk file onto `to`.
    async fn move_node(&self, from: &str, to: &str, sink: Sink) -> FsResult<()> {
        let node = self.node(from).await?;
        match (&node.source, &sink) {
            (Source::Chunk { array, .. }, Sink::Commit(target @ Target::Chunk { array: dest, .. }))
                if Arc::ptr_eq(array, dest) =>
            {
                let data = self.view.read(&node, 0, u64::MAX).await?;
                self.commit(target, data).await?;
                self.remove_node(from, &node).await
            }
            (Source::Chunk { array, .. }, Sink::Staged)
                if self
                    .view
                    .sharded_array_of(to)
                    .await?
                    .is_some_and(|dest| Arc::ptr_eq(array, &dest)) =>
            {
                let data = self.view.read(&node, 0, u64::MAX).await?;
                let file = Arc::new(WriteFile::new_empty(self.budget.clone()));
                file.state.lock().await.data.replace(&data)?;
                let entry = super::OverlayEntry {
                    file,
                    sink: Sink::Staged,
                    handles: 0,
                    pending: None,
                };
                self.overlay
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(to.to_string(), entry);
                self.remove_node(from, &node).await
            }
            (Source::Stored { key }, Sink::Commit(Target::Stored { key: dest })) => {
                Ok(self.view.store().rename(key, dest).await?)
            }
            (
                Source::Stored { key },
                Sink::Commit(target @ (Target::Chunk { .. } | Target::Metadata(_) | Target::NodeMetadata { .. })),
            ) => {
                let data = self.view.read(&node, 0, u64::MAX).await?;
                self.commit(target, data).await?;
                Ok(self.view.store().erase(key).await?)
            }
            _ => Err(FsError::CrossDevice),
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
        let mut attr = self.attr(
            ino,
            &Node {
                size: 0,
                mtime_ns: None,
                source: Source::Dir,
            },
        );
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
