//! A last-level chunk directory listed a page at a time, in the order of its coordinates.
//!
//! A last-level directory of a large array may hold millions of chunk files spread over many
//! shards, and a program listing it wants the first names at once (`ls | head`, a walker that
//! opens the first file). Listed in the order of names ("10" before "9") its first page needs
//! every shard's index, read and sorted. Listed in the order of coordinates it needs only the
//! first shard's: the shards of the directory cover consecutive runs of the last coordinate,
//! and each one's chunks come from its index in that order. So the directory is listed shard by
//! shard, at most [`PAGE_CHUNKS`] coordinates a page, each page read from one index. When the
//! second shard is reached the listing is taken to go on to the end, and the indexes of that
//! shard and those after it are fetched in the background, concurrently, as a whole listing
//! fetches them (`fetch_indexes`).
//!
//! Only directories whose entries are named by their coordinate (`0`, `1`, …; not the draft
//! encoding's first level, `c0`) are paged: the order of coordinates is then the order of
//! decimal numbers, which the view's listings use for such names.

use std::sync::Arc;

use super::{ShardError, ShardedArray};
use crate::store::DirEntry;
use crate::zarr::grid::BoxCoords;
use crate::zarr::key_encoding::ChunkKeyEncoding;

/// Most coordinates one page covers: a page costs a few milliseconds to make.
pub const PAGE_CHUNKS: u64 = 16384;

/// Where a last-level listing is (see the module's documentation).
#[derive(Debug, Clone)]
pub(super) struct LeafCursor {
    prefix: Vec<u64>,
    /// The stored shards below the directory, by their coordinate along the last dimension.
    shards: Vec<Vec<u64>>,
    /// The shard of the next page, and the first coordinate it covers.
    next: (usize, u64),
    /// The last coordinate listed: a coordinate is never listed twice.
    last: Option<u64>,
}

impl LeafCursor {
    /// Every page has been taken.
    fn done(&self) -> bool {
        self.next.0 >= self.shards.len()
    }
}

/// Where a page of a last-level listing starts: what [`LeafPages::at`] takes it again from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafPosition {
    next: (usize, u64),
    last: Option<u64>,
}

/// The pages of one last-level chunk directory (see the module's documentation).
#[derive(Debug, Clone)]
pub struct LeafPages {
    array: Arc<ShardedArray>,
    cursor: LeafCursor,
    /// Whether the indexes of the shards after the second were asked for.
    fetched_ahead: bool,
}

impl ShardedArray {
    /// Whether the last-level entries with leading coordinates `prefix` are named by their
    /// coordinates alone (`/` separators): their names then sort as decimal numbers.
    pub(super) fn leaf_named_by_number(&self, prefix: &[u64]) -> bool {
        prefix.len() + 1 == self.ndim() && !(matches!(self.encoding, ChunkKeyEncoding::Draft(_)) && prefix.is_empty())
    }

    /// A cursor at the start of the last-level directory `prefix`, its shards found (no index
    /// is read).
    pub(super) async fn leaf_cursor(&self, prefix: &[u64]) -> Result<LeafCursor, ShardError> {
        let dim = prefix.len();
        let mut shards = self.shards_under(&self.shard_prefix_of(prefix)).await?;
        shards.sort_unstable_by_key(|s| s.get(dim).copied());
        shards.dedup();
        Ok(LeafCursor {
            prefix: prefix.to_vec(),
            shards,
            next: (0, 0),
            last: None,
        })
    }

