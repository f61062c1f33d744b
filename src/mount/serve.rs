//! Wiring: turns validated settings into a running mount, and runs the other commands.
//! Daemon mode is in [`crate::daemon`]. Exit codes are decided here and nowhere else.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::cli::{Cli, Command, LogFormat, MountSettings, SourceSpec};
use crate::fs::journal::Journal;
use crate::fs::{Fs, FsConfig};
use crate::fuse::mount_table::absolute_mount_path;
use crate::fuse::session::{self, MountConfig};
use crate::source::{check_reachable, open_store, source_name, zarr_warning, LOOK_ENTRIES};
use crate::store::disk_cache::store::DiskCachedStore;
use crate::store::local::watch::SourceWatch;
use crate::store::object::SearchOptions;
use crate::store::Store;
use crate::view::{View, ViewMode, WarmUpLimits};

/// Run a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let result = match cli.command {
        Command::Mount(args) => match args.settings() {
            Ok(settings) => mount(settings),
            Err(message) => Err(anyhow::anyhow!(message)),
        },
        Command::Unmount { mountpoint } => crate::mountpoint::unmount(&mountpoint),
        Command::Stats { mountpoint, json } => crate::mount_stats::print(&mountpoint, json),
        Command::Inspect { source, json } => inspect(&source, json),
        Command::Copy {
            shard_size: Some(_),
            shard,
            ..
        } if shard != Some(crate::cli::ShardShape::Auto) => Err(anyhow::anyhow!(
            "--shard-size goes with --shard auto (with --shard SHAPE, SHAPE sets the shards' size)"
        )),
        Command::Copy {
            source,
            dest,
            jobs,
            part,
            verify,
            json,
            progress_every,
            shard,
            shard_size,
            max_probe_shards,
            ..
        } => crate::copy::run(&crate::copy::CopyArgs {
            source,
            dest,
            jobs,
            part: part.unwrap_or(crate::copy::Part::WHOLE),
            verify,
            json,
            progress_every: std::time::Duration::try_from_secs_f64(progress_every.clamp(0.1, 1e6))
                .unwrap_or(std::time::Duration::from_secs(10)),
            shard: shard.map(|s| match s {
                crate::cli::ShardShape::Given(shape) => crate::copy::Shaping::Shape(shape),
                crate::cli::ShardShape::Auto => crate::copy::Shaping::Auto {
                    bytes: shard_size.unwrap_or(crate::copy::DEFAULT_SHARD_BYTES),
                },
            }),
            max_probe_shards,
        })
        .map(drop),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("zarrfs: {}", message(&e));
            1
        }
    }
}

/// An error and its causes, each said once (a cause's text is often part of its parent's).
pub(crate) fn message(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// Log lines go to the file, or to stderr; colour only on a terminal, JSON lines on request.
pub(crate) fn init_logging(log_file: Option<&Path>, format: LogFormat) -> Result<()> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fuser=error"));
    // With RUST_LOG=debug each FUSE request's span ends with a line giving its duration.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE);
    let writer = match log_file {
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open log file {}", path.display()))?;
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::sync::Mutex::new(file))
        }
        None => tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr),
    };
    let ansi = log_file.is_none() && std::io::stderr().is_terminal();
    match format {
        LogFormat::Text => builder.with_ansi(ansi).with_writer(writer).init(),
        LogFormat::Json => builder.json().with_ansi(false).with_writer(writer).init(),
    }
    std::panic::set_hook(Box::new(|info| tracing::error!("panic: {info}")));
    Ok(())
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(path).with_context(|| format!("{}", path.display()))
}

/// Check everything that can be checked before forking, so errors reach the user directly.
fn prepare(mut settings: MountSettings) -> Result<MountSettings> {
    if settings.writable && settings.view == ViewMode::V2 {
        eprintln!("zarrfs: the v2 view is read-only: mounting read-only");
        settings.writable = false;
    }
    let (given, path) = match &settings.source {
        SourceSpec::Local(path) => (path.clone(), absolute(path).context("source")?),
        SourceSpec::Remote { url, .. } => {
            if settings.writable && crate::store::remote::is_http_url(url) {
                let url = crate::store::remote::redact_url(url);
                eprintln!("zarrfs: HTTP sources are read-only: mounting {url} read-only");
                settings.writable = false;
            }
            return prepare_local_paths(settings);
        }
    };
    if !path.is_dir() {
        bail!("source {} is not a directory", path.display());
    }
    if settings.writable && nix::unistd::access(&path, nix::unistd::AccessFlags::W_OK).is_err() {
        eprintln!("zarrfs: {} is not writable: mounting read-only", path.display());
        settings.writable = false;
    }
    settings.source = SourceSpec::Local(path.clone());
    let given_mountpoint = settings.mountpoint.clone();
    let mut settings = prepare_local_paths(settings)?;
    crate::mountpoint::refuse_circular((&given, &path), (&given_mountpoint, &settings.mountpoint))?;
    settings.source_warning = zarr_warning(&path, settings.writable, LOOK_ENTRIES)?;
    Ok(settings)
}

