//! The mount table (`/proc/self/mountinfo`): which mount is on top of a path, and whether it is
//! a given zarrfs mount.
//!
//! zarrfs unmounts only its own live mount. A path alone cannot say that: after an external
//! unmount the path shows whatever lies beneath (a tmpfs, another mount), and unmounting "the
//! mountpoint" would take that down. So a mount is identified by what the kernel gives it —
//! its mount ID and its device number (a FUSE connection's own) — recorded once it is live,
//! and the topmost mount at the path must still be that one before zarrfs unmounts it.
//!
//! Reading the table never touches the mounted filesystem (a `stat` of the mountpoint would
//! ask the daemon itself, which may not be serving yet, or be dead).

use std::io;
use std::path::{Path, PathBuf};

/// How a zarrfs mount names its source in the table (`zarrfs:` + the source).
pub const SOURCE_PREFIX: &str = "zarrfs:";

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub id: u64,
    pub parent: u64,
    /// `major:minor` of the mounted file system.
    pub dev: String,
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
}

/// What identifies one mount for as long as it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountId {
    pub id: u64,
    pub dev: String,
}

impl MountEntry {
    pub fn identity(&self) -> MountId {
        MountId {
            id: self.id,
            dev: self.dev.clone(),
        }
    }

    /// A FUSE mount (`fuse`, or `fuse.zarrfs` when mounted through fusermount3) whose source
    /// zarrfs named.
    pub fn is_zarrfs(&self) -> bool {
        (self.fstype == "fuse" || self.fstype.starts_with("fuse.")) && self.source.starts_with(SOURCE_PREFIX)
    }
}

/// `\040` and the other octal escapes the kernel writes for spaces, tabs, newlines and `\`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                let value = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let fields: Vec<&str> = left.split(' ').collect();
    let mut right = right.split(' ');
    Some(MountEntry {
        id: fields.first()?.parse().ok()?,
        parent: fields.get(1)?.parse().ok()?,
        dev: fields.get(2)?.to_string(),
        mount_point: PathBuf::from(unescape(fields.get(4)?)),
        fstype: right.next()?.to_string(),
        source: unescape(right.next()?),
    })
}

/// Every entry of a mountinfo text; lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_line).collect()
}

/// The current mount table of this process's mount namespace.
pub fn read() -> io::Result<Vec<MountEntry>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// The mount on top at `path` (what the path shows), if `path` is a mount point: of the
/// entries at `path`, the one no other entry there is mounted on.
pub fn top_at<'a>(entries: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    let here: Vec<&MountEntry> = entries.iter().filter(|e| e.mount_point == path).collect();
    here.iter()
        .rev()
        .find(|e| !here.iter().any(|other| other.parent == e.id && other.id != e.id))
        .copied()
}

/// Whether the mount on top at `path` is `mount`.
pub fn is_on_top(path: &Path, mount: &MountId) -> io::Result<bool> {
    let entries = read()?;
    Ok(top_at(&entries, path).is_some_and(|e| e.identity() == *mount))
}

/// `path` made absolute without resolving its last component: a dead FUSE mount cannot be
/// looked at (ENOTCONN), yet it must be named to be cleaned up or refused.
pub fn absolute_mount_path(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no last component"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok(std::fs::canonicalize(parent)?.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /mnt/d rw,relatime shared:20 - tmpfs tmp rw
41 40 0:36 / /mnt/d rw,nosuid,nodev,relatime shared:21 - fuse.zarrfs zarrfs:/data rw,user_id=0,group_id=0
50 22 0:40 / /mnt/with\\040space rw - fuse.zarrfs zarrfs:/x\\134y rw
garbage line
";

    #[test]
    fn parses_fields_and_escapes() {
        let entries = parse(TABLE);
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[2].id, 41);
        assert_eq!(entries[2].parent, 40);
        assert_eq!(entries[2].dev, "0:36");
        assert_eq!(entries[2].fstype, "fuse.zarrfs");
        assert!(entries[2].is_zarrfs() && entries[3].is_zarrfs() && !entries[1].is_zarrfs());
        let other_fuse = parse("60 22 0:41 / /m rw - fuse sshfs#host: rw");
        assert!(!other_fuse[0].is_zarrfs());
        assert_eq!(entries[3].mount_point, Path::new("/mnt/with space"));
        assert_eq!(entries[3].source, "zarrfs:/x\\y");
    }

    #[test]
    fn the_top_mount_is_the_one_nothing_is_stacked_on() {
        let mut entries = parse(TABLE);
        let top = top_at(&entries, Path::new("/mnt/d")).unwrap();
        assert_eq!(top.id, 41);
        assert!(top.is_zarrfs());
        // The zarrfs mount gone: the tmpfs beneath shows.
        entries.retain(|e| e.id != 41);
        assert_eq!(top_at(&entries, Path::new("/mnt/d")).unwrap().fstype, "tmpfs");
        assert_eq!(top_at(&entries, Path::new("/mnt")), None);
        // Listed out of order, the stacking still decides.
        let mut reversed = parse(TABLE);
        reversed.reverse();
        assert_eq!(top_at(&reversed, Path::new("/mnt/d")).unwrap().id, 41);
    }

    #[test]
    fn absolute_path_of_a_name_that_cannot_be_looked_at() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing");
        assert_eq!(
            absolute_mount_path(&p).unwrap(),
            std::fs::canonicalize(dir.path()).unwrap().join("missing")
        );
        assert!(absolute_mount_path(Path::new("/")).is_err());
    }
}
