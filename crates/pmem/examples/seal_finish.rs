//! The data seal's two finishes timed alone (`pmem::seal`): format version 4's chained
//! finish (`Seal::finish_v1`) against version 5's (`Seal::finish`, every lane mixed on
//! its own), in nanoseconds per finish.
//!
//! ```sh
//! cargo run --release -p pmem --example seal_finish
//! ```
//!
//! "dependent": each finish picks the seal the next one finishes by its result (one
//! load from a small table, in L1, added to each), so they run one after another, as
//! a write's one finish does; "independent": the finishes of a table of seals, which
//! the CPU may overlap. Three rounds, both finishes in each.

use std::hint::black_box;
use std::time::Instant;

use pmem::seal::{Finish, Seal};

/// Seals in the table: each of one stripe of different bytes.
const SEALS: usize = 1024;
/// Finishes per timed loop.
const ROUNDS: usize = 20_000_000;

fn main() {
    let table: Vec<Seal> = (0..SEALS)
        .map(|i| {
            let stripe: Vec<u8> = (0..64)
                .map(|b| (i * 64 + b) as u8 ^ (i >> 8) as u8)
                .collect();
            let mut s = Seal::new();
            s.update(&stripe);
            s
        })
        .collect();
    for round in 1..=3 {
        for (name, how) in [("finish_v1", Finish::V1), ("finish", Finish::V2)] {
            let t = Instant::now();
            let mut i = 0usize;
            for _ in 0..ROUNDS {
                i = black_box(&table[i % SEALS]).finish_as(how) as usize;
            }
            black_box(i);
            let dependent = t.elapsed().as_secs_f64() * 1e9 / ROUNDS as f64;
            let t = Instant::now();
            let mut sum = 0u64;
            for n in 0..ROUNDS {
                sum = sum.wrapping_add(black_box(&table[n % SEALS]).finish_as(how));
            }
            black_box(sum);
            let independent = t.elapsed().as_secs_f64() * 1e9 / ROUNDS as f64;
            println!(
                "round {round}  {name:<9}  dependent {dependent:6.2} ns  independent {independent:6.2} ns"
            );
        }
    }
}
