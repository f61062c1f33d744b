//! Pure Zarr v3 format logic for zarrfs: metadata parsing, chunk key encodings,
//! chunk-grid arithmetic, sharding analysis, shard-index coding and the mapping
//! between the stored (sharded) layout and the unsharded view.
//!
//! Everything here works on values and byte slices only — no I/O, no async, no
//! locks — so it can be tested exhaustively and used from any thread. Input
//! bytes are untrusted: every function reports malformed or absurd input as a
//! [`ZarrError`] (or `None`) instead of panicking, and all index arithmetic is
//! checked.

pub mod around_sharding;
mod blosc;
pub mod bytes_codecs;
pub mod chunk_keys;
pub mod consolidated;
pub mod draft;
pub mod error;
pub mod grid;
mod json;
pub mod key_encoding;
pub mod legacy;
pub mod locate;
pub mod metadata;
pub mod rect_layout;
pub mod rect_resize;
pub mod rectilinear;
pub mod reshard;
pub mod rewrite;
pub mod shard_index;
pub mod shard_pack;
pub mod shard_shape;
pub mod sharding;
pub mod transcode;
pub mod translate;
pub mod v2_meta;

pub use error::ZarrError;
