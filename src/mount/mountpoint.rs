//! The mountpoint around a mount's life: checked before mounting, and the zarrfs mount found
//! at a directory (for `zarrfs unmount`, in `unmount.rs`, and `zarrfs stats`).
//!
//! - Mounting onto a directory that is already a mount point hides what is mounted there, and
//!   a later unmount by path could take the wrong one down; it is refused unless the user asks
//!   for it (`--stack`).
//! - A zarrfs mount whose daemon is gone (killed: every access gives "transport endpoint is not
//!   connected") is detached first, with a log line, so a restart (`Restart=on-failure`, or the
//!   same command again) just works.
//! - `zarrfs unmount DIR` and `zarrfs stats DIR` act only on a zarrfs mount, the one on top
//!   at DIR ([`zarrfs_mount_at`]).
//! - A local source and a mountpoint of which one contains the other (or which are one
//!   directory) are refused: the daemon would reach its own source through its own mount, and
//!   the first `find` would wait forever on a request the daemon makes to itself. Paths are
//!   compared resolved (symlinks, `..`), and then by identity (device and inode) along both
//!   paths, which also catches a bind mount naming the same directory twice.

use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::fuse::mount_table::{self, absolute_mount_path, top_at, MountEntry};

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

/// How a local source and a mountpoint overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// The mountpoint is the source directory.
    Same,
    /// The mountpoint is below the source.
    MountpointInside,
    /// The source is below the mountpoint.
    SourceInside,
}

/// A mount whose daemon would read its source through its own mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircularMount {
    /// The source and the mountpoint as given, and resolved.
    pub source: (PathBuf, PathBuf),
    pub mountpoint: (PathBuf, PathBuf),
    pub overlap: Overlap,
    /// Two names of one directory, when only their identity showed the overlap (a bind mount).
    pub alias: Option<(PathBuf, PathBuf)>,
}

impl std::error::Error for CircularMount {}

/// `given (that is, resolved)`, or the resolved path alone when they are the same.
fn shown((given, resolved): &(PathBuf, PathBuf)) -> String {
    if given == resolved {
        resolved.display().to_string()
    } else {
        format!("{} (that is, {})", given.display(), resolved.display())
    }
}

impl fmt::Display for CircularMount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = self.source.1.display();
        let (what, reach, fix) = match self.overlap {
            Overlap::Same => (
                "the mountpoint is the source directory itself",
                "read its source through its own mount",
                format!("mount it on a directory outside {source}"),
            ),
            Overlap::MountpointInside => (
                "the mountpoint is inside the source",
                "read its source through its own mount",
                format!("choose a mountpoint outside {source}"),
            ),
            Overlap::SourceInside => (
                "the source is inside the mountpoint",
                "reach its source through its own mount once mounted",
                format!("choose a mountpoint that does not contain {source}"),
            ),
        };
        write!(
            f,
            "cannot mount {} on {}: {what}",
            shown(&self.source),
            shown(&self.mountpoint)
        )?;
        if let Some((a, b)) = &self.alias {
            write!(f, " ({} and {} are the same directory)", a.display(), b.display())?;
        }
        write!(f, ", so the daemon would {reach} and hang; {fix}")
    }
}

/// Refuse to mount the local directory `source` (given, and resolved) on `mountpoint` (given,
/// and made absolute) when one contains the other. A mountpoint that cannot be resolved (a
/// dead mount) is compared as it is.
pub fn refuse_circular(
    source: (&Path, &Path),
    mountpoint: (&Path, &Path),
) -> std::result::Result<(), Box<CircularMount>> {
    let (src, mp_absolute) = (source.1, mountpoint.1);
    let mp = std::fs::canonicalize(mp_absolute).unwrap_or_else(|_| mp_absolute.to_path_buf());
    let (overlap, alias) = match overlap_by_path(src, &mp) {
        Some(overlap) => (overlap, None),
        None => match overlap_by_identity(src, &mp) {
            Some((overlap, alias)) => (overlap, Some(alias)),
            None => return Ok(()),
        },
    };
    Err(Box::new(CircularMount {
        source: (source.0.to_path_buf(), src.to_path_buf()),
        mountpoint: (mountpoint.0.to_path_buf(), mp),
        overlap,
        alias,
    }))
}

