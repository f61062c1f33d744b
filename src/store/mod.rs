//! The abstract store interface of the Zarr specification, its backends and decorators.
//!
//! Every layer below the view speaks this vocabulary (`get`, `get_partial_values`, `set`,
//! `set_partial_values`, `erase`, `erase_values`, `erase_prefix`, `list`, `list_prefix`,
//! `list_dir`), so the sharding transformer, a request counter or a fault injector are all
//! stores wrapping stores. Keys are `/`-separated strings without leading slash (see
//! [`key`]); every read returns the object's [`Version`] so callers can cache by content
//! version and pin later ranged reads to it (`GetOptions::if_version`).

pub mod counting;
pub mod error;
pub mod key;
pub mod local;
pub mod memory;
mod types;

pub use error::StoreError;
pub use types::{ByteRange, Capabilities, DirEntry, EntryKind, GetOptions, GetResult, ObjectMeta, Version};

use async_trait::async_trait;
use bytes::Bytes;

pub type StoreResult<T> = Result<T, StoreError>;

/// A Zarr store. Missing keys are `Ok(None)` on reads, never errors.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// What this store can do; callers check before mutating.
    fn capabilities(&self) -> Capabilities;

    /// Read a key, or a byte range of it. The range is clamped to the object: a range that starts
    /// at or beyond the end returns empty bytes. With `if_version`, a store returns
    /// [`StoreError::VersionMismatch`] unless that version is the current one: never stale bytes,
    /// never bytes of another version.
    async fn get(&self, key: &str, opts: GetOptions) -> StoreResult<Option<GetResult>>;

    /// Size and version of a key without reading it.
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>>;

    /// Several reads; backends may coalesce. Results are in request order.
    async fn get_partial_values(&self, requests: &[(String, ByteRange)]) -> StoreResult<Vec<Option<GetResult>>> {
        let mut out = Vec::with_capacity(requests.len());
        for (key, range) in requests {
            out.push(self.get(key, GetOptions::range(*range)).await?);
        }
        Ok(out)
    }

    /// Store a whole value, replacing any previous one atomically.
    async fn set(&self, key: &str, value: Bytes) -> StoreResult<Version>;

    /// Write byte ranges into existing values (offset, bytes). Not every store supports it.
    async fn set_partial_values(&self, _values: &[(String, u64, Bytes)]) -> StoreResult<()> {
        Err(StoreError::Unsupported("set_partial_values"))
    }

    /// Remove a key; removing a missing key is not an error.
    async fn erase(&self, key: &str) -> StoreResult<()>;

    async fn erase_values(&self, keys: &[String]) -> StoreResult<()> {
        for key in keys {
            self.erase(key).await?;
        }
        Ok(())
    }

    /// Remove every key under `prefix` (which ends with `/` or is empty).
    async fn erase_prefix(&self, prefix: &str) -> StoreResult<()> {
        let keys = self.list_prefix(prefix).await?;
        self.erase_values(&keys).await
    }

    /// Every key in the store.
    async fn list(&self) -> StoreResult<Vec<String>> {
        self.list_prefix("").await
    }

    /// Every key starting with `prefix`, full keys, sorted.
    async fn list_prefix(&self, prefix: &str) -> StoreResult<Vec<String>>;

    /// The direct children of a directory prefix (`""` or ending in `/`): keys as files with
    /// their size, deeper prefixes as directories. Names are relative to the prefix, sorted.
    async fn list_dir(&self, prefix: &str) -> StoreResult<Vec<DirEntry>>;

    /// Whether a directory prefix exists. Object stores have no empty directories, so by
    /// default a prefix exists when something is under it; the local store also knows empty ones.
    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        Ok(prefix.is_empty() || !self.list_dir(prefix).await?.is_empty())
    }
}
