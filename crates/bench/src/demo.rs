//! `easyio demo`: a short EASYIO Fig. 10 on this machine — two applications, the
//! synchronous movers against the asynchronous one, with and without slow memory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use pmem::{Pmem, Region};
use serde::Serialize;

use crate::app::{self, AppReport, AppSpec};
use crate::output::Output;
use crate::report::{self, Machine};
use crate::target::{EngineArg, Slowmem, Target};
use fs::Mode;

/// What the demo compares: an I/O-and-computation-balanced application and an
/// I/O-heavy one (EASYIO reports 2.1× for both), the movers of NOVA, Fastmove, OdinFS
/// and EASYIO, on DRAM and on emulated CXL memory.
const APPS: [app::App; 2] = [app::App::Snappy, app::App::Grep];
const MODES: [Mode; 4] = [Mode::Cpu, Mode::DmaSync, Mode::Delegate, Mode::Async];
const SLOWMEM: [Slowmem; 2] = [Slowmem::None, Slowmem::Cxl];
const THREADS: [usize; 2] = [1, 2];
const UTHREADS_PER_CORE: usize = 4;
/// Seconds per run and file sizes (× Table 1) of the full demo and of `--quick`.
const DURATION_S: f64 = 0.8;
const SCALE: f64 = 1.0;
const QUICK_DURATION_S: f64 = 0.03;
const QUICK_SCALE: f64 = 0.02;
/// Region size: room for every input and output of the largest run.
const REGION_BYTES: u64 = 256 << 20;

/// The options of `easyio demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// A few seconds' smoke run: tiny files, very short runs (figures meaningless).
    #[arg(long)]
    quick: bool,
    /// Where to write the plot (default: easyio-demo.svg in the temporary directory;
    /// with --json, no plot unless this is given).
    #[arg(long)]
    plot: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

/// The demo's JSON: the application report plus where the plot went, if anywhere.
#[derive(Serialize)]
struct DemoReport {
    plot: Option<PathBuf>,
    seconds: f64,
    #[serde(flatten)]
    report: AppReport,
}

/// `easyio demo`: every run of the comparison on a temporary region, then the table
/// and the plot (or the JSON).
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let began = Instant::now();
    let (duration, scale) = if a.quick {
        (QUICK_DURATION_S, QUICK_SCALE)
    } else {
        (DURATION_S, SCALE)
    };
    let plot = match (a.plot, a.json) {
        (Some(p), _) => Some(p),
        (None, false) => Some(std::env::temp_dir().join("easyio-demo.svg")),
        (None, true) => None,
    };
    let plot_out = plot
        .as_deref()
        .map(|p| Output::create(p, None))
        .transpose()?;
    let specs = specs(Duration::from_secs_f64(duration));
    let machine = Machine::this();
    if !a.json {
        println!(
            "easyio demo — {} and {} (EASYIO Table 1 sizes ×{scale}) in modes {}, {} and {} \
             thread(s), on DRAM and on EMULATED CXL memory; {} runs of {duration} s",
            APPS[0].name(),
            APPS[1].name(),
            MODES.map(Mode::name).join(", "),
            THREADS[0],
            THREADS[1],
            specs.len(),
        );
        println!("machine: {}", machine.describe());
    }
    // The region is a temporary file in /dev/shm, removed when it is dropped.
    let region: Arc<dyn Pmem> = Arc::new(Region::create_temp(REGION_BYTES)?);
    let results = app::run_all(&specs, scale, &region, a.json)?;
    drop(region);
    let settings = format!(
        "{duration} s per run, sizes ×{scale} of EASYIO Table 1, async: {UTHREADS_PER_CORE} \
         uthreads per worker; cxl = EMULATED slow memory; region: volatile DRAM in /dev/shm"
    );
    if let Some(out) = plot_out {
        app::write_plot(
            out,
            "easyio demo — throughput against threads (cf. EASYIO Fig. 10)",
            &[format!("machine: {}", machine.describe()), settings.clone()],
            &results,
        )?;
    }
    let report = AppReport {
        machine,
        duration_s: duration,
        scale,
        uthreads_per_core: UTHREADS_PER_CORE,
        note: app::NOTE,
        results,
    };
    print_report(report, plot, began.elapsed().as_secs_f64(), a.json)
}

/// Every run of the demo: applications × memories × threads × modes.
fn specs(duration: Duration) -> Vec<AppSpec> {
    let mut specs = Vec::new();
    for app in APPS {
        for slowmem in SLOWMEM {
            for threads in THREADS {
                for mode in MODES {
                    specs.push(AppSpec {
                        app,
                        mode: Target::Easyio(mode),
                        threads,
                        uthreads_per_core: UTHREADS_PER_CORE,
                        slowmem,
                        engine: EngineArg::Software,
                        duration,
                    });
                }
            }
        }
    }
    specs
}

/// The table, the note, where the plot went and how long it took (or the JSON).
fn print_report(
    report: AppReport,
    plot: Option<PathBuf>,
    seconds: f64,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        return report::print_json(&DemoReport {
            plot,
            seconds,
            report,
        });
    }
    println!("{}", app::table(&report.results));
    println!("note:    {}", app::NOTE);
    if let Some(p) = &plot {
        println!("plot:    {}", p.display());
    }
    println!("took:    {seconds:.1} s");
    Ok(())
}
