//! The FUSE boundary: the fuser adapter ([`adapter`]) and the mount session ([`session`]).

pub mod adapter;
mod capabilities;
pub mod mount_table;
mod pruning;
pub mod reply;
mod request;
pub mod session;
pub mod watching;

pub use pruning::DEFAULT_MAX_INODES;
