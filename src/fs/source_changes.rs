//! Changes others made to the source, when the mount is told of them (a watched local source,
//! `store/local/watch.rs`) instead of asking again after a TTL: the kernel is then given every
//! entry and attribute with a TTL that does not expire (`FsConfig::attr_ttl`), so a walk it
//! did before is served from its caches, and each change makes the mount forget what it kept
//! and tells the kernel which names to drop.
//!
//! The order makes a lookup racing a change safe: the view forgets first, then the change
//! generation moves, then the kernel drops the names. An answer that began before the
//! generation moved may carry what was forgotten: it goes out with a TTL of zero
//! ([`TtlTicket`]), so the kernel asks again at its next use; one that began after reads afresh.
//! Directory listings are taken again too (the mount's own change generation moves), and
//! chunks kept for reads without a handle are dropped.
//!
//! A path that changed drops its entry in its parent: for a directory, the kernel drops
//! everything it holds below it (that is how an array's directory stands for all its chunks,
//! see `view/changes.rs`), except what is in use then: a file being read keeps its entry and
//! comes back with the directory, so the chunk files of a changed shard are dropped by name
//! too, with their attributes and cached pages. The parent's attributes and kept listing go too, so new and removed
//! names show. When anything may have changed, every name of the root goes. Names the kernel
//! was told are missing go at and above each changed path, and all of them when anything may
//! have changed (`missing.rs`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::inodes::ROOT_INO;
use super::{parent_path, Fs};

/// The generation of the source's changes, and what handling them did.
#[derive(Debug, Default)]
pub struct SourceChanges {
    generation: Arc<AtomicU64>,
    /// Batches of changes handled.
    batches: AtomicU64,
    /// Names the kernel was told to drop because of them.
    names_dropped: AtomicU64,
}

/// The TTL an answer may be given, taken when its request arrives.
#[derive(Debug, Clone)]
pub struct TtlTicket {
    ttl: Duration,
    seen: u64,
    generation: Arc<AtomicU64>,
}

impl TtlTicket {
    /// The TTL to answer with now: zero if the source changed since the request arrived.
    pub fn ttl(&self) -> Duration {
        match self.generation.load(Ordering::Acquire) == self.seen {
            true => self.ttl,
            false => Duration::ZERO,
        }
    }
}

/// What the kernel must be told to drop after a change.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Invalidations {
    /// Names (a directory inode and a name in it).
    pub entries: Vec<(u64, String)>,
    /// Inodes whose attributes and cached pages (or kept listing) go.
    pub inodes: Vec<u64>,
}

/// The documents the root may show.
const ROOT_DOCUMENTS: [&str; 5] = ["zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata"];

impl Fs {
    /// The TTL of the answer to a request arriving now (see [`TtlTicket`]).
    pub fn ttl_ticket(&self) -> TtlTicket {
        let generation = self.source.generation.clone();
        TtlTicket {
            ttl: self.config.attr_ttl,
            seen: generation.load(Ordering::Acquire),
            generation,
        }
    }

    /// The source's `keys` changed (with `everything`, anything may have): forget what is
    /// kept of them, and say what the kernel must drop.
    pub fn source_changed(&self, keys: &BTreeSet<String>, everything: bool) -> Invalidations {
        let changed = self.view.source_changed(keys, everything);
        self.unopened.clear();
        self.source.generation.fetch_add(1, Ordering::AcqRel);
        drop(self.changing());
        let mut out = Invalidations::default();
        if changed.everything {
            for name in self.inodes.names_in(ROOT_INO) {
                out.entries.push((ROOT_INO, name));
            }
            out.entries.extend(self.missing.take_all());
            out.inodes.push(ROOT_INO);
        }
        // Chunk files first, while the kernel still reaches them by their directories.
        for path in &changed.files {
            let Some(dir) = self.inodes.peek(parent_path(path)) else {
                continue; // the kernel holds nothing there
            };
            let name = path.rsplit('/').next().unwrap_or(path);
            if let Some(ino) = self.inodes.peek(path) {
                out.entries.push((dir, name.to_string()));
                out.inodes.push(ino);
            } else if self.missing.take(dir, name) {
                out.entries.push((dir, name.to_string()));
            }
        }
        for path in &changed.paths {
            self.missing_above(path, &mut out);
            if path.is_empty() {
                out.entries
                    .extend(ROOT_DOCUMENTS.iter().map(|name| (ROOT_INO, name.to_string())));
                out.inodes.push(ROOT_INO);
                continue;
            }
            let Some(dir) = self.inodes.peek(parent_path(path)) else {
                continue; // the kernel holds nothing there
            };
            let name = path.rsplit('/').next().unwrap_or(path);
            self.missing.take(dir, name);
            out.entries.push((dir, name.to_string()));
            out.inodes.push(dir);
            out.inodes.extend(self.inodes.peek(path));
        }
        out.inodes.sort_unstable();
        out.inodes.dedup();
        self.source.batches.fetch_add(1, Ordering::Relaxed);
        self.source
            .names_dropped
            .fetch_add(out.entries.len() as u64, Ordering::Relaxed);
        out
    }

    /// The names above `path` the kernel keeps as missing (`missing.rs`): a path that appears
    /// may be below a directory that was missing too. (Its own name goes with the path's.)
    fn missing_above(&self, path: &str, out: &mut Invalidations) {
        if self.missing.is_empty() {
            return;
        }
        let (mut dir, mut start) = (ROOT_INO, 0);
        for end in path.match_indices('/').map(|(i, _)| i) {
            let name = &path[start..end];
            start = end + 1;
            if name.is_empty() {
                return;
            }
            if self.missing.take(dir, name) {
                out.entries.push((dir, name.to_string()));
            }
            match self.inodes.peek(&path[..end]) {
                Some(ino) => dir = ino,
                None => return, // the kernel holds nothing below
            }
        }
    }

    /// Counters of the changes handled (`zarrfs stats`).
    pub(super) fn source_change_counts(&self) -> [(&'static str, u64); 2] {
        [
            ("source_changes", self.source.batches.load(Ordering::Relaxed)),
            (
                "source_change_names_dropped",
                self.source.names_dropped.load(Ordering::Relaxed),
            ),
        ]
    }
}
