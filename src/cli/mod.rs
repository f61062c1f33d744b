//! The command line: the only place that knows clap and argv.
//!
//! [`mount_options`] first turns the FUSE mount helper's form (`zarrfs SOURCE DIR -o OPTIONS`)
//! and `-o` lists into ordinary arguments; [`args`] holds the clap definitions and the parsers
//! of their values; [`settings`] validates `zarrfs mount`'s arguments once into the plain
//! `mount::settings::MountSettings`; [`run`] hands each command to the folder that does it
//! (`mount/`, `copy/`, `inspect/`) with plain structs built from its arguments, and decides
//! the exit code.
//!
//! Nothing below it sees a clap type or an argument's spelling, and nothing of the crate names
//! this folder but `main.rs` and the fuzz targets' entry point (`tests/layout.rs` checks both).

pub mod args;
pub mod mount_options;
pub mod run;
pub mod settings;

pub use args::{mount_long_options, Cli, Command};
pub use run::{read_settings, run};
