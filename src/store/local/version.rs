//! What a version of a local value is — (inode, size, mtime) — and how conditional writes
//! keep a key's versions from ever repeating (see [`advance_mtime`]).

use super::*;

/// The version of an open or stat'ed file.
pub fn meta_of(m: &fs::Metadata) -> ObjectMeta {
    meta_from(m.ino(), m.len(), i128::from(m.mtime()), i128::from(m.mtime_nsec()))
}

/// The version of a `stat` result: the same as [`meta_of`] for the same file.
pub(super) fn meta_of_stat(st: &libc::stat) -> ObjectMeta {
    meta_from(
        ino(st),
        u64::try_from(st.st_size).unwrap_or(0),
        i128::from(st.st_mtime),
        i128::from(st.st_mtime_nsec),
    )
}

pub(super) fn meta_from(ino: u64, size: u64, mtime_s: i128, mtime_nsec: i128) -> ObjectMeta {
    let mtime_ns = mtime_s * 1_000_000_000 + mtime_nsec;
    ObjectMeta {
        size,
        version: Version(format!("{ino:x}-{size:x}-{mtime_ns:x}")),
        mtime_ns: Some(mtime_ns),
    }
}

/// The inode number of a `stat` result (its type varies across targets).
#[allow(clippy::useless_conversion)]
pub(super) fn ino(st: &libc::stat) -> u64 {
    u64::from(st.st_ino)
}

pub(super) fn is_dir_stat(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Set the new value's mtime to `max(now, replaced + 1 ns)` from the precise clock, so that no
/// later value of the key can repeat an earlier version (see the module docs). Best effort: a
/// filesystem that refuses keeps its own timestamp.
pub(super) fn advance_mtime(file: &File, replaced_mtime_ns: Option<i128>) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
        .unwrap_or(0);
    let ns = replaced_mtime_ns.map_or(now, |old| now.max(old + 1));
    let (Ok(secs), Ok(nanos)) = (
        libc::time_t::try_from(ns.div_euclid(1_000_000_000)),
        i64::try_from(ns.rem_euclid(1_000_000_000)),
    ) else {
        return;
    };
    let mtime = nix::sys::time::TimeSpec::new(secs, nanos as _);
    if let Err(e) = nix::sys::stat::futimens(file, &nix::sys::time::TimeSpec::UTIME_OMIT, &mtime) {
        tracing::debug!("could not set the mtime of a new value: {e}");
    }
}
