//! Renames. Names inside a sharded array that are neither chunk keys nor `zarr.json` — the
//! temporary files clients write before renaming them into place (zarr-python's
//! `1.<uuid>.partial`, rsync's `.1.XXXXXX`) — are *staged*: held by the mount, visible to
//! lookups, until they are renamed onto a real key (then committed there) or unlinked.
//! Renaming a chunk file onto another chunk key moves the chunk; a stored file renamed onto a
//! `zarr.json` is committed like a write of it. Other renames fail with EXDEV, never losing
//! data.
//!
//! The inode of the source moves to the new name with whatever the mount holds for it, so open
//! handles follow; it moves before anything is awaited whenever a handle may commit meanwhile
//! (a release racing with the rename must commit to the new name, never bring the old back).

use std::sync::Arc;
use std::time::Duration;

use super::handles::{Sink, WriteFile};
use super::inodes::{Local, Written};
use super::{child_path, validate_name, Fs, FsError, FsResult};
use crate::view::Located;

/// How long a rename waits for a write or commit of the file it replaces to finish.
pub(super) const REPLACED_WAIT: Duration = Duration::from_secs(5);

impl Fs {
    /// Move a file. What moves is decided by where it comes from and where it goes:
    /// - a staged file goes anywhere a file can be written: onto a chunk key it is committed
    ///   there (or, in write-back mode, left pending);
    /// - a file being written (or pending) moves with its content where the view allows its
    ///   bytes to go as they are, and the old name's stored version is removed;
    /// - a file the mount does not hold is moved by the view (chunks within their array,
    ///   stored files), or staged when it is a chunk going to a temporary name of its array;
    /// - anything else (directories, chunks between arrays, metadata) is EXDEV.
    pub async fn rename(
        &self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
        no_replace: bool,
    ) -> FsResult<()> {
        let _changing = self.changing();
        self.check_writable()?;
        validate_name(name)?;
        validate_name(new_name)?;
        let from = child_path(&self.path_of(parent)?, name);
        let to = child_path(&self.path_of(new_parent)?, new_name);
        if from == to {
            return Ok(());
        }
        let (from_at, to_at) = (self.view.locate(&from).await?, self.view.locate(&to).await?);
        if no_replace && (self.inodes.file_at(&to).is_some() || self.view.node(&to_at).await?.is_some()) {
            return Err(FsError::Exists);
        }
        let held = self.inodes.file_at(&from);
        // A staged file is new to the store; one stored (or being written to its key) is not.
        let sink = self.sink_for(&to_at, matches!(&held, Some((_, Sink::Staged)))).await?;
        if held.is_none() && self.view.node(&from_at).await?.is_none() {
            return Err(FsError::NotFound);
        }
        // A held file the view cannot move there fails before anything changes.
        if let Some((_, Sink::Commit(a))) = &held {
            if !matches!(&sink, Sink::Commit(b) if a.may_move_to(b)) {
                return Err(FsError::CrossDevice);
            }
        }
        // A staged file going where write-back defers it is made durable in the journal (when
        // there is one) before anything changes: the file it replaces keeps its name until the
        // move, so no reader sees the name between the two.
        let journaled_early = match &held {
            Some((file, Sink::Staged)) if self.defers(&sink) => {
                let mut state = self.load(file).await?;
                state.touch();
                self.journal_content(&to, &mut state, None).await?;
                true
            }
            _ => false,
        };
        // The file held at `to`, if any, is replaced: like an unlink, its open handles keep a
        // file that no longer has a place. Its writes and commits wait until the rename is
        // done (then find it gone), so none lands while the name still shows what the store
        // had: the replacement is atomic to them. The wait is bounded, so two renames
        // crossing each other cannot deadlock. It keeps its name until the move replaces it
        // in one step (`InodeTable::move_file`): readers of `to` see it until then, never the
        // stored version it hides.
        // Readers of the file replaced keep reading it (see `unlinked.rs`).
        self.keep_readers(&to).await?;
        let replaced = self.inodes.file_at(&to).map(|(file, _)| file);
        let _held_back = match &replaced {
            Some(file) => tokio::time::timeout(REPLACED_WAIT, file.state.lock()).await.ok(),
            None => None,
        };
        if !journaled_early && _held_back.as_ref().is_some_and(|state| state.journaled.is_some()) {
            self.journal_removed(&to).await?;
        }
        let replaced_ino = self.inodes.peek(&to);
        let moved = match held {
            Some((file, Sink::Staged)) => self.move_staged(&from, &to, file, sink).await,
            Some((file, from_sink)) => self.move_open(&from_at, &to, file, from_sink, sink).await,
            None => self.move_node(&from_at, &to_at, sink).await,
        };
        // A move that failed after the mount moved the file (`move_open` storing it) leaves
        // the kernel's entry for `to` at the inode it replaced: a writer opening it is sent to
        // look again, and writes the file now at `to`.
        match (&moved, replaced_ino) {
            (Err(_), Some(ino)) => self.inodes.kernel_still_names(ino),
            (Ok(()), _) => self.made(new_parent, new_name),
            _ => {}
        }
        moved
    }

