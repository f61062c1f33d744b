//! What the mount publishes about itself and its files: the mount's counters as JSON through
//! an ioctl on any of its files or directories ([`STATS_IOCTL`], what `zarrfs stats` uses),
//! and, with `--xattr`, the extended attributes `user.zarrfs.source` on every file (where its
//! bytes live) and `user.zarrfs.stats` on the root (the same counters).
//!
//! Why the attributes are opt-in: the kernel asks the filesystem for every `getxattr` it sees
//! (there is no attribute cache), and `ls -l` asks two per file (`security.selinux`,
//! `system.posix_acl_access`). Answering the first one with ENOSYS makes the kernel stop
//! asking for the life of the mount, so a long listing costs no round trip per file; an ioctl
//! keeps the counters reachable either way.

use super::*;

/// `_IOR('Z', 1, [u8; 16383])`: the mount's counters as JSON into the caller's buffer of the
/// largest size an ioctl number can declare; the ioctl returns the JSON's length.
pub const STATS_IOCTL: u32 = (2 << 30) | ((STATS_IOCTL_SIZE as u32) << 16) | ((b'Z' as u32) << 8) | 1;
/// The buffer size [`STATS_IOCTL`] declares.
pub const STATS_IOCTL_SIZE: usize = (1 << 14) - 1;

impl Fs {
    /// The mount's counters (store requests, transport, shard cache and commits, kernel
    /// requests) as a JSON object.
    pub fn stats_json(&self) -> FsResult<Vec<u8>> {
        let counters = self.counters.as_ref().ok_or(FsError::NoAttribute)?;
        let mut stats = counters.snapshot();
        stats.extend(self.view.shard_stats().snapshot());
        stats.extend(self.ops.snapshot());
        stats.extend(self.holdings());
        stats.extend(self.latencies.snapshot());
        for (name, value) in self.source_change_counts().into_iter().chain(self.missing_counts()) {
            stats.insert(name.into(), value.into());
        }
        stats.insert("source_watched".into(), self.config.watched.into());
        serde_json::to_vec(&stats).map_err(|_| FsError::NoAttribute)
    }

    /// What the mount holds now: open handles, files it holds the content of (being written,
    /// staged, pending), the memory their content takes, and how many of them spilled to disk.
    fn holdings(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut out = serde_json::Map::new();
        let held = self.inodes.files();
        for (name, value) in [
            ("open_files", self.files.len()),
            ("open_dirs", self.dirs.len()),
            ("held_files", held.len()),
            ("write_buffer_bytes", self.budget.used()),
            ("spilled_files", self.budget.spilled()),
            (
                "read_snapshot_bytes",
                usize::try_from(self.view.snapshot_bytes()).unwrap_or(usize::MAX),
            ),
            ("inodes_held", self.inodes.len()),
            ("inode_table_bytes", self.inodes.bytes()),
            ("listing_bytes_kept", self.listed.bytes()),
            ("daemon_rss_bytes", resident_bytes().unwrap_or(0)),
        ] {
            out.insert(name.into(), value.into());
        }
        if let Some(journal) = self.journal() {
            let (bytes, files) = journal.pending();
            out.insert("journal_pending_bytes".into(), bytes.into());
            out.insert("journal_pending_files".into(), files.into());
            let age = journal.oldest_pending_age().map_or(0, |a| a.as_millis());
            out.insert(
                "journal_oldest_pending_ms".into(),
                u64::try_from(age).unwrap_or(u64::MAX).into(),
            );
        }
        if self.writeback.is_some() {
            // Closed chunk files waiting for write-back (`writeback.rs`), journaled or not.
            let oldest = held.iter().filter_map(|(_, _, _, pending)| *pending).min();
            let age = oldest.map_or(0, |since| since.elapsed().as_millis());
            out.insert(
                "write_back_oldest_pending_ms".into(),
                u64::try_from(age).unwrap_or(u64::MAX).into(),
            );
        }
        out
    }

    /// An ioctl on a file or directory of the mount: [`STATS_IOCTL`] answers the counters;
    /// anything else is not for us (files here are not terminals or devices; Python asks, to
    /// decide on line buffering).
    pub fn ioctl(&self, cmd: u32, out_size: u32) -> FsResult<Vec<u8>> {
        if cmd != STATS_IOCTL {
            return Err(FsError::NotATerminal);
        }
        let json = self.stats_json()?;
        if json.len() > usize::try_from(out_size).unwrap_or(0) {
            return Err(FsError::BufferTooSmall);
        }
        Ok(json)
    }

    /// Where a file's bytes come from, as text.
    async fn source_text(&self, ino: u64) -> FsResult<String> {
        let at = self.view.locate(&self.path_of(ino)?).await?;
        let node = self.node(&at).await?;
        self.view.describe(&node).await?.ok_or(FsError::NoAttribute)
    }

    pub async fn getxattr(&self, ino: u64, name: &str) -> FsResult<Vec<u8>> {
        self.ops.count(&self.ops.getxattrs);
        if !self.config.xattrs {
            return Err(FsError::NotImplemented);
        }
        if name == XATTR_STATS && ino == ROOT_INO {
            return self.stats_json();
        }
        if name != XATTR_SOURCE {
            return Err(FsError::NoAttribute);
        }
        Ok(self.source_text(ino).await?.into_bytes())
    }

    /// Names of the extended attributes, NUL-terminated, as `listxattr` returns them.
    pub async fn listxattr(&self, ino: u64) -> FsResult<Vec<u8>> {
        if !self.config.xattrs {
            return Err(FsError::NotImplemented);
        }
        let path = self.path_of(ino)?;
        if ino == ROOT_INO && self.counters.is_some() {
            return Ok(format!("{XATTR_STATS}\0").into_bytes());
        }
        let node = self.node(&self.view.locate(&path).await?).await?;
        if node.is_dir() {
            return Ok(Vec::new());
        }
        Ok(format!("{XATTR_SOURCE}\0").into_bytes())
    }
}

/// The daemon's resident memory (`/proc/self/statm`), if the system tells.
fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    Some(pages * page)
}
