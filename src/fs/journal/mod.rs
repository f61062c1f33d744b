//! The write journal: closed files made durable on local disk before `close()` returns, and
//! committed to the store later, in batches (see `fs/journaling.rs` for how the mount uses it).
//!
//! On a remote source a commit is a read and a conditional write of a whole shard, tens of
//! milliseconds each; committing at every close makes a copy into the mount take minutes.
//! Write-back batches the commits but, held in memory only, loses what was closed when the
//! daemon dies. The journal keeps both: each close appends the file's content to a segment
//! file in the journal directory and fsyncs it (one fsync serves every close waiting at that
//! moment: a group commit), and write-back commits the shards later. After a crash the next
//! mount of the same source with the same journal finds the records no commit finished and
//! commits them before serving (`Replay`).
//!
//! On disk: `seg-<first seq>.zj` files of [`record`]s, written in sequence order over the
//! zeros of a segment made ahead (`spare.zj`, see [`spare`]), a new one past [`SEGMENT_BYTES`]; `source`, the source the records belong to (a journal is never
//! replayed onto another); `lock`, held (flock) by the one mount using the journal. A segment
//! is deleted once every record in it and in every older segment is done (committed, or
//! superseded by a newer record of its path): deleting in order keeps a removal's record as
//! long as any record it voids, so a replay never brings a removed file back. The journal
//! holds only what is not yet committed, bounded by what the mount lets wait (`pending`).
//!
//! Every call here does blocking file I/O: callers run it off the async workers.

mod age;
pub mod record;
mod replay;
mod spare;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use record::{Kind, Record};
pub use replay::Replay;
use replay::{read_segments, segment_files};

/// A segment is closed (synced) and a new one started past this size; segments are made this
/// large, of zeros, ahead of use (see `spare`).
pub const SEGMENT_BYTES: u64 = 16 << 20;

/// Why a journal could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("the journal {dir} is in use by another mount (one mount at a time per journal; name another with --journal-dir)")]
    InUse { dir: PathBuf },
    #[error("the journal {dir} holds uncommitted writes of {theirs}, not of {ours}: mount {theirs} with it to commit them, or name another --journal-dir")]
    OtherSource { dir: PathBuf, theirs: String, ours: String },
    #[error("journal {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Records not yet done, and the segments holding them.
#[derive(Debug, Default)]
struct Live {
    /// Oldest first: (first seq, path, live records).
    segments: VecDeque<(u64, PathBuf, usize)>,
    /// Live records: seq -> (content bytes, path).
    records: BTreeMap<u64, (u64, String)>,
    /// Each path's newest live record.
    newest: HashMap<String, u64>,
    bytes: u64,
}

/// The segment being appended to.
#[derive(Debug, Default)]
struct Writer {
    file: Option<Arc<File>>,
    size: u64,
    /// Bytes appended since the journal was opened, across segments.
    appended: u64,
    next_seq: u64,
}

#[derive(Debug, Default)]
struct State {
    writer: Writer,
    live: Live,
}

/// An open journal (see the module's documentation).
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    state: Mutex<State>,
    /// `appended` up to which the current segment is fsynced.
    synced: Mutex<u64>,
    /// Size past which a new segment is started.
    segment_bytes: u64,
    spares: spare::Spares,
    /// Append times and the age of the oldest pending record (`age.rs`).
    ages: age::Ages,
    _lock: File,
}

impl Journal {
    /// Open (creating) the journal in `dir` for `source`; `max_data` bounds a record's
    /// content. Returns the journal and what it holds from before, which the caller commits
    /// and then hands to [`Journal::replayed`].
    pub fn open(dir: &Path, source: &str, max_data: u64) -> Result<(Journal, Replay), JournalError> {
        Self::open_with(dir, source, max_data, SEGMENT_BYTES)
    }

