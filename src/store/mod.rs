//! The abstract store interface of the Zarr specification, its backends and decorators.
//!
//! Every layer below the view speaks this vocabulary (`get`, `get_partial_values`, `set`,
//! `set_partial_values`, `erase`, `erase_values`, `erase_prefix`, `list`, `list_prefix`,
//! `list_dir`), so the sharding transformer, a request counter or a fault injector are all
//! stores wrapping stores. Keys are `/`-separated strings without leading slash (see
//! [`key`]); every read returns the object's [`Version`] so callers can cache by content
//! version and pin later ranged reads to it (`GetOptions::if_version`).
//!
//! Writers that read-modify-write a value (the shard packer rewrites whole shards) use the
//! conditional writes `set_if` / `erase_if` with a [`Precondition`]: the version they read, or
//! "absent". A write whose precondition no longer holds fails with [`StoreError::Conflict`] and
//! changes nothing, so the writer re-reads and retries instead of losing a concurrent update.
//! Stores that enforce preconditions themselves say so in their [`Capabilities`]; the default
//! implementations only support [`Precondition::Any`].

pub mod counting;
pub mod disk_cache;
pub mod error;
pub mod fault;
mod invalidating;
pub mod key;
pub mod known_keys;
pub mod latency;
pub mod list_cache;
pub mod local;
mod lock;
pub mod memory;
pub mod object;
pub mod prefetch;
pub mod remote;
pub mod single_flight;
mod sweep;
pub mod timed;
pub mod transport;
mod types;

pub use error::StoreError;
pub use types::{
    now_ns, ByteRange, Capabilities, DirEntry, EntryKind, GetOptions, GetResult, ObjectMeta, Precondition, Version,
};

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

    /// Replace (or create) a value atomically if the precondition holds; returns the new
    /// version. [`StoreError::Conflict`] when it does not hold (nothing was written).
    ///
    /// The default supports only [`Precondition::Any`] (a plain `set`).
    async fn set_if(&self, key: &str, value: Bytes, condition: Precondition) -> StoreResult<Version> {
        match condition {
            Precondition::Any => self.set(key, value).await,
            Precondition::Absent | Precondition::Version(_) => Err(StoreError::Unsupported("conditional set")),
        }
    }

    /// Remove a value if the precondition holds (`Absent`: Ok if missing, Conflict if present);
    /// [`StoreError::Conflict`] when it does not hold (nothing was removed).
    ///
    /// The default supports only [`Precondition::Any`] (a plain `erase`).
    async fn erase_if(&self, key: &str, condition: Precondition) -> StoreResult<()> {
        match condition {
            Precondition::Any => self.erase(key).await,
            Precondition::Absent | Precondition::Version(_) => Err(StoreError::Unsupported("conditional erase")),
        }
    }

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

    /// Make a directory prefix exist before anything is stored under it. Object stores have no
    /// directories, so by default there is nothing to do; the local store creates one.
    async fn create_dir(&self, _prefix: &str) -> StoreResult<()> {
        Ok(())
    }

    /// Remove an empty directory prefix (by default nothing: an empty prefix does not exist).
    async fn remove_dir(&self, _prefix: &str) -> StoreResult<()> {
        Ok(())
    }

    /// Move a value to another key (replacing what is there). By default a copy and an erase;
    /// the local store renames.
    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        let Some(got) = self.get(from, GetOptions::default()).await? else {
            return Err(StoreError::io(from, std::io::Error::from(std::io::ErrorKind::NotFound)));
        };
        self.set(to, got.bytes).await?;
        self.erase(from).await
    }

    /// Whether a directory prefix exists. Object stores have no empty directories, so by
    /// default a prefix exists when something is under it; the local store also knows empty ones.
    async fn dir_exists(&self, prefix: &str) -> StoreResult<bool> {
        Ok(prefix.is_empty() || !self.list_dir(prefix).await?.is_empty())
    }
}
