//! Directory handles: `opendir` takes a snapshot of the view's listing together with what only
//! the overlay knows (files being written or staged, directories made by `mkdir` that hold
//! nothing stored yet), and `readdir` pages through it by offset.
//!
//! A snapshot is taken again when the mount changed anything since (a write, a rename, a
//! delete): a readdirplus reply hands the kernel entries with their attributes, and an entry
//! from before the change would give it a name that is gone, or a size the file no longer has,
//! which the kernel then trusts for the entry's TTL (the model test of concurrent writers and
//! listings found both: writes failing with ENOENT, files read as empty). Paging goes on after
//! the last name returned, so no name is returned twice or skipped.

use super::kernel_listings::fingerprint;
use super::*;

impl Fs {
    /// Open a directory: its listing is taken now and read from the handle.
    pub async fn opendir(&self, ino: u64) -> FsResult<u64> {
        Ok(self.open_dir(ino).await?.fh)
    }

    /// Open a directory, and say whether the kernel may keep its listing and go on using what
    /// it kept (see `kernel_listings`).
    pub async fn open_dir(&self, ino: u64) -> FsResult<OpenedDir> {
        self.ops.count(&self.ops.opendirs);
        let path = self.path_of(ino)?;
        let generation = self.generation();
        let stats = self.walkers.stats();
        if self
            .kernel_listings
            .as_ref()
            .is_some_and(|k| k.still_kept(&path, generation, stats))
        {
            // The kernel lists it from what it kept: nothing to take now, unless it asks. The
            // walker's use of it still tells what it does with names (`walkers.rs`).
            self.walkers.listed(ino);
            self.ops.count(&self.ops.listings_kept);
            return Ok(OpenedDir {
                fh: self.dirs.insert(DirHandle::unlisted(path)),
                cache: true,
                keep_cache: true,
            });
        }
        let unstored = self.unstored_below(&path);
        let mut entries = self.view.list(&path).await?;
        // Only a directory has entries; an empty listing may also be a file, or nothing now.
        if entries.is_empty() && unstored.is_empty() && !self.node(&self.view.locate(&path).await?).await?.is_dir() {
            return Err(FsError::NotADirectory);
        }
        self.add_unstored(unstored, &mut entries).await;
        let (cache, keep_cache) = match &self.kernel_listings {
            Some(kept) => (true, kept.open(&path, fingerprint(&entries), generation, stats)),
            None => (false, false),
        };
        if keep_cache {
            self.walkers.listed(ino);
            self.ops.count(&self.ops.listings_kept);
        }
        Ok(OpenedDir {
            fh: self.dirs.insert(DirHandle::new(path, generation, entries)),
            cache,
            keep_cache,
        })
    }

    /// The listing of an open directory as of now: the handle's snapshot, or a new one when
    /// the mount changed something since; with `offset` moved to go on after the last name
    /// returned from the old one. A directory that cannot be listed again keeps its snapshot.
    /// A handle opened without a listing (the kernel was to list from what it kept) takes one
    /// now; its offsets are those of the listing the kernel kept, which this one is unless the
    /// directory changed since.
    async fn current_listing(&self, handle: &DirHandle, offset: u64) -> FsResult<(Arc<Vec<(String, Node)>>, usize)> {
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        let (taken, entries) = handle.listing();
        let generation = self.generation();
        if taken == Some(generation) {
            return Ok((entries, offset));
        }
        let unstored = self.unstored_below(&handle.path);
        let mut fresh = match self.view.list(&handle.path).await {
            Ok(fresh) => fresh,
            Err(e) if taken.is_none() => return Err(e.into()),
            Err(_) => return Ok((entries, offset)),
        };
        self.add_unstored(unstored, &mut fresh).await;
        let fresh = Arc::new(fresh);
        // Offsets 0..=2 are the start, after `.`, after `..`; entry i was returned with i + 3.
        let next = match offset
            .checked_sub(3)
            .map(|i| entries.get(i))
            .filter(|_| taken.is_some())
        {
            None => offset,
            Some(None) => 2 + fresh.len(),
            Some(Some((last, _))) => 2 + fresh.partition_point(|(name, _)| name <= last),
        };
        handle.replace(generation, fresh.clone());
        Ok((fresh, next))
    }