/// The mountpoint and the log file, made absolute (the daemon runs in `/`). A mountpoint whose
/// daemon is gone cannot be looked at; it is cleaned up once logging runs (`start`).
fn prepare_local_paths(mut settings: MountSettings) -> Result<MountSettings> {
    let mountpoint = &settings.mountpoint;
    settings.mountpoint =
        absolute_mount_path(mountpoint).with_context(|| format!("mountpoint {}", mountpoint.display()))?;
    match std::fs::metadata(&settings.mountpoint) {
        Ok(meta) if meta.is_dir() => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => {}
        Ok(_) => bail!("mountpoint {} is not a directory", settings.mountpoint.display()),
        Err(e) => bail!("mountpoint {}: {e}", settings.mountpoint.display()),
    }
    if let Some((dir, _)) = &mut settings.disk_cache {
        *dir = std::path::absolute(&*dir).with_context(|| format!("cache directory {}", dir.display()))?;
    }
    if let Some(log) = &settings.log_file {
        let parent = log
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        settings.log_file = Some(absolute(parent)?.join(log.file_name().context("log file name")?));
    }
    Ok(settings)
}

fn mount(settings: MountSettings) -> Result<()> {
    let settings = prepare(settings)?;
    // A warning about the source is said once on stderr: by the log when that is stderr,
    // here otherwise (the log then has it too, see `serve`).
    let logs_to_stderr = settings.foreground && settings.log_file.is_none();
    if let (Some(warning), false) = (&settings.source_warning, logs_to_stderr) {
        eprintln!("zarrfs: {warning}");
    }
    if settings.foreground {
        init_logging(settings.log_file.as_deref(), settings.log_format)?;
        return serve(&settings, |_| {});
    }
    crate::daemon::daemonize(settings)
}

/// Build the runtime and the filesystem, mount, report, and serve until unmounted.
pub(crate) fn serve(settings: &MountSettings, report: impl FnOnce(Result<(), String>)) -> Result<()> {
    if let Some(warning) = &settings.source_warning {
        tracing::warn!("{warning}");
    }
    if let Some((before, after)) = crate::fd_limit::raise() {
        tracing::debug!("descriptor limit (ulimit -n) raised from {before} to {after}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("zarrfs-io")
        .on_thread_start(crate::threads::register_serving)
        .on_thread_stop(crate::threads::unregister_serving)
        .build()?;
    let (fs, mounted, disk_cache) = match start(settings, &runtime) {
        Ok(started) => started,
        Err(e) => {
            let message = message(&e);
            report(Err(message.clone()));
            bail!(message);
        }
    };
    tracing::info!(source = %source_name(&settings.source), mountpoint = %settings.mountpoint.display(), "mounted");
    report(Ok(()));
    notify_service_manager(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&format!("mounted at {}", settings.mountpoint.display())),
    ]);
    {
        let _context = runtime.enter();
        fs.start_write_back();
    }
    let served = mounted.serve(runtime.handle());
    notify_service_manager(&[
        sd_notify::NotifyState::Stopping,
        sd_notify::NotifyState::Status("unmounted; committing pending writes"),
    ]);
    // Unmounted (or told to stop): write back what is still pending before exiting.
    if let Err(e) = runtime.block_on(fs.commit_all()) {
        tracing::error!("pending writes could not be committed: {e}");
    }
    if let Some(cached) = disk_cache {
        cached.close();
    }
    served?;
    tracing::info!("unmounted");
    // Requests still running hold nothing worth waiting for once the kernel has let go.
    runtime.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}

/// Tell systemd (`Type=notify`) where the service stands, when it runs under one
/// (`NOTIFY_SOCKET` set); otherwise nothing.
fn notify_service_manager(states: &[sd_notify::NotifyState]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify the service manager: {e}");
    }
}

/// How long a mount waits for its metadata warm-up before going live (the warm-up then goes
/// on in the background, and lookups that need what it is fetching wait for that): long
/// enough for a hierarchy a few levels deep at a cloud round trip, short enough that a huge
/// or slow one does not hold the mount up for long.
const WARM_UP_WAIT: Duration = Duration::from_secs(3);

/// Check that the source answers (which lists its root) while its root document is read, then
/// warm up the rest of its metadata (see `view::warm_up`), waiting up to [`WARM_UP_WAIT`].
async fn check_and_warm_up(view: &View, store: &dyn Store, source: &SourceSpec) -> Result<()> {
    if !view.warms_up() {
        return check_reachable(store, source).await;
    }
    let (checked, ()) = tokio::join!(check_reachable(store, source), view.warm_up_root());
    checked?;
    let walk = tokio::spawn(view.warm_up(WarmUpLimits::default()));
    if tokio::time::timeout(WARM_UP_WAIT, walk).await.is_err() {
        tracing::info!(
            "the metadata warm-up took more than {} s: mounting now, it goes on in the background",
            WARM_UP_WAIT.as_secs()
        );
    }
    Ok(())
}

