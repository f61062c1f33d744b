//! Serving a mount: the runtime built, the source opened through the same stack a copy reads
//! ([`reading`](super::reading)) and checked, its metadata warmed up, the journal of an
//! earlier mount replayed, the filesystem mounted and served until unmounted; then pending
//! writes committed. systemd (`Type=notify`) is told when the mount is live and when it stops.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::logging::message;
use super::settings::{MountSettings, SourceSpec};
use super::source::{check_reachable, source_name};
use crate::fs::journal::Journal;
use crate::fs::{Fs, FsConfig};
use crate::fuse::session::{self, MountConfig};
use crate::store::disk_cache::store::DiskCachedStore;
use crate::store::local::watch::SourceWatch;
use crate::store::Store;
use crate::view::{View, WarmUpLimits};

/// Build the runtime and the filesystem, mount, report, and serve until unmounted.
pub(crate) fn serve(settings: &MountSettings, report: impl FnOnce(Result<(), String>)) -> Result<()> {
    if let Some(warning) = &settings.source_warning {
        tracing::warn!("{warning}");
    }
    if let Some((before, after)) = crate::sys::fd_limit::raise() {
        tracing::debug!("descriptor limit (ulimit -n) raised from {before} to {after}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("zarrfs-io")
        .on_thread_start(crate::sys::threads::register_serving)
        .on_thread_stop(crate::sys::threads::unregister_serving)
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
    // Bound first: a taken port fails the mount before anything else is done.
    let metrics = match settings.metrics_address {
        Some(addr) => Some(crate::metrics::address::bind(addr).map_err(anyhow::Error::msg)?),
        None => None,
    };
    // A watched source is trusted until it changes.
    let watch = super::source::start_watch(settings);
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
    let super::reading::Reading { view, store, counters } = super::reading::open_recording(settings, own)?;
    let disk_cache = counters.disk_cache.clone();
    let store_timings = counters.timings.clone();
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
    if let Some(listener) = metrics {
        super::metrics::serve(listener, runtime.handle(), fs.clone(), store_timings)?;
    }
    super::mountpoint::prepare(&settings.mountpoint, settings.stack)?;
    let mounted = session::mount(fs.clone(), runtime.handle().clone(), &settings.mountpoint, &cfg)
        .with_context(|| format!("cannot mount {}", settings.mountpoint.display()))?;
    let mounted = match watch {
        Some(watch) => mounted.with_changes(super::source::change_feed(watch)),
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
