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
//!
//! A large last-level chunk directory is taken a page at a time as it is read ([`listing`]),
//! unless the kernel keeps listings for a finite TTL (which takes a listing's fingerprint at
//! `opendir`; with an indefinite one, a watched source's, such a listing is kept by the change
//! generation it was taken at) or the mount holds entries of its own there (merged into a
//! whole listing). Listings are in the
//! view's order ([`listing_order`]), which offsets and the merge follow.

mod listing;

use super::kernel_listings::fingerprint;
use super::*;
use crate::view::{listing_order, Listing};
pub use listing::{DirListing, EntriesKept, ENTRY_BYTES, KEPT_ENTRIES};

/// Entries an answer to READDIR holds at least, unless the listing ends sooner: more than a
/// reply to a common `getdents` buffer (32 KiB: about a thousand short names) holds, so that
/// the answers to a small directory reach its end as the kernel's buffer allows.
const ANSWER_ENTRIES: usize = 4096;

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
        if ino == ROOT_INO && self.view.root_read_by_its_end().await {
            // A big root not read whole yet is listed at its first read: `zarrfs stats` and
            // the Python API open the root for their ioctl and read nothing, and its listing
            // fetches and rewrites the whole consolidated metadata of the hierarchy. Nor does
            // the kernel keep that listing (whether it may is known only from the listing);
            // once read whole the root is opened as any directory, listed at once.
            return Ok(OpenedDir {
                fh: self.dirs.insert(DirHandle::unlisted(path)),
                cache: false,
                keep_cache: false,
            });
        }
        let listing = self.take_listing(&path).await?;
        // Only a directory has entries; an empty listing may also be a file, or nothing now.
        if listing.complete()
            && listing.page_of(0).await?.is_none()
            && !self.node(&self.view.locate(&path).await?).await?.is_dir()
        {
            return Err(FsError::NotADirectory);
        }
        let (cache, keep_cache) = match (&self.kernel_listings, listing.whole_entries()) {
            (Some(kept), Some(entries)) => (true, kept.open(&path, fingerprint(&entries), generation, stats)),
            (Some(kept), None) => (true, kept.open_paged(&path, generation)),
            (None, _) => (false, false),
        };
        if keep_cache {
            self.walkers.listed(ino);
            self.ops.count(&self.ops.listings_kept);
        }
        Ok(OpenedDir {
            fh: self.dirs.insert(DirHandle::new(path, generation, listing)),
            cache,
            keep_cache,
        })
    }

    /// The listing of directory `path` as of now, with what only the overlay knows: a page at
    /// a time when the view gives it so, the mount holds nothing of its own there and the
    /// kernel does not keep listings; whole otherwise.
    /// A kernel keeping listings for a finite TTL knows a listing by its fingerprint, so one
    /// is taken whole, unless it is larger than a paged listing keeps: the kernel then keeps
    /// none of it (a directory of millions of chunks held whole took a few hundred bytes an
    /// entry while it was open).
    async fn take_listing(&self, path: &str) -> FsResult<DirListing> {
        let unstored = self.unstored_below(path);
        if unstored.is_empty() {
            let indefinite = self.kernel_listings.as_ref().is_none_or(|k| k.indefinite());
            return Ok(match self.view.list_paged(path).await? {
                Listing::Whole(entries) => DirListing::whole(entries, &self.listed),
                Listing::Paged(pages) if indefinite => DirListing::paged(pages, &self.listed).await?,
                Listing::Paged(pages) => {
                    let listing = DirListing::paged(pages, &self.listed).await?;
                    listing.page_of(KEPT_ENTRIES).await?;
                    listing.as_whole().unwrap_or(listing)
                }
            });
        }
        let mut entries = self.view.list(path).await?;
        self.add_unstored(unstored, &mut entries).await;
        Ok(DirListing::whole(entries, &self.listed))
    }

    /// The listing of an open directory as of now: the handle's snapshot, or a new one when
    /// the mount changed something since; with `offset` moved to go on after the last name
    /// returned from the old one. A directory that cannot be listed again keeps its snapshot.
    /// A handle opened without a listing (the kernel was to list from what it kept) takes one
    /// now; its offsets are those of the listing the kernel kept, which this one is unless the
    /// directory changed since.
    async fn current_listing(&self, handle: &DirHandle, offset: u64) -> FsResult<(Arc<DirListing>, usize)> {
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        let (taken, listing) = handle.listing();
        let generation = self.generation();
        if taken == Some(generation) {
            return Ok((listing, offset));
        }
        let fresh = match self.take_listing(&handle.path).await {
            Ok(fresh) => Arc::new(fresh),
            Err(e) if taken.is_none() => return Err(e),
            Err(_) => return Ok((listing, offset)),
        };
        // Offsets 0..=2 are the start, after `.`, after `..`; entry i was returned with i + 3.
        let next = match offset.checked_sub(3).filter(|_| taken.is_some()) {
            None => offset,
            Some(i) => match listing.name_at(i) {
                Some(last) => 2 + fresh.count_up_to(Some(&last)).await?,
                // Past the end of a listing taken whole; else an offset never returned.
                None if listing.complete() => 2 + fresh.count_up_to(None).await?,
                None => offset,
            },
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
        if added {
            entries.sort_by(|a, b| listing_order(&a.0, &b.0));
        }
    }

    /// Entries from `offset` on: `.` and `..` first, then the listing.
    /// (Every entry to the end, asked for a page at a time as the kernel does.)
    pub async fn readdir(&self, ino: u64, fh: u64, offset: u64) -> FsResult<Vec<DirItem>> {
        let mut all: Vec<DirItem> = Vec::new();
        let mut from = offset;
        loop {
            let before = all.len();
            all.extend(self.dir_items(ino, fh, from).await?);
            match all.get(before..).and_then(|got| got.last()) {
                Some(last) => from = last.offset,
                None => return Ok(all),
            }
        }
    }

    /// Entries from `offset` on, made one by one as they are taken: a reply takes as many as
    /// fit in the kernel's buffer, so a directory read in many calls costs each entry once,
    /// not once per call. An answer holds the pages of the listing taken so far from `offset`
    /// on, and at least [`ANSWER_ENTRIES`] entries unless the listing ends sooner: it may end
    /// before the kernel's buffer is full (the kernel asks on from there), but then only in a
    /// directory far larger than one answer.
    pub async fn dir_items(&self, ino: u64, fh: u64, offset: u64) -> FsResult<DirItems> {
        Ok(self.dir_items_of(ino, fh, offset).await?.0)
    }

    async fn dir_items_of(&self, ino: u64, fh: u64, offset: u64) -> FsResult<(DirItems, Arc<DirListing>)> {
        self.ops.count(&self.ops.readdirs);
        let handle = self.dirs.get(fh).ok_or(FsError::BadHandle)?;
        let parent_ino = self.inodes.peek(parent_path(&handle.path)).unwrap_or(ROOT_INO);
        let (listing, next) = self.current_listing(&handle, offset).await?;
        if let Some(kept) = self.kernel_listings.as_ref().filter(|_| offset == 0) {
            // A listing is taken whole when the kernel keeps listings for a finite TTL (see
            // `take_listing`); a paged one stands for the generation it was taken at.
            match listing.whole_entries() {
                Some(entries) => kept.served_from_start(&handle.path, fingerprint(&entries)),
                None => kept.served_paged_from_start(&handle.path, handle.listing().0.unwrap_or(u64::MAX)),
            }
        }
        let pages = listing.pages_from(next.saturating_sub(2), ANSWER_ENTRIES).await?;
        let items = DirItems {
            path: handle.path.clone(),
            pages: pages.into(),
            dots: [ino, parent_ino],
            next,
            end: usize::MAX,
        };
        Ok((items, listing))
    }

    /// Entries from `offset` on for a READDIRPLUS, which hands each with its attributes. From
    /// the start, what the walker is guessed to do decides how far (see `fs/walkers.rs`): to
    /// the last file, which is left to a plain READDIR, or only to `.` and `..`.
    pub async fn dir_items_plus(&self, ino: u64, fh: u64, offset: u64) -> FsResult<DirItems> {
        let (mut items, listing) = self.dir_items_of(ino, fh, offset).await?;
        if offset != 0 {
            // The kernel goes on with attributes only when a program used an entry it was
            // handed with them (or looked one up) meanwhile: `ls -l` stats each entry as it
            // reads it, so its LOOKUP of the last one never comes.
            self.walkers.entries_used(ino);
        } else {
            items.end = match self.walkers.listing_starts(ino) {
                true => {
                    if let Some(kept) = &self.kernel_listings {
                        kept.handed_attributes(&items.path);
                    }
                    // Whether this answer may reach the last entry: the page after its last
                    // is taken (if any) to know whether that one is the listing's last.
                    let after = items.pages.back().map_or(0, |(page, start)| start + page.len());
                    listing.page_of(after).await?;
                    match listing.summary() {
                        Some((len, last_is_file)) => 2 + len - usize::from(last_is_file),
                        None => usize::MAX, // it ends with its pages, before the last entry
                    }
                }
                false => {
                    if let Some(kept) = &self.kernel_listings {
                        kept.handed_names_only(&items.path);
                    }
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

    /// Entries the listing of open directory `fh` keeps in memory (a paged one keeps its last
    /// pages only, see `readdir/listing.rs`).
    pub fn listing_entries_kept(&self, fh: u64) -> Option<usize> {
        Some(self.dirs.get(fh)?.listing().1.kept_entries())
    }

    /// Bytes the listings of every open directory keep (`listing_bytes_kept` in the stats).
    pub fn listing_bytes_kept(&self) -> usize {
        self.listed.bytes()
    }
}

/// The entries of an open directory from some offset on (see [`Fs::dir_items`]).
#[derive(Debug)]
pub struct DirItems {
    path: Arc<str>,
    /// The pages of the listing this answer is taken from, each with the index of its first
    /// entry; those passed are dropped.
    pages: std::collections::VecDeque<(listing::Page, usize)>,
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
                let (name, node) = loop {
                    let (page, start) = self.pages.front()?;
                    match page.get((i - 2).checked_sub(*start)?) {
                        Some(entry) => break entry,
                        None => drop(self.pages.pop_front()),
                    }
                };
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
