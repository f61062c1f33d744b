//! `zarrfs unmount DIR`: only a zarrfs mount, the one on top at DIR, is unmounted. One that
//! holds closed files not yet committed (a journal's, or write-back's) is first asked to commit
//! them, and the command says how far it got; a mount still in use is left alone, with the way
//! to find who uses it.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::mountpoint::zarrfs_mount_at;
use crate::fuse::session::unmount_path;

/// `zarrfs unmount DIR`.
pub fn unmount(dir: &Path) -> Result<()> {
    let (path, _) = zarrfs_mount_at(dir).context("not unmounting")?;
    commit_first(&path);
    match unmount_path(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => bail!(
            "{} is busy: a process has a file or directory open in it (`fuser -vm {}` shows \
             which); close them and try again",
            path.display(),
            path.display()
        ),
        Err(e) => bail!("cannot unmount {}: {e}", path.display()),
    }
}

/// Before unmounting a mount that holds closed files not yet committed (a journal's, or
/// write-back's): have it commit them (an fsync of its root), saying how far it got every
/// second, and when it is done. A failure is said and the unmount goes on: what the journal
/// holds stays there for the next mount of the source.
fn commit_first(path: &Path) {
    let pending = |stats: &serde_json::Map<String, serde_json::Value>| {
        let n = |k: &str| stats.get(k).and_then(serde_json::Value::as_u64);
        (n("journal_pending_files"), n("journal_pending_bytes").unwrap_or(0))
    };
    let Ok(stats) = super::stats::read(path) else {
        return;
    };
    let (Some(files), bytes) = pending(&stats) else { return };
    if files == 0 {
        return;
    }
    let shown = path.display().to_string();
    eprintln!(
        "zarrfs: committing {files} closed files ({}) of {shown} to the store",
        super::stats::bytes(bytes)
    );
    let (done_tx, done) = std::sync::mpsc::channel();
    let root = path.to_path_buf();
    std::thread::spawn(move || {
        let synced = std::fs::File::open(&root).and_then(|dir| dir.sync_all());
        let _ = done_tx.send(synced);
    });
    let started = std::time::Instant::now();
    loop {
        match done.recv_timeout(std::time::Duration::from_secs(1)) {
            Ok(Ok(())) => {
                eprintln!(
                    "zarrfs: committed in {:.1} s: every closed file of {shown} is in the store",
                    started.elapsed().as_secs_f64()
                );
                return;
            }
            Ok(Err(e)) => {
                eprintln!(
                    "zarrfs: cannot commit every closed file of {shown} ({e}); what is not committed \
                     stays in the mount's journal, and the next mount of the source commits it"
                );
                return;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(stats) = super::stats::read(path) {
                    let (files, bytes) = pending(&stats);
                    eprintln!(
                        "zarrfs: {} files ({}) left to commit",
                        files.unwrap_or(0),
                        super::stats::bytes(bytes)
                    );
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}
