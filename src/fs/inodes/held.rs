//! What the mount holds for a name beyond the store, kept by its inode (see the table's notes):
//! a file whose content is in memory — being written, staged under a temporary name, or closed
//! and pending write-back — with its destination and open handles; or a chunk directory made
//! by `mkdir` that holds nothing stored yet. Also the questions asked of them: which file is
//! at a path, where a handle's file is now, what lies below a directory.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

use super::caching::Retired;
use super::tree::RETIRED;
use super::{InodeTable, Tables};

impl Tables {
    /// Hold `local` for `ino` (or nothing); returns what was held. An inode that holds nothing
    /// any more is dropped if nothing else holds it.
    pub(super) fn set_local(&mut self, ino: u64, local: Option<Local>) -> Option<Local> {
        if !self.inodes.contains_key(&ino) {
            return None;
        }
        let held = local.is_some();
        let old = match local {
            Some(local) => self.held.insert(ino, local),
            None => self.held.remove(&ino),
        };
        // A name the inode no longer has (replaced by a rename) is not its to index.
        if let Some(path) = self.attached(ino).then(|| self.path_of(ino)).flatten() {
            if held {
                self.held_paths.insert(Arc::from(path));
            } else {
                self.held_paths.remove(path.as_str());
            }
        }
        if !held {
            self.drop_if_unused(ino);
        }
        old
    }

    /// One more handle of the file held at `path` (this `file` going to `sink` if none is):
    /// its inode and the file now held there, which the handle must use. That may be another
    /// than `file`: between a caller's look at the table and this, another open may have put
    /// its own file there (a handle of a file not held would write where nobody reads, and its
    /// close would commit nothing).
    fn hold(&mut self, path: &str, file: Arc<WriteFile>, sink: Sink) -> (u64, Arc<WriteFile>) {
        let ino = match self.written(path).is_some() {
            true => self.at(path),
            false => self.write_inode(path),
        };
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.relink();
        }
        if self.written(path).is_none() {
            self.set_local(ino, Some(Local::File(Box::new(Written::new(file.clone(), sink)))));
        }
        match self.written(path) {
            Some(w) => {
                w.handles += 1;
                (ino, w.file.clone())
            }
            None => (ino, file),
        }
    }
}
use crate::fs::handles::{Sink, WriteFile};

/// A held file's content and where it goes.
pub type HeldFile = (Arc<WriteFile>, Sink);

/// What the mount holds for a name beyond the store.
#[derive(Debug)]
pub enum Local {
    /// Boxed: most inodes hold nothing, and a small table entry keeps lookups in cache.
    File(Box<Written>),
    /// A chunk directory made by mkdir that holds no stored chunk yet (they are implicit).
    MadeDir,
}

/// A file whose content the mount holds: where it goes, how many handles have it open, and
/// since when it has been pending (closed with changes, write-back mode).
#[derive(Debug)]
pub struct Written {
    pub file: Arc<WriteFile>,
    pub sink: Sink,
    pub handles: usize,
    pub pending: Option<Instant>,
}

impl Written {
    pub fn new(file: Arc<WriteFile>, sink: Sink) -> Self {
        Written {
            file,
            sink,
            handles: 0,
            pending: None,
        }
    }

    /// Whether it must stay when no handle has it open: staged, or pending write-back.
    fn kept(&self) -> bool {
        matches!(self.sink, Sink::Staged) || self.pending.is_some()
    }
}

impl Tables {
    pub(super) fn written(&mut self, path: &str) -> Option<&mut Written> {
        let ino = self.find(path)?;
        match self.held.get_mut(&ino)? {
            Local::File(w) => Some(w),
            Local::MadeDir => None,
        }
    }
}

impl InodeTable {
    /// The file the mount holds at `path`, and where it goes.
    pub fn file_at(&self, path: &str) -> Option<HeldFile> {
        self.lock().written(path).map(|w| (w.file.clone(), w.sink.clone()))
    }

