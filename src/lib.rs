//! zarrfs: mount sharded Zarr hierarchies as plain, unsharded directory trees.
//!
//! Layers, top to bottom: [`fuse`] (thin fuser adapter) → [`fs`] (operations) → [`view`]
//! (namespace, metadata rewriting) → [`shard`] (sharding transformer) → [`store`] (abstract
//! store interface and backends). [`zarr`] is pure format code used by all of them. The
//! command line lives in [`cli`], [`app`] wires a configuration into a running mount, and
//! [`inspect`] reports on a hierarchy.

pub mod allocator;
pub mod app;
pub mod cli;
pub mod copy;
pub mod daemon;
pub mod dir_lock;
pub mod fd_limit;
pub mod fs;
pub mod fuse;
pub mod fuzzing;
pub mod inspect;
pub mod mount_options;
pub mod mount_settings;
pub mod mount_stats;
pub mod mountpoint;
pub mod reading;
pub mod shard;
pub mod source;
pub mod store;
pub mod threads;
pub mod view;
pub mod zarr;
