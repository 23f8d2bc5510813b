//! `easyio bench app`: EASYIO's real-world applications (§6.3, Table 1, Fig. 10) in
//! each mode, reading their inputs from and writing their outputs to files.
//!
//! Each client (a kernel thread, or in `async` a uthread, `--uthreads-per-core` per
//! worker) repeats one *task* of its application until the run's time is up:
//!
//! | app        | one task                                                          |
//! |------------|-------------------------------------------------------------------|
//! | snappy     | read a Snappy file, decompress, write the output                  |
//! | jpeg       | read a JPEG, decode to RGB888, write the pixels                   |
//! | aes        | read a file, encrypt it with AES-128-CTR, write the ciphertext    |
//! | grep       | read a text file, count the lines a regex matches                 |
//! | knn        | read query samples, find each one's nearest point in a k-d tree   |
//! | bfs        | read a serialised graph, build it, breadth-first search           |
//! | fileserver | create, write, close, append, read back, delete; stat an input   |
//! | webserver  | read ten whole files, append to one log shared by every client    |
//!
//! Every result is checked (checksums of the decompressed, decoded, encrypted and read
//! data; match counts; search results), and each output file is read back and checked
//! after the run, so a fast wrong answer fails the run instead of reporting it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hdrhistogram::Histogram;
use pmem::slowmem::{Model, Preset};
use pmem::{Pmem, Region};
use serde::Serialize;

pub use crate::applications::App;
use crate::applications::{checksum, Dataset, Output, Scratch, INPUTS, WEBSERVER_READS};
use crate::args;
use crate::plot;
use crate::report::{self, Machine};
use crate::target::{
    run_clients, timed_loop, EngineArg, Gate, Handle, Mount, Target, ThreadResult,
};
use command::output;
use command::{progress, signals};

/// Files a fileserver client cycles its created files through.
const FILESERVER_SET: u64 = 8;

/// The options of `easyio bench app`.
#[derive(Args)]
pub struct AppArgs {
    /// Applications, comma-separated, or `all`.
    #[arg(long, value_delimiter = ',', default_value = "snappy,grep")]
    app: Vec<App>,
    /// Modes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cpu,semaphore,delegate,dma-sync,async,kernel"
    )]
    mode: Vec<Target>,
    /// Worker thread counts, comma-separated (1 to 1024 each).
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = args::threads())]
    threads: Vec<usize>,
    /// Uthreads per worker in async modes (1 to 1024).
    #[arg(long, default_value_t = 4, value_parser = args::threads())]
    uthreads_per_core: usize,
    /// Slow-memory emulation applied to the region (easyio modes only).
    #[arg(long, value_enum, default_value = "none")]
    slowmem: Preset,
    /// Copy engine of the dma-sync and async modes.
    #[arg(long, value_enum, default_value = "software")]
    engine: EngineArg,
    /// Seconds per run (more than 0, at most 3600).
    #[arg(long, default_value_t = 1.0, value_parser = args::seconds)]
    duration: f64,
    /// File sizes as a multiple of EASYIO Table 1's (more than 0, at most 16).
    #[arg(long, default_value_t = 1.0, value_parser = args::scale)]
    scale: f64,
    /// Size of the easyio region (a temporary file in /dev/shm).
    #[arg(long, default_value = "1G", value_parser = command::args::size)]
    region_size: u64,
    /// Write an SVG plot of throughput against threads, one line per mode.
    #[arg(long)]
    plot: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

/// One measured configuration.
#[derive(Clone, Copy)]
pub struct AppSpec {
    /// The application.
    pub app: App,
    /// What it runs on.
    pub mode: Target,
    /// Worker threads (kernel threads, or the runtime's workers in `async`).
    pub threads: usize,
    /// Clients per worker in `async` modes.
    pub uthreads_per_core: usize,
    /// Slow-memory emulation of the region.
    pub slowmem: Preset,
    /// Copy engine of the modes that use one.
    pub engine: EngineArg,
    /// How long the clients run.
    pub duration: Duration,
}

