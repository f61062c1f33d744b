//! The listing an open directory pages through: taken whole at `opendir`, or, for a large
//! last-level chunk directory, a page at a time as readers get to it (see `view::list_paged`).
//!
//! A program listing a directory of a million chunk files gets its first names once the first
//! page is taken (one shard's index read), not once every index is read and a million entries
//! made. An offset (entry `i` was returned with offset `i + 3`) always means the same entry,
//! whether the listing is read on, read again from an offset `telldir` gave, or taken again
//! after a change (which goes on after the last name returned, found in what was taken).
//!
//! A paged listing keeps only its last pages' entries ([`KEPT_ENTRIES`]): an entry takes a few
//! hundred bytes, so a directory of ten million chunks read to its end by `du` would otherwise
//! hold gigabytes while it is open. Of an earlier page it keeps where it starts, in entries and
//! in the listing (its position); a reader going back to it has it taken again from its shard's
//! index, cut to the entries it had (offsets after it keep their meaning).
//!
//! What every open listing of a mount keeps is counted ([`EntriesKept`]): it is memory the
//! inode table then does without (`Fs::inodes_fitting`), so that a walk's listings and its
//! inodes together stay within what the mount may take.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::view::{listing_order, Node, PagePosition, Pages, ViewError};

/// One page of entries.
pub type Page = Arc<Vec<(String, Node)>>;

/// Entries a paged listing keeps beyond its last page (see the module's documentation).
pub const KEPT_ENTRIES: usize = 2 * crate::shard::PAGE_CHUNKS as usize;

/// Bytes one kept entry takes: the pair, and its name's allocation (chunk files have short
/// names; a longer one is counted short).
pub const ENTRY_BYTES: usize = std::mem::size_of::<(String, Node)>() + 32;

/// The entries kept by the open listings of one mount.
#[derive(Debug, Clone, Default)]
pub struct EntriesKept(Arc<AtomicUsize>);

impl EntriesKept {
    /// Entries kept now.
    pub fn entries(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Bytes kept now (see [`ENTRY_BYTES`]).
    pub fn bytes(&self) -> usize {
        self.entries().saturating_mul(ENTRY_BYTES)
    }

    fn add(&self, n: usize) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    fn sub(&self, n: usize) {
        // Never below zero: every entry subtracted was added by the same listing.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| Some(k.saturating_sub(n)));
    }
}

/// A page taken: its entries while kept, and where it starts.
#[derive(Debug)]
struct TakenPage {
    entries: Option<Page>,
    /// The index of its first entry, and how many it had.
    start: usize,
    len: usize,
    /// Where it starts in the listing (a paged listing's page).
    position: Option<PagePosition>,
}

/// The pages taken so far.
#[derive(Debug, Default)]
struct Taken {
    pages: Vec<TakenPage>,
    len: usize,
    /// Entries of the pages kept, also counted in `counted`.
    kept: usize,
    counted: EntriesKept,
    /// Every page is taken.
    complete: bool,
}

/// Entry `i`'s page in what was taken.
enum Found {
    Kept(Page, usize),
    /// Dropped: its number among the pages.
    Dropped(usize),
}

impl Taken {
    fn push(&mut self, page: Vec<(String, Node)>, position: Option<PagePosition>) {
        if page.is_empty() {
            return;
        }
        let len = page.len();
        self.pages.push(TakenPage {
            entries: Some(Arc::new(page)),
            start: self.len,
            len,
            position,
        });
        self.len += len;
        self.keep(len);
        self.trim(self.pages.len() - 1);
    }

    /// Drop the oldest pages kept (never the last, nor page `keep`) while more than
    /// [`KEPT_ENTRIES`] are kept beyond the last page; only pages that can be taken again.
    fn trim(&mut self, keep: usize) {
        let last = self.pages.len().saturating_sub(1);
        let bound = KEPT_ENTRIES + self.pages.last().map_or(0, |p| p.len);
        for (n, page) in self.pages.iter_mut().enumerate() {
            if self.kept <= bound {
                break;
            }
            if n == last || n == keep || page.position.is_none() || page.entries.is_none() {
                continue;
            }
            page.entries = None;
            self.kept -= page.len;
            self.counted.sub(page.len);
        }
    }