    /// The path and destination of the file a handle of inode `ino` has open: `None` once the
    /// file has been unlinked or replaced (its content then goes nowhere).
    pub fn place_of(&self, ino: u64, file: &Arc<WriteFile>) -> Option<(String, Sink)> {
        let t = self.lock();
        t.inodes.get(&ino).filter(|i| !i.unlinked())?;
        match t.held.get(&ino)? {
            Local::File(w) if Arc::ptr_eq(&w.file, file) => Some((t.path_of(ino)?, w.sink.clone())),
            _ => None,
        }
    }

    /// One more handle of `path` on its file (this `file` going to `sink` if it has none yet);
    /// returns the inode and the file the handle is of (see `hold`).
    pub fn open_file(&self, path: &str, file: Arc<WriteFile>, sink: Sink) -> (u64, Arc<WriteFile>) {
        self.lock().hold(path, file, sink)
    }

    /// [`open_file`](Self::open_file) for the kernel's inode `ino`: `None`, and nothing held,
    /// if `path` is another inode's now (a rename replaced `ino` while the open was under way);
    /// `Retired` if `ino` must not change size (see `caching.rs`).
    pub fn open_file_of(
        &self,
        ino: u64,
        path: &str,
        file: Arc<WriteFile>,
        sink: Sink,
    ) -> Result<Option<(u64, Arc<WriteFile>)>, Retired> {
        let mut t = self.lock();
        if t.inodes.get(&ino).is_some_and(|i| i.has(RETIRED)) {
            if t.written(path).is_none() {
                t.write_inode(path);
            }
            return Err(Retired);
        }
        if t.find(path).is_some_and(|owner| owner != ino) {
            return Ok(None);
        }
        if t.written(path).is_none() {
            t.begin_write_at(ino, path)?;
        }
        Ok(Some(t.hold(path, file, sink)))
    }

    /// A handle of `file` at inode `ino` is gone; a committed file goes with its last handle.
    pub fn close_file(&self, ino: u64, file: &Arc<WriteFile>) {
        let mut t = self.lock();
        let Some(Local::File(w)) = t.held.get_mut(&ino) else {
            return;
        };
        if !Arc::ptr_eq(&w.file, file) {
            return;
        }
        w.handles = w.handles.saturating_sub(1);
        if w.handles == 0 && !w.kept() {
            t.set_local(ino, None);
        }
    }

    /// Take the file held at `path` away from it (unlinked, replaced, or committed).
    pub fn take_file(&self, path: &str) -> Option<Written> {
        let mut t = self.lock();
        let ino = t.find(path)?;
        t.written(path)?;
        match t.set_local(ino, None) {
            Some(Local::File(w)) => Some(*w),
            _ => None,
        }
    }

    /// Hold `written` at `path` (replacing whatever file was there).
    pub fn put_file(&self, path: &str, written: Written) {
        let mut t = self.lock();
        let ino = t.at(path);
        t.set_local(ino, Some(Local::File(Box::new(written))));
    }

    /// Hold `written` at `path` unless a file is held there already; whether it was put.
    pub fn put_new_file(&self, path: &str, written: Written) -> bool {
        let mut t = self.lock();
        if t.written(path).is_some() {
            return false;
        }
        let ino = t.at(path);
        t.set_local(ino, Some(Local::File(Box::new(written))));
        true
    }

    /// Move the file held at `from` to `to`, going to `sink` from now on, and pending
    /// write-back there or not as `pending` says (an earlier mark kept): one step, so no flush
    /// sees the new name with the old sink, no reader of `to` finds it between the file it
    /// replaces and this one, and no release of its last handle finds it neither open nor
    /// pending in between (it would let the file go, its bytes committed nowhere). Returns what
    /// the mount held at `to` before, and whether the file was pending.
    pub fn move_file(&self, from: &str, to: &str, sink: Sink, pending: bool) -> (Option<Local>, bool) {
        let mut t = self.lock();
        let replaced = t.rename(from, to);
        let mut was_pending = false;
        if let Some(w) = t.written(to) {
            w.sink = sink;
            was_pending = w.pending.is_some();
            match pending {
                true => w.pending = w.pending.or_else(|| Some(Instant::now())),
                false => w.pending = None,
            }
        }
        (replaced, was_pending)
    }

