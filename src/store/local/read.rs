//! Reads of the local store. A pinned read (the chunk reads of the sharding transformer) goes
//! through a small cache of open files: a cached descriptor is used only while the path still
//! names the pinned version (a `stat` per read), which saves an open and a close per chunk and
//! keeps the kernel's readahead state across the chunks of a shard.

use super::*;

impl LocalStore {
    /// A pinned read through the cache of open files. The path is stat'ed first: a cached file
    /// is used only while the path still names the pinned version, so a replaced value is
    /// never served, and a stat costs far less than an open and a close.
    pub(super) fn get_pinned(
        &self,
        path: &Path,
        key: &str,
        pinned: &Version,
        opts: &GetOptions,
    ) -> StoreResult<Option<GetResult>> {
        let current = match fs::metadata(path) {
            Ok(m) if m.is_dir() => return Ok(None),
            Ok(m) => meta_of(&m).version,
            Err(e) if is_missing(&e) => return Ok(None),
            Err(e) => return Err(StoreError::io(key, e)),
        };
        if current != *pinned {
            return Err(StoreError::VersionMismatch {
                key: key.to_string(),
                expected: pinned.0.clone(),
            });
        }
        let cached = self
            .open_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        if let Some((file, version)) = cached {
            if version == *pinned {
                return read_open(&file, key, opts);
            }
        }
        let Some(file) = open_file(path, key)? else {
            return Ok(None);
        };
        let result = read_open(&file, key, opts)?;
        if let Some(got) = &result {
            let entry = (Arc::new(file), got.meta.version.clone());
            self.open_files
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .put(key.to_string(), entry);
        }
        Ok(result)
    }
}

pub(super) fn open_file(path: &Path, key: &str) -> StoreResult<Option<File>> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if is_missing(&e) => Ok(None),
        Err(e) => Err(StoreError::io(key, e)),
    }
}

/// Read from an open file, after checking its version against the pin.
pub(super) fn read_open(file: &File, key: &str, opts: &GetOptions) -> StoreResult<Option<GetResult>> {
    let m = file.metadata().map_err(|e| StoreError::io(key, e))?;
    if m.is_dir() {
        return Ok(None);
    }
    let meta = meta_of(&m);
    opts.check_version(key, &meta.version)?;
    let (start, end) = opts.byte_range().resolve(meta.size);
    let len = usize::try_from(end - start)
        .map_err(|_| StoreError::io(key, std::io::Error::new(ErrorKind::InvalidInput, "range too large")))?;
    let mut buf = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buf[filled..], start + filled as u64) {
            Ok(0) => break, // the file shrank under us; return what is there
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(StoreError::io(key, e)),
        }
    }
    buf.truncate(filled);
    Ok(Some(GetResult {
        bytes: Bytes::from(buf),
        offset: start,
        meta,
    }))
}
