//! Copying a part's units: each unit's files (a shard's chunk files, from its index; or the
//! one file), many at a time, each read through the view and written whole to DEST.
//!
//! The units' file lists are found up to `--jobs` units ahead of the copying (a shard's index
//! read brings its bytes along on a remote source, see `view::copy_units`), as far as the keys
//! they hold allow ([`super::ahead`]), and the files of all
//! of them flow through one pool of `--jobs` copies, so a small shard does not hold the pool
//! back. A file DEST already holds at its full size is skipped when DEST was not empty at the
//! start (a rerun, or another part's machine); `--verify` compares bytes instead, rewrites
//! what differs, and reads back what it wrote. A file that fails is counted and named, and
//! the copy goes on, up to [`MAX_FAILURES`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures::StreamExt;

use super::ahead::Ahead;
use super::dest::Dest;
use super::pack::PackUnit;
use super::plan::Unit;
use super::progress::Tally;
use crate::view::{Node, View};

/// Units whose files are being found ahead of the copying: as many as files copied at once,
/// so that on a remote source `--jobs` shards are in flight (each index read brings its shard,
/// up to the prefetch window).
fn units_ahead(jobs: usize) -> usize {
    jobs.clamp(1, 64)
}

/// Failed files after which the copy stops (something is wrong with DEST or SOURCE as a
/// whole, and more attempts only add noise).
pub const MAX_FAILURES: u64 = 100;

/// How the files of a part are copied.
pub struct Work<'a> {
    pub view: &'a Arc<View>,
    pub dest: &'a Dest,
    pub tally: &'a Tally,
    pub jobs: usize,
    /// DEST held something at the start: ask it before writing.
    pub check_dest: bool,
    pub verify: bool,
    /// What shards being packed may hold (see `pack`).
    pub packing: tokio::sync::Semaphore,
    /// Keys held ahead of and by the copying (see [`super::ahead`]).
    pub keys_ahead: u64,
}

/// What a file of DEST is made from.
enum Content {
    /// A file of the view.
    Node(Node),
    /// Bytes the plan made (a rewritten metadata document).
    Bytes(Bytes),
    /// A shard packed from chunk files of the view (`--shard`).
    Pack(Arc<PackUnit>),
}

/// What DEST's file will be, as far as is known before making it.
struct Expected {
    size: u64,
    /// A packed shard's index: its offset and bytes.
    index: Option<(u64, Vec<u8>)>,
}

impl Content {
    fn expected(&self) -> Result<Expected> {
        Ok(match self {
            Content::Node(node) => Expected {
                size: node.size,
                index: None,
            },
            Content::Bytes(bytes) => Expected {
                size: bytes.len() as u64,
                index: None,
            },
            Content::Pack(pack) => {
                let (index, size) = pack.layout()?;
                let at = pack.level.index_offset(size)?;
                Expected {
                    size,
                    index: Some((at, index.encode(pack.level.index_codec))),
                }
            }
        })
    }

    /// Stored bytes of the source it stands for, for progress.
    fn source_bytes(&self) -> u64 {
        match self {
            Content::Node(node) => node.size,
            Content::Bytes(bytes) => bytes.len() as u64,
            Content::Pack(pack) => pack.chunk_bytes(),
        }
    }
}

/// A unit in progress: when its last file is done, the unit is.
struct UnitState {
    /// Keys held for it (see `Tally::held`): its own and its files'.
    held: u64,
    /// Keys it was let in with (see `ahead`).
    ahead_keys: u64,
    size: u64,
    shard: bool,
    remaining: AtomicUsize,
    file_bytes: AtomicU64,
}

