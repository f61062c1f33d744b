//! Shards stored inside bytes-to-bytes codecs (`[sharding_indexed, gzip]` and the like): a
//! store decorator under one array's [`ShardedArray`](super::ShardedArray) that shows each
//! stored shard decoded, so that everything above it (index reads, ranged chunk reads,
//! listings, commits) works as for a bare shard.
//!
//! A read fetches the whole stored object (a range of it means nothing), decodes it and keeps
//! the result in a cache shared by the mount, keyed by shard and version and bounded in bytes
//! (`--cache-size`); ranges are cut from the decoded bytes, and sizes are decoded sizes. A
//! decoded shard larger than the whole cache is refused with an I/O error and a log line
//! naming the option to raise. A write encodes the shard again before storing it, under the
//! same precondition. Keys outside the chunk key space pass through untouched.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use lru::LruCache;

use crate::store::{
    ByteRange, Capabilities, DirEntry, GetOptions, GetResult, ObjectMeta, Precondition, Store, StoreError, StoreResult,
    Version,
};
use crate::zarr::bytes_codecs::{decode, encode};
use crate::zarr::key_encoding::ChunkKeyEncoding;
use crate::zarr::metadata::CodecSpec;

/// Decoded shards by key, with the version they were decoded from.
type Entries = LruCache<String, (Version, Bytes)>;

/// Decoded shards kept by a mount, bounded in bytes.
#[derive(Debug)]
pub struct DecodedShards {
    capacity: usize,
    /// The entries and the bytes they hold.
    state: Mutex<(Entries, usize)>,
}

impl DecodedShards {
    pub fn new(capacity: usize) -> Self {
        let entries = NonZeroUsize::new(4096).unwrap_or(NonZeroUsize::MIN);
        DecodedShards {
            capacity,
            state: Mutex::new((LruCache::new(entries), 0)),
        }
    }

    pub(crate) fn get(&self, key: &str, version: &Version) -> Option<Bytes> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match state.0.get(key) {
            Some((v, bytes)) if v == version => Some(bytes.clone()),
            _ => None,
        }
    }

    pub(crate) fn put(&self, key: &str, version: Version, bytes: Bytes) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (entries, used) = &mut *state;
        if let Some((_, old)) = entries.put(key.to_string(), (version, bytes.clone())) {
            *used = used.saturating_sub(old.len());
        }
        *used += bytes.len();
        while *used > self.capacity {
            match entries.pop_lru() {
                Some((_, (_, gone))) => *used = used.saturating_sub(gone.len()),
                None => break,
            }
        }
    }

    fn forget(&self, key: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, gone)) = state.0.pop(key) {
            state.1 = state.1.saturating_sub(gone.len());
        }
    }
}

impl Default for DecodedShards {
    fn default() -> Self {
        DecodedShards::new(64 << 20)
    }
}

/// The store of one array whose shards are wrapped in `codecs` (module docs).
#[derive(Debug)]
pub struct OuterCodecs {
    inner: Arc<dyn Store>,
    codecs: Vec<CodecSpec>,
    decoded: Arc<DecodedShards>,
    /// The array's key prefix and chunk key encoding: shards are its chunk keys; other keys
    /// pass through.
    prefix: String,
    encoding: ChunkKeyEncoding,
    ndim: usize,
}

impl OuterCodecs {
    pub fn new(
        inner: Arc<dyn Store>,
        codecs: Vec<CodecSpec>,
        decoded: Arc<DecodedShards>,
        prefix: String,
        encoding: ChunkKeyEncoding,
        ndim: usize,
    ) -> Self {
        OuterCodecs {
            inner,
            codecs,
            decoded,
            prefix,
            encoding,
            ndim,
        }
    }

    fn is_shard(&self, key: &str) -> bool {
        key.strip_prefix(&self.prefix)
            .is_some_and(|rel| self.encoding.decode(rel, self.ndim).is_some())
    }