    /// [`Journal::open`] with segments of `segment_bytes`.
    pub fn open_with(
        dir: &Path,
        source: &str,
        max_data: u64,
        segment_bytes: u64,
    ) -> Result<(Journal, Replay), JournalError> {
        let io = |source| JournalError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        let Some(lock) = crate::sys::dir_lock::lock_dir(dir).map_err(io)? else {
            return Err(JournalError::InUse { dir: dir.into() });
        };
        let segments = segment_files(dir).map_err(io)?;
        let named = dir.join("source");
        match std::fs::read_to_string(&named) {
            Ok(theirs) if theirs.trim() != source && !segments.is_empty() => {
                return Err(JournalError::OtherSource {
                    dir: dir.into(),
                    theirs: theirs.trim().to_string(),
                    ours: source.to_string(),
                })
            }
            Ok(theirs) if theirs.trim() == source => {}
            _ => write_synced(&named, source.as_bytes()).map_err(io)?,
        }
        let (replay, last_seq) = read_segments(&segments, max_data).map_err(io)?;
        let spares = spare::Spares::new(dir, segment_bytes).map_err(io)?;
        spares.ready_now().map_err(io)?;
        let mut state = State::default();
        state.writer.next_seq = last_seq + 1;
        // The old segments stay (as live) until `replayed`: a crash during the replay finds
        // them again.
        for (first, path) in segments {
            state.live.segments.push_back((first, path, 1));
        }
        let journal = Journal {
            dir: dir.to_path_buf(),
            state: Mutex::new(state),
            synced: Mutex::new(0),
            segment_bytes,
            spares,
            ages: age::Ages::default(),
            _lock: lock,
        };
        Ok((journal, replay))
    }