    /// Move a staged file onto `to`.
    async fn move_staged(&self, from: &str, to: &str, file: Arc<WriteFile>, sink: Sink) -> FsResult<()> {
        let deferred = self.defers(&sink);
        if matches!(sink, Sink::Staged) || deferred {
            // (A deferred one is in the journal already, see `rename`.) Pending from the move
            // on: the release of the handle that wrote it may come at any moment.
            let (replaced, _) = self.inodes.move_file(from, to, sink.clone(), deferred);
            self.let_go(replaced);
            if deferred {
                self.count_pending(&sink);
            }
            #[cfg(test)]
            super::hooks::reached(super::hooks::Point::Moved);
            return Ok(());
        }
        let Sink::Commit(target) = sink else {
            return Err(FsError::CrossDevice);
        };
        let data = self.load(&file).await?.content()?;
        self.view.commit(&target, data).await?;
        self.inodes.take_file(from);
        let replaced = self.inodes.rename(from, to);
        self.let_go(replaced);
        Ok(())
    }

    /// A moved file's pending mark went from one batch to another (either may be none).
    fn recount(&self, from: Option<&Sink>, to: Option<&Sink>) {
        if let Some(sink) = from {
            self.undefer(sink);
        }
        if let Some(sink) = to {
            self.count_pending(sink);
        }
    }

    /// What a rename replaced at its destination is let go: a file pending write-back there
    /// no longer counts toward its batch.
    fn let_go(&self, replaced: Option<Local>) {
        if let Some(Local::File(w)) = replaced {
            if w.pending.is_some() {
                self.undefer(&w.sink);
            }
        }
    }

    /// Move a file that is being written, or pending write-back: its content goes to `to`,
    /// the old name's stored version is removed, and open handles follow it there.
    async fn move_open(
        &self,
        from_at: &Located,
        to: &str,
        file: Arc<WriteFile>,
        from_sink: Sink,
        sink: Sink,
    ) -> FsResult<()> {
        // (`rename` checked that the view can move it.)
        // Incomplete content never replaces anything (and the old name keeps its stored copy).
        file.state.lock().await.check_whole()?;
        let from = from_at.path();
        // Where write-back defers it, it is pending from the move on, so that no release of
        // its last handle meanwhile lets it go: it is counted in its new batch at once.
        let deferred = self.defers(&sink);
        let (replaced, was_pending) = self.inodes.move_file(from, to, sink.clone(), deferred);
        self.let_go(replaced);
        self.recount(was_pending.then_some(&from_sink), deferred.then_some(&sink));
        // The content must be whole before the old name's stored version goes.
        let loaded = self.load(&file).await.map(|mut state| state.touch());
        if let Err(e) = loaded {
            self.inodes.move_file(to, from, from_sink.clone(), was_pending);
            self.recount(deferred.then_some(&sink), was_pending.then_some(&from_sink));
            return Err(e);
        }
        if let Some(node) = self.view.node(from_at).await? {
            self.view.remove(&node).await?;
        }
        #[cfg(test)]
        super::hooks::reached(super::hooks::Point::Moved);
        if deferred {
            let mut state = file.state.lock().await;
            // (Unless write-back committed it meanwhile.)
            if state.dirty {
                self.journal_content(to, &mut state, Some(from)).await?;
            }
            return Ok(());
        }
        if file.state.lock().await.journaled.is_some() {
            self.journal_removed(from).await?;
        }
        // Committed now, not when the open handles close: the kernel releases files
        // asynchronously, and a release that never comes (unmount) must not lose the content.
        let Sink::Commit(target) = &sink else { return Ok(()) };
        let mut state = file.state.lock().await;
        let data = state.content()?;
        self.view.commit(target, data).await?;
        state.dirty = false;
        drop(state);
        self.inodes.drop_committed(to, &file);
        Ok(())
    }

