//! `zarrfs copy SOURCE DEST --unshard`: the unsharded view of SOURCE written to DEST, without a
//! mount (issue 26, first part).
//!
//! The copy is the mount's view itself, walked and read: the same listings, the same rewritten
//! metadata, the same chunk bytes, so DEST holds byte for byte what `cp -r` of a mount of
//! SOURCE gives. Nothing is decoded or re-encoded. The view's caches do the work that keeps
//! requests few: on a remote source, a shard's index brings the whole shard with it (up to the
//! prefetch window) and listing a chunk directory fetches the next shards ahead, so a shard
//! costs about one GET. Directories are walked depth first, in name order; the files of a
//! directory are copied many at a time (`--jobs`), each written whole with one `set` (a PUT on
//! an object store), so memory stays within the view's caches plus `--jobs` files.
//!
//! Not yet here: `--shard`, `--part K/N`, resuming into a DEST that holds part of the copy,
//! `--verify`, and a progress bar; DEST must be empty (or not exist).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use futures::StreamExt;

use crate::cli::SourceSpec;
use crate::store::Store;
use crate::view::View;
use clap::Parser;

/// Files copied at once unless `--jobs` says otherwise.
pub const DEFAULT_JOBS: usize = 16;

/// What a copy did.
#[derive(Debug, Default)]
pub struct Summary {
    pub files: AtomicU64,
    pub bytes: AtomicU64,
    pub dirs: AtomicU64,
}

/// Where the copy goes.
enum Dest {
    /// A local directory: files are written plainly (as `cp` does, no `fsync` each) and the
    /// file system is synced once at the end, so the copy is on disk when the command returns.
    Local(std::path::PathBuf),
    /// An object store: one PUT per file.
    Store(Arc<dyn Store>),
}

impl Dest {
    async fn write(&self, key: &str, bytes: bytes::Bytes) -> Result<()> {
        match self {
            Dest::Local(root) => {
                let path = root.join(key);
                tokio::task::spawn_blocking(move || {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(&path, &bytes)
                })
                .await??;
            }
            Dest::Store(store) => {
                store.set(key, bytes).await?;
            }
        }
        Ok(())
    }

    async fn make_dir(&self, key: &str) -> Result<()> {
        match self {
            Dest::Local(root) => {
                let path = root.join(key);
                tokio::task::spawn_blocking(move || std::fs::create_dir_all(path)).await??;
            }
            Dest::Store(store) => store.create_dir(&format!("{key}/")).await?,
        }
        Ok(())
    }

    /// Make what was written durable (local: one `syncfs`).
    async fn finish(&self) -> Result<()> {
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

/// Open DEST for writing: a local directory (created if missing) or an object store URL. It
/// must hold nothing yet.
async fn open_dest(dest: &str) -> Result<Dest> {
    let spec = SourceSpec::parse(dest).map_err(|m| anyhow::anyhow!(m))?;
    let store: Arc<dyn Store> = match &spec {
        SourceSpec::Local(path) => {
            std::fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))?;
            let held = std::fs::read_dir(path)
                .with_context(|| format!("cannot list the destination {dest}"))?
                .next()
                .transpose()?;
            if let Some(first) = held {
                bail!(
                    "the destination {dest} is not empty (it holds {}): copy into an empty one; \
                     nothing was written",
                    first.file_name().to_string_lossy()
                );
            }
            return Ok(Dest::Local(path.clone()));
        }
        SourceSpec::Remote { url, options } => {
            if crate::store::remote::is_http_url(url) {
                bail!("{dest}: an HTTP destination cannot be written (use a directory, s3://, gs:// or az://)");
            }
            Arc::new(crate::store::remote::open(url, options, true).map_err(|m| anyhow::anyhow!(m))?)
        }
    };
    let held = store
        .list_dir("")
        .await
        .with_context(|| format!("cannot list the destination {dest}"))?;
    if let Some(first) = held.first() {
        bail!(
            "the destination {dest} is not empty (it holds {}{}): copy into an empty one; \
             nothing was written",
            first.name,
            if held.len() > 1 { " and more" } else { "" }
        );
    }
    Ok(Dest::Store(store))
}

/// The unsharded view of SOURCE, read exactly as a read-only mount of it with the default
/// options would read it (its caches, prefetch window and TTL).
fn source_view(source: &str) -> Result<View> {
    let cli = crate::cli::Cli::try_parse_from(["zarrfs", "mount", source, "/", "--read-only"])?;
    let crate::cli::Command::Mount(args) = cli.command else {
        bail!("{source}: not a source");
    };
    let settings = args.settings().map_err(|m| anyhow::anyhow!(m))?;
    Ok(crate::reading::open(&settings)?.view)
}

/// Copy every file under `dir` of the view to the same key of `dest`, depth first.
async fn copy_dir(view: &View, dest: &Dest, dir: String, jobs: usize, summary: &Summary) -> Result<()> {
    let entries = view
        .list(&dir)
        .await
        .with_context(|| format!("cannot list {}", shown(&dir)))?;
    summary.dirs.fetch_add(1, Relaxed);
    let key = |name: &str| {
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    };
    let (dirs, files): (Vec<_>, Vec<_>) = entries.into_iter().partition(|(_, node)| node.is_dir());
    let mut copies = futures::stream::iter(files)
        .map(|(name, node)| {
            let key = key(&name);
            async move {
                let bytes = view
                    .read(&node, 0, node.size)
                    .await
                    .with_context(|| format!("cannot read {key}"))?;
                let len = bytes.len() as u64;
                dest.write(&key, bytes)
                    .await
                    .with_context(|| format!("cannot write {key}"))?;
                summary.files.fetch_add(1, Relaxed);
                summary.bytes.fetch_add(len, Relaxed);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(jobs.max(1));
    while let Some(done) = copies.next().await {
        done?;
    }
    for (name, _) in dirs {
        dest.make_dir(&key(&name)).await?;
        Box::pin(copy_dir(view, dest, key(&name), jobs, summary)).await?;
    }
    Ok(())
}

fn shown(dir: &str) -> &str {
    if dir.is_empty() {
        "the root"
    } else {
        dir
    }
}

/// `zarrfs copy SOURCE DEST --unshard [--jobs N]`.
pub fn run(source: &str, dest: &str, jobs: usize) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let started = Instant::now();
    let summary = Summary::default();
    runtime.block_on(async {
        let view = source_view(source)?;
        let dest_store = open_dest(dest).await?;
        if view
            .list("")
            .await
            .with_context(|| format!("cannot list {source}"))?
            .is_empty()
        {
            bail!("nothing to copy: {source} shows no file or directory");
        }
        copy_dir(&view, &dest_store, String::new(), jobs, &summary).await?;
        dest_store.finish().await
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let bytes = summary.bytes.load(Relaxed);
    println!(
        "copied {} files ({}) in {} directories to {dest} in {seconds:.2} s ({:.1} MB/s)",
        summary.files.load(Relaxed),
        crate::mount_stats::bytes(bytes),
        summary.dirs.load(Relaxed),
        bytes as f64 / 1e6 / seconds.max(1e-9)
    );
    Ok(())
}
