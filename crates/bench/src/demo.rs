//! `easyio demo`: a short EASYIO Fig. 10 on this machine — two applications, the
//! synchronous movers against the asynchronous one, on DRAM and on emulated Optane,
//! ending with one line that says in plain words, from the run's own figures, what
//! `async` gains on the slow medium and what it costs on DRAM ([`summary`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use pmem::{Pmem, Region};
use serde::Serialize;

use crate::app::{self, AppReport, AppRow, AppSpec};
use crate::report::{self, Machine};
use crate::target::{EngineArg, Target};
use command::output::Output;
use fs::Mode;
use pmem::slowmem::Preset;

/// What the demo compares: a computing application that writes its output (EASYIO
/// reports 2.1× for Snappy) and an I/O-heavy one (Filebench fileserver, 2.3×), the
/// movers of NOVA, Fastmove, OdinFS and EASYIO, on DRAM — where a copy costs the CPU
/// little and handing it over costs more than it saves — and on emulated Optane, whose
/// slow writes are what `async` hides.
const APPS: [app::App; 2] = [app::App::Snappy, app::App::Fileserver];
const MODES: [Mode; 4] = [Mode::Cpu, Mode::DmaSync, Mode::Delegate, Mode::Async];
const SLOWMEM: [Preset; 2] = [Preset::None, Preset::Optane];
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
    /// The plain-words line ([`summary`]).
    summary: Option<String>,
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
             thread(s), on DRAM and on EMULATED Optane; {} runs of {duration} s",
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
         uthreads per worker; optane = EMULATED slow memory; region: volatile DRAM in /dev/shm"
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
        note: app::NOTE_WITHOUT_KERNEL,
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
    let summary = summary(&report.results);
    if json {
        return report::print_json(&DemoReport {
            plot,
            seconds,
            summary,
            report,
        });
    }
    println!("{}", app::table(&report.results));
    println!("note:    {}", app::NOTE_WITHOUT_KERNEL);
    if let Some(p) = &plot {
        println!("plot:    {}", p.display());
    }
    println!("took:    {seconds:.1} s");
    if let Some(line) = summary {
        println!("in short: {line}");
    }
    Ok(())
}

/// `lo–hi×` of `xs` at two decimals, or one figure if they print alike.
fn span(xs: &[f64]) -> String {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = (format!("{lo:.2}"), format!("{hi:.2}"));
    if lo == hi {
        format!("{lo}×")
    } else {
        format!("{lo}–{hi}×")
    }
}

/// Geometric mean of `xs` (which are positive).
fn geomean(xs: &[f64]) -> f64 {
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}

/// Every (row of `mode`, `cpu` row of the same application, threads and medium) pair
/// on `medium`, as (tasks/s ratio, CPU-s/GiB ratio).
fn against_cpu(rows: &[AppRow], mode: Mode, medium: Option<&str>) -> Vec<(f64, f64)> {
    rows.iter()
        .filter(|r| r.mode == Target::Easyio(mode) && r.slowmem == medium)
        .filter_map(|r| {
            let cpu = rows.iter().find(|p| {
                p.mode == Target::Easyio(Mode::Cpu)
                    && (p.app, p.threads, p.slowmem) == (r.app, r.threads, r.slowmem)
            })?;
            (cpu.tasks_per_s > 0.0 && cpu.cpu_s_per_gib > 0.0 && r.tasks_per_s > 0.0).then(|| {
                (
                    r.tasks_per_s / cpu.tasks_per_s,
                    r.cpu_s_per_gib / cpu.cpu_s_per_gib,
                )
            })
        })
        .collect()
}

