//! Giving freed memory back to the system. glibc keeps the pages of memory freed in many small
//! blocks (a forgotten inode table's entries, the parsed tree of a big metadata document), so
//! the resident size stays at its peak unless the allocator is asked to trim. One place for
//! the one `unsafe` call, used where a large amount was just freed.

/// Ask the C allocator to return free pages to the system.
pub fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}
