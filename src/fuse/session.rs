//! Mounting: builds the fuser configuration, mounts (mount(2) and the INIT handshake happen
//! before `mount` returns, so the caller can report "live"), then serves requests on a pool
//! of FUSE threads until the filesystem is unmounted. SIGTERM, SIGINT and SIGHUP unmount
//! cleanly, which ends the session.

use std::io;
use std::path::Path;
use std::sync::Arc;

use fuser::{Config, MountOption, Session, SessionACL};
use tokio::runtime::Handle;

use super::adapter::ZarrFuse;
use crate::fs::Fs;

#[derive(Debug, Clone)]
pub struct MountConfig {
    pub read_only: bool,
    pub allow_other: bool,
    /// Name shown as the mount's source in /proc/mounts.
    pub fsname: String,
    /// FUSE worker threads; requests themselves run on the tokio runtime.
    pub threads: usize,
}

fn fuser_config(cfg: &MountConfig) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(cfg.fsname.clone()),
        MountOption::Subtype("zarrfs".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoAtime,
    ];
    if cfg.read_only {
        config.mount_options.push(MountOption::RO);
    }
    if cfg.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(cfg.threads.max(1));
    config
}

/// A mounted, initialised filesystem that has not started serving yet.
pub struct Mounted {
    session: Session<ZarrFuse>,
}

/// Mount `fs` at `mountpoint`. When this returns Ok the mount is live.
pub fn mount(fs: Arc<Fs>, rt: Handle, mountpoint: &Path, cfg: &MountConfig) -> io::Result<Mounted> {
    let session = Session::new(ZarrFuse::new(fs, rt), mountpoint, &fuser_config(cfg))?;
    Ok(Mounted { session })
}

impl Mounted {
    /// Serve requests until the filesystem is unmounted (by `zarrfs unmount`, `fusermount3 -u`,
    /// `umount`, or a termination signal received by this process).
    pub fn serve(mut self, rt: &Handle) -> io::Result<()> {
        let mut unmounter = self.session.unmount_callable();
        rt.spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
                signal(SignalKind::hangup()),
            ) else {
                tracing::error!("cannot install signal handlers; unmount with `zarrfs unmount`");
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = hup.recv() => {}
            }
            tracing::info!("signal received, unmounting");
            if let Err(e) = unmounter.unmount() {
                tracing::error!("unmount failed: {e}");
            }
        });
        self.session.run()
    }
}