/// What one configuration measured.
#[derive(Serialize, Clone)]
pub struct AppRow {
    /// The application.
    pub app: App,
    /// What it ran on.
    pub mode: Target,
    /// Worker threads.
    pub threads: usize,
    /// Clients (uthreads in async modes).
    pub clients: usize,
    /// The slow-memory model applied, if any: this result is emulated.
    pub slowmem: Option<&'static str>,
    /// Tasks all clients completed.
    pub tasks: u64,
    /// Tasks of all clients per second of wall time from the common start.
    pub tasks_per_s: f64,
    /// File data read plus written, GiB/s.
    pub gib_per_s: f64,
    /// File data read per task, KiB.
    pub read_kib_per_task: f64,
    /// File data written per task, KiB.
    pub write_kib_per_task: f64,
    /// Median latency of a task, ms.
    pub p50_ms: f64,
    /// 99th-percentile latency of a task, ms.
    pub p99_ms: f64,
    /// CPU-seconds of the whole process per GiB of file data moved.
    pub cpu_s_per_gib: f64,
    /// Every result and output file matched its checksum (a mismatch fails the run).
    pub verified: bool,
}

/// A report of application runs.
#[derive(Serialize)]
pub struct AppReport {
    /// The machine measured.
    pub machine: Machine,
    /// Seconds per run.
    pub duration_s: f64,
    /// File sizes as a multiple of EASYIO Table 1's.
    pub scale: f64,
    /// Clients per worker in `async` modes.
    pub uthreads_per_core: usize,
    /// What the columns mean.
    pub note: &'static str,
    /// A row per configuration.
    pub results: Vec<AppRow>,
}

/// What every report's figures mean, less the `kernel` rows (which the demo has not).
macro_rules! figures_note {
    () => {
        "slowmem results are EMULATED; tasks/s = tasks of all clients / wall time from the \
         common start to the last finish"
    };
}

/// Note printed with every report.
pub const NOTE: &str = concat!(
    "kernel = the same code through std::fs on the host tmpfs (not persistent); ",
    figures_note!()
);

/// The note of a report without `kernel` rows (the demo's).
pub const NOTE_WITHOUT_KERNEL: &str = figures_note!();

/// Bytes a client read and wrote.
#[derive(Default)]
struct Moved {
    read: u64,
    written: u64,
}

/// One client's buffers: an input of each file, a fileserver file read back whole, and
/// what it processes with.
struct Buffers {
    inputs: Vec<Vec<u8>>,
    whole: Vec<u8>,
    scratch: Scratch,
}

/// Runs tasks of `set`'s application on `t` as client `id` until `duration` after the
/// start line, then reads back and checks its last output.
fn client(
    t: &Mount,
    set: &Dataset,
    id: usize,
    duration: Duration,
    gate: &Gate,
    log_appends: &AtomicU64,
) -> anyhow::Result<(ThreadResult, Moved)> {
    let app = set.app;
    let dir = format!("/c{id}");
    t.mkdir(&dir)?;
    let out_path = format!("{dir}/out");
    let mut moved = Moved::default();
    let mut last_out: Option<(usize, u64)> = None;
    let mut bufs = Buffers {
        inputs: set.inputs.iter().map(|i| vec![0; i.data.len()]).collect(),
        whole: vec![0u8; set.inputs[0].data.len() + set.append.len()],
        scratch: set.scratch(),
    };
    let log = (app == App::Webserver)
        .then(|| t.open("/log", false, true))
        .transpose()?;
    let deadline = gate.arrive_and_wait()? + duration;
    let result = timed_loop(
        deadline,
        |i| {
            let k = (id + i as usize) % INPUTS;
            let (r0, w0) = (moved.read, moved.written);
            match app {
                App::Fileserver => {
                    let p = format!("{dir}/f{}", i % FILESERVER_SET);
                    fileserver_task(t, set, k, &p, &mut bufs.whole, &mut moved)?;
                }
                App::Webserver => {
                    let log = log.as_ref().expect("log opened");
                    webserver_task(t, set, k, log, &mut bufs.inputs, &mut moved)?;
                    log_appends.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    let out = compute_task(t, set, k, &out_path, &mut bufs, &mut moved)?;
                    last_out = out.or(last_out);
                }
            }
            Ok(moved.read - r0 + moved.written - w0)
        },
        |_| Ok(false),
    )?;
    if let Some(h) = log {
        t.close(h)?;
    }
    if let Some((len, expect)) = last_out {
        check_output(t, app, &out_path, len, expect)?;
    }
    Ok((result, moved))
}