    /// The shards of `cursor` not listed yet.
    pub(super) fn shards_left<'a>(&self, cursor: &'a LeafCursor) -> &'a [Vec<u64>] {
        cursor.shards.get(cursor.next.0..).unwrap_or_default()
    }

    /// The next page of `cursor`'s directory, in the order of coordinates; `None` at its end.
    /// A page holds at least one entry: ranges holding nothing are passed over. A failure
    /// leaves the cursor where it was.
    pub(super) async fn leaf_page(&self, cursor: &mut LeafCursor) -> Result<Option<Vec<DirEntry>>, ShardError> {
        let dim = cursor.prefix.len();
        loop {
            let (at, from) = cursor.next;
            let Some(shard) = cursor.shards.get(at) else {
                return Ok(None);
            };
            let covered = shard.get(dim).map_or(0..0, |&s| self.covered(dim, s));
            let start = from.max(covered.start);
            let end = covered.end.min(start.saturating_add(PAGE_CHUNKS));
            let next = match end < covered.end {
                true => (at, end),
                false => (at + 1, 0),
            };
            let chunks = self.leaf_slice(shard, &cursor.prefix, start..end);
            let present = self.present_in_shard(shard, chunks, false).await?;
            cursor.next = next;
            let mut page = Vec::with_capacity(present.len());
            for (coords, (nbytes, mtime_ns)) in present {
                let Some(&c) = coords.get(dim) else {
                    continue;
                };
                if cursor.last.is_some_and(|last| c <= last) {
                    continue;
                }
                cursor.last = Some(c);
                page.push(DirEntry::file(self.encoding.level_name(dim, c), nbytes, mtime_ns));
            }
            if !page.is_empty() {
                return Ok(Some(page));
            }
        }
    }

    /// The inner chunks of `shard` whose leading coordinates are `prefix` and whose last one
    /// is in `last`, in order.
    fn leaf_slice(&self, shard: &[u64], prefix: &[u64], last: std::ops::Range<u64>) -> BoxCoords {
        let (mut lo, mut hi) = (Vec::with_capacity(self.ndim()), Vec::with_capacity(self.ndim()));
        for (d, &p) in prefix.iter().enumerate() {
            match shard.get(d) {
                Some(&s) if self.covered(d, s).contains(&p) => {
                    lo.push(p);
                    hi.push(p + 1);
                }
                _ => return BoxCoords::empty(),
            }
        }
        if last.is_empty() || shard.len() != prefix.len() + 1 {
            return BoxCoords::empty();
        }
        lo.push(last.start);
        hi.push(last.end);
        BoxCoords::new(&lo, &hi)
    }

    /// The last-level directory `prefix` (`/` separators), to be listed a page at a time; `None`
    /// when it is not one whose entries are named by their coordinates (see the module's
    /// documentation). Its shards are found now; no index is read.
    pub async fn leaf_pages(self: &Arc<Self>, prefix: &[u64]) -> Result<Option<LeafPages>, ShardError> {
        if self.encoding.separator() != '/' || !self.leaf_named_by_number(prefix) || !self.prefix_in_grid(prefix) {
            return Ok(None);
        }
        self.read_ahead_after(prefix);
        self.note_leaf_listing();
        Ok(Some(LeafPages {
            array: self.clone(),
            cursor: self.leaf_cursor(prefix).await?,
            fetched_ahead: false,
        }))
    }
}

impl LeafPages {
    /// The next page, in the order of coordinates; `None` at the end. Reaching the second
    /// shard fetches the indexes of it and the rest in the background, concurrently; the
    /// page's own look at its index joins that fetch (loads are single-flight).
    pub async fn next_page(&mut self) -> Result<Option<Vec<DirEntry>>, ShardError> {
        if self.cursor.next.0 >= 1 && !self.fetched_ahead {
            self.fetched_ahead = true;
            let rest = self.array.shards_left(&self.cursor).to_vec();
            if let (true, Ok(runtime)) = (rest.len() > 1, tokio::runtime::Handle::try_current()) {
                let array = self.array.clone();
                runtime.spawn(async move { array.fetch_indexes(&rest).await });
            }
        }
        self.array.leaf_page(&mut self.cursor).await
    }

    /// Whether every page was taken (a listing may still end sooner: the shards left may hold
    /// nothing more).
    pub fn done(&self) -> bool {
        self.cursor.done()
    }

    /// Where the next page starts.
    pub fn position(&self) -> LeafPosition {
        LeafPosition {
            next: self.cursor.next,
            last: self.cursor.last,
        }
    }

    /// These pages from `position` (one of theirs) on, to take a page again: the shards are
    /// the ones found when the listing began, each page read from its index as it is now.
    pub fn at(&self, position: LeafPosition) -> LeafPages {
        let mut pages = self.clone();
        pages.cursor.next = position.next;
        pages.cursor.last = position.last;
        pages.fetched_ahead = true;
        pages
    }

    /// Every page left, the indexes they need fetched first, concurrently.
    pub async fn rest(mut self) -> Result<Vec<DirEntry>, ShardError> {
        self.array.fetch_indexes(self.array.shards_left(&self.cursor)).await;
        let mut out = Vec::new();
        while let Some(page) = self.array.leaf_page(&mut self.cursor).await? {
            out.extend(page);
        }
        Ok(out)
    }
}