/// The demo's finding in one line of plain words, built from `rows`: on the emulated
/// medium, `async`'s tasks/s and CPU per GiB as multiples of `cpu`'s (the range over
/// applications and thread counts); on DRAM, the fastest mode by the geometric mean of
/// its tasks/s over `cpu`'s, and `async`'s range there. `None` if the rows lack the
/// pairs to compare.
pub fn summary(rows: &[AppRow]) -> Option<String> {
    let medium = rows.iter().find_map(|r| r.slowmem)?;
    let slow = against_cpu(rows, Mode::Async, Some(medium));
    let dram = against_cpu(rows, Mode::Async, None);
    if slow.is_empty() || dram.is_empty() {
        return None;
    }
    let speed = |v: &[(f64, f64)]| v.iter().map(|p| p.0).collect::<Vec<_>>();
    let cpu = |v: &[(f64, f64)]| v.iter().map(|p| p.1).collect::<Vec<_>>();
    let fastest = MODES
        .into_iter()
        .map(|m| {
            let v = speed(&against_cpu(rows, m, None));
            (m, if v.is_empty() { 0.0 } else { geomean(&v) })
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(m, _)| m)?;
    let on_dram = if fastest == Mode::Async {
        format!(
            "on DRAM, async is fastest too ({} cpu's tasks/s)",
            span(&speed(&dram))
        )
    } else {
        format!(
            "on DRAM, {} mode is fastest (async: {} cpu's tasks/s)",
            fastest.name(),
            span(&speed(&dram))
        )
    };
    Some(format!(
        "on emulated {medium}, async: {} cpu's tasks/s at {} its CPU per GiB; {on_dram}",
        span(&speed(&slow)),
        span(&cpu(&slow)),
    ))
}

#[cfg(test)]
mod tests {
    use super::{summary, Mode};
    use crate::app::{App, AppRow};
    use crate::target::Target;

    fn row(app: App, mode: Mode, threads: usize, slow: bool, tasks: f64, cpu: f64) -> AppRow {
        AppRow {
            app,
            mode: Target::Easyio(mode),
            threads,
            clients: threads,
            slowmem: slow.then_some("optane"),
            tasks: 1,
            tasks_per_s: tasks,
            gib_per_s: 1.0,
            read_kib_per_task: 0.0,
            write_kib_per_task: 0.0,
            p50_ms: 0.0,
            p99_ms: 0.0,
            cpu_s_per_gib: cpu,
            verified: true,
        }
    }

    /// cpu at 100 tasks/s and 2 CPU-s/GiB everywhere; async as given per (slow, threads).
    fn rows(async_slow: [(f64, f64); 2], async_dram: [f64; 2], delegate_dram: f64) -> Vec<AppRow> {
        let mut v = Vec::new();
        for (t, threads) in [1, 2].into_iter().enumerate() {
            for slow in [false, true] {
                v.push(row(App::Snappy, Mode::Cpu, threads, slow, 100.0, 2.0));
                let (tasks, cpu) = if slow {
                    async_slow[t]
                } else {
                    (async_dram[t], 2.0)
                };
                v.push(row(App::Snappy, Mode::Async, threads, slow, tasks, cpu));
                v.push(row(
                    App::Snappy,
                    Mode::Delegate,
                    threads,
                    slow,
                    delegate_dram,
                    2.0,
                ));
            }
        }
        v
    }

    #[test]
    fn the_line_is_built_from_the_figures() {
        let line = summary(&rows([(140.0, 1.0), (360.0, 0.9)], [80.0, 90.0], 95.0)).unwrap();
        assert_eq!(
            line,
            "on emulated optane, async: 1.40–3.60× cpu's tasks/s at 0.45–0.50× its CPU per \
             GiB; on DRAM, cpu mode is fastest (async: 0.80–0.90× cpu's tasks/s)"
        );
    }

    #[test]
    fn other_figures_give_another_line() {
        let line = summary(&rows([(90.0, 3.0), (90.0, 3.0)], [120.0, 130.0], 95.0)).unwrap();
        assert_eq!(
            line,
            "on emulated optane, async: 0.90× cpu's tasks/s at 1.50× its CPU per GiB; \
             on DRAM, async is fastest too (1.20–1.30× cpu's tasks/s)"
        );
        let line = summary(&rows([(200.0, 1.0), (200.0, 1.0)], [50.0, 50.0], 150.0)).unwrap();
        assert!(
            line.ends_with("on DRAM, delegate mode is fastest (async: 0.50× cpu's tasks/s)"),
            "{line}"
        );
    }

    #[test]
    fn without_both_media_there_is_no_line() {
        let only_dram: Vec<AppRow> = rows([(1.0, 1.0); 2], [1.0; 2], 1.0)
            .into_iter()
            .filter(|r| r.slowmem.is_none())
            .collect();
        assert_eq!(summary(&only_dram), None);
    }
}