impl Work<'_> {
    /// Copy every file of `units`, in order.
    pub async fn run(&self, units: impl futures::Stream<Item = Unit>) -> Result<()> {
        let ahead = &Ahead::new(self.keys_ahead);
        let files = units
            // Let in one at a time, in order (see `ahead`): a stored shard's keys are known
            // once its files are found, any other unit's now.
            .then(|unit| async move {
                let known = (!matches!(unit, Unit::Shard(_))).then(|| unit.entries());
                ahead.enter(known).await;
                (unit, known)
            })
            .map(|(unit, known)| async move {
                let files = self.files_of(&unit).await;
                // A stored shard's files are found here: they are held until it is done.
                let found = match (&unit, &files) {
                    (Unit::Shard(_), Ok(files)) => files.len() as u64,
                    _ => 0,
                };
                self.tally.held.take(found);
                if known.is_none() {
                    ahead.found(found);
                }
                (unit, files, found, known.unwrap_or(found))
            })
            .buffered(units_ahead(self.jobs))
            .flat_map(|(unit, files, found, ahead_keys)| {
                let state = Arc::new(UnitState {
                    held: unit.entries() + found,
                    ahead_keys,
                    size: unit.size(),
                    shard: matches!(unit, Unit::Shard(_) | Unit::Pack(_)),
                    remaining: AtomicUsize::new(0),
                    file_bytes: AtomicU64::new(0),
                });
                let files = match files {
                    Ok(files) => files,
                    Err(e) => {
                        self.tally.failed(unit.name(), &e);
                        Vec::new()
                    }
                };
                state.remaining.store(files.len(), Relaxed);
                if files.is_empty() {
                    self.unit_done(&state, ahead);
                }
                futures::stream::iter(
                    files
                        .into_iter()
                        .map(move |(path, content)| (state.clone(), path, content)),
                )
            });
        let copies = files
            .map(|(state, path, content)| async move {
                if let Err(e) = self.copy_file(&path, &content).await {
                    self.tally.failed(&path, &e);
                }
                let size = content.source_bytes();
                state.file_bytes.fetch_add(size, Relaxed);
                self.tally.progress_bytes.fetch_add(size, Relaxed);
                if state.remaining.fetch_sub(1, Relaxed) == 1 {
                    self.unit_done(&state, ahead);
                }
            })
            .buffer_unordered(self.jobs.max(1));
        let mut copies = std::pin::pin!(copies);
        while copies.next().await.is_some() {
            let failed = self.tally.files_failed.load(Relaxed);
            if failed >= MAX_FAILURES {
                bail!("stopped after {failed} failures");
            }
        }
        Ok(())
    }

    fn unit_done(&self, state: &UnitState, ahead: &Ahead) {
        self.tally.held.give(state.held);
        ahead.done(state.ahead_keys);
        let rest = state.size.saturating_sub(state.file_bytes.load(Relaxed));
        self.tally.progress_bytes.fetch_add(rest, Relaxed);
        self.tally.units_done.fetch_add(1, Relaxed);
        if state.shard {
            self.tally.shards_done.fetch_add(1, Relaxed);
        }
    }

    async fn files_of(&self, unit: &Unit) -> Result<Vec<(String, Content)>> {
        Ok(match unit {
            Unit::File { path, node } => vec![(path.clone(), Content::Node(node.clone()))],
            Unit::Doc { path, bytes } => vec![(path.clone(), Content::Bytes(bytes.clone()))],
            Unit::Pack(pack) => vec![(pack.key.clone(), Content::Pack(pack.clone()))],
            Unit::Shard(shard) => {
                let (view, shard) = (self.view.clone(), shard.clone());
                super::on_task(async move {
                    let files = view.shard_files(&shard).await;
                    files.with_context(|| format!("cannot read the index of {}", shard.key))
                })
                .await?
                .into_iter()
                .map(|(path, node)| (path, Content::Node(node)))
                .collect()
            }
        })
    }

    async fn read_source(&self, path: &str, content: &Content) -> Result<Bytes> {
        match content {
            Content::Node(node) => read_whole(self.view, node, path).await,
            Content::Bytes(bytes) => Ok(bytes.clone()),
            Content::Pack(pack) => pack.packed(self.view, &self.packing).await,
        }
    }

    /// Whether DEST holds what is expected, as far as can be told without making it: the same
    /// size, and for a packed shard the same index.
    async fn held(&self, path: &str, expected: &Expected) -> Result<bool> {
        let held = self
            .dest
            .size_of(path)
            .await
            .with_context(|| format!("cannot look up {path} in the destination"))?;
        if held != Some(expected.size) {
            return Ok(false);
        }
        let Some((at, want)) = &expected.index else {
            return Ok(true);
        };
        let got = self
            .dest
            .read_range(path, *at, want.len() as u64)
            .await
            .with_context(|| format!("cannot read the index of {path} in the destination"))?;
        Ok(got.as_deref() == Some(&want[..]))
    }

    async fn copy_file(&self, path: &str, content: &Content) -> Result<()> {
        let mut source = None;
        if self.check_dest {
            let expected = content.expected()?;
            if self.held(path, &expected).await? {
                if !self.verify {
                    self.skipped(expected.size);
                    return Ok(());
                }
                let bytes = self.read_source(path, content).await?;
                if self.read_back(path).await?.as_ref() == Some(&bytes) {
                    self.tally.files_verified.fetch_add(1, Relaxed);
                    self.skipped(expected.size);
                    return Ok(());
                }
                source = Some(bytes);
            }
        }
        let bytes = match source {
            Some(bytes) => bytes,
            None => self.read_source(path, content).await?,
        };
        let len = bytes.len() as u64;
        self.dest
            .write(path, bytes.clone(), super::plan::is_metadata_path(path))
            .await
            .with_context(|| format!("cannot write {path}"))?;
        if self.verify {
            if self.read_back(path).await?.as_ref() != Some(&bytes) {
                bail!("{path}: the destination's bytes differ from the source's after writing");
            }
            self.tally.files_verified.fetch_add(1, Relaxed);
        }
        self.tally.files_copied.fetch_add(1, Relaxed);
        self.tally.bytes_copied.fetch_add(len, Relaxed);
        Ok(())
    }

    fn skipped(&self, size: u64) {
        self.tally.files_skipped.fetch_add(1, Relaxed);
        self.tally.bytes_skipped.fetch_add(size, Relaxed);
    }

    async fn read_back(&self, path: &str) -> Result<Option<Bytes>> {
        self.dest
            .read(path)
            .await
            .with_context(|| format!("cannot read {path} back from the destination"))
    }
}