    /// Move a file the mount does not hold onto `to`.
    async fn move_node(&self, from_at: &Located, to_at: &Located, sink: Sink) -> FsResult<()> {
        let node = self.node(from_at).await?;
        match sink {
            Sink::Commit(target) => self.view.move_node(&node, &target).await?,
            // A chunk going to a temporary name of its own array: held there until renamed
            // back onto a chunk key.
            Sink::Staged if self.view.is_chunk_of_array_at(&node, to_at) => {
                let data = self.view.read(&node, 0, u64::MAX).await?;
                let file = Arc::new(WriteFile::new_empty(self.budget.clone()));
                file.state.lock().await.data.replace(&data)?;
                self.view.remove(&node).await?;
                let replaced = self.inodes.rename(from_at.path(), to_at.path());
                self.let_go(replaced);
                self.inodes.put_file(to_at.path(), Written::new(file, Sink::Staged));
                return Ok(());
            }
            Sink::Staged => return Err(FsError::CrossDevice),
        }
        let replaced = self.inodes.rename(from_at.path(), to_at.path());
        self.let_go(replaced);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use serde_json::json;

    use crate::fs::hooks::{self, Point};
    use crate::fs::inodes::ROOT_INO;
    use crate::fs::{Fs, FsConfig};
    use crate::store::memory::MemoryStore;
    use crate::store::Store;
    use crate::view::{View, ViewOptions};

    /// When the rename has moved the file, `fh` is released (the kernel sends a release
    /// when it likes, after the close that flushed it).
    fn release_when_moved(fs: &Arc<Fs>, fh: u64) {
        let fs = fs.clone();
        hooks::at(Point::Moved, move || futures::executor::block_on(fs.release(fh)));
    }

    /// Array `a` of 8 bytes, one shard of two inner chunks of 4 (`a/c/0`, `a/c/1`), none
    /// stored; a write-back mount of it (nothing is committed until a pass).
    async fn write_back_mount() -> (Arc<Fs>, Arc<MemoryStore>, u64) {
        let doc = json!({
            "zarr_format": 3, "node_type": "array", "shape": [8], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [4], "codecs": [{"name": "bytes"}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]
        });
        let store = Arc::new(MemoryStore::new());
        store.set("a/zarr.json", Bytes::from(doc.to_string())).await.unwrap();
        let mut config = FsConfig::read_only(0, 0, Duration::from_secs(1));
        config.writable = true;
        config.write_back_delay = Some(Duration::from_secs(3600));
        let fs = Arc::new(Fs::new(View::new(store.clone(), &ViewOptions::default()), config));
        let array = fs.lookup(ROOT_INO, "a").await.unwrap().ino;
        let chunks = fs.mkdir(array, "c").await.unwrap().ino;
        (fs, store, chunks)
    }

    /// The bytes at `name` of `dir`, read through the mount.
    async fn read(fs: &Fs, dir: u64, name: &str) -> Vec<u8> {
        let ino = fs.lookup(dir, name).await.expect("the file is there").ino;
        let fh = fs.open(ino, false, false).await.unwrap();
        let data = fs.read(fh, 0, 64).await.unwrap().to_vec();
        fs.release(fh).await;
        data
    }

    /// What a fresh mount of the store reads at `a/c/<name>`, `None` if nothing.
    async fn stored(store: &Arc<MemoryStore>, name: &str) -> Option<Vec<u8>> {
        let mut config = FsConfig::read_only(0, 0, Duration::from_secs(1));
        config.writable = true;
        let fs = Fs::new(View::new(store.clone(), &ViewOptions::default()), config);
        let array = fs.lookup(ROOT_INO, "a").await.unwrap().ino;
        let chunks = fs.lookup(array, "c").await.ok()?.ino;
        fs.lookup(chunks, name).await.ok()?;
        Some(read(&fs, chunks, name).await)
    }

    /// `data` written to a new file `name` of `dir` and closed (flushed); its handle, not
    /// released yet (the kernel releases it when it likes).
    async fn written(fs: &Fs, dir: u64, name: &str, data: &[u8]) -> u64 {
        let (_, fh) = fs.create(dir, name, false).await.unwrap();
        fs.write(fh, 0, data).await.unwrap();
        fs.flush(fh).await.unwrap();
        fh
    }

    /// A temporary file written, closed and renamed onto a chunk key, whose release the kernel
    /// sends while the rename is under way: the renamed file is pending from the move on, so
    /// the release keeps it. (The mark came a step after the move: the release let the file
    /// go, and the name showed the stored version, or none, with nothing ever committed; the
    /// fault workload test found it.)
    #[tokio::test]
    async fn a_renamed_temporary_file_released_during_the_rename_is_kept_and_committed() {
        let (fs, store, chunks) = write_back_mount().await;
        let fh = written(&fs, chunks, "0.tmp.partial", b"new!").await;
        release_when_moved(&fs, fh);
        fs.rename(chunks, "0.tmp.partial", chunks, "0", false).await.unwrap();
        assert!(!hooks::waiting(Point::Moved), "the release ran");
        assert_eq!(read(&fs, chunks, "0").await, b"new!");
        fs.write_back(true).await.unwrap();
        assert_eq!(stored(&store, "0").await.as_deref(), Some(&b"new!"[..]));
    }

    /// A chunk file open for writing, closed with changes (pending) and renamed onto another
    /// chunk key, its handle released while the rename is under way: the file at the new name
    /// stays pending, and is committed there.
    #[tokio::test]
    async fn a_moved_pending_chunk_released_during_the_rename_is_kept_and_committed() {
        let (fs, store, chunks) = write_back_mount().await;
        let fh = written(&fs, chunks, "0", b"mine").await;
        release_when_moved(&fs, fh);
        fs.rename(chunks, "0", chunks, "1", false).await.unwrap();
        assert!(!hooks::waiting(Point::Moved), "the release ran");
        assert_eq!(read(&fs, chunks, "1").await, b"mine");
        assert!(fs.lookup(chunks, "0").await.is_err(), "the old name is gone");
        fs.write_back(true).await.unwrap();
        assert_eq!(stored(&store, "1").await.as_deref(), Some(&b"mine"[..]));
    }

    /// An open for writing of a pending chunk file, which nothing orders against renames,
    /// while a temporary file is renamed onto the name: the open holds the file it found (now
    /// replaced, its writes go nowhere), and the file renamed there stays pending and is
    /// committed. (The open took the pending mark of whatever file its path held by then:
    /// the renamed one was never committed, nor by an fsync.)
    #[tokio::test]
    async fn an_open_racing_a_rename_onto_its_name_leaves_the_renamed_file_pending() {
        let (fs, store, chunks) = write_back_mount().await;
        fs.release(written(&fs, chunks, "0", b"old!").await).await;
        fs.release(written(&fs, chunks, "0.tmp.partial", b"new!").await).await;
        let renamer = fs.clone();
        hooks::at(Point::Held, move || {
            futures::executor::block_on(renamer.rename(chunks, "0.tmp.partial", chunks, "0", false)).unwrap()
        });
        let ino = fs.lookup(chunks, "0").await.unwrap().ino;
        let opened = fs.open(ino, true, true).await.unwrap();
        assert!(!hooks::waiting(Point::Held), "the rename ran");
        assert_eq!(read(&fs, chunks, "0").await, b"new!");
        fs.write_back(true).await.unwrap();
        let committed = stored(&store, "0").await;
        assert_eq!(
            committed.as_deref(),
            Some(&b"new!"[..]),
            "the renamed file was committed"
        );
        fs.release(opened).await;
    }

    /// An open for writing (O_TRUNC) of a pending chunk file that a rename moves to another
    /// key while the open is under way: the open still takes the file's pending mark, wherever
    /// its name is now, so write-back leaves the emptied file alone until it is written and
    /// closed. (Taken by path, the mark stayed: a pass stored the empty file, a chunk no
    /// reader can decode.)
    #[tokio::test]
    async fn an_open_takes_the_mark_of_its_file_renamed_away_meanwhile() {
        let (fs, store, chunks) = write_back_mount().await;
        fs.release(written(&fs, chunks, "0", b"old!").await).await;
        let renamer = fs.clone();
        hooks::at(Point::Held, move || {
            futures::executor::block_on(renamer.rename(chunks, "0", chunks, "1", false)).unwrap()
        });
        let ino = fs.lookup(chunks, "0").await.unwrap().ino;
        let opened = fs.open(ino, true, true).await.unwrap();
        assert!(!hooks::waiting(Point::Held), "the rename ran");
        fs.write_back(true).await.unwrap();
        assert_eq!(stored(&store, "1").await, None, "the emptied file was committed");
        fs.write(opened, 0, b"new!").await.unwrap();
        fs.flush(opened).await.unwrap();
        fs.release(opened).await;
        fs.write_back(true).await.unwrap();
        assert_eq!(stored(&store, "1").await.as_deref(), Some(&b"new!"[..]));
    }
}
