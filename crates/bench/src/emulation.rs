//! `easyio bench emulation`: one core's copies through the slow-memory model, timed on
//! the wall clock, beside the time the model computes for them
//! (`Model::cpu_copy_time`) and, for `optane`, the row of Fastmove Table 4 the model was
//! fitted to. It checks that the emulation spins as long as its arithmetic says on
//! this machine. It is a benchmark, not a test: a busy machine makes a copy later than
//! modelled, never earlier.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use pmem::slowmem::{SlowMem, FASTMOVE_T4_READ_1T, FASTMOVE_T4_WRITE_1T};
use pmem::{Pmem, Region};
use serde::Serialize;

use crate::median;
use crate::raw::slot_offset;
use crate::report::{self, size_label, Machine};
use pmem::slowmem::Preset;

/// The region the copies rotate through: larger than a last-level cache.
const REGION_BYTES: u64 = 64 << 20;

/// The options of `easyio bench emulation`.
#[derive(Args)]
pub struct EmulationArgs {
    /// The slow-memory model (not `none`).
    #[arg(long, value_enum, default_value = "optane")]
    slowmem: Preset,
    /// Milliseconds of copies per size and direction (1 to 60000).
    #[arg(long, default_value_t = 200, value_parser = crate::args::millis())]
    round_ms: u64,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    direction: &'static str,
    bytes: usize,
    /// Median wall-clock time of one copy.
    p50_us: f64,
    /// What the model computes for one copy on an idle medium.
    model_us: f64,
    /// Fastmove Table 4, 1 thread, local (`optane` only).
    table4_us: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    model: &'static str,
    source: &'static str,
    results: Vec<Row>,
}

/// Times single-core reads and writes of Table 4's sizes through the model.
pub fn run(args: EmulationArgs) -> anyhow::Result<()> {
    let Some(model) = args.slowmem.model() else {
        anyhow::bail!("bench emulation needs a model: --slowmem optane or cxl");
    };
    let region: Arc<dyn Pmem> = Arc::new(Region::create_temp(REGION_BYTES)?);
    let slow = SlowMem::new(region, model);
    let budget = Duration::from_millis(args.round_ms);
    let table4 = model.name == "optane";
    let mut results = Vec::new();
    for (rows, write) in [(FASTMOVE_T4_READ_1T, false), (FASTMOVE_T4_WRITE_1T, true)] {
        for (bytes, us) in rows {
            let p50 = p50_ns(&slow, bytes, write, budget);
            results.push(Row {
                direction: if write { "write" } else { "read" },
                bytes,
                p50_us: p50 / 1e3,
                model_us: model.cpu_copy_time(bytes, write).as_secs_f64() * 1e6,
                table4_us: table4.then_some(us),
            });
        }
    }
    let report = Report {
        machine: Machine::this(),
        model: model.name,
        source: model.source,
        results,
    };
    if args.json {
        return report::print_json(&report);
    }
    println!(
        "easyio bench emulation — one core, {} ms per row, median (EMULATED: {})",
        args.round_ms, report.model
    );
    println!("machine: {}", report.machine.describe());
    println!("model:   {}", report.source);
    let rows = report
        .results
        .iter()
        .map(|r| {
            let table = |f: fn(&Row, f64) -> String| r.table4_us.map_or("-".into(), |t| f(r, t));
            vec![
                r.direction.to_string(),
                size_label(r.bytes as u64),
                format!("{:.2}", r.p50_us),
                format!("{:.2}", r.model_us),
                format!("{:.2}x", r.p50_us / r.model_us),
                table(|_, t| format!("{t:.1}")),
                table(|r, t| format!("{:.2}x", r.model_us / t)),
            ]
        })
        .collect();
    println!(
        "{}",
        report::table(
            &[
                "copy",
                "size",
                "p50 µs",
                "model µs",
                "p50 ÷ model",
                "Table 4 µs",
                "model ÷ Table 4"
            ],
            rows
        )
    );
    Ok(())
}

/// The median ns of one copy of `bytes` through `slow` (reads into DRAM, or writes of
/// non-temporal stores and a fence), each timed on its own for about `budget`, with
/// the region's offsets rotating so that no copy finds its data cached.
fn p50_ns(slow: &SlowMem, bytes: usize, write: bool, budget: Duration) -> f64 {
    let src: Vec<u8> = (0..bytes).map(|i| (i * 13) as u8).collect();
    let mut dst = vec![0u8; bytes];
    let len = slow.len();
    let mut ns = Vec::new();
    let begin = Instant::now();
    let mut i = 0u64;
    while begin.elapsed() < budget {
        let off = slot_offset(i, bytes as u64, len, len);
        let t0 = Instant::now();
        if write {
            slow.copy_nt(off, &src);
            slow.fence();
        } else {
            slow.read(off, &mut dst);
        }
        ns.push(t0.elapsed().as_nanos() as f64);
        i += 1;
    }
    std::hint::black_box(&dst);
    median(ns)
}
