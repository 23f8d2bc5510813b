//! The evaluation of easyio: workloads, applications, benchmark targets, measurement
//! (CPU time, histograms, the physical limit), reports (tables, JSON) and plots, the
//! calibration that writes a mover profile, and the demo. Each benchmark measures one
//! layer beside its peer in the same run, and is a runner of three steps: set up,
//! run, report.
//!
//! What it may do: import every library crate of the workspace (pmem, rt, engine,
//! mover, fs) and print its reports. What it must not do: be imported by a library
//! crate — only the `easyio` binary (which parses the arguments and calls a runner)
//! and tests use it; install signal handlers (the binary does, and `command::signals` only
//! reads what they recorded); or hold anything the file system needs to work.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

pub mod app;
pub mod applications;
pub mod args;
mod benchmark;
pub mod calibrate;
pub mod demo;
pub mod emulation;
pub mod engine;
pub mod fuse;
pub mod micro;
mod plot;
pub mod preload;
pub mod qos;
pub mod raw;
pub mod report;
pub mod rt;
pub mod shared;
pub mod startup;
pub mod target;

pub use benchmark::Benchmark;

use std::time::{Duration, Instant};

/// Runs `op` (given the iteration number) repeatedly for about `budget` and returns the
/// mean time per call in nanoseconds. Checks the clock only every few calls so that
/// timing overhead stays out of small operations.
pub fn time_per_op(budget: Duration, mut op: impl FnMut(u64)) -> f64 {
    let mut iter = 0u64;
    let mut batch = 1u64;
    let start = Instant::now();
    loop {
        for _ in 0..batch {
            op(iter);
            iter += 1;
        }
        let elapsed = start.elapsed();
        if elapsed >= budget {
            return elapsed.as_nanos() as f64 / iter as f64;
        }
        batch = (batch * 2).min(1 << 16);
    }
}

/// Median of a small sample.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Bandwidth in GiB/s of moving `bytes` every `ns`.
pub fn gib_per_s(bytes: u64, ns: f64) -> f64 {
    bytes as f64 / ns * 1e9 / (1u64 << 30) as f64
}
