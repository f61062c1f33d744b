//! The listing an open directory pages through: taken whole at `opendir`, or, for a large
//! last-level chunk directory, a page at a time as readers get to it (see `view::list_paged`).
//!
//! A program listing a directory of a million chunk files gets its first names once the first
//! page is taken (one shard's index read), not once every index is read and a million entries
//! made. Pages taken are kept, in order, for the handle's life: an offset (entry `i` was
//! returned with offset `i + 3`) always means the same entry, whether the listing is read on,
//! read again from an offset `telldir` gave, or taken again after a change (which goes on after
//! the last name returned, found in what was taken).

use std::sync::{Arc, Mutex};

use crate::view::{listing_order, Node, Pages, ViewError};

/// One page of entries.
pub type Page = Arc<Vec<(String, Node)>>;

/// The pages taken so far.
#[derive(Debug, Default)]
struct Taken {
    pages: Vec<Page>,
    /// The index of each page's first entry.
    starts: Vec<usize>,
    len: usize,
    /// Every page is taken.
    complete: bool,
}

impl Taken {
    fn push(&mut self, page: Vec<(String, Node)>) {
        if page.is_empty() {
            return;
        }
        self.starts.push(self.len);
        self.len += page.len();
        self.pages.push(Arc::new(page));
    }

    /// The taken page holding entry `i`, with the index of its first entry.
    fn page_of(&self, i: usize) -> Option<(Page, usize)> {
        if i >= self.len {
            return None;
        }
        let at = self.starts.partition_point(|&s| s <= i).checked_sub(1)?;
        Some((self.pages.get(at)?.clone(), *self.starts.get(at)?))
    }
}

/// A directory's listing, taken as far as it was read (see the module's documentation).
#[derive(Debug, Default)]
pub struct DirListing {
    taken: Mutex<Taken>,
    /// The pages not taken yet.
    rest: tokio::sync::Mutex<Option<Pages>>,
}

impl DirListing {
    /// A listing taken whole.
    pub fn whole(entries: Vec<(String, Node)>) -> Self {
        let mut taken = Taken::default();
        taken.push(entries);
        taken.complete = true;
        DirListing {
            taken: Mutex::new(taken),
            rest: tokio::sync::Mutex::new(None),
        }
    }

    /// A listing taken a page at a time, its first page taken now (so that an empty one is
    /// known at once).
    pub async fn paged(mut pages: Pages) -> Result<Self, ViewError> {
        let mut taken = Taken::default();
        match pages.next_page().await? {
            Some(page) => taken.push(page),
            None => taken.complete = true,
        }
        taken.complete |= pages.done();
        let rest = (!taken.complete).then_some(pages);
        Ok(DirListing {
            taken: Mutex::new(taken),
            rest: tokio::sync::Mutex::new(rest),
        })
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, Taken> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The page holding entry `i`, with the index of its first entry, taking pages until it is
    /// there; `None` past the end.
    pub async fn page_of(&self, i: usize) -> Result<Option<(Page, usize)>, ViewError> {
        loop {
            {
                let taken = self.taken();
                if let Some(found) = taken.page_of(i) {
                    return Ok(Some(found));
                }
                if taken.complete {
                    return Ok(None);
                }
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
            let page = pages.next_page().await?;
            let done = page.is_none() || pages.done();
            let mut taken = self.taken();
            if let Some(page) = page {
                taken.push(page);
            }
            if done {
                taken.complete = true;
                *rest = None;
            }
        }
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
        // And those taken already after them, at no cost.
        let taken = self.taken();
        while let Some(found) = taken.page_of(at) {
            at = found.1 + found.0.len();
            out.push(found);
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

    /// Entry `i`'s name, if it was taken.
    pub fn name_at(&self, i: usize) -> Option<String> {
        let (page, start) = self.taken().page_of(i)?;
        page.get(i - start).map(|(name, _)| name.clone())
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
            [page] if taken.complete => Some(page.clone()),
            _ => None,
        }
    }

    /// The number of entries, and whether the last is a file, once every page is taken.
    pub fn summary(&self) -> Option<(usize, bool)> {
        let taken = self.taken();
        let last_is_file = taken
            .pages
            .last()
            .and_then(|p| p.last())
            .is_some_and(|(_, node)| !node.is_dir());
        taken.complete.then_some((taken.len, last_is_file))
    }
}
