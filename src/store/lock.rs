//! The system calls under the local store's conditional writes (see [`super::local`]): an open
//! directory that is both the object of an exclusive `flock` and the anchor of
//! directory-relative operations (`renameat2` with its flags, `fstatat`, `linkat`, `unlinkat`,
//! `openat`), so every step of a check-and-replace names entries of the one directory that is
//! locked, even if the path to it changes meanwhile.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;

/// The longest a write waits for a directory's lock before it fails.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// `renameat2` flag: fail with `EEXIST` rather than replace an existing target.
pub(crate) const RENAME_NOREPLACE: u32 = 1;
/// `renameat2` flag: atomically swap source and target (both must exist).
pub(crate) const RENAME_EXCHANGE: u32 = 2;

/// An open directory (`O_RDONLY | O_DIRECTORY | O_CLOEXEC`).
#[derive(Debug)]
pub(crate) struct Dir {
    file: File,
}

/// An exclusive `flock` on a [`Dir`], released on drop.
#[derive(Debug)]
pub(crate) struct DirLock<'a> {
    dir: &'a Dir,
}

impl Drop for DirLock<'_> {
    fn drop(&mut self) {
        // Explicit, so the lock never outlives the guard even if the descriptor was duplicated
        // (a fork); closing the directory would release it as well.
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(self.dir.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Whether an error of `renameat2` / `linkat` means "this filesystem cannot do that", as opposed
/// to a failure of the operation itself.
pub(crate) fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::EPERM)
    )
}

fn nix_io(e: nix::Error) -> io::Error {
    io::Error::from(e)
}

impl Dir {
    pub fn open(path: &Path) -> io::Result<Dir> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(path)?;
        Ok(Dir { file })
    }

    /// Take the exclusive `flock` of this directory, waiting for other holders (other open
    /// descriptions of the directory: other threads, stores or processes) at most
    /// [`LOCK_WAIT`]: a holder that long is stuck, and the write fails instead of hanging.
    pub fn lock(&self) -> io::Result<DirLock<'_>> {
        self.lock_within(LOCK_WAIT)
    }

    /// [`Dir::lock`] with another bound. Polls with a growing pause (1 ms to 50 ms): `flock`
    /// itself can only wait without bound or not at all.
    pub fn lock_within(&self, bound: Duration) -> io::Result<DirLock<'_>> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(DirLock { dir: self });
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) if started.elapsed() < bound => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Some(libc::EWOULDBLOCK) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                        "the directory stayed locked by another writer for {} s (a stuck process holding its flock?)",
                        bound.as_secs()
                    ),
                    ))
                }
                _ => return Err(e),
            }
        }
    }

    /// `fsync` of the directory, making renames and unlinks in it durable.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    /// Create a new file (`O_EXCL`), mode 0666 before the umask.
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(self.file.as_fd(), name, flags, Mode::from_bits_truncate(0o666)).map_err(nix_io)?;
        Ok(File::from(fd))
    }

    /// `stat` of an entry, following a symbolic link (what a reader sees), or `None` when missing.
    pub fn stat(&self, name: &str) -> io::Result<Option<libc::stat>> {
        self.stat_flags(name, AtFlags::empty())
    }

    /// `lstat` of an entry: the identity of the directory entry itself.
    pub fn lstat(&self, name: &str) -> io::Result<Option<libc::stat>> {
        self.stat_flags(name, AtFlags::AT_SYMLINK_NOFOLLOW)
    }

    fn stat_flags(&self, name: &str, flags: AtFlags) -> io::Result<Option<libc::stat>> {
        match nix::sys::stat::fstatat(self.file.as_fd(), name, flags) {
            Ok(st) => Ok(Some(st)),
            Err(nix::Error::ENOENT | nix::Error::ENOTDIR) => Ok(None),
            Err(e) => Err(nix_io(e)),
        }
    }

    /// `renameat2(dir/from, dir/to, flags)`; without flags a plain `renameat`.
    pub fn rename(&self, from: &str, to: &str, flags: u32) -> io::Result<()> {
        if flags == 0 {
            return nix::fcntl::renameat(self.file.as_fd(), from, self.file.as_fd(), to).map_err(nix_io);
        }
        #[cfg(test)]
        if hook::no_rename_flags() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        renameat2(&self.file, from, to, flags)
    }

    /// `linkat(dir/from, dir/to)`: creates `to` atomically, `EEXIST` if it exists.
    pub fn link(&self, from: &str, to: &str) -> io::Result<()> {
        #[cfg(test)]
        if hook::no_links() {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        nix::unistd::linkat(self.file.as_fd(), from, self.file.as_fd(), to, AtFlags::empty()).map_err(nix_io)
    }

    pub fn unlink(&self, name: &str) -> io::Result<()> {
        nix::unistd::unlinkat(self.file.as_fd(), name, UnlinkatFlags::NoRemoveDir).map_err(nix_io)
    }

    /// Remove a temporary name, ignoring that it is already gone.
    pub fn discard(&self, name: &str) {
        match self.unlink(name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(name, "could not remove a temporary file: {e}"),
        }
    }
}

