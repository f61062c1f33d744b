//! What the kernel is handed and gives back: the inode and attributes of each name it is told
//! of (a counted lookup), its FORGETs, the names it is asked to forget to keep the inode table
//! bounded, and the time each of its requests took.

use std::time::Duration;

use super::inodes::Place;
use super::{Attr, Fs, FsError, FsResult, Node};

/// Memory for the inode table beyond `--cache-size` (see [`Fs::inodes_fitting`]).
pub const INODE_MEMORY: usize = 36 << 20;

impl Fs {
    /// The inode and attributes a name is handed to the kernel with (one lookup counted). A
    /// file's inode never changes size: another size gets another inode (see
    /// `fs/inodes/sizes.rs`).
    /// The entry is `name` in directory `dir`, whose inode is `dir_ino`.
    pub(crate) fn entry_attr(&self, dir_ino: u64, dir: &str, name: &str, node: &Node) -> Attr {
        let place = Place::Child { dir_ino, dir, name };
        if node.is_dir() {
            let ino = self.inodes.lookup_sized(place, None);
            return self.attr(ino, node);
        }
        self.inodes.lookup_shown(place, node.size, |ino| self.attr(ino, node))
    }

    /// The bytes of a file whose size is not its inode's are another inode's: `Replaced` (ESTALE) for whatever would read them through this one.
    pub(super) fn check_size(&self, ino: u64, node: &Node) -> FsResult<()> {
        match !node.is_dir() && self.inodes.shown_if_resized(ino, node.size).is_some() {
            true => Err(FsError::Replaced),
            false => Ok(()),
        }
    }

    /// A kernel request of kind `op` was answered `elapsed` after it arrived.
    pub fn answered(&self, op: &str, elapsed: Duration) {
        self.latencies.record(op, elapsed);
    }

    /// Inodes the mount keeps now.
    pub fn inodes_held(&self) -> usize {
        self.inodes.len()
    }

    /// Inodes whose memory fits beside the caches (see `fuse/pruning.rs`): the memory the
    /// daemon takes beyond `--cache-size` is [`INODE_MEMORY`] for the inode table and the
    /// listings of open directories, and 28 MiB for all else (measured through a walk of ten
    /// million files: 16–19 MiB for the binary, its threads and the allocator's slack, and up
    /// to a tenth more inodes than fit, held while the kernel is still forgetting the names it
    /// was asked to); while the cache of shard indexes is not full the table may use what it
    /// has not taken yet (a walk of a million files fills a quarter of the default cache, and
    /// keeps every inode). What open listings keep (a walk's window of a directory of millions
    /// of chunk files: some ten MiB) is the table's to do without.
    pub fn inodes_fitting(&self) -> usize {
        (self.view.cache_room() + INODE_MEMORY).saturating_sub(self.listed.bytes())
            / super::inodes::InodeTable::MAX_BYTES_PER_INODE
    }

    /// Names (a directory inode and a name in it) the kernel should forget so that about
    /// `want` inodes can go, and count them as asked (see `fuse/pruning.rs`).
    pub fn inodes_to_forget(&self, want: usize) -> Vec<(u64, String)> {
        let names = self.inodes.oldest_names(want);
        self.ops
            .forgets_asked
            .fetch_add(names.len() as u64, std::sync::atomic::Ordering::Relaxed);
        names
    }

    pub fn forget(&self, ino: u64, n: u64) {
        if self.inodes.forget(ino, n) {
            self.missing.dir_forgotten(ino);
        }
    }
}