/// A fileserver task on `p`: create and write input `k`, append, read it all back and
/// check it, delete it; stat an input.
fn fileserver_task(
    t: &Mount,
    set: &Dataset,
    k: usize,
    p: &str,
    whole: &mut [u8],
    moved: &mut Moved,
) -> anyhow::Result<()> {
    let data = &set.inputs[k].data;
    let h = t.open(p, true, false)?;
    t.pwrite(&h, data, 0)?;
    t.close(h)?;
    let h = t.open(p, false, true)?;
    t.append(&h, &set.append)?;
    t.close(h)?;
    let h = t.open(p, false, false)?;
    let n = data.len() + set.append.len();
    t.read_exact(&h, &mut whole[..n], 0)?;
    t.close(h)?;
    anyhow::ensure!(
        checksum(&whole[..n]) == set.inputs[k].expect,
        "fileserver read back different data from {p}"
    );
    t.unlink(p)?;
    t.size(&format!("/in/{k}"))?;
    moved.written += n as u64;
    moved.read += n as u64;
    Ok(())
}

/// A webserver task: read ten whole inputs from `k` on and check them, then append
/// to the shared log.
fn webserver_task(
    t: &Mount,
    set: &Dataset,
    k: usize,
    log: &Handle,
    bufs: &mut [Vec<u8>],
    moved: &mut Moved,
) -> anyhow::Result<()> {
    for j in 0..WEBSERVER_READS {
        let k = (k + j) % INPUTS;
        let h = t.open(&format!("/in/{k}"), false, false)?;
        t.read_exact(&h, &mut bufs[k], 0)?;
        t.close(h)?;
        anyhow::ensure!(
            checksum(&bufs[k]) == set.inputs[k].expect,
            "webserver read different data from /in/{k}"
        );
        moved.read += bufs[k].len() as u64;
    }
    t.append(log, &set.append)?;
    moved.written += set.append.len() as u64;
    Ok(())
}

/// A task of a computing application: read input `k`, process it (which checks the
/// result) and write the output, if the application has one, to `out_path`. Returns
/// the output's length and checksum, for the check after the run.
fn compute_task(
    t: &Mount,
    set: &Dataset,
    k: usize,
    out_path: &str,
    bufs: &mut Buffers,
    moved: &mut Moved,
) -> anyhow::Result<Option<(usize, u64)>> {
    let input = &mut bufs.inputs[k];
    let h = t.open(&format!("/in/{k}"), false, false)?;
    t.read_exact(&h, input, 0)?;
    t.close(h)?;
    moved.read += input.len() as u64;
    let Output::Bytes(out) = set.process(&bufs.scratch, k, input)? else {
        return Ok(None);
    };
    let h = t.open(out_path, true, false)?;
    t.pwrite(&h, &out, 0)?;
    t.close(h)?;
    moved.written += out.len() as u64;
    Ok(Some((out.len(), set.inputs[k].expect)))
}

/// Reads back the last output a client wrote and checks it.
fn check_output(
    t: &Mount,
    app: App,
    out_path: &str,
    len: usize,
    expect: u64,
) -> anyhow::Result<()> {
    let h = t.open(out_path, false, false)?;
    let mut back = vec![0u8; len];
    t.read_exact(&h, &mut back, 0)?;
    t.close(h)?;
    anyhow::ensure!(
        checksum(&back) == expect,
        "{}: the output file read back differs from what was written",
        app.name()
    );
    Ok(())
}

