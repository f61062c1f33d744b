//! The overlay: files whose content the mount holds (being written, staged, or pending
//! write-back) shown over the view. The files themselves are held by their inodes (see
//! [`super::inodes`]); this is how they show: lookups, listings and attributes consult them
//! before the view, so a file being written shows as written so far, while metadata documents
//! show as stored until their write is accepted.

use super::handles::Sink;
use super::{Attr, FileKind, Fs, FsResult};
use crate::view::Located;

impl Fs {
    /// Where bytes written at a placed path go: those of a `new` file (not stored yet), or of
    /// one stored elsewhere and renamed there (`View::write_target`).
    pub(super) async fn sink_for(&self, at: &Located, new: bool) -> FsResult<Sink> {
        Ok(match self.view.write_target(at, new).await? {
            Some(target) => Sink::Commit(target),
            None => Sink::Staged,
        })
    }

    /// Attributes of a file the mount holds at a placed path (being written, or staged).
    pub(super) async fn local_attr(&self, ino: u64, at: &Located) -> Option<Attr> {
        let (file, sink) = self.inodes.file_at(at.path())?;
        // Metadata being written is shown as stored until it is accepted (sizes included), as
        // written while nothing is stored.
        if matches!(&sink, Sink::Commit(t) if t.is_metadata()) && !matches!(self.view.node(at).await, Ok(None)) {
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
