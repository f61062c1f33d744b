#![no_main]
//! See `zarrfs::fuzzing::draft`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| zarrfs::fuzzing::draft(data));
