//! `easyio bench …`: measurements of each layer, each beside its peer in the same run.

pub mod app;
pub mod applications;
mod engine;
mod micro;
mod plot;
mod qos;
pub mod raw;
mod rt;
mod startup;
pub mod target;

use std::time::{Duration, Instant};

use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// The physical limit: single-core copies into and out of the region.
    Raw(raw::RawArgs),
    /// FxMark-style file system microbenchmarks, beside the kernel's tmpfs.
    Micro(micro::MicroArgs),
    /// Copy engines: latency and bandwidth per backend, size, direction, batch and
    /// channel count, beside the persistent copy and memcpy of the same run.
    Engine(engine::EngineArgs),
    /// The user-level thread runtime: yield, spawn+join and ping-pong vs kernel threads.
    Rt(rt::RtArgs),
    /// EASYIO's real-world applications (Table 1, Fig. 10) in each mode, outputs verified.
    App(app::AppArgs),
    /// Quality of service (EASYIO Fig. 12): a latency-critical reader beside a bulk
    /// copier under no, CPU and engine throttling.
    Qos(qos::QosArgs),
    /// Start-up: `ls` of the same files on images of different sizes (sparse), as a
    /// ratio to the smallest; opening an image should not cost more when it is larger.
    Startup(startup::StartupArgs),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Raw(args) => raw::run(args),
        BenchCommand::Micro(args) => micro::run(args),
        BenchCommand::Engine(args) => engine::run(args),
        BenchCommand::Rt(args) => rt::run(args),
        BenchCommand::App(args) => app::run(args),
        BenchCommand::Qos(args) => qos::run(args),
        BenchCommand::Startup(args) => startup::run(args),
    }
}

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
