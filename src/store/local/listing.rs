//! Directory listings of the local store: the children of a directory (temporary files of
//! writers in flight hidden) and every key under a directory.

use super::*;

pub(super) fn list_dir_blocking(dir: &Path, prefix: &str) -> StoreResult<Vec<DirEntry>> {
    let entries = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if is_missing(&e) => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(prefix, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(prefix, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            tracing::debug!(prefix, "skipping a name that is not UTF-8");
            continue;
        };
        if name.starts_with(TEMP_MARKER) {
            continue;
        }
        // Relative to the open directory (no walk of the whole path per entry); symlinks are
        // followed: the source tree is the user's, shown as it reads.
        let m = match entry.metadata() {
            Ok(m) if m.file_type().is_symlink() => fs::metadata(entry.path()),
            other => other,
        };
        let m = match m {
            Ok(m) => m,
            Err(e) if is_missing(&e) => continue,
            Err(e) => return Err(StoreError::io(prefix, e)),
        };
        out.push(if m.is_dir() {
            DirEntry::dir(name)
        } else {
            DirEntry::file(name, m.len(), meta_of(&m).mtime_ns)
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

pub(super) fn walk(dir: &Path, key_prefix: &str, out: &mut Vec<String>) -> StoreResult<()> {
    for entry in list_dir_blocking(dir, key_prefix)? {
        let key = format!("{key_prefix}{}", entry.name);
        match entry.kind {
            EntryKind::Dir => walk(&dir.join(&entry.name), &format!("{key}/"), out)?,
            EntryKind::File { .. } => out.push(key),
        }
    }
    Ok(())
}