/// Open the source, check it answers, build the filesystem and mount it.
fn start(settings: &MountSettings, runtime: &tokio::runtime::Runtime) -> Result<Started> {
    // A watched source is trusted until it changes.
    let watch = crate::source::start_watch(settings);
    let watched;
    let settings = match watch {
        Some(_) => {
            watched = MountSettings {
                metadata_ttl: crate::fs::INDEFINITE_TTL,
                ..settings.clone()
            };
            &watched
        }
        None => settings,
    };
    let own = watch.as_ref().and_then(SourceWatch::own);
    let crate::reading::Reading { view, store, counters } = crate::reading::open_recording(settings, own)?;
    let disk_cache = counters.disk_cache.clone();
    runtime.block_on(check_and_warm_up(&view, &*store, &settings.source))?;
    let mut fs_config = FsConfig::read_only(
        settings.uid,
        settings.gid,
        settings.metadata_ttl.max(Duration::from_millis(100)),
    );
    fs_config.writable = settings.writable;
    fs_config.no_open = !settings.writable;
    fs_config.write_back_delay = settings.write_back_delay.filter(|_| settings.writable);
    fs_config.write_buffer_bytes = settings.write_buffer_bytes;
    fs_config.xattrs = settings.xattr;
    fs_config.watched = watch.is_some();
    // A store that cannot be listed shows in a listing what lookups have found so far: the
    // kernel must not keep one.
    fs_config.kernel_listings =
        settings.metadata_ttl >= crate::fs::kernel_listings::MIN_TTL && store.capabilities().listable;
    let max_file_size = fs_config.max_file_size as u64;
    let mut fs = Fs::new(view, fs_config).with_counters(Arc::new(counters));
    let replay = match settings.journal.as_ref().filter(|_| settings.writable) {
        Some(dir) => {
            let dir = dir.resolve(&source_name(&settings.source), &settings.mountpoint);
            let (journal, replay) = Journal::open(&dir, &source_name(&settings.source), max_file_size)?;
            fs = fs.with_journal(Arc::new(journal));
            Some((dir, replay))
        }
        None => None,
    };
    let fs = Arc::new(fs);
    if let Some((dir, replay)) = replay {
        runtime
            .block_on(fs.replay_and_report(replay))
            .with_context(|| format!("cannot commit the writes left in the journal {}", dir.display()))?;
    }
    let cfg = MountConfig {
        read_only: !settings.writable,
        allow_other: settings.allow_other,
        fsname: format!(
            "{}{}",
            crate::fuse::mount_table::SOURCE_PREFIX,
            source_name(&settings.source)
        ),
        threads: settings.threads.unwrap_or_else(fuse_threads),
        max_inodes: settings.max_inodes,
    };
    crate::mountpoint::prepare(&settings.mountpoint, settings.stack)?;
    let mounted = session::mount(fs.clone(), runtime.handle().clone(), &settings.mountpoint, &cfg)
        .with_context(|| format!("cannot mount {}", settings.mountpoint.display()))?;
    let mounted = match watch {
        Some(watch) => mounted.with_changes(crate::source::change_feed(watch)),
        None => mounted,
    };
    Ok((fs, mounted, disk_cache))
}

/// A mount going live: its filesystem, its session, and its disk cache (closed at unmount).
type Started = (Arc<Fs>, session::Mounted, Option<Arc<DiskCachedStore>>);

/// FUSE worker threads: requests run inline on them when they can, so a few per core.
fn fuse_threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| (n.get() * 2).clamp(4, 16))
}

fn inspect(source: &str, json: bool) -> Result<()> {
    let spec = SourceSpec::parse(source).map_err(|m| anyhow::anyhow!(m))?;
    let (store, _) = open_store(&spec, false, SearchOptions::default(), None)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = runtime.block_on(crate::inspect::inspect(store.clone()))?;
    if report.groups.is_empty() && report.arrays.is_empty() && report.problems.is_empty() {
        let v2 = [".zgroup", ".zarray", ".zmetadata"]
            .into_iter()
            .find(|key| runtime.block_on(store.head(key)).is_ok_and(|found| found.is_some()));
        match v2 {
            Some(key) => bail!(
                "no Zarr v3 hierarchy found at {source}: it holds Zarr v2 metadata ({key}), which \
                 zarrfs shows as stored (v2 has no sharding to undo)"
            ),
            None => bail!("no Zarr hierarchy found at {source}: no zarr.json in it or below it"),
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}