    /// The decoded shard at `key` (of the pinned version, if any), with the stored object's
    /// metadata.
    async fn whole(&self, key: &str, if_version: Option<Version>) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let opts = GetOptions {
            range: None,
            if_version: if_version.clone(),
        };
        // A pinned read of a version already decoded: those bytes are that version's.
        if let Some(version) = &if_version {
            if let Some(bytes) = self.decoded.get(key, version) {
                let meta = ObjectMeta {
                    size: bytes.len() as u64,
                    version: version.clone(),
                    mtime_ns: None,
                };
                return Ok(Some((bytes, meta)));
            }
        }
        let Some(got) = self.inner.get(key, opts).await? else {
            return Ok(None);
        };
        if let Some(bytes) = self.decoded.get(key, &got.meta.version) {
            return Ok(Some((bytes, got.meta)));
        }
        let limit = self.decoded.capacity;
        let bytes = match decode(&self.codecs, &got.bytes, limit) {
            Ok(bytes) => Bytes::from(bytes),
            Err(crate::zarr::ZarrError::TooLarge { .. }) => {
                tracing::warn!(
                    key,
                    limit,
                    "a shard decoded from its codecs would be larger than the whole cache: raise --cache-size"
                );
                return Err(StoreError::io(
                    key,
                    std::io::Error::other(format!("decoded shard larger than --cache-size ({limit} bytes)")),
                ));
            }
            Err(e) => {
                return Err(StoreError::io(
                    key,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("cannot decode the shard: {e}")),
                ))
            }
        };
        self.decoded.put(key, got.meta.version.clone(), bytes.clone());
        Ok(Some((bytes, got.meta)))
    }

    fn encoded(&self, key: &str, value: &Bytes) -> StoreResult<Bytes> {
        encode(&self.codecs, value)
            .map(Bytes::from)
            .map_err(|e| StoreError::io(key, std::io::Error::other(format!("cannot encode the shard: {e}"))))
    }
}

#[async_trait]
impl Store for OuterCodecs {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>> {
        if !self.is_shard(key) {
            return self.inner.get(key, opts).await;
        }
        let Some((bytes, meta)) = self.whole(key, opts.if_version.clone()).await? else {
            return Ok(None);
        };
        let (start, end) = opts.byte_range().resolve(bytes.len() as u64);
        let meta = ObjectMeta {
            size: bytes.len() as u64,
            ..meta
        };
        Ok(Some(GetResult {
            bytes: bytes.slice(start as usize..end as usize),
            offset: start,
            meta,
        }))
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if !self.is_shard(key) {
            return self.inner.head(key).await;
        }
        // The version is what callers ask a head for; the decoded size when it is known, else
        // the stored one (a read gives decoded sizes).
        let Some(meta) = self.inner.head(key).await? else {
            return Ok(None);
        };
        let size = self
            .decoded
            .get(key, &meta.version)
            .map_or(meta.size, |b| b.len() as u64);
        Ok(Some(ObjectMeta { size, ..meta }))
    }

    async fn get_partial_values(&self, requests: &[(String, ByteRange)]) -> StoreResult<Vec<Option<GetResult>>> {
        let mut out = Vec::with_capacity(requests.len());
        for (key, range) in requests {
            out.push(self.get(key, GetOptions::range(*range)).await?);
        }
        Ok(out)
    }

    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version> {
        self.set_if(key, value, Precondition::Any).await
    }

    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        if !self.is_shard(key) {
            return self.inner.set_if(key, value, condition).await;
        }
        let stored = self.encoded(key, &value)?;
        self.decoded.forget(key);
        let version = self.inner.set_if(key, stored, condition).await?;
        self.decoded.put(key, version.clone(), value);
        Ok(version)
    }

    async fn erase(&self, key: &str) -> StoreResult<()> {
        self.decoded.forget(key);
        self.inner.erase(key).await
    }

    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        self.decoded.forget(key);
        self.inner.erase_if(key, condition).await
    }

    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.inner.list_prefix(prefix).await
    }

    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>> {
        self.inner.list_dir(prefix).await
    }

    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        self.inner.dir_exists(prefix).await
    }
}