#[cfg(target_os = "linux")]
fn renameat2(dir: &File, from: &str, to: &str, flags: u32) -> io::Result<()> {
    let from = std::ffi::CString::new(from).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let to = std::ffi::CString::new(to).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = dir.as_raw_fd();
    // SAFETY: valid descriptors and NUL-terminated paths that outlive the call. The raw system
    // call, because the libc wrapper is missing from older C libraries (and from musl's libc crate).
    let r = unsafe { libc::syscall(libc::SYS_renameat2, fd, from.as_ptr(), fd, to.as_ptr(), flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// No `renameat2` here: callers take their fallback paths.
#[cfg(not(target_os = "linux"))]
fn renameat2(_dir: &File, _from: &str, _to: &str, _flags: u32) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// Test hooks: run code of the test at fixed points of a conditional write (to play a foreign
/// writer inside the race window), and pretend the filesystem lacks `renameat2` flags or hard
/// links. Per thread, since the local store does its file I/O on the calling thread.
#[cfg(test)]
pub(crate) mod hook {
    use std::cell::{Cell, RefCell};

    /// Where a hook runs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Point {
        /// After the precondition was checked under the lock, before the value is replaced
        /// (or, for an erase, moved away).
        BeforeReplace,
        /// After a foreign value was found where the expected one should have been, before it
        /// is put back.
        BeforeRestore,
    }

    type Hook = Box<dyn FnMut(Point)>;

    thread_local! {
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
        static NO_RENAME_FLAGS: Cell<bool> = const { Cell::new(false) };
        static NO_LINKS: Cell<bool> = const { Cell::new(false) };
    }

    pub fn set(hook: impl FnMut(Point) + 'static) {
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
    }

    pub fn clear() {
        HOOK.with(|h| *h.borrow_mut() = None);
        NO_RENAME_FLAGS.with(|f| f.set(false));
        NO_LINKS.with(|f| f.set(false));
    }

    pub fn fire(point: Point) {
        let taken = HOOK.with(|h| h.borrow_mut().take());
        if let Some(mut hook) = taken {
            hook(point);
            HOOK.with(|h| {
                let mut slot = h.borrow_mut();
                if slot.is_none() {
                    *slot = Some(hook);
                }
            });
        }
    }

    /// Pretend `renameat2` flags are unsupported (`EINVAL`).
    pub fn set_no_rename_flags(on: bool) {
        NO_RENAME_FLAGS.with(|f| f.set(on));
    }

    pub fn no_rename_flags() -> bool {
        NO_RENAME_FLAGS.with(|f| f.get())
    }

    /// Pretend hard links are unsupported (`EPERM`).
    pub fn set_no_links(on: bool) {
        NO_LINKS.with(|f| f.set(on));
    }

    pub fn no_links() -> bool {
        NO_LINKS.with(|f| f.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_held_elsewhere_is_waited_for_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, theirs) = (Dir::open(dir.path()).unwrap(), Dir::open(dir.path()).unwrap());
        let held = theirs.lock().unwrap();
        let started = Instant::now();
        let Err(e) = ours.lock_within(Duration::from_millis(150)) else {
            panic!("locked while another description holds the lock");
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("locked by another writer"), "{e}");
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(started.elapsed() < Duration::from_secs(5));
        // Released while waiting: taken as soon as it is free.
        std::thread::scope(|scope| {
            scope.spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                drop(held);
            });
            assert!(ours.lock_within(Duration::from_secs(10)).is_ok());
        });
    }
}
