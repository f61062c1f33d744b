//! What the mount asks of the kernel at `init`, and what it got. Everything asked for is
//! optional: an older kernel without it still works, only slower.

use fuser::{InitFlags, KernelConfig};

use crate::fs::FsConfig;

/// Requests the kernel may have in flight at once (reads are asynchronous).
const MAX_BACKGROUND: u16 = 64;

/// Ask for the capabilities the mount uses; returns whether the kernel agreed to read files
/// without opening them (see `FsConfig::no_open`).
pub(super) fn negotiate(config: &mut KernelConfig, fs: &FsConfig) -> bool {
    // Listings with attributes: the kernel asks with READDIRPLUS from the start of a listing
    // (or after a lookup in the directory) and with plain READDIR otherwise, so the answer to
    // the first request decides (see `fs/walkers.rs`).
    let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
    // O_TRUNC arrives with OPEN instead of as a separate SETATTR.
    let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
    // Lookups and listings in one directory may run at once: without it the kernel sends them
    // one at a time, so readers of chunk files of one directory (zarr-python's concurrent
    // reads, a parallel copy) would wait for each other's first fetch of a shard.
    let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
    let _ = config.set_max_background(MAX_BACKGROUND);
    if fs.writable {
        // Files written through the mount are FOPEN_DIRECT_IO (see `fs/inodes/caching.rs`);
        // without this a shared mmap of one fails with ENODEV (numpy.memmap, tools that map
        // their input).
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
    }
    if !fs.no_open || fs.writable {
        return false;
    }
    // Both or neither: without dropping pages whose file changed, keeping them across opens
    // would serve stale data.
    match config.add_capabilities(InitFlags::FUSE_NO_OPEN_SUPPORT | InitFlags::FUSE_AUTO_INVAL_DATA) {
        Ok(()) => true,
        Err(missing) => {
            tracing::info!(?missing, "the kernel opens every file (no zero-message opens)");
            false
        }
    }
}
