//! Giving freed memory back to the system. glibc keeps the pages of memory freed in many small
//! blocks (a forgotten inode table's entries, the parsed tree of a big metadata document), so
//! the resident size stays at its peak unless the allocator is asked to trim. One place for
//! the `unsafe` calls, used at start and where a large amount was just freed.
//!
//! Large blocks (a shard's decoded index: 1 MiB for 65,536 chunks) are mapped on their own,
//! so that freeing one gives its pages back at once. glibc raises that threshold to the size
//! of each such block freed, after which they come from the heaps of the allocator's arenas,
//! one per thread that allocates: a walk of ten million chunk files, whose indexes go through
//! the cache one after another, then left about 120 MiB resident in them. So the threshold is
//! fixed at start.
//!
//! And the arenas are few. glibc gives threads up to eight arenas a core, and each keeps what
//! was freed in it: a copy's threads (runtime workers, blocking threads reading and writing
//! local files) grew the process with the number of files copied (180 MiB for 10^6 chunk
//! files, 71 MiB with two arenas). A mount's threads (FUSE and runtime workers) are as many;
//! there two arenas changed less: walks of 10^6 files peaked at 104 MiB against 106 MiB, a
//! walk of 2 x 10^7 at 253 MiB against 237 MiB (one run each), and kept 137 MiB against 165 MiB
//! once it was over; no cost in speed was measured. A `MALLOC_ARENA_MAX` in the environment
//! is left to decide.

/// Blocks of this size or more are mapped on their own (glibc's initial threshold).
const MMAP_THRESHOLD: i32 = 128 << 10;

/// The C allocator's arenas (see the module's documentation).
const ARENAS: i32 = 2;

/// Fix how the C allocator places large blocks and how many arenas it keeps (see the module's
/// documentation). Called once, before any thread is started.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets parameters of the allocator; it takes no pointer.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
    }
}

/// Ask the C allocator to return free pages to the system.
pub fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}
