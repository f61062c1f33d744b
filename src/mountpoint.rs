//! The mountpoint around a mount's life: checked before mounting, and `zarrfs unmount`.
//!
//! - Mounting onto a directory that is already a mount point hides what is mounted there, and
//!   a later unmount by path could take the wrong one down; it is refused unless the user asks
//!   for it (`--stack`).
//! - A zarrfs mount whose daemon is gone (killed: every access gives "transport endpoint is not
//!   connected") is detached first, with a log line, so a restart (`Restart=on-failure`, or the
//!   same command again) just works.
//! - `zarrfs unmount DIR` unmounts only a zarrfs mount, the one on top at DIR.

use std::io;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::fuse::mount_table::{self, absolute_mount_path, top_at, MountEntry};
use crate::fuse::session::unmount_path;

/// How many dead mounts stacked at one mountpoint are cleaned up before giving up.
const MAX_DEAD_MOUNTS: usize = 8;

fn describe(entry: &MountEntry) -> String {
    format!("a {} mount of {}", entry.fstype, entry.source)
}

/// Whether the mount at `path` has lost its daemon: ENOTCONN, or ECONNABORTED once the
/// connection was aborted. `statfs` always reaches the daemon (a `stat` may be answered from
/// the kernel's attribute cache).
fn is_dead(path: &Path) -> bool {
    use nix::errno::Errno;
    matches!(
        nix::sys::statfs::statfs(path),
        Err(Errno::ENOTCONN | Errno::ECONNABORTED)
    )
}

/// Detach the (dead) mount on top at `path`.
fn detach(path: &Path) -> io::Result<()> {
    match nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) => {
            let status = std::process::Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(path)
                .status()?;
            if status.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!("fusermount3 -u -z exited with {status}")))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Make `path` (absolute) ready to be mounted on.
pub fn prepare(path: &Path, stack: bool) -> Result<()> {
    for _ in 0..MAX_DEAD_MOUNTS {
        let entries = mount_table::read().context("cannot read /proc/self/mountinfo")?;
        let Some(top) = top_at(&entries, path) else {
            return Ok(());
        };
        if top.is_zarrfs() && is_dead(path) {
            tracing::info!(
                mountpoint = %path.display(),
                source = %top.source,
                "cleaning up a dead zarrfs mount (its daemon is gone) before mounting"
            );
            detach(path).with_context(|| format!("cannot clean up the dead zarrfs mount at {}", path.display()))?;
            continue;
        }
        if stack {
            return Ok(());
        }
        let hint = if top.is_zarrfs() {
            format!("unmount it first (`zarrfs unmount {}`)", path.display())
        } else {
            "choose an empty directory".to_string()
        };
        bail!(
            "{} is already a mount point ({}): mounting on top would hide it; {hint}, or pass \
             --stack to mount on top anyway",
            path.display(),
            describe(top)
        );
    }
    bail!("{}: too many dead mounts stacked here", path.display())
}

/// The zarrfs mount on top at `dir` (its absolute path and its entry), or why there is none.
pub fn zarrfs_mount_at(dir: &Path) -> Result<(PathBuf, MountEntry)> {
    let path = absolute_mount_path(dir).with_context(|| dir.display().to_string())?;
    let entries = mount_table::read().context("cannot read /proc/self/mountinfo")?;
    let Some(top) = top_at(&entries, &path) else {
        bail!("{} is not mounted", path.display());
    };
    if !top.is_zarrfs() {
        bail!("{} is not a zarrfs mount ({} is there)", path.display(), describe(top));
    }
    let top = top.clone();
    Ok((path, top))
}

/// `zarrfs unmount DIR`.
pub fn unmount(dir: &Path) -> Result<()> {
    let (path, _) = zarrfs_mount_at(dir).context("not unmounting")?;
    match unmount_path(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => bail!(
            "{} is busy: a process has a file or directory open in it (`fuser -vm {}` shows \
             which); close them and try again",
            path.display(),
            path.display()
        ),
        Err(e) => bail!("cannot unmount {}: {e}", path.display()),
    }
}
