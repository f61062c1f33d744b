//! Mounting: builds the fuser configuration, mounts (mount(2) and the INIT handshake happen
//! before `mount` returns, so the caller can report "live"), then serves requests on a pool
//! of FUSE threads until the filesystem is unmounted. SIGTERM, SIGINT and SIGHUP unmount
//! cleanly, which ends the session. Nothing here unmounts a mount that is not this one, on
//! top at the mountpoint (see [`mount_table`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{Config, MountOption, Session, SessionACL};
use tokio::runtime::Handle;

use super::adapter::ZarrFuse;
use super::mount_table::{self, MountId};
use crate::fs::Fs;

#[derive(Debug, Clone)]
pub struct MountConfig {
    pub read_only: bool,
    pub allow_other: bool,
    /// Name shown as the mount's source in /proc/mounts.
    pub fsname: String,
    /// FUSE worker threads; requests themselves run on the tokio runtime.
    pub threads: usize,
    /// Inodes kept at most before the kernel is asked to forget some (see `pruning`).
    pub max_inodes: usize,
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
    fs: Arc<Fs>,
    max_inodes: usize,
    /// Where the source's changes come from, if the mount is told of them.
    changes: Option<super::watching::ChangeFeed>,
    mountpoint: PathBuf,
    /// This mount, as the mount table knows it (`None` if it could not be found there: then
    /// zarrfs never unmounts anything itself).
    identity: Option<MountId>,
}

/// Mount `fs` at `mountpoint` (absolute, canonical). When this returns Ok the mount is live.
pub fn mount(fs: Arc<Fs>, rt: Handle, mountpoint: &Path, cfg: &MountConfig) -> io::Result<Mounted> {
    let session = Session::new(ZarrFuse::new(fs.clone(), rt), mountpoint, &fuser_config(cfg))?;
    let identity = mount_table::read().ok().and_then(|entries| {
        let top = mount_table::top_at(&entries, mountpoint)?;
        top.is_zarrfs().then(|| top.identity())
    });
    if identity.is_none() {
        tracing::warn!(
            mountpoint = %mountpoint.display(),
            "this mount is not in /proc/self/mountinfo: zarrfs will not unmount it itself"
        );
    }
    Ok(Mounted {
        session,
        fs,
        max_inodes: cfg.max_inodes,
        changes: None,
        mountpoint: mountpoint.to_path_buf(),
        identity,
    })
}

/// Unmount `path` by path: `umount(2)`, or `fusermount3 -u` where that is not permitted
/// (a user's mount). The caller makes sure the mount on top there is the one meant.
pub fn unmount_path(path: &Path) -> io::Result<()> {
    match nix::mount::umount(path) {
        Ok(()) => return Ok(()),
        Err(nix::errno::Errno::EPERM) => {}
        Err(e) => return Err(e.into()),
    }
    let out = std::process::Command::new("fusermount3").arg("-u").arg(path).output()?;
    if out.status.success() {
        Ok(())
    } else {
        let message = String::from_utf8_lossy(&out.stderr);
        Err(io::Error::other(format!("fusermount3 -u: {}", message.trim())))
    }
}

/// Unmount this mount if it is still the one on top at `mountpoint`; whether it was.
fn unmount_own(mountpoint: &Path, identity: &MountId) -> io::Result<bool> {
    if !mount_table::is_on_top(mountpoint, identity)? {
        return Ok(false);
    }
    unmount_path(mountpoint)?;
    Ok(true)
}

impl Mounted {
    /// Tell the kernel of the source's changes `feed` reports, while serving (see
    /// `watching.rs`).
    pub fn with_changes(mut self, feed: super::watching::ChangeFeed) -> Self {
        self.changes = Some(feed);
        self
    }

    /// Serve requests until the filesystem is unmounted (by `zarrfs unmount`, `fusermount3 -u`,
    /// `umount`, or a termination signal received by this process).
    ///
    /// fuser unmounts by path when its session ends, after asking the FUSE device whether the
    /// mount still lives — and a dead connection answers as a live one. After an external
    /// unmount that would take down whatever lies beneath the mountpoint. So fuser's mount
    /// handle is never dropped: the session runs in the background, its thread handle is
    /// taken out, and the rest is forgotten. zarrfs unmounts only its own mount, on top.
    pub fn serve(self, rt: &Handle) -> io::Result<()> {
        let Mounted {
            session,
            fs,
            max_inodes,
            changes,
            mountpoint,
            identity,
        } = self;
        let mut background = session.spawn()?;
        let watching = changes.map(|feed| super::watching::Watching::start(fs.clone(), background.notifier(), feed));
        let pruner = super::pruning::Pruner::start(fs, background.notifier(), max_inodes);
        let thread = std::mem::replace(&mut background.guard, std::thread::spawn(|| Ok(())));
        std::mem::forget(background);
        if let Some(identity) = identity.clone() {
            rt.spawn(unmount_on_signal(mountpoint.clone(), identity));
        }
        let served = thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the FUSE session thread panicked")));
        pruner.stop();
        if let Some(watching) = watching {
            watching.stop();
        }
        // The session ends when the kernel lets go (after an unmount) or on an error; only in
        // the second case may the mount still be here, and ours. After an unmount the path is
        // left alone: a mount made there since (`umount m; zarrfs mount src m`) often gets
        // this one's mount ID and device number back, so the table cannot tell it apart.
        if let (Err(_), Some(identity)) = (&served, &identity) {
            match unmount_own(&mountpoint, identity) {
                Ok(true) => tracing::info!("unmounted after the session ended"),
                Ok(false) => {}
                Err(e) => tracing::warn!("cannot unmount after the session ended: {e}"),
            }
        }
        served
    }
}

/// On SIGTERM, SIGINT or SIGHUP: unmount this mount (which ends the session), if it is still
/// the one on top at the mountpoint.
async fn unmount_on_signal(mountpoint: PathBuf, identity: MountId) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers; unmount with `zarrfs unmount`");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
        tracing::info!("signal received, unmounting");
        let (path, id) = (mountpoint.clone(), identity.clone());
        match tokio::task::spawn_blocking(move || unmount_own(&path, &id)).await {
            Ok(Ok(true)) => return,
            Ok(Ok(false)) => {
                tracing::warn!("the mount on top at the mountpoint is not this one any more: not unmounting it");
                return;
            }
            Ok(Err(e)) => tracing::error!("unmount failed: {e}"),
            Err(e) => tracing::error!("unmount failed: {e}"),
        }
    }
}
