//! Changes made to a local source, as they happen: one inotify watch per directory of the
//! source, so a mount can trust what it read for as long as nothing changes, and forget it the
//! moment something does (see `fs/source_changes.rs`), instead of asking again after a TTL.
//!
//! Only filesystems whose changes all pass through this kernel raise every event: a network or
//! cluster filesystem (NFS, SMB, Lustre, GPFS, CephFS, FUSE) changed from another host raises
//! none, so [`SourceWatch::start`] refuses anything not on its list of local filesystems, and
//! the mount keeps its TTL there.
//!
//! Through `nix`'s inotify (a dependency already), not a watching crate: the watch must leave
//! out opens and reads (the daemon's own reads of shards would otherwise wake it on every
//! read), list only directories when it starts (a source may hold millions of files), and say
//! when events were lost (the queue overflowed), so that the mount forgets everything then.
//!
//! A change is a key: the file or directory created, written (closed after writing),
//! modified, removed or renamed, relative to the root. The temporary files of replacements
//! (`TEMP_MARKER`, hidden from listings) are not: the rename into place is. Events are gathered for
//! [`GATHER`] after the first one, so a writer's temporary file, its writes and its rename are
//! one batch.
//!
//! A writable mount's own changes raise events too; a watch told of the store's record of them
//! ([`SourceWatch::skipping_own`], see `own_changes.rs`) leaves out each key that holds what
//! the mount's own last change left there. The entries already in a directory just made are
//! changes of their own: they were made before its watch was added, so raised no event, and
//! the directory's own event may be the mount's.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::statfs;

use super::OwnChanges;

/// How long events are gathered into one batch after the first.
pub const GATHER: Duration = Duration::from_millis(20);

/// What changed in a batch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changed {
    /// Keys of files and directories created, written, removed or renamed.
    pub keys: BTreeSet<String>,
    /// Events were lost (the kernel's queue overflowed, or a new directory could not be
    /// watched): anything may have changed.
    pub everything: bool,
}

/// Why a source cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("{0} is on a {1} filesystem, whose changes from other hosts raise no event")]
    NotLocal(PathBuf, String),
    #[error(
        "the source has more directories than inotify may watch (raise fs.inotify.max_user_watches \
         or fs.inotify.max_user_instances)"
    )]
    Limit,
    #[error("cannot watch {0}: {1}")]
    Io(PathBuf, io::Error),
}

/// The watches on a local source's directories.
#[derive(Debug)]
pub struct SourceWatch {
    inotify: Inotify,
    root: PathBuf,
    /// The directory (its key; the root is "") each watch is on.
    dirs: HashMap<WatchDescriptor, String>,
    /// The mount's own changes, left out of what is reported.
    own: Option<Arc<OwnChanges>>,
}

/// What each directory is watched for: everything that changes a name or the bytes of a file,
/// never opens or reads.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// The filesystem `path` is on, if every change to it raises an inotify event here.
pub fn local_filesystem(path: &Path) -> Result<(), WatchError> {
    let fs = statfs::statfs(path).map_err(|e| WatchError::Io(path.to_path_buf(), e.into()))?;
    let kind = fs.filesystem_type();
    let local = [
        statfs::EXT4_SUPER_MAGIC, // also ext2 and ext3: one magic number
        statfs::XFS_SUPER_MAGIC,
        statfs::BTRFS_SUPER_MAGIC,
        statfs::TMPFS_MAGIC,
        statfs::F2FS_SUPER_MAGIC,
        statfs::OVERLAYFS_SUPER_MAGIC,
        statfs::FsType(0x2fc1_2fc1 as _), // ZFS
    ];
    if local.contains(&kind) {
        return Ok(());
    }
    Err(WatchError::NotLocal(path.to_path_buf(), format!("{kind:?}")))
}

