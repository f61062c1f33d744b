//! zarrfs: mount sharded Zarr hierarchies as plain, unsharded directory trees.
//!
//! Layers, top to bottom: [`fuse`] (thin fuser adapter) → [`fs`] (operations) → [`view`]
//! (namespace, metadata rewriting) → [`shard`] (sharding transformer) → [`store`] (abstract
//! store interface and backends). [`zarr`] is pure format code used by all of them, [`sys`] the
//! few process-wide helpers they share (allocator, descriptor limit, directory locks, thread
//! kinds). Above the layers: [`cli`] is the command line (the only place that knows clap),
//! [`mount`] starts and runs a mount, [`copy`] copies a hierarchy without mounting it, and
//! [`inspect`] reports on one. [`fuzzing`] is the fuzz targets' entry point.
//! `tests/layout.rs` keeps these modules free of import cycles.

pub mod cli;
pub mod copy;
pub mod fs;
pub mod fuse;
pub mod fuzzing;
pub mod inspect;
pub mod metrics;
pub mod mount;
pub mod shard;
pub mod store;
pub mod sys;
pub mod view;
pub mod zarr;
