//! The benchmarks by name, as `easyio bench NAME` offers them: each with its arguments
//! and its runner.

use clap::Subcommand;

use crate::{app, emulation, engine, fuse, micro, preload, qos, raw, rt, shared, startup};

/// One benchmark and its arguments.
#[derive(Subcommand)]
pub enum Benchmark {
    /// The physical limit: single-core copies into and out of the region.
    Raw(raw::RawArgs),
    /// The slow-memory model on the wall clock: one core's copies of Fastmove Table 4's
    /// sizes, beside the model's computed time and the table's row (EMULATED).
    Emulation(emulation::EmulationArgs),
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
    /// fio-like workloads through a FUSE mount of a fresh image (`easyio mount`),
    /// beside the kernel's tmpfs and the library in the same run.
    Fuse(fuse::FuseArgs),
    /// fio through the LD_PRELOAD shim (libeasyio_preload.so) on a fresh image, beside
    /// the same fio on the kernel's tmpfs in the same run.
    Preload(preload::PreloadArgs),
    /// Client processes of `easyio serve` beside the library in-process: read, write
    /// and create latency, a reader beside writers, create throughput of two clients.
    Shared(shared::SharedArgs),
}

impl Benchmark {
    /// Runs the benchmark; `easyio` is the binary the door benchmarks start (mount,
    /// serve, the shim's commands).
    pub fn run(self, easyio: &std::path::Path) -> anyhow::Result<()> {
        match self {
            Benchmark::Raw(args) => raw::run(args),
            Benchmark::Emulation(args) => emulation::run(args),
            Benchmark::Micro(args) => micro::run(args),
            Benchmark::Engine(args) => engine::run(args),
            Benchmark::Rt(args) => rt::run(args),
            Benchmark::App(args) => app::run(args),
            Benchmark::Qos(args) => qos::run(args),
            Benchmark::Startup(args) => startup::run(args),
            Benchmark::Fuse(args) => fuse::run(args, easyio),
            Benchmark::Preload(args) => preload::run(args, easyio),
            Benchmark::Shared(args) => shared::run(args, easyio),
        }
    }
}
