//! Fuzz target: the server's request decoder and dispatch — payloads answered by one
//! connection on a fresh file system, which must stay consistent (see
//! `easyio_serve::fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| easyio_serve::fuzz::requests(data));
