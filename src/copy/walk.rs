//! The second pass of a copy: its units found, dealt to parts and handed to the copying as
//! they come, an array at a time, so that what is held in memory does not grow with the number
//! of chunks (issue 35).
//!
//! After the files outside arrays ([`super::outline`]), each array in name order: its
//! directory and everything below it walked depth first ([`listings`]), each directory's
//! listing one batch (its files; an array's stored shards with `--unshard`), dealt by the
//! [`Cutter`] and the part's units sent down a short queue to `work`, which copies them while
//! the walk goes on (the queue full, the walk waits). An array `--shard` packs is walked the
//! same way, its chunk files gathered into destination shards a row of shards at a time
//! ([`Rows`]). The metadata documents come last, so a part interrupted early leaves chunks
//! without metadata rather than metadata without chunks. Part 0 makes the directories as
//! they are met (those of packed chunk trees excepted: DEST's shards make their own).
//!
//! What is held at once: the deepest path's listings ([`WALK_LISTINGS`] a level ahead), one
//! batch, the queue and the units being copied. A directory is listed whole, so one holding
//! all of an array's chunk files (a flat key encoding) is held whole while it is dealt.

use std::pin::Pin;
use std::sync::Arc;

use anyhow::{Context, Result};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;

use super::dest::Dest;
use super::outline::{Outline, WALK_LISTINGS};
use super::pack::Packing;
use super::pack_rows::Rows;
use super::plan::{is_metadata_path, Cutter, Unit};
use super::progress::Tally;
use crate::view::{CopyListing, View};

/// Units queued between the walk and the copying.
pub const UNITS_QUEUED: usize = 2;

type Listings = Pin<Box<dyn Stream<Item = Result<(String, CopyListing)>> + Send>>;

/// The listings of `root` and every directory below it, depth first, parents first, children
/// in order of their names as numbers (so chunk coordinates ascend), then as text; with
/// `whole`, chunk trees file by file (see `View::list_for_copy`). Up to [`WALK_LISTINGS`]
/// directories of a level are listed ahead.
pub fn listings(view: &Arc<View>, root: String, whole: bool) -> impl Stream<Item = Result<(String, CopyListing)>> {
    let level = move |view: &Arc<View>, dirs: Vec<String>| -> Listings {
        let view = view.clone();
        Box::pin(
            futures::stream::iter(dirs)
                .map(move |dir| {
                    let view = view.clone();
                    super::on_task(async move {
                        let shown = if dir.is_empty() { "the root" } else { dir.as_str() };
                        let listing = view.list_for_copy(&dir, whole).await;
                        let listing = listing.with_context(|| format!("cannot list {shown}"))?;
                        Ok((dir, listing))
                    })
                })
                .buffered(WALK_LISTINGS),
        )
    };
    let stack = vec![level(view, vec![root])];
    futures::stream::unfold((view.clone(), stack), move |(view, mut stack)| async move {
        loop {
            let top = stack.last_mut()?;
            match top.next().await {
                None => {
                    stack.pop();
                }
                Some(Err(e)) => return Some((Err(e), (view, Vec::new()))),
                Some(Ok((dir, listing))) => {
                    let mut children = listing.dirs.clone();
                    children.sort_by_cached_key(|d| {
                        let name = d.rsplit('/').next().unwrap_or(d);
                        (name.parse::<u64>().ok(), name.to_string())
                    });
                    stack.push(level(&view, children));
                    return Some((Ok((dir, listing)), (view, stack)));
                }
            }
        }
    })
}

/// The walk of a part (see the module notes).
pub struct Walk<'a> {
    pub view: &'a Arc<View>,
    pub dest: &'a Dest,
    pub tally: &'a Tally,
    pub cutter: Cutter,
    /// Part 0 makes the directories.
    pub make_dirs: bool,
    /// `--shard`: what is packed; else the copy unshards.
    pub packing: Option<&'a Packing>,
    pub queue: mpsc::Sender<Unit>,
}

impl Walk<'_> {
    /// Walk the outlined hierarchy's arrays, with the outline's files first and `metadata`
    /// last (see the module notes).
    pub async fn run(mut self, outline: Outline, metadata: Vec<Unit>) -> Result<()> {
        for dir in &outline.dirs {
            self.make_dir(dir).await;
        }
        let files = outline.files.into_iter().filter(|(path, _)| !is_metadata_path(path));
        let files: Vec<Unit> = files.map(|(path, node)| Unit::File { path, node }).collect();
        self.tally.held.take(files.len() as u64);
        self.deal(files).await?;
        for array in outline.arrays {
            self.array(array).await?;
        }
        self.tally.held.take(metadata.len() as u64);
        self.deal(metadata).await?;
        self.tally.planned.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    async fn make_dir(&self, dir: &str) {
        if !self.make_dirs {
            return;
        }
        if let Err(e) = self.dest.make_dir(dir).await {
            self.tally
                .failed(dir, &e.context(format!("cannot make the directory {dir}")));
        }
    }

    /// An array's directory and everything below it; its own metadata was in the outline.
    async fn array(&mut self, dir: String) -> Result<()> {
        let target = self.packing.and_then(|p| p.targets.get(&dir));
        let mut rows = target.map(|t| Rows::new(&dir, t));
        let mut listed = std::pin::pin!(listings(self.view, dir.clone(), self.packing.is_some()));
        while let Some(listed) = listed.next().await {
            let (at, mut listing) = listed?;
            if at == dir {
                // The outline had the array's metadata.
                listing.files.retain(|(path, _)| !is_metadata_path(path));
            }
            self.tally.held.take(listing_entries(&listing));
            if rows.is_none() {
                for sub in &listing.dirs {
                    self.make_dir(sub).await;
                }
            }
            // Its directories are done with; its files and shards are the batch's now (a
            // packed shard's chunks stay held until the shard is dealt).
            self.tally.held.give(listing.dirs.len() as u64);
            let mut batch: Vec<Unit> = listing.shards.into_iter().map(Unit::Shard).collect();
            let files = match &mut rows {
                Some(rows) => rows.add(listing.files)?,
                None => listing.files,
            };
            batch.extend(files.into_iter().map(|(path, node)| Unit::File { path, node }));
            if let Some(rows) = &mut rows {
                self.tally
                    .pack_held_peak
                    .fetch_max(rows.held_peak(), std::sync::atomic::Ordering::Relaxed);
                batch.extend(rows.ready());
            }
            self.deal(batch).await?;
        }
        if let Some(rows) = rows {
            self.deal(rows.finish()?).await?;
        }
        Ok(())
    }

    /// Deal `batch` (its entries counted as held) and queue the part's units.
    async fn deal(&mut self, batch: Vec<Unit>) -> Result<()> {
        let entries: u64 = batch.iter().map(Unit::entries).sum();
        let mine = self.cutter.cut(batch);
        let kept: u64 = mine.iter().map(Unit::entries).sum();
        self.tally.held.give(entries - kept);
        for unit in mine {
            let shard = matches!(unit, Unit::Shard(_) | Unit::Pack(_));
            self.tally.planned(unit.size(), shard);
            self.queue
                .send(unit)
                .await
                .map_err(|_| anyhow::anyhow!("the copy stopped"))?;
        }
        Ok(())
    }
}

/// Keys a listing holds.
fn listing_entries(listing: &CopyListing) -> u64 {
    (listing.files.len() + listing.dirs.len() + listing.shards.len()) as u64
}
