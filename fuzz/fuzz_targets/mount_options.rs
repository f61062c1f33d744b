#![no_main]
//! See `zarrfs::fuzzing::mount_options`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| zarrfs::fuzzing::mount_options(data));
