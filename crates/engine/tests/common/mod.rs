//! Helpers shared by the engine's integration tests: regions, patterns, a small RNG.
#![allow(dead_code)]

use std::sync::Arc;

use engine::{format_records, EngineConfig, AREA_BYTES};
use pmem::Region;
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

/// Region offset of the record area in every test region.
pub const AREA: u64 = 0;
/// First byte tests copy to: after the record area.
pub const DATA: u64 = AREA_BYTES;

/// A temporary region of `mib` MiB with formatted records for `channels` channels.
pub fn region(mib: u64, channels: usize) -> Arc<Region> {
    let r = Region::create_temp((mib << 20) + pmem::HEADER_LEN).unwrap();
    format_records(&r, AREA, channels).unwrap();
    Arc::new(r)
}

pub fn config(channels: usize) -> EngineConfig {
    EngineConfig {
        area_off: AREA,
        channels,
        ..EngineConfig::default()
    }
}

pub use testkit::pattern;

/// Seeded random numbers for the tests.
pub fn rng(seed: u64) -> Pcg64Mcg {
    Pcg64Mcg::seed_from_u64(seed)
}

/// Reads `len` bytes of the region at `off`.
pub fn read(region: &Region, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    pmem::Pmem::read(region, off, &mut v);
    v
}