    /// The files of the replay are committed: the segments they came from go.
    pub fn replayed(&self) -> std::io::Result<()> {
        let mut state = self.lock();
        for (_, _, live) in state.live.segments.iter_mut() {
            *live = live.saturating_sub(1);
        }
        self.drop_done(&mut state)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Live records' content bytes and their count: what waits for commit.
    pub fn pending(&self) -> (u64, usize) {
        let state = self.lock();
        (state.live.bytes, state.live.records.len())
    }

    /// How long the oldest record not yet committed has waited (`None`: none waits).
    pub fn oldest_pending_age(&self) -> Option<std::time::Duration> {
        let oldest = self.lock().live.records.keys().next().copied();
        self.ages.oldest(oldest)
    }

    /// How long appends took, fsync included.
    pub fn append_latency(&self) -> crate::metrics::histogram::Snapshot {
        self.ages.append_latency.snapshot()
    }

    /// Append records of `(path, kind)` in order, durably: when this returns they are on disk
    /// (fsynced). Each path's earlier live record is superseded (done). Returns the seqs.
    pub fn append(&self, entries: Vec<(String, Kind)>) -> std::io::Result<Vec<u64>> {
        let start = std::time::Instant::now();
        let (file, mark, seqs) = {
            let mut state = self.lock();
            let mut bytes = Vec::new();
            let mut seqs = Vec::with_capacity(entries.len());
            let first = state.writer.next_seq;
            self.ages.appended(first, start);
            for (path, kind) in entries {
                let seq = state.writer.next_seq;
                state.writer.next_seq += 1;
                // Of a path's record: its content's size (`None`: a removal). Done lists are no
                // path's record.
                let size = match &kind {
                    Kind::Content(data) => Some(Some(data.len() as u64)),
                    Kind::Removed => Some(None),
                    Kind::Done(_) => None,
                };
                bytes.extend_from_slice(
                    &Record {
                        seq,
                        path: path.clone(),
                        kind,
                    }
                    .encode(),
                );
                seqs.push((seq, path, size));
            }
            let file = self.segment_for(&mut state, first, bytes.len() as u64)?;
            file.write_all_at(&bytes, state.writer.size)?;
            state.writer.size += bytes.len() as u64;
            state.writer.appended += bytes.len() as u64;
            let mark = state.writer.appended;
            let st = &mut *state;
            let mut added = 0;
            for (seq, path, size) in &seqs {
                let Some(size) = size else { continue };
                if let Some(older) = st.live.newest.remove(path) {
                    Self::forget(st, older);
                }
                if let Some(size) = size {
                    added += 1;
                    st.live.records.insert(*seq, (*size, path.clone()));
                    st.live.bytes += size;
                    st.live.newest.insert(path.clone(), *seq);
                }
            }
            if let Some((_, _, live)) = st.live.segments.back_mut() {
                *live += added;
            }
            (file, mark, seqs.into_iter().map(|(seq, _, _)| seq).collect())
        };
        self.sync_to(&file, mark)?;
        self.ages.append_latency.record(start.elapsed());
        let mut state = self.lock();
        self.drop_done(&mut state)?;
        Ok(seqs)
    }

    /// The records `seqs` are committed (or no longer needed): a done record lists them,
    /// durably, so that a replay never commits them again (see `replay`).
    pub fn done(&self, seqs: &[u64]) -> std::io::Result<()> {
        {
            let mut state = self.lock();
            for seq in seqs {
                Self::forget(&mut state, *seq);
            }
        }
        let lists = seqs.chunks(record::MAX_DONE);
        self.append(lists.map(|l| (String::new(), Kind::Done(l.to_vec()))).collect())
            .map(drop)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count a live record out of its segment (and out of its path's newest).
    fn forget(state: &mut State, seq: u64) {
        let Some((size, path)) = state.live.records.remove(&seq) else {
            return;
        };
        if state.live.newest.get(&path) == Some(&seq) {
            state.live.newest.remove(&path);
        }
        state.live.bytes = state.live.bytes.saturating_sub(size);
        let at = state.live.segments.partition_point(|(first, _, _)| *first <= seq);
        if let Some((_, _, live)) = at.checked_sub(1).and_then(|i| state.live.segments.get_mut(i)) {
            *live = live.saturating_sub(1);
        }
    }

    /// Delete the oldest segments while nothing in them is live, up to the one being written
    /// (it stays until full, or until the journal is closed with nothing live: its done records
    /// say what a replay skips, and a new segment would cost a spare).
    fn drop_done(&self, state: &mut State) -> std::io::Result<()> {
        let mut removed = false;
        while let Some((_, path, 0)) = state.live.segments.front() {
            if state.live.segments.len() == 1 && state.writer.file.is_some() {
                break;
            }
            remove_if_there(path)?;
            state.live.segments.pop_front();
            removed = true;
        }
        if removed {
            File::open(&self.dir)?.sync_all()?;
        }
        Ok(())
    }

    /// The segment to append `len` bytes to, starting one (and syncing the last) as needed.
    fn segment_for(&self, state: &mut State, first_seq: u64, len: u64) -> std::io::Result<Arc<File>> {
        if let Some(file) = &state.writer.file {
            if state.writer.size == 0 || state.writer.size + len <= self.segment_bytes {
                return Ok(file.clone());
            }
            file.sync_data()?; // older records are durable before newer ones land elsewhere
        }
        let path = self.dir.join(format!("seg-{first_seq:016x}.zj"));
        let file = match self.spares.take(&path)? {
            Some(file) => file,
            None => OpenOptions::new().create_new(true).write(true).open(&path)?,
        };
        let file = Arc::new(file);
        File::open(&self.dir)?.sync_all()?;
        state.writer.file = Some(file.clone());
        state.writer.size = 0;
        state.live.segments.push_back((first_seq, path, 0));
        Ok(file)
    }

    /// fsync `file` unless an fsync since covered `mark`: one fsync for every append that
    /// waited on this one.
    fn sync_to(&self, file: &File, mark: u64) -> std::io::Result<()> {
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        if *synced >= mark {
            return Ok(());
        }
        let upto = self.lock().writer.appended;
        file.sync_data()?;
        *synced = upto.max(mark);
        Ok(())
    }
}

fn remove_if_there(path: &Path) -> std::io::Result<()> {
    std::fs::remove_file(path).or_else(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    })
}

impl Drop for Journal {
    /// Closed with nothing live (an unmount that committed everything): no segment is left.
    fn drop(&mut self) {
        let state = self.lock();
        // (An earlier mount's segments count one live record each until replayed.)
        if !state.live.records.is_empty() || state.live.segments.iter().any(|(_, _, live)| *live > 0) {
            return;
        }
        let paths: Vec<PathBuf> = state.live.segments.iter().map(|(_, p, _)| p.clone()).collect();
        drop(state);
        let removed = paths.iter().try_for_each(|p| remove_if_there(p));
        self.spares.close();
        if let Err(e) = removed.and_then(|()| File::open(&self.dir)?.sync_all()) {
            tracing::warn!(
                "journal {}: could not remove its done segments: {e}",
                self.dir.display()
            );
        }
    }
}

/// Write `bytes` to `path` durably (through a temporary file renamed into place).
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
