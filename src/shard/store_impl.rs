//! [`ShardedArray`] as a [`Store`]: keys are inner-chunk keys relative to the array.
//!
//! A chunk's version is its shard's version plus its offset, so two reads that agree on it saw
//! the same bytes. Keys outside the chunk tree are not this store's: reads of them find
//! nothing and listings leave them out (the view shows the underlying store for those), and
//! writing them is an invalid key. Writes and erasures of chunk keys are packed into their
//! shard by one conditional rewrite each, like the view's (which batches them per shard
//! through [`ShardedArray::write_chunks`] instead).

use async_trait::async_trait;
use bytes::Bytes;

use super::{ChunkLocation, ShardError, ShardedArray};
use crate::store::{
    Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Store, StoreError, StoreResult, Version,
};
use crate::zarr::key_encoding::ChunkPath;

impl ChunkLocation {
    pub fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            size: self.nbytes,
            version: Version(format!("{}@{}", self.version.0, self.offset)),
            mtime_ns: self.mtime_ns,
        }
    }
}

/// Errors of the transformer expressed in store terms, for callers that only know stores.
fn to_store(e: ShardError) -> StoreError {
    match e {
        ShardError::Store(e) => e,
        other => StoreError::Io {
            key: other.key().unwrap_or_default().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
        },
    }
}

impl ShardedArray {
    fn chunk_coords(&self, key: &str) -> Option<Vec<u64>> {
        match self.encoding.classify(key, self.ndim()) {
            ChunkPath::Chunk(coords) => Some(coords),
            _ => None,
        }
    }

    /// The coordinates of a chunk key that can be written: in the array's grid.
    fn chunk_key(&self, key: &str) -> StoreResult<Vec<u64>> {
        self.chunk_coords(key)
            .filter(|c| self.in_grid(c))
            .ok_or_else(|| StoreError::InvalidKey {
                key: key.to_string(),
                reason: "not a chunk key of this array's grid",
            })
    }
}

#[async_trait]
impl Store for ShardedArray {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            readable: true,
            writable: true,
            listable: true,
            conditional_writes: false,
            directories: false,
            suffix_reads: true,
        }
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        let Some(coords) = self.chunk_coords(key) else {
            return Ok(None);
        };
        let Some(loc) = self.locate(&coords).await.map_err(to_store)? else {
            return Ok(None);
        };
        let meta = loc.meta();
        opts.check_version(key, &meta.version)?;
        let (start, end) = opts.byte_range().resolve(loc.nbytes);
        let bytes = self.read_at(&loc, start, end - start).await?;
        Ok(Some(GetResult {
            bytes,
            offset: start,
            meta,
        }))
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        let Some(coords) = self.chunk_coords(key) else {
            return Ok(None);
        };
        Ok(self.locate(&coords).await.map_err(to_store)?.map(|loc| loc.meta()))
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        let coords = self.chunk_key(key)?;
        self.commit_one(&coords, Some(value)).await.map_err(to_store)?;
        let loc = self.locate(&coords).await.map_err(to_store)?;
        // Removed again before it could be located: another writer came in between.
        loc.map(|l| l.meta().version)
            .ok_or(StoreError::Conflict { key: key.to_string() })
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        let coords = self.chunk_key(key)?;
        self.commit_one(&coords, None).await.map_err(to_store)
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let mut keys = Vec::new();
        for shard in self.stored_shards().await.map_err(to_store)? {
            for (coords, _) in self.chunks_of_shard(&shard).await.map_err(to_store)? {
                let key = self.encoding.encode(&coords);
                if key.starts_with(prefix) {
                    keys.push(key);
                }
            }
        }
        keys.sort();
        Ok(keys)
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        if prefix.is_empty() {
            return self.list_array_dir().await.map_err(to_store);
        }
        match self.encoding.classify(prefix.trim_end_matches('/'), self.ndim()) {
            ChunkPath::Dir(coords) => self.list_chunk_dir(&coords).await.map_err(to_store),
            _ => Ok(Vec::new()),
        }
    }
}