/// Runs one configuration on a freshly formatted `region` (or the kernel's tmpfs).
pub fn run_one(
    spec: &AppSpec,
    set: &Arc<Dataset>,
    region: &Arc<dyn Pmem>,
) -> anyhow::Result<AppRow> {
    let kernel_dir = PathBuf::from(format!("/dev/shm/easyio-bench-app-{}", std::process::id()));
    let target = Arc::new(Mount::set_up(
        spec.mode,
        spec.engine,
        region,
        spec.slowmem.model(),
        &kernel_dir,
        spec.threads,
    )?);
    target.mkdir("/in")?;
    for (k, input) in set.inputs.iter().enumerate() {
        target.put(&format!("/in/{k}"), &input.data)?;
    }
    if set.app == App::Webserver {
        target.create_empty("/log")?;
    }
    let clients = if spec.mode.uthreads() {
        spec.threads * spec.uthreads_per_core
    } else {
        spec.threads
    };
    let gate = Arc::new(Gate::new(clients + 1));
    let log_appends = Arc::new(AtomicU64::new(0));
    let (results, wall, cpu) = {
        let (target, set, gate2, appends) = (
            target.clone(),
            set.clone(),
            gate.clone(),
            log_appends.clone(),
        );
        let duration = spec.duration;
        run_clients(spec.mode, spec.threads, clients, &gate, move |id| {
            client(&target, &set, id, duration, &gate2, &appends)
        })?
    };
    if set.app == App::Webserver {
        let expect = log_appends.load(Ordering::Relaxed) * set.append.len() as u64;
        let got = target.size("/log")?;
        anyhow::ensure!(
            got == expect,
            "webserver log is {got} bytes, expected {expect}"
        );
    }
    Arc::into_inner(target)
        .ok_or_else(|| anyhow::anyhow!("benchmark target still shared after the run"))?
        .tear_down()?;
    let mut hist = Histogram::<u64>::new(3)?;
    let (mut tasks, mut read, mut written) = (0u64, 0u64, 0u64);
    for (r, m) in &results {
        hist.add(&r.hist)?;
        tasks += r.ops;
        read += m.read;
        written += m.written;
    }
    let gib = (read + written) as f64 / (1u64 << 30) as f64;
    let per_task = |b: u64| b as f64 / 1024.0 / tasks.max(1) as f64;
    Ok(AppRow {
        app: set.app,
        mode: spec.mode,
        threads: spec.threads,
        clients,
        slowmem: spec.slowmem.model().map(|m: Model| m.name),
        tasks,
        tasks_per_s: tasks as f64 / wall,
        gib_per_s: gib / wall,
        read_kib_per_task: per_task(read),
        write_kib_per_task: per_task(written),
        p50_ms: hist.value_at_quantile(0.5) as f64 / 1e6,
        p99_ms: hist.value_at_quantile(0.99) as f64 / 1e6,
        cpu_s_per_gib: if gib > 0.0 { cpu / gib } else { 0.0 },
        verified: true,
    })
}

/// Runs every spec, generating each application's data once, with a progress bar
/// when the runs take more than a few seconds.
pub fn run_all(
    specs: &[AppSpec],
    scale: f64,
    region: &Arc<dyn Pmem>,
    quiet: bool,
) -> anyhow::Result<Vec<AppRow>> {
    let total: f64 = specs.iter().map(|s| s.duration.as_secs_f64()).sum();
    let progress = progress::bar(specs.len() as u64, quiet || total <= 3.0);
    let mut sets: std::collections::HashMap<App, Arc<Dataset>> = Default::default();
    let mut rows = Vec::new();
    for spec in specs {
        let name = format!(
            "{} {} {} thread(s){}",
            spec.app.name(),
            spec.mode.name(),
            spec.threads,
            spec.slowmem
                .model()
                .map_or(String::new(), |m| format!(" {}", m.name))
        );
        signals::check()?;
        progress.set_message(name.clone());
        let set = match sets.get(&spec.app) {
            Some(s) => s.clone(),
            None => {
                progress.set_message(format!("generating {} data", spec.app.name()));
                let s = Arc::new(Dataset::generate(spec.app, scale)?);
                sets.insert(spec.app, s.clone());
                s
            }
        };
        rows.push(run_one(spec, &set, region).with_context(|| name.clone())?);
        progress.inc(1);
    }
    progress.finish_and_clear();
    Ok(rows)
}

/// The speedup of `r` over the `cpu` mode (NOVA's data path) of the same
/// application, threads and slow memory, if that was measured.
pub fn vs_cpu(rows: &[AppRow], r: &AppRow) -> Option<f64> {
    rows.iter()
        .find(|p| {
            p.mode == Target::Easyio(fs::Mode::Cpu)
                && p.app == r.app
                && p.threads == r.threads
                && p.slowmem == r.slowmem
        })
        .filter(|p| p.tasks_per_s > 0.0)
        .map(|p| r.tasks_per_s / p.tasks_per_s)
}

