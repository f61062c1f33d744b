#![no_main]
//! See `zarrfs::fuzzing::bytes_codecs_target`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| zarrfs::fuzzing::bytes_codecs_target(data));
