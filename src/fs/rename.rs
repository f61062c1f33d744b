//! Renames. Names inside a sharded array that are neither chunk keys nor `zarr.json` — the
//! temporary files clients write before renaming them into place (zarr-python's
//! `1.<uuid>.partial`, rsync's `.1.XXXXXX`) — are *staged*: kept in the overlay, visible to
//! lookups, until they are renamed onto a real key (then committed there) or unlinked.
//! Renaming a chunk file onto another chunk key moves the chunk; a stored file renamed onto a
//! `zarr.json` is committed like a write of it. Other renames fail with EXDEV, never losing
//! data.

use std::sync::Arc;

use super::handles::{Sink, WriteFile};
use super::{child_path, validate_name, Fs, FsError, FsResult};
use crate::view::{Source, Target};

impl Fs {
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
}