    /// Take the pending mark of `file`, held at inode `ino` wherever its name is now (a rename
    /// moves it with its inode); the sink it was pending for.
    pub fn take_pending(&self, ino: u64, file: &Arc<WriteFile>) -> Option<Sink> {
        match self.lock().held.get_mut(&ino)? {
            Local::File(w) if Arc::ptr_eq(&w.file, file) => w.pending.take().map(|_| w.sink.clone()),
            _ => None,
        }
    }

    /// Change the file held at `path` in place; `None` if there is none.
    pub fn with_file<T>(&self, path: &str, f: impl FnOnce(&mut Written) -> T) -> Option<T> {
        self.lock().written(path).map(f)
    }

    /// Drop the file held at `path` if it is still `file`, no handle has it open, it is not
    /// pending again and it is not staged (a pending file that was just committed). Returns
    /// whether it was dropped.
    pub fn drop_committed(&self, path: &str, file: &Arc<WriteFile>) -> bool {
        let mut t = self.lock();
        let done = t.written(path).is_some_and(|w| {
            w.handles == 0 && w.pending.is_none() && Arc::ptr_eq(&w.file, file) && !matches!(w.sink, Sink::Staged)
        });
        if let (true, Some(ino)) = (done, t.find(path)) {
            t.set_local(ino, None);
        }
        done
    }

    /// Every file the mount holds, with its path, sink and pending time.
    pub fn files(&self) -> Vec<(String, Arc<WriteFile>, Sink, Option<Instant>)> {
        let t = self.lock();
        t.held
            .iter()
            .filter_map(|(ino, local)| match local {
                Local::File(w) => Some((t.path_of(*ino)?, w.file.clone(), w.sink.clone(), w.pending)),
                Local::MadeDir => None,
            })
            .collect()
    }

    /// Record a chunk directory made by mkdir (nothing stored for it yet).
    pub fn make_dir(&self, path: &str) {
        let mut t = self.lock();
        let ino = t.at(path);
        if !t.held.contains_key(&ino) {
            t.set_local(ino, Some(Local::MadeDir));
        }
    }

    /// Forget a directory made by mkdir (it was removed).
    pub fn unmake_dir(&self, path: &str) {
        let mut t = self.lock();
        let ino = t.find(path);
        if let Some(ino) = ino.filter(|ino| matches!(t.held.get(ino), Some(Local::MadeDir))) {
            t.set_local(ino, None);
        }
    }

    /// Whether `path` is a directory only the mount knows of: made by mkdir, or above
    /// something the mount holds.
    pub fn is_local_dir(&self, path: &str) -> bool {
        let t = self.lock();
        let made = t
            .find(path)
            .is_some_and(|ino| matches!(t.held.get(&ino), Some(Local::MadeDir)));
        made || !Self::below(&t, path).is_empty()
    }

    /// Paths held locally below directory `dir` (`""`: the root), in order.
    fn below(t: &Tables, dir: &str) -> Vec<Arc<str>> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        t.held_paths
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|p| p.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// What the mount holds below directory `dir`: for each path, its file and sink (`None`
    /// for a directory made by mkdir).
    pub fn local_below(&self, dir: &str) -> Vec<(String, Option<HeldFile>)> {
        let t = self.lock();
        Self::below(&t, dir)
            .into_iter()
            .filter_map(|p| {
                let file = match t.held.get(&t.find(&p)?)? {
                    Local::File(w) => Some((w.file.clone(), w.sink.clone())),
                    Local::MadeDir => None,
                };
                Some((p.to_string(), file))
            })
            .collect()
    }
}