    fn counted_in(counted: &EntriesKept) -> Self {
        let mut taken = Taken::default();
        taken.counted = counted.clone();
        taken
    }

    fn keep(&mut self, n: usize) {
        self.kept += n;
        self.counted.add(n);
    }

    /// The taken page holding entry `i`.
    fn page_of(&self, i: usize) -> Option<Found> {
        if i >= self.len {
            return None;
        }
        let n = self.pages.partition_point(|p| p.start <= i).checked_sub(1)?;
        let page = self.pages.get(n)?;
        Some(match &page.entries {
            Some(entries) => Found::Kept(entries.clone(), page.start),
            None => Found::Dropped(n),
        })
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.counted.sub(self.kept);
    }
}

/// A directory's listing, taken as far as it was read (see the module's documentation).
#[derive(Debug, Default)]
pub struct DirListing {
    taken: Mutex<Taken>,
    /// The pages not taken yet.
    rest: tokio::sync::Mutex<Option<Pages>>,
    /// The listing as it began: a dropped page is taken again from it.
    origin: Option<Pages>,
}

impl DirListing {
    /// A listing taken whole; its entries counted in `counted` while it is kept.
    pub fn whole(entries: Vec<(String, Node)>, counted: &EntriesKept) -> Self {
        let mut taken = Taken::counted_in(counted);
        taken.push(entries, None);
        taken.complete = true;
        DirListing {
            taken: Mutex::new(taken),
            rest: tokio::sync::Mutex::new(None),
            origin: None,
        }
    }

