#![no_main]
//! See `zarrfs::fuzzing::shard_index`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| zarrfs::fuzzing::shard_index(data));