impl SourceWatch {
    /// Watch every directory below `root` (which must be on a local filesystem).
    pub fn start(root: &Path) -> Result<SourceWatch, WatchError> {
        local_filesystem(root)?;
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).map_err(|e| match e {
            Errno::EMFILE | Errno::ENFILE => WatchError::Limit,
            e => WatchError::Io(root.to_path_buf(), e.into()),
        })?;
        let mut watch = SourceWatch {
            inotify,
            root: root.to_path_buf(),
            dirs: HashMap::new(),
            own: None,
        };
        watch.add_tree("", None)?;
        Ok(watch)
    }

    /// Leave out of what is reported the changes `own` records as the mount's own.
    pub fn skipping_own(mut self, own: Arc<OwnChanges>) -> Self {
        self.own = Some(own);
        self
    }

    /// Where the store is to record the changes left out (see [`Self::skipping_own`]).
    pub fn own(&self) -> Option<Arc<OwnChanges>> {
        self.own.clone()
    }

    /// Directories watched.
    pub fn watched(&self) -> usize {
        self.dirs.len()
    }

    /// Watch directory `key` and every directory below it. One removed meanwhile is skipped.
    /// `found` gets the key of every entry already in them (none for the first watch).
    fn add_tree(&mut self, key: &str, mut found: Option<&mut BTreeSet<String>>) -> Result<(), WatchError> {
        let mut pending = vec![key.to_string()];
        while let Some(dir) = pending.pop() {
            let path = self.root.join(&dir);
            match self.inotify.add_watch(&path, mask()) {
                Ok(wd) => {
                    self.dirs.insert(wd, dir.clone());
                }
                Err(Errno::ENOENT | Errno::ENOTDIR) if !dir.is_empty() => continue,
                Err(Errno::ENOSPC) => return Err(WatchError::Limit),
                Err(e) => return Err(WatchError::Io(path, e.into())),
            }
            let entries = match std::fs::read_dir(&path) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound && !dir.is_empty() => continue,
                Err(e) => return Err(WatchError::Io(path, e)),
            };
            for entry in entries.flatten() {
                let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                if let Some(found) = found.as_deref_mut().filter(|_| !name.starts_with(super::TEMP_MARKER)) {
                    found.insert(join(&dir, &name));
                }
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    pending.push(join(&dir, &name));
                }
            }
        }
        Ok(())
    }

    /// Stop watching directory `key` and the directories below it (it moved away).
    fn drop_tree(&mut self, key: &str) {
        let below = format!("{key}/");
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, dir)| *dir == key || dir.starts_with(&below))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            let _ = self.inotify.rm_watch(wd);
        }
    }

    /// Wait up to `timeout` for a change; then gather what else arrives for [`GATHER`].
    /// `None`: nothing changed in time.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<Option<Changed>> {
        if !self.ready(timeout)? {
            return Ok(None);
        }
        let mut changed = Changed::default();
        let until = Instant::now() + GATHER;
        loop {
            self.take(&mut changed)?;
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.ready(left)? {
                break;
            }
        }
        if let Some(own) = &self.own {
            changed.keys.retain(|key| !own.holds_own(&self.root, key));
        }
        Ok((changed.everything || !changed.keys.is_empty()).then_some(changed))
    }

    /// Whether events are waiting, after up to `timeout`.
    fn ready(&self, timeout: Duration) -> io::Result<bool> {
        let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(n) => Ok(n > 0),
            Err(Errno::EINTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Read the events waiting now into `changed`.
    fn take(&mut self, changed: &mut Changed) -> io::Result<()> {
        let events = match self.inotify.read_events() {
            Ok(events) => events,
            Err(Errno::EAGAIN | Errno::EINTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for event in events {
            if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                changed.everything = true;
                continue;
            }
            let Some(dir) = self.dirs.get(&event.wd).cloned() else {
                continue;
            };
            if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                self.dirs.remove(&event.wd);
                continue;
            }
            let Some(name) = event.name.as_ref().and_then(|n| n.to_str()) else {
                // An event on the directory itself (removed or moved): its parent's watch
                // reports its name; the root's own means the source went away.
                if dir.is_empty()
                    && event
                        .mask
                        .intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF)
                {
                    changed.everything = true;
                }
                continue;
            };
            if name.starts_with(super::TEMP_MARKER) {
                continue; // a replacement in progress, hidden from listings: its rename counts
            }
            let key = join(&dir, name);
            if event.mask.contains(AddWatchFlags::IN_ISDIR) {
                if event.mask.contains(AddWatchFlags::IN_MOVED_FROM) {
                    self.drop_tree(&key);
                }
                // What a new directory already holds raised no event (a moved one is a change
                // as a whole: its key covers what is below it).
                let created = event.mask.contains(AddWatchFlags::IN_CREATE);
                if event
                    .mask
                    .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
                    && self.add_tree(&key, created.then_some(&mut changed.keys)).is_err()
                {
                    tracing::warn!("cannot watch the new directory {key} of the source: forgetting everything");
                    changed.everything = true;
                }
            }
            changed.keys.insert(key);
        }
        Ok(())
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(watch: &mut SourceWatch) -> Changed {
        watch
            .wait(Duration::from_secs(5))
            .unwrap()
            .expect("a change within 5 s")
    }

    fn keys(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn writes_renames_removals_and_new_directories_are_changes() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/c/0")).unwrap();
        let mut watch = SourceWatch::start(root.path()).unwrap();
        assert_eq!(watch.watched(), 4, "the root, a, a/c, a/c/0");
        assert_eq!(watch.wait(Duration::from_millis(50)).unwrap(), None, "nothing yet");

        std::fs::write(root.path().join("a/c/0/tmp"), b"x").unwrap();
        std::fs::rename(root.path().join("a/c/0/tmp"), root.path().join("a/c/0/1")).unwrap();
        assert_eq!(next(&mut watch).keys, keys(&["a/c/0/1", "a/c/0/tmp"]));

        // A directory made now is watched too, and so is what is made in it later.
        std::fs::create_dir_all(root.path().join("b/c")).unwrap();
        let first = next(&mut watch);
        assert!(first.keys.contains("b"), "{first:?}");
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(root.path().join("b/c/zarr.json"), b"{}").unwrap();
        let mut seen = next(&mut watch).keys;
        seen.remove("b/c");
        assert_eq!(seen, keys(&["b/c/zarr.json"]));

        std::fs::remove_file(root.path().join("a/c/0/1")).unwrap();
        assert_eq!(next(&mut watch).keys, keys(&["a/c/0/1"]));

        // A replacement by the mount: its temporary file is no change, its rename is.
        let temp = root.path().join(format!("a/c/0/{}3.1.1", super::super::TEMP_MARKER));
        std::fs::write(&temp, b"z").unwrap();
        std::fs::rename(&temp, root.path().join("a/c/0/3")).unwrap();
        assert_eq!(next(&mut watch).keys, keys(&["a/c/0/3"]));

        // A directory moved away is no longer watched under its old name; under its new one
        // it is.
        std::fs::rename(root.path().join("a"), root.path().join("z")).unwrap();
        assert_eq!(next(&mut watch).keys, keys(&["a", "z"]));
        std::fs::write(root.path().join("z/c/0/2"), b"y").unwrap();
        assert_eq!(next(&mut watch).keys, keys(&["z/c/0/2"]));
        assert!(!watch.dirs.values().any(|d| d.starts_with('a')), "{:?}", watch.dirs);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_stores_own_changes_are_left_out() {
        use crate::store::{local::LocalStore, Precondition, Store};
        let root = tempfile::tempdir().unwrap();
        let own = Arc::new(OwnChanges::default());
        let store = LocalStore::new(root.path(), true)
            .unwrap()
            .recording_own_changes(own.clone());
        let mut watch = SourceWatch::start(root.path()).unwrap().skipping_own(own);

        store.set("a/c/0/1", "x".into()).await.unwrap();
        let v = store
            .set_if("a/zarr.json", "{}".into(), Precondition::Absent)
            .await
            .unwrap();
        store
            .set_if("a/zarr.json", "{ }".into(), Precondition::Version(v))
            .await
            .unwrap();
        store.create_dir("g/h/").await.unwrap();
        store.rename("a/c/0/1", "a/c/0/2").await.unwrap();
        store.erase("a/c/0/2").await.unwrap();
        store.remove_dir("g/h/").await.unwrap();
        assert_eq!(
            watch.wait(Duration::from_millis(200)).unwrap(),
            None,
            "all the store's own"
        );

        // Another writer's changes still show, also beside the store's own, and inside a
        // directory the store just made (before its watch was added).
        store.set("b/zarr.json", "{}".into()).await.unwrap();
        std::fs::write(root.path().join("b/x"), b"them").unwrap();
        std::fs::write(root.path().join("a/zarr.json"), b"them").unwrap();
        assert_eq!(next(&mut watch).keys, keys(&["a/zarr.json", "b/x"]));
    }

    #[test]
    fn reads_are_not_changes() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("zarr.json"), b"{}").unwrap();
        let mut watch = SourceWatch::start(root.path()).unwrap();
        assert_eq!(std::fs::read(root.path().join("zarr.json")).unwrap(), b"{}");
        let _ = std::fs::read_dir(root.path()).unwrap().count();
        assert_eq!(watch.wait(Duration::from_millis(100)).unwrap(), None);
    }

    #[test]
    fn a_filesystem_without_events_is_refused() {
        // /proc is no local filesystem of the list: its changes raise no event.
        assert!(matches!(
            SourceWatch::start(Path::new("/proc")),
            Err(WatchError::NotLocal(..))
        ));
    }
}