/// The overlap of two resolved paths, by their components.
pub fn overlap_by_path(source: &Path, mountpoint: &Path) -> Option<Overlap> {
    if source == mountpoint {
        Some(Overlap::Same)
    } else if mountpoint.starts_with(source) {
        Some(Overlap::MountpointInside)
    } else if source.starts_with(mountpoint) {
        Some(Overlap::SourceInside)
    } else {
        None
    }
}

/// A directory's device and inode, if it can be looked at.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The overlap of two paths that name the same directory along the way under other names,
/// and those two names.
fn overlap_by_identity(source: &Path, mountpoint: &Path) -> Option<(Overlap, (PathBuf, PathBuf))> {
    let source_id = identity(source)?;
    for dir in mountpoint.ancestors() {
        if identity(dir) == Some(source_id) {
            let overlap = if dir == mountpoint {
                Overlap::Same
            } else {
                Overlap::MountpointInside
            };
            return Some((overlap, (dir.to_path_buf(), source.to_path_buf())));
        }
    }
    let mountpoint_id = identity(mountpoint)?;
    source
        .ancestors()
        .skip(1)
        .find(|dir| identity(dir) == Some(mountpoint_id))
        .map(|dir| (Overlap::SourceInside, (dir.to_path_buf(), mountpoint.to_path_buf())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlaps_by_path() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(overlap_by_path(&p("/data"), &p("/data")), Some(Overlap::Same));
        assert_eq!(
            overlap_by_path(&p("/data"), &p("/data/mnt")),
            Some(Overlap::MountpointInside)
        );
        assert_eq!(
            overlap_by_path(&p("/mnt/x/data"), &p("/mnt/x")),
            Some(Overlap::SourceInside)
        );
        assert_eq!(overlap_by_path(&p("/data"), &p("/")), Some(Overlap::SourceInside));
        // Components, not text: /data2 is not inside /data.
        assert_eq!(overlap_by_path(&p("/data"), &p("/data2")), None);
        assert_eq!(overlap_by_path(&p("/data2/x"), &p("/data")), None);
    }

    #[test]
    fn refuses_through_symlinks_and_names_both_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let data = root.join("data");
        std::fs::create_dir_all(data.join("mnt")).unwrap();
        std::os::unix::fs::symlink(&data, root.join("link")).unwrap();
        let err = refuse_circular((&root.join("link"), &data), (&data.join("mnt"), &data.join("mnt"))).unwrap_err();
        assert_eq!(err.overlap, Overlap::MountpointInside);
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "{} (that is, {})",
                root.join("link").display(),
                data.display()
            )),
            "{text}"
        );
        assert!(text.contains(&data.join("mnt").display().to_string()), "{text}");
        // A mountpoint that is a symlink to the source.
        std::os::unix::fs::symlink(&data, root.join("mp")).unwrap();
        let err = refuse_circular((&data, &data), (&root.join("mp"), &root.join("mp"))).unwrap_err();
        assert_eq!(err.overlap, Overlap::Same);
        // Unrelated directories pass.
        std::fs::create_dir(root.join("other")).unwrap();
        assert!(refuse_circular((&data, &data), (&root.join("other"), &root.join("other"))).is_ok());
    }

    #[test]
    fn identity_finds_the_same_directory_under_another_name() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(root.join("data/mnt")).unwrap();
        // Hard links to directories do not exist; the same directory by a path the text
        // comparison does not see: the path checks are bypassed by asking identity directly.
        let found = overlap_by_identity(&root.join("data"), &root.join("data/mnt"));
        assert_eq!(found.map(|(o, _)| o), Some(Overlap::MountpointInside));
        let found = overlap_by_identity(&root.join("data/mnt"), &root.join("data"));
        assert_eq!(found.map(|(o, _)| o), Some(Overlap::SourceInside));
        assert!(overlap_by_identity(&root.join("data/mnt"), &root).is_some());
        std::fs::create_dir(root.join("other")).unwrap();
        assert!(overlap_by_identity(&root.join("data"), &root.join("other")).is_none());
    }
}
