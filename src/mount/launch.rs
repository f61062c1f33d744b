//! `zarrfs mount`, up to serving: everything that can be checked is checked before the process
//! forks, so errors reach the user directly (the source resolved and looked through for Zarr,
//! a mountpoint inside the source refused, paths made absolute since the daemon runs in `/`);
//! then the mount is served in the foreground ([`serve`](super::serve::serve)) or by a daemon
//! ([`daemon`](super::daemon)).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::logging::init_logging;
use super::settings::{MountSettings, SourceSpec};
use super::source::{zarr_warning, LOOK_ENTRIES};
use crate::fuse::mount_table::absolute_mount_path;
use crate::view::ViewMode;

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
        SourceSpec::Remote { url, options } => {
            if settings.writable && crate::store::remote::is_http_url(url) {
                let url = crate::store::remote::redact_url(url);
                eprintln!("zarrfs: HTTP sources are read-only: mounting {url} read-only");
                settings.writable = false;
            } else if settings.writable && options.no_sign_request {
                // Public data read anonymously: a write would be refused by the store at
                // close, and a writable mount pays a request per file opened.
                let url = crate::store::remote::redact_url(url);
                eprintln!(
                    "zarrfs: requests are not signed (--no-sign-request), so nothing can be written: \
                     mounting {url} read-only"
                );
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
    super::mountpoint::refuse_circular((&given, &path), (&given_mountpoint, &settings.mountpoint))?;
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

/// Mount as `settings` say, in the foreground or as a daemon; returns once the mount is live
/// (daemon) or unmounted (foreground).
pub fn mount(settings: MountSettings) -> Result<()> {
    let settings = prepare(settings)?;
    // A warning about the source is said once on stderr: by the log when that is stderr,
    // here otherwise (the log then has it too, see `serve`).
    let logs_to_stderr = settings.foreground && settings.log_file.is_none();
    if let (Some(warning), false) = (&settings.source_warning, logs_to_stderr) {
        eprintln!("zarrfs: {warning}");
    }
    if settings.foreground {
        init_logging(settings.log_file.as_deref(), settings.log_format)?;
        return super::serve::serve(&settings, |_| {});
    }
    super::daemon::daemonize(settings)
}
