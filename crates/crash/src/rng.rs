//! The harness's seeded generator: one portable algorithm (PCG-64 MCG), so that a seed
//! names the same workload, crash points and patterns on every machine.

use rand::{Rng, SeedableRng};
pub use rand_pcg::Pcg64Mcg;

/// The generator for `seed`.
pub fn seeded(seed: u64) -> Pcg64Mcg {
    Pcg64Mcg::seed_from_u64(seed)
}

/// Draws below a bound.
pub trait Below {
    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64;
}

impl Below for Pcg64Mcg {
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.random_range(0..n)
        }
    }
}
