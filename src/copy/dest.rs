//! Where a copy goes: a local directory or an object store, written, asked what it holds (for
//! reruns, which skip files already there in full) and read back (`--verify`).
//!
//! A local DEST is written with plain writes, as `cp` does (no `fsync` per file), and synced
//! once at the end with `syncfs`, so the copy is on disk when the command returns; a file cut
//! short by a kill is shorter than it should be, so a rerun writes it again. An object store
//! is written with one PUT per file, which is atomic. What an object store holds is learnt a
//! directory at a time (one listing, sizes included), the last few listings kept: a copy
//! works through its files in key order, so it asks about the same directory many times
//! running.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use tokio::sync::OnceCell;

use crate::mount::settings::SourceSpec;
use crate::store::key::dir_prefix;
use crate::store::{EntryKind, GetOptions, Store};

/// Directory listings of an object-store DEST kept at once.
const LISTINGS_KEPT: usize = 256;

type Listing = Arc<OnceCell<HashMap<String, u64>>>;

pub enum Dest {
    Local(PathBuf),
    Store {
        store: Arc<dyn Store>,
        listings: Mutex<lru::LruCache<String, Listing>>,
    },
}

impl Dest {
    /// Open DEST for writing (a local directory is created if missing) and say whether it holds
    /// nothing yet.
    pub async fn open(dest: &str) -> Result<(Dest, bool)> {
        let spec = SourceSpec::parse(dest).map_err(|m| anyhow::anyhow!(m))?;
        match spec {
            SourceSpec::Local(path) => {
                std::fs::create_dir_all(&path).with_context(|| format!("cannot create {}", path.display()))?;
                let empty = std::fs::read_dir(&path)
                    .with_context(|| format!("cannot list the destination {dest}"))?
                    .next()
                    .is_none();
                Ok((Dest::Local(path), empty))
            }
            SourceSpec::Remote { url, options } => {
                if crate::store::remote::is_http_url(&url) {
                    bail!("{dest}: an HTTP destination cannot be written (use a directory, s3://, gs:// or az://)");
                }
                let store: Arc<dyn Store> =
                    Arc::new(crate::store::remote::open(&url, &options, true).map_err(|m| anyhow::anyhow!(m))?);
                let empty = store
                    .list_dir("")
                    .await
                    .with_context(|| format!("cannot list the destination {dest}"))?
                    .is_empty();
                let listings = Mutex::new(lru::LruCache::new(
                    NonZeroUsize::new(LISTINGS_KEPT).unwrap_or(NonZeroUsize::MIN),
                ));
                Ok((Dest::Store { store, listings }, empty))
            }
        }
    }

    /// Write the file at `key`. With `atomic`, a local file is written under a temporary name
    /// and renamed, so that no reader ever sees part of it: metadata documents, which other
    /// parts' machines read when they start (an object-store PUT is atomic anyway).
    pub async fn write(&self, key: &str, bytes: Bytes, atomic: bool) -> Result<()> {
        match self {
            Dest::Local(root) => {
                let path = root.join(key);
                tokio::task::spawn_blocking(move || {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    if !atomic {
                        return std::fs::write(&path, &bytes);
                    }
                    let name = path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let temp = path.with_file_name(format!(".{name}.zarrfs-copy-{}", std::process::id()));
                    std::fs::write(&temp, &bytes)?;
                    std::fs::rename(&temp, &path).inspect_err(|_| {
                        let _ = std::fs::remove_file(&temp);
                    })
                })
                .await??;
            }
            Dest::Store { store, .. } => {
                store.set(key, bytes).await?;
            }
        }
        Ok(())
    }

    pub async fn make_dir(&self, key: &str) -> Result<()> {
        match self {
            Dest::Local(root) => {
                let path = root.join(key);
                tokio::task::spawn_blocking(move || std::fs::create_dir_all(path)).await??;
            }
            Dest::Store { store, .. } => store.create_dir(&dir_prefix(key)).await?,
        }
        Ok(())
    }

