//! Fuzz target: one or more fields of a valid image set to chosen values, checksums
//! optionally fixed, then mount, read back and fsck.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| crash::fuzz::corrupt_field(data));
