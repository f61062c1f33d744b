#![no_main]
//! See `zarrfs::fuzzing::chunk_key`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| zarrfs::fuzzing::chunk_key(data));