    /// The size of the file DEST holds at `key`, if any.
    pub async fn size_of(&self, key: &str) -> Result<Option<u64>> {
        match self {
            Dest::Local(root) => {
                let path = root.join(key);
                let meta = tokio::task::spawn_blocking(move || std::fs::metadata(path)).await?;
                Ok(match meta {
                    Ok(meta) if meta.is_file() => Some(meta.len()),
                    Ok(_) => None,
                    Err(e) if absent(&e) => None,
                    Err(e) => return Err(e.into()),
                })
            }
            Dest::Store { store, listings } => {
                let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
                let prefix = dir_prefix(dir);
                let listing = {
                    let mut kept = listings.lock().unwrap_or_else(|e| e.into_inner());
                    kept.get_or_insert(prefix.clone(), Listing::default).clone()
                };
                let sizes = listing
                    .get_or_try_init(|| async {
                        let entries = store.list_dir(&prefix).await?;
                        anyhow::Ok(
                            entries
                                .into_iter()
                                .filter_map(|e| match e.kind {
                                    EntryKind::File { size } => Some((e.name, size)),
                                    EntryKind::Dir => None,
                                })
                                .collect(),
                        )
                    })
                    .await?;
                Ok(sizes.get(name).copied())
            }
        }
    }

    /// The bytes DEST holds at `key`, if any.
    pub async fn read(&self, key: &str) -> Result<Option<Bytes>> {
        match self {
            Dest::Local(root) => {
                let path = root.join(key);
                match tokio::task::spawn_blocking(move || std::fs::read(path)).await? {
                    Ok(bytes) => Ok(Some(bytes.into())),
                    Err(e) if absent(&e) || e.kind() == std::io::ErrorKind::IsADirectory => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
            Dest::Store { store, .. } => Ok(store.get(key, GetOptions::default()).await?.map(|g| g.bytes)),
        }
    }

    /// `len` bytes at `offset` of the file DEST holds at `key`, if any (short at its end).
    pub async fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Bytes>> {
        match self {
            Dest::Local(root) => {
                let path = root.join(key);
                let read = tokio::task::spawn_blocking(move || {
                    use std::os::unix::fs::FileExt;
                    let file = std::fs::File::open(path)?;
                    let mut buf = vec![0; usize::try_from(len).unwrap_or(0)];
                    let n = file.read_at(&mut buf, offset)?;
                    buf.truncate(n);
                    std::io::Result::Ok(buf)
                })
                .await?;
                match read {
                    Ok(bytes) => Ok(Some(bytes.into())),
                    Err(e) if absent(&e) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
            Dest::Store { store, .. } => {
                let range = GetOptions::range(crate::store::ByteRange::Range { offset, length: len });
                Ok(store.get(key, range).await?.map(|g| g.bytes))
            }
        }
    }

    /// Make what was written durable (local: one `syncfs`).
    pub async fn finish(&self) -> Result<()> {
        if let Dest::Local(root) = self {
            let root = root.clone();
            tokio::task::spawn_blocking(move || {
                let dir = std::fs::File::open(&root)?;
                nix::unistd::syncfs(&dir).map_err(std::io::Error::from)
            })
            .await??;
        }
        Ok(())
    }
}

/// An error that means a local DEST holds no file there (a file where a directory would be
/// included: writing there fails, and is counted, later).
fn absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// Refuse a local DEST inside a local SOURCE, before DEST is made: the copy would show up in
/// what it copies (as `cp` refuses to copy a directory into itself). DEST and SOURCE the same
/// directory is allowed: every file is held already, so nothing is written.
pub fn refuse_inside(source: &str, dest: &str) -> Result<()> {
    let (Ok(SourceSpec::Local(source)), Ok(SourceSpec::Local(dest))) =
        (SourceSpec::parse(source), SourceSpec::parse(dest))
    else {
        return Ok(());
    };
    let (Ok(source), Some(dest)) = (source.canonicalize(), resolved(&dest)) else {
        return Ok(());
    };
    if dest != source && dest.starts_with(&source) {
        bail!(
            "the destination {} lies inside the source {}: copy it somewhere else; nothing was written",
            dest.display(),
            source.display()
        );
    }
    Ok(())
}

/// `path` made absolute through its nearest existing ancestor (symbolic links resolved there).
fn resolved(path: &std::path::Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut rest = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            return Some(rest.iter().rev().fold(real, |p, c| p.join(c)));
        }
        rest.push(at.file_name()?.to_owned());
        at = at.parent()?;
    }
}
