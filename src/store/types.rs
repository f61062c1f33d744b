//! Plain value types of the store interface: byte ranges, versions, listings.

use bytes::Bytes;

/// A byte range of a stored value, as the spec's `get_partial_values` expresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// The whole value.
    Full,
    /// `length` bytes from `offset` (clamped to the value's end).
    Range { offset: u64, length: u64 },
    /// From `offset` to the end.
    From(u64),
    /// The last `n` bytes (all of it when the value is shorter), so an end-located shard
    /// index costs one request without knowing the size first.
    Suffix(u64),
}

impl ByteRange {
    /// Resolve against a value of `size` bytes into a half-open `[start, end)` window.
    pub fn resolve(self, size: u64) -> (u64, u64) {
        match self {
            ByteRange::Full => (0, size),
            ByteRange::Range { offset, length } => {
                let start = offset.min(size);
                (start, offset.saturating_add(length).min(size))
            }
            ByteRange::From(offset) => (offset.min(size), size),
            ByteRange::Suffix(n) => (size.saturating_sub(n), size),
        }
    }
}

/// Identity of one content version of a stored value. Two reads with equal versions saw the
/// same bytes. Local files: inode, size and mtime (a rename-replaced file gets a new inode);
/// memory: a counter; object stores: the ETag or generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(pub String);

/// What must hold for a conditional write ([`Store::set_if`](super::Store::set_if),
/// [`Store::erase_if`](super::Store::erase_if)) to happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// No condition.
    Any,
    /// The key must not exist.
    Absent,
    /// The key must exist with exactly this version.
    Version(Version),
}

/// Options of a read: which bytes, and which version they must come from.
#[derive(Debug, Clone, Default)]
pub struct GetOptions {
    pub range: Option<ByteRange>,
    /// Fail with `VersionMismatch` rather than return bytes of another version.
    pub if_version: Option<Version>,
}

impl GetOptions {
    pub fn range(range: ByteRange) -> Self {
        GetOptions {
            range: Some(range),
            if_version: None,
        }
    }

    pub fn pinned(range: ByteRange, version: Version) -> Self {
        GetOptions {
            range: Some(range),
            if_version: Some(version),
        }
    }

    pub fn byte_range(&self) -> ByteRange {
        self.range.unwrap_or(ByteRange::Full)
    }

    /// `VersionMismatch` unless a pinned read's version is `current`: the one check every
    /// store makes before serving a pinned read.
    pub fn check_version(&self, key: &str, current: &Version) -> Result<(), super::StoreError> {
        match &self.if_version {
            Some(expected) if expected != current => Err(super::StoreError::VersionMismatch {
                key: key.to_string(),
                expected: expected.0.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// The clock now, as an `mtime_ns`: what a value written now is stamped with where the store
/// does not say.
pub fn now_ns() -> Option<i128> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i128::try_from(d.as_nanos()).ok())
}

/// Size and version of a stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub size: u64,
    pub version: Version,
    /// Modification time in nanoseconds since the epoch, when the store knows it.
    pub mtime_ns: Option<i128>,
}

/// Bytes of a read, with the metadata of the version they came from.
#[derive(Debug, Clone)]
pub struct GetResult {
    pub bytes: Bytes,
    /// Offset of `bytes[0]` within the value.
    pub offset: u64,
    pub meta: ObjectMeta,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    File { size: u64 },
    Dir,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: EntryKind,
    /// Modification time in nanoseconds since the epoch, when the store knows it.
    pub mtime_ns: Option<i128>,
}

impl DirEntry {
    pub fn dir(name: impl Into<String>) -> Self {
        DirEntry {
            name: name.into(),
            kind: EntryKind::Dir,
            mtime_ns: None,
        }
    }

    pub fn file(name: impl Into<String>, size: u64, mtime_ns: Option<i128>) -> Self {
        DirEntry {
            name: name.into(),
            kind: EntryKind::File { size },
            mtime_ns,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub readable: bool,
    pub writable: bool,
    pub listable: bool,
    /// The store enforces the preconditions of `set_if` / `erase_if` itself (otherwise only
    /// `Precondition::Any` is supported).
    pub conditional_writes: bool,
    /// The store keeps directories of its own (a local filesystem): an empty one exists until
    /// removed. Elsewhere a directory is a prefix of stored keys, gone with its last key.
    pub directories: bool,
    /// A read of a value's last bytes ([`ByteRange::Suffix`]) is one request. Azure's is two
    /// (it needs the size first), so a reader that could do with the whole value reads it.
    pub suffix_reads: bool,
}
