//! What filesystem operations take and give, in plain types (no fuser types): the mount's
//! configuration, attributes, directory entries, an opened file's cache flags, filesystem
//! statistics.

use std::time::{Duration, SystemTime};

use crate::view::Node;

/// `--metadata-ttl indefinite`: longer than any number of seconds the option takes.
pub const INDEFINITE_TTL: Duration = Duration::from_secs(u64::MAX / 4);

#[derive(Debug, Clone)]
pub struct FsConfig {
    pub uid: u32,
    pub gid: u32,
    /// How long the kernel may cache entries and attributes.
    pub attr_ttl: Duration,
    /// Whether mutations are allowed.
    pub writable: bool,
    /// Files are read without being opened (read-only mounts: every source's versions show in
    /// modification times, a local file's own and an object's with its version in the
    /// sub-second part): the kernel then sends no OPEN or RELEASE, keeps every file's pages,
    /// and drops them when a file's size or time changes (see `fs/unopened.rs`).
    pub no_open: bool,
    /// Largest file that may be written through the mount (held in memory until committed).
    pub max_file_size: usize,
    /// Opt-in write-back: how long closed chunk files may wait before their shard is committed.
    pub write_back_delay: Option<Duration>,
    /// Memory for the content of files being written; beyond it they spill to `spill_dir`.
    pub write_buffer_bytes: usize,
    pub spill_dir: std::path::PathBuf,
    /// Serve the `user.zarrfs.*` extended attributes. Off by default: the kernel then stops
    /// asking after the first `getxattr` (ENOSYS), where `ls -l` would otherwise send two
    /// round trips per file (`security.selinux`, `system.posix_acl_access`).
    pub xattrs: bool,
    /// The kernel keeps directory listings (`FOPEN_CACHE_DIR`) while they are unchanged and
    /// their entries valid (`attr_ttl`): set when `--metadata-ttl` is long enough for it to pay
    /// (see `fs/kernel_listings.rs`).
    pub kernel_listings: bool,
    /// The mount is told of the source's changes (a watched local source): `attr_ttl` never
    /// expires, and each change drops what it touched (see `fs/source_changes.rs`).
    pub watched: bool,
}

impl FsConfig {
    pub fn read_only(uid: u32, gid: u32, attr_ttl: Duration) -> Self {
        FsConfig {
            uid,
            gid,
            attr_ttl,
            writable: false,
            no_open: false,
            max_file_size: 1 << 30,
            write_back_delay: None,
            write_buffer_bytes: 256 << 20,
            spill_dir: std::env::temp_dir(),
            xattrs: false,
            kernel_listings: false,
            watched: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
}

/// An open directory handle, whether the kernel may keep the listing it reads, and whether it
/// may go on using the listing it kept.
#[derive(Debug, Clone, Copy)]
pub struct OpenedDir {
    pub fh: u64,
    pub cache: bool,
    pub keep_cache: bool,
}

/// An open file handle, whether the kernel may keep its cached pages of the file, whether
/// closing it needs no flush (it cannot write, so a flush would do nothing), and whether the
/// kernel must send every read and write of it to the daemon (see `fs/inodes/caching.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Opened {
    pub fh: u64,
    pub keep_cache: bool,
    pub no_flush: bool,
    pub direct_io: bool,
}

/// Attributes of a node as the kernel sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    pub size: u64,
    pub mtime: SystemTime,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
}

/// One entry of a directory listing, at position `offset` (the offset to resume after it).
#[derive(Debug, Clone)]
pub struct DirItem {
    /// Inline up to 24 bytes: a listing makes one per entry.
    pub name: compact_str::CompactString,
    /// The directory listed, and its inode.
    pub dir: std::sync::Arc<str>,
    pub dir_ino: u64,
    pub offset: u64,
    pub node: Option<Node>,
    pub kind: FileKind,
    /// Known inode (for `.` and `..`).
    pub ino: Option<u64>,
}

impl DirItem {
    /// The entry's path.
    pub fn path(&self) -> String {
        match self.name.as_str() {
            "." => self.dir.to_string(),
            ".." => super::parent_path(&self.dir).to_string(),
            name => super::child_path(&self.dir, name),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}
