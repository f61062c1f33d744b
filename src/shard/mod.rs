//! The sharding transformer: serves the *inner chunks* of a sharded array over a store that
//! holds its *shards*.
//!
//! [`ShardedArray`] is a [`Store`](crate::store::Store) whose keys are the inner-chunk keys of
//! one array, relative to the array (`c/3/7`, `c.3.7`, `3.7`, …, in the array's own chunk key
//! encoding). A read of an inner chunk costs one ranged read of the shard index (then cached,
//! see [`index_cache`]) and one ranged read of the chunk, pinned to the version the index came
//! from. Listing returns prefix directories from shard existence and exact leaf entries from
//! the indexes. Nested sharding is followed down to the innermost chunks, whose byte ranges are
//! absolute offsets in the stored shard. Writes of inner chunks are packed back into their
//! shard by conditional read-modify-write, group-committed per shard ([`commit`]).

mod array;
mod chunk_read;
pub mod commit;
pub mod data_cache;
mod error;
pub mod index_cache;
mod index_read;
mod leaf_pages;
mod listing;
pub mod outer;
mod read_ahead;
mod read_order;
mod shard_dirs;
pub mod stats;
mod store_impl;

pub use array::{ChunkLocation, ShardOptions, ShardedArray};
pub use data_cache::DataCache;
pub use error::{Corruption, ShardError};
pub use index_cache::IndexCache;
pub use leaf_pages::{LeafPages, LeafPosition, PAGE_CHUNKS};
pub use listing::DEFAULT_MAX_PROBE_SHARDS;
pub use stats::ShardStats;
