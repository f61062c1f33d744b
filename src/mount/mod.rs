//! What starts and runs a mount, and the commands that act on a live one.
//!
//! From plain [`settings`] (the command line builds them; nothing here knows clap or argv):
//! [`launch`] checks what can be checked before the process forks, then the mount is served in
//! the foreground or by a [`daemon`] that reports back through a pipe; [`serve`] builds the
//! runtime, opens the [`source`] through the store stack of [`reading`] (which `zarrfs copy`
//! reads through too, so a copy reads as a mount does), checks it, warms up its metadata and
//! mounts the filesystem on a [`mountpoint`] checked first; [`logging`] says what happens.
//! [`stats`] and [`unmount`] are `zarrfs stats` and `zarrfs unmount`, which act on a live
//! mount from outside it.
//!
//! It owns the process around a mount (fork, logging, systemd notification, exit of the
//! daemon) and the wiring of the layers: it builds a store, a view, an `Fs` and a FUSE session
//! and hands each to the next. It never serves a request itself and never looks inside what it
//! wires (no shard, store key or inode is handled here), and it never names the command line
//! (`cli/`) or a copy (`copy/`). Its files import one another without a cycle
//! (`tests/layout.rs`): launch → daemon → serve → reading → source → settings → logging, and
//! unmount → stats → mountpoint; stats_watch → stats; serve → metrics (a mount's `/metrics`, `--metrics-address`).

pub mod daemon;
pub mod launch;
pub mod logging;
mod metrics;
pub mod mountpoint;
pub mod reading;
pub mod serve;
pub mod settings;
pub mod source;
pub mod stats;
pub mod stats_watch;
pub mod unmount;
