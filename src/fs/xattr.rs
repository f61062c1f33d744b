//! Extended attributes: `user.zarrfs.source` on every file (where its bytes live) and
//! `user.zarrfs.stats` on the root (the mount's counters as JSON).

use super::*;

impl Fs {
    /// Where a file's bytes come from, as text.
    async fn source_text(&self, ino: u64) -> FsResult<String> {
        let at = self.view.locate(&self.path_of(ino)?).await?;
        let node = self.node(&at).await?;
        self.view.describe(&node).await?.ok_or(FsError::NoAttribute)
    }

    pub async fn getxattr(&self, ino: u64, name: &str) -> FsResult<Vec<u8>> {
        self.ops.count(&self.ops.getxattrs);
        if name == XATTR_STATS && ino == ROOT_INO {
            let counters = self.counters.as_ref().ok_or(FsError::NoAttribute)?;
            let mut stats = counters.snapshot();
            stats.extend(self.view.shard_stats().snapshot());
            stats.extend(self.ops.snapshot());
            return serde_json::to_vec(&stats).map_err(|_| FsError::NoAttribute);
        }
        if name != XATTR_SOURCE {
            return Err(FsError::NoAttribute);
        }
        Ok(self.source_text(ino).await?.into_bytes())
    }

    /// Names of the extended attributes, NUL-terminated, as `listxattr` returns them.
    pub async fn listxattr(&self, ino: u64) -> FsResult<Vec<u8>> {
        let path = self.path_of(ino)?;
        if ino == ROOT_INO && self.counters.is_some() {
            return Ok(format!("{XATTR_STATS}\0").into_bytes());
        }
        let node = self.node(&self.view.locate(&path).await?).await?;
        if node.is_dir() {
            return Ok(Vec::new());
        }
        Ok(format!("{XATTR_SOURCE}\0").into_bytes())
    }
}
