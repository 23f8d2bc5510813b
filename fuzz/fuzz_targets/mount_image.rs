//! Fuzz target: mount, read back and fsck an arbitrary region image (patches over a
//! zeroed region; seeds are real images).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| crash::fuzz::mount_image(data));