    /// What the store may not show yet in directory `dir`: files the mount holds (being
    /// written, staged, or pending write-back) and directories made by mkdir, with the
    /// directories that lead to them. Taken before the store is listed: a pending file
    /// committed (and let go) while the listing is under way is then in one or the other.
    pub(super) fn unstored_below(&self, dir: &str) -> Vec<(String, Option<std::sync::Arc<WriteFile>>)> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut extra: Vec<(String, Option<std::sync::Arc<WriteFile>>)> = Vec::new();
        for (path, held) in self.inodes.local_below(dir) {
            // Metadata being written is listed as stored until accepted (as getattr shows it).
            if matches!(&held, Some((_, Sink::Commit(t))) if t.is_metadata()) {
                continue;
            }
            let Some(rest) = path.strip_prefix(&prefix) else {
                continue;
            };
            match rest.split_once('/') {
                Some((sub, _)) => extra.push((sub.to_string(), None)),
                None => extra.push((rest.to_string(), held.map(|(file, _)| file))),
            }
        }
        extra
    }

    /// Add [`Fs::unstored_below`]'s entries to a listing of the store.
    pub(super) async fn add_unstored(
        &self,
        extra: Vec<(String, Option<std::sync::Arc<WriteFile>>)>,
        entries: &mut Vec<(String, Node)>,
    ) {
        let added = !extra.is_empty();
        for (name, file) in extra {
            let listed = entries.iter().position(|(n, _)| *n == name);
            if name.is_empty() || (listed.is_some() && file.is_none()) {
                continue;
            }
            if let Some(i) = listed {
                entries.remove(i); // the held content supersedes the stored one
            }
            let node = match file {
                Some(file) => {
                    let state = file.state.lock().await;
                    Node::unstored(if state.loaded {
                        state.data.len()
                    } else {
                        state.size_hint
                    })
                }
                None => Node::dir(),
            };
            entries.push((name, node));
        }
        if added || !entries.is_sorted_by(|a, b| a.0 <= b.0) {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
        }
    }

    /// Entries from `offset` on: `.` and `..` first, then the listing.
    pub async fn readdir(&self, ino: u64, fh: u64, offset: u64) -> FsResult<Vec<DirItem>> {
        Ok(self.dir_items(ino, fh, offset).await?.collect())
    }

    /// Entries from `offset` on, made one by one as they are taken: a reply takes as many as
    /// fit in the kernel's buffer, so a directory read in many calls costs each entry once,
    /// not once per call.
    pub async fn dir_items(&self, ino: u64, fh: u64, offset: u64) -> FsResult<DirItems> {
        self.ops.count(&self.ops.readdirs);
        let handle = self.dirs.get(fh).ok_or(FsError::BadHandle)?;
        let parent_ino = self.inodes.peek(parent_path(&handle.path)).unwrap_or(ROOT_INO);
        let (entries, next) = self.current_listing(&handle, offset).await?;
        if let Some(kept) = self.kernel_listings.as_ref().filter(|_| offset == 0) {
            kept.served_from_start(&handle.path, fingerprint(&entries));
        }
        Ok(DirItems {
            path: handle.path.clone(),
            entries,
            dots: [ino, parent_ino],
            next,
            end: usize::MAX,
        })
    }

    /// Entries from `offset` on for a READDIRPLUS, which hands each with its attributes. From
    /// the start, what the walker is guessed to do decides how far (see `fs/walkers.rs`): to
    /// the last file, which is left to a plain READDIR, or only to `.` and `..`.
    pub async fn dir_items_plus(&self, ino: u64, fh: u64, offset: u64) -> FsResult<DirItems> {
        let mut items = self.dir_items(ino, fh, offset).await?;
        if offset != 0 {
            // The kernel goes on with attributes only when a program used an entry it was
            // handed with them (or looked one up) meanwhile: `ls -l` stats each entry as it
            // reads it, so its LOOKUP of the last one never comes.
            self.walkers.entries_used(ino);
        } else {
            let last_is_file = items.entries.last().is_some_and(|(_, node)| !node.is_dir());
            items.end = match self.walkers.listing_starts(ino) {
                true => {
                    if let Some(kept) = &self.kernel_listings {
                        kept.handed_attributes(&items.path);
                    }
                    2 + items.entries.len() - usize::from(last_is_file)
                }
                false => {
                    self.ops.count(&self.ops.listings_bare);
                    2
                }
            };
        }
        Ok(items)
    }

    /// A file of directory `dir` (inode `dir_ino`) was looked up: the walker uses what it lists
    /// (`walkers.rs`), and the kernel has the attributes of what it looked up, so its kept
    /// listing no longer counts as one without them.
    pub(super) fn file_looked_up(&self, dir_ino: u64, dir: &str) {
        self.walkers.entries_used(dir_ino);
        if let Some(kept) = &self.kernel_listings {
            kept.handed_attributes(dir);
        }
    }

    /// The inode number of a listed entry for a plain readdir, which only reports a number (the
    /// kernel passes it on and keeps nothing): a stable hash of its path, outside the table's
    /// range, for every name but `.` and `..`. Finding the inode a name has would cost a walk
    /// of millions of names a random look into the inode table each (about 0.8 µs with its cache
    /// misses), for a number nothing compares; a `stat` reports the inode. (readdirplus hands
    /// the kernel entries with a counted lookup: `Fs::entry_attr`.)
    pub fn entry_ino(&self, item: &DirItem) -> u64 {
        if let Some(ino) = item.ino {
            return ino;
        }
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&*item.dir, item.name.as_str()).hash(&mut h);
        h.finish() | (1 << 63)
    }

    pub fn releasedir(&self, fh: u64) {
        self.dirs.remove(fh);
    }
}

/// The entries of an open directory from some offset on (see [`Fs::dir_items`]).
#[derive(Debug)]
pub struct DirItems {
    path: Arc<str>,
    entries: Arc<Vec<(String, Node)>>,
    /// The inodes of `.` and `..`.
    dots: [u64; 2],
    /// Position of the next entry: 0 and 1 are `.` and `..`, then the listing.
    next: usize,
    /// Position where this answer ends, before the listing's end.
    end: usize,
}

impl Iterator for DirItems {
    type Item = DirItem;

    fn next(&mut self) -> Option<DirItem> {
        let i = self.next;
        if i >= self.end {
            return None;
        }
        let item = match i {
            0 | 1 => DirItem {
                name: [".", ".."][i].into(),
                dir: self.path.clone(),
                dir_ino: self.dots[0],
                offset: 0,
                node: None,
                kind: FileKind::Dir,
                ino: Some(self.dots[i]),
            },
            _ => {
                let (name, node) = self.entries.get(i - 2)?;
                DirItem {
                    name: name.as_str().into(),
                    dir: self.path.clone(),
                    dir_ino: self.dots[0],
                    offset: 0,
                    kind: if node.is_dir() { FileKind::Dir } else { FileKind::File },
                    node: Some(node.clone()),
                    ino: None,
                }
            }
        };
        self.next = i.saturating_add(1);
        Some(DirItem {
            offset: i as u64 + 1,
            ..item
        })
    }
}
