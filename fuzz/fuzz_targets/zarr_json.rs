#![no_main]
//! See `zarrfs::fuzzing::zarr_json`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| zarrfs::fuzzing::zarr_json(data));