    /// A listing taken a page at a time, its first page taken now (so that an empty one is
    /// known at once).
    pub async fn paged(mut pages: Pages, counted: &EntriesKept) -> Result<Self, ViewError> {
        let mut taken = Taken::counted_in(counted);
        let origin = pages.clone();
        let position = pages.position();
        match pages.next_page().await? {
            Some(page) => taken.push(page, Some(position)),
            None => taken.complete = true,
        }
        taken.complete |= pages.done();
        let rest = (!taken.complete).then_some(pages);
        Ok(DirListing {
            taken: Mutex::new(taken),
            rest: tokio::sync::Mutex::new(rest),
            origin: Some(origin),
        })
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, Taken> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The page holding entry `i`, with the index of its first entry, taking pages until it is
    /// there; `None` past the end.
    pub async fn page_of(&self, i: usize) -> Result<Option<(Page, usize)>, ViewError> {
        loop {
            let dropped = {
                let taken = self.taken();
                match taken.page_of(i) {
                    Some(Found::Kept(page, start)) => return Ok(Some((page, start))),
                    Some(Found::Dropped(n)) => n,
                    None if taken.complete => return Ok(None),
                    None => usize::MAX,
                }
            };
            if dropped != usize::MAX {
                return self.take_again(dropped).await.map(Some);
            }
            let mut rest = self.rest.lock().await;
            // Another reader may have taken it while this one waited.
            let taken_meanwhile = {
                let taken = self.taken();
                taken.len > i || taken.complete
            };
            if taken_meanwhile {
                continue;
            }
            let Some(pages) = rest.as_mut() else {
                self.taken().complete = true;
                continue;
            };
            let position = pages.position();
            let page = pages.next_page().await?;
            let done = page.is_none() || pages.done();
            let mut taken = self.taken();
            if let Some(page) = page {
                taken.push(page, Some(position));
            }
            if done {
                taken.complete = true;
                *rest = None;
            }
        }
    }

    /// Page `n`, dropped, taken again from where it started, cut to the entries it had (the
    /// shard may hold more now: offsets after it must keep their meaning).
    async fn take_again(&self, n: usize) -> Result<(Page, usize), ViewError> {
        // Only a paged listing's pages are dropped: each has its position, and the listing
        // its origin (were one missing, the page would read as empty).
        let (position, start, len) = {
            let taken = self.taken();
            match taken.pages.get(n) {
                Some(page) => (page.position, page.start, page.len),
                None => (None, taken.len, 0),
            }
        };
        let (Some(position), Some(origin)) = (position, self.origin.as_ref()) else {
            return Ok((Arc::default(), start));
        };
        let mut entries = origin.at(position).next_page().await?.unwrap_or_default();
        entries.truncate(len);
        let entries = Arc::new(entries);
        let mut taken = self.taken();
        if let Some(page) = taken.pages.get_mut(n).filter(|p| p.entries.is_none()) {
            page.entries = Some(entries.clone());
            taken.keep(len);
            taken.trim(n);
        }
        Ok((entries, start))
    }

    /// The pages holding entries `i`, `i + 1`, … as far as taken, and further until they hold
    /// at least `at_least` entries from `i` on (or the listing ends); each with the index of
    /// its first entry.
    pub async fn pages_from(&self, i: usize, at_least: usize) -> Result<Vec<(Page, usize)>, ViewError> {
        let mut out = Vec::new();
        let mut at = i;
        while let Some((page, start)) = self.page_of(at).await? {
            at = start + page.len();
            out.push((page, start));
            if at - i >= at_least {
                break;
            }
        }
        // And those kept already after them, at no cost.
        let taken = self.taken();
        while let Some(Found::Kept(page, start)) = taken.page_of(at) {
            at = start + page.len();
            out.push((page, start));
        }
        Ok(out)
    }

    /// The number of entries up to `name` (in listing order, `name` included), taking pages
    /// until one comes after it; `None`: every entry.
    pub async fn count_up_to(&self, name: Option<&str>) -> Result<usize, ViewError> {
        let mut i = 0;
        while let Some((page, start)) = self.page_of(i).await? {
            if let Some(name) = name {
                let within = page.partition_point(|(n, _)| listing_order(n, name).is_le());
                if within < page.len() {
                    return Ok(start + within);
                }
            }
            i = start + page.len();
        }
        Ok(i)
    }

    /// Entry `i`'s name, if it was taken and is kept.
    pub fn name_at(&self, i: usize) -> Option<String> {
        match self.taken().page_of(i)? {
            Found::Kept(page, start) => page.get(i - start).map(|(name, _)| name.clone()),
            Found::Dropped(_) => None,
        }
    }

    /// The same listing taken whole, if every page is taken and kept.
    pub fn as_whole(&self) -> Option<DirListing> {
        let taken = self.taken();
        if !taken.complete || taken.pages.iter().any(|p| p.entries.is_none()) {
            return None;
        }
        let mut entries = Vec::with_capacity(taken.len);
        for page in &taken.pages {
            entries.extend(page.entries.iter().flat_map(|e| e.iter().cloned()));
        }
        Some(DirListing::whole(entries, &taken.counted))
    }

    /// Entries kept in memory.
    pub fn kept_entries(&self) -> usize {
        self.taken().kept
    }

    /// Whether every page is taken.
    pub fn complete(&self) -> bool {
        self.taken().complete
    }

    /// The entries taken, when they are the whole listing in one page (a listing taken whole).
    pub fn whole_entries(&self) -> Option<Page> {
        let taken = self.taken();
        match taken.pages.as_slice() {
            [] if taken.complete => Some(Arc::default()),
            [page] if taken.complete => page.entries.clone(),
            _ => None,
        }
    }

    /// The number of entries, and whether the last is a file, once every page is taken.
    pub fn summary(&self) -> Option<(usize, bool)> {
        let taken = self.taken();
        let last_is_file = taken
            .pages
            .last()
            .and_then(|p| p.entries.as_ref()?.last().map(|(_, node)| !node.is_dir()))
            .unwrap_or(false);
        taken.complete.then_some((taken.len, last_is_file))
    }
}