/// The results as a table for people.
pub fn table(rows: &[AppRow]) -> String {
    let body = rows
        .iter()
        .map(|r| {
            vec![
                r.app.name().to_string(),
                r.slowmem
                    .map_or("none".into(), |s| format!("{s} (emulated)")),
                r.mode.name().to_string(),
                format!("{}/{}", r.threads, r.clients),
                format!("{:.1}", r.tasks_per_s),
                format!("{:.2}", r.gib_per_s),
                format!("{:.0}/{:.0}", r.read_kib_per_task, r.write_kib_per_task),
                format!("{:.2}", r.p99_ms),
                format!("{:.2}", r.cpu_s_per_gib),
                vs_cpu(rows, r).map_or(String::new(), |s| format!("{s:.2}x")),
                if r.verified { "ok" } else { "FAILED" }.into(),
            ]
        })
        .collect();
    report::table(
        &[
            "app",
            "slowmem",
            "mode",
            "thr/clients",
            "tasks/s",
            "GiB/s",
            "KiB r/w per task",
            "p99 ms",
            "CPU-s/GiB",
            "vs cpu",
            "verified",
        ],
        body,
    )
}

/// Writes the Fig. 10-style plot of `rows` to `out`: a panel per application and
/// medium, throughput against threads, a line per mode.
pub fn write_plot(
    out: output::Output,
    title: &str,
    caption: &[String],
    rows: &[AppRow],
) -> anyhow::Result<()> {
    let mut panels: Vec<plot::Panel> = Vec::new();
    for r in rows {
        let name = match r.slowmem {
            Some(s) => format!("{} — {s} (emulated)", r.app.name()),
            None => format!("{} — DRAM", r.app.name()),
        };
        let panel = match panels.iter().position(|p| p.title == name) {
            Some(i) => &mut panels[i],
            None => {
                panels.push(plot::Panel {
                    title: name,
                    y_label: "throughput (tasks/s)".into(),
                    series: Vec::new(),
                    mark: None,
                    y_top: None,
                });
                panels.last_mut().expect("just pushed")
            }
        };
        let mode = r.mode.name();
        let series = match panel.series.iter().position(|s| s.name == mode) {
            Some(i) => &mut panel.series[i],
            None => {
                panel.series.push(plot::Series {
                    name: mode.to_string(),
                    points: Vec::new(),
                    dots: true,
                });
                panel.series.last_mut().expect("just pushed")
            }
        };
        series.points.push((r.threads as f64, r.tasks_per_s));
    }
    let figure = plot::Figure {
        title: title.to_string(),
        x_label: "threads".into(),
        caption: caption.to_vec(),
        columns: 2,
        panel_size: (340, 240),
        panels,
    };
    out.write_all(plot::svg(&figure)?.as_bytes())
}

/// `easyio bench app`: every configuration asked for, then the table (or JSON) and
/// the plot if asked.
pub fn run(a: AppArgs) -> anyhow::Result<()> {
    let plot = output::prepare(a.plot.as_deref())?;
    let apps: Vec<App> = if a.app.contains(&App::All) {
        App::EVERY.to_vec()
    } else {
        a.app.clone()
    };
    let duration = Duration::from_secs_f64(a.duration);
    let mut specs = Vec::new();
    for &app in &apps {
        for &threads in &a.threads {
            for &mode in &a.mode {
                specs.push(AppSpec {
                    app,
                    mode,
                    threads,
                    uthreads_per_core: a.uthreads_per_core,
                    slowmem: a.slowmem,
                    engine: a.engine,
                    duration,
                });
            }
        }
    }
    let region: Arc<dyn Pmem> = Arc::new(Region::create_temp(a.region_size)?);
    let results = run_all(&specs, a.scale, &region, a.json)?;
    let report = AppReport {
        machine: Machine::this(),
        duration_s: a.duration,
        scale: a.scale,
        uthreads_per_core: a.uthreads_per_core,
        note: NOTE,
        results,
    };
    let settings = format!(
        "{} s per run, sizes {}× EASYIO Table 1, async: {} uthreads per worker, slowmem: {}",
        a.duration,
        a.scale,
        a.uthreads_per_core,
        a.slowmem
            .model()
            .map_or("none".to_string(), |m| format!("{} (EMULATED)", m.name))
    );
    if let Some(plot) = plot {
        write_plot(
            plot,
            "easyio bench app — throughput against threads (EASYIO Fig. 10)",
            &[
                format!("machine: {}", report.machine.describe()),
                settings.clone(),
            ],
            &report.results,
        )?;
    }
    if a.json {
        return report::print_json(&report);
    }
    println!("easyio bench app — {settings}");
    println!("machine: {}", report.machine.describe());
    println!("note:    {NOTE}");
    println!("{}", table(&report.results));
    if let Some(path) = &a.plot {
        println!("plot:    {}", path.display());
    }
    Ok(())
}