/// The whole of a file of the view, read as a task of its own (see [`super::on_task`]).
pub(super) async fn read_whole(view: &Arc<View>, node: &Node, path: &str) -> Result<Bytes> {
    let (view, node, path) = (view.clone(), node.clone(), path.to_string());
    super::on_task(async move {
        let bytes = view.read(&node, 0, node.size).await;
        bytes.with_context(|| format!("cannot read {path}"))
    })
    .await
}

/// The whole of the file at `path` of the view, read as a task of its own; none there is an
/// error (see `View::read_path`).
pub(super) async fn read_path(view: &Arc<View>, path: &str) -> Result<Bytes> {
    let (view, path) = (view.clone(), path.to_string());
    super::on_task(async move {
        let bytes = view.read_path(&path).await;
        bytes
            .with_context(|| format!("cannot read {path}"))?
            .with_context(|| format!("{path}: gone"))
    })
    .await
}

/// Metadata documents of the plan that DEST holds with other bytes, sorted.
pub async fn metadata_conflicts(view: &Arc<View>, dest: &Dest, units: &[Unit], jobs: usize) -> Result<Vec<String>> {
    let checks = futures::stream::iter(units.iter().filter(|u| u.is_metadata()))
        .map(|unit| async move {
            // Metadata units are files: their name is their path.
            let path = unit.name();
            let Some(held) = dest
                .read(path)
                .await
                .with_context(|| format!("cannot read {path} in the destination"))?
            else {
                return Ok(None);
            };
            let ours = match unit {
                Unit::File { node, .. } => read_whole(view, node, path).await?,
                Unit::Doc { bytes, .. } => bytes.clone(),
                Unit::Shard(_) | Unit::Pack(_) => return Ok(None),
            };
            anyhow::Ok((held != ours).then(|| path.to_string()))
        })
        .buffer_unordered(jobs.max(1))
        .collect::<Vec<_>>()
        .await;
    let mut conflicts = Vec::new();
    for check in checks {
        conflicts.extend(check?);
    }
    conflicts.sort();
    Ok(conflicts)
}
