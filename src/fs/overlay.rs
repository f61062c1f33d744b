//! The overlay: files being written, staged or pending write-back, by path, each with its sink
//! (where its bytes go) and its open handles. Lookups, listings and attributes consult it
//! before the view, so a file being written shows as written so far; metadata documents show
//! as stored until their write is accepted.

use std::sync::Arc;

use super::handles::{Sink, WriteFile};
use super::{Attr, FileKind, Fs};

impl Fs {
    pub(super) fn overlay_get(&self, path: &str) -> Option<(Arc<WriteFile>, Sink)> {
        self.overlay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .map(|e| (e.file.clone(), e.sink.clone()))
    }

    /// Register one more handle of `path` on `file`.
    pub(super) fn overlay_open(&self, path: &str, file: Arc<WriteFile>, sink: Sink) {
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
    pub(super) fn overlay_close(&self, path: &str, file: &Arc<WriteFile>) {
        let mut overlay = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = overlay.get_mut(path).filter(|e| Arc::ptr_eq(&e.file, file)) {
            entry.handles = entry.handles.saturating_sub(1);
            if entry.handles == 0 && !matches!(entry.sink, Sink::Staged) && entry.pending.is_none() {
                overlay.remove(path);
            }
        }
    }

    pub(super) fn overlay_remove(&self, path: &str) -> Option<Arc<WriteFile>> {
        self.overlay_take(path).map(|e| e.file)
    }

    pub(super) fn overlay_take(&self, path: &str) -> Option<super::OverlayEntry> {
        self.overlay.lock().unwrap_or_else(|e| e.into_inner()).remove(path)
    }

    /// Put an entry at `path`, the file's place following it.
    pub(super) fn overlay_put(&self, path: &str, entry: super::OverlayEntry) {
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
}
