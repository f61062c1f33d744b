#![no_main]
//! See `zarrfs::fuzzing::legacy`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| zarrfs::fuzzing::legacy(data));
