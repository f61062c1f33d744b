//! How a mount uses its write journal (`journal/`): closed files that write-back defers (chunk
//! files, and files stored as they are but metadata) are made durable on local disk before
//! `close()` returns, committed by write-back in batches, and found again
//! by the next mount after a crash.
//!
//! - A file closed with changes (or renamed into place) that write-back defers has its
//!   content appended to the journal, fsynced, while its content is locked: `close()` returns
//!   once it is there. Its record is done when write-back commits it (`committed`).
//! - A pending file removed, renamed away or replaced gets a removal record, so that a replay
//!   never brings back what the user removed.
//! - The journal is bounded by `--write-buffer-size`: a close that finds it full first
//!   commits everything pending (waiting for the store, as a local disk makes a writer wait
//!   when its cache is full).
//! - At mount, before serving, what an earlier mount of the source left in the journal is
//!   committed (`replay_journal`): each path's last content, skipped when the store already
//!   holds those bytes. Torn records were dropped when the journal was read.
//!
//! Journal I/O is blocking (writes, fsyncs, deletes): it runs on the blocking pool.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;

use super::handles::WriteState;
use super::journal::record::Kind;
use super::journal::{Journal, Replay};
use super::{Fs, FsError, FsResult};

/// Files of a replay whose place and stored content are looked up at once.
const REPLAY_CHECKS: usize = 32;

/// What a mount's replay of its journal did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Files committed, and their bytes.
    pub files: usize,
    pub bytes: u64,
    /// Files the store already held as journaled.
    pub already_stored: usize,
    /// Files whose path can no longer be written (its array is gone or changed).
    pub dropped: Vec<String>,
    pub torn_records: usize,
}

impl Fs {
    /// Journal closed files here (see the module's documentation).
    pub fn with_journal(mut self, journal: Arc<Journal>) -> Self {
        self.journal = Some(journal);
        self
    }

    pub fn journal(&self) -> Option<&Arc<Journal>> {
        self.journal.as_ref()
    }

    /// Before a close journals its file: if the journal holds `--write-buffer-size` already,
    /// commit what is pending first.
    pub(super) async fn journal_room(&self) -> FsResult<()> {
        let Some(journal) = &self.journal else { return Ok(()) };
        if journal.pending().0 >= self.config.write_buffer_bytes as u64 {
            self.write_back(true).await?;
        }
        Ok(())
    }

    /// Append the content of the file at `path` (its state locked by the caller) durably,
    /// with removals of `removed` after it (a rename's old name). Nothing without a journal.
    pub(super) async fn journal_content(
        &self,
        path: &str,
        state: &mut WriteState,
        removed: Option<&str>,
    ) -> FsResult<()> {
        let Some(journal) = self.journal.clone() else {
            return Ok(());
        };
        let mut entries = vec![(path.to_string(), Kind::Content(state.content()?))];
        entries.extend(removed.map(|r| (r.to_string(), Kind::Removed)));
        let seqs = blocking(move || journal.append(entries)).await?;
        state.journaled = seqs.first().copied();
        Ok(())
    }

    /// Record that `path`, pending in the journal, was removed or replaced.
    pub(super) async fn journal_removed(&self, path: &str) -> FsResult<()> {
        let Some(journal) = self.journal.clone() else {
            return Ok(());
        };
        let entries = vec![(path.to_string(), Kind::Removed)];
        blocking(move || journal.append(entries)).await.map(drop)
    }

    /// Journaled contents are in the store: their records are done, all in one step (a commit
    /// pass of thousands of files costs one hand-off to a blocking thread, not one each).
    pub(super) async fn journal_done(&self, seqs: Vec<u64>) {
        let Some(journal) = self.journal.clone() else { return };
        if seqs.is_empty() {
            return;
        }
        if let Err(e) = blocking(move || journal.done(&seqs)).await {
            tracing::warn!("journal {}: {e}", self.journal_dir());
        }
    }

    fn journal_dir(&self) -> String {
        self.journal
            .as_ref()
            .map_or(String::new(), |j| j.dir().display().to_string())
    }

    /// [`Fs::replay_journal`], and say in the log what was dropped and committed.
    pub async fn replay_and_report(&self, replay: Replay) -> FsResult<Replayed> {
        let dir = self.journal_dir();
        let (records, torn, torn_bytes) = (replay.records, replay.torn_segments, replay.torn_bytes);
        if torn > 0 {
            tracing::warn!(
                "journal {dir}: dropped a torn record at the end of {torn} segment(s) ({torn_bytes} \
                 bytes): a write the crash interrupted, whose close never returned"
            );
        }
        let done = self.replay_journal(replay).await?;
        for path in &done.dropped {
            tracing::warn!("journal {dir}: {path} can no longer be written (its array is gone or changed): its journaled content is dropped");
        }
        if records > 0 {
            tracing::info!(
                files = done.files,
                bytes = done.bytes,
                already_stored = done.already_stored,
                dropped = done.dropped.len(),
                "journal {dir}: committed what an earlier mount left"
            );
        }
        Ok(done)
    }

    /// Commit what an earlier mount left in the journal, before this one serves.
    pub async fn replay_journal(&self, replay: Replay) -> FsResult<Replayed> {
        let Some(journal) = self.journal.clone() else {
            return Ok(Replayed::default());
        };
        let mut done = Replayed {
            torn_records: replay.torn_segments,
            ..Replayed::default()
        };
        // Where each file goes and whether the store holds it already, asked for many files
        // at once (each check may cost a round trip to a remote store), in journal order.
        let placed = futures::stream::iter(replay.files)
            .map(|(path, data)| async move {
                let at = self.view.locate(&path).await?;
                let target = self.view.write_target(&at, true).await?;
                let stored = match target {
                    Some(_) => self.stored_as(&at, &data).await,
                    None => false,
                };
                Ok::<_, FsError>((path, data, target, stored))
            })
            .buffered(REPLAY_CHECKS)
            .collect::<Vec<_>>()
            .await;
        let mut batch = Vec::new();
        for placed in placed {
            let (path, data, target, stored) = placed?;
            let Some(target) = target else {
                done.dropped.push(path);
                continue;
            };
            if stored {
                done.already_stored += 1;
                continue;
            }
            done.files += 1;
            done.bytes += data.len() as u64;
            batch.push((target, data));
        }
        for (_, outcome) in self.view.commit_together(batch).await {
            outcome?;
        }
        blocking(move || journal.replayed()).await?;
        Ok(done)
    }

    /// Whether the store holds `data` at the placed path now.
    async fn stored_as(&self, at: &crate::view::Located, data: &Bytes) -> bool {
        let Ok(Some(node)) = self.view.node(at).await else {
            return false;
        };
        if node.size != data.len() as u64 {
            return false;
        }
        matches!(self.view.read(&node, 0, node.size).await, Ok(stored) if stored == *data)
    }
}

/// Run journal I/O where blocking holds up no task: right here on a FUSE thread that polls
/// its own request (a close usually is answered so: no hand-off to another thread), else on
/// the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> FsResult<T> {
    if crate::sys::threads::beside_runtime() {
        return f().map_err(|e| FsError::Journal(Arc::new(e)));
    }
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(|e| FsError::Journal(Arc::new(e))),
        Err(e) => Err(FsError::Journal(Arc::new(std::io::Error::other(e)))),
    }
}
