//! `easyio bench qos`: EASYIO Fig. 12 (§6.4.3). A latency-critical client serving
//! 64 KiB reads at Poisson arrivals runs beside a bulk client copying 2 MiB chunks
//! continuously, under no throttling, CPU throttling (the bulk client gets a third of
//! a core's time) and engine throttling (the channel manager's loop, B limit a third of
//! the bulk client's measured bandwidth). Both go through the file system in `async`
//! mode with the channel manager: L and B handles on separate channels.
//!
//! The medium is emulated (labelled): Fig. 12's contention is for the bandwidth of the
//! shared I/OAT engine, whereas the software engine's channels are independent threads
//! on DRAM. The default model gives the medium the engine's bandwidth.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use fs::{Class, FileSystem, FormatOptions, Mode, MountOptions, MoverConfig, QosConfig};
use hdrhistogram::Histogram;
use mover::qos::CpuThrottle;
use pmem::slowmem::{Model, SlowMem};
use pmem::Pmem;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::args;
use crate::plot;
use crate::raw::open_region;
use crate::report::{self, Machine};
use crate::target::EngineArg;
use command::output::Output;
use command::{progress, signals};

/// The L client's request size (EASYIO §6.4.3: "Web server (64KB I/O size)").
const L_BYTES: usize = 64 << 10;
/// The B client's copy size (EASYIO §6.4.3: "bulk data movement (2MB)").
const B_BYTES: usize = 2 << 20;
/// B's limit as a fraction of its measured bandwidth (§6.4.3: 2 GB/s, "1/3rd of the
/// hardware bandwidth").
const B_SHARE: f64 = 1.0 / 3.0;
/// The L file and the B file.
const L_FILE_BYTES: usize = 16 << 20;
const B_FILE_BYTES: usize = 32 << 20;
/// The default medium: Optane's latencies with the bandwidth of EASYIO's I/OAT engine
/// (Fig. 12 throttles to 2 GB/s, a third of it: ~6 GB/s); a core's copies are not
/// limited below the medium's bandwidth.
const IOAT_MEDIUM: Model = Model {
    name: "optane-at-ioat-bandwidth",
    read_bw: 6e9,
    write_bw: 6e9,
    read_latency: Model::OPTANE.read_latency,
    write_latency: Model::OPTANE.write_latency,
    cpu_read_bw: None,
    cpu_write_bw: None,
    engine_bw: None,
    source: "Optane latencies (EASYIO §6.1, Fastmove §2.2); 6 GB/s, the I/OAT bandwidth of \
             EASYIO §6.4.3",
};
/// EASYIO's figures (§6.4.3): L's maximum latency with and without engine throttling.
const EASYIO_MAX_US: (f64, f64) = (13.7, 20.0);

/// The options of `easyio bench qos`.
#[derive(Args)]
pub struct QosArgs {
    /// Where to create the benchmark region (as for `bench raw`).
    #[arg(long)]
    image: Option<PathBuf>,
    /// Copy engine of the file system; `dsa` needs `--medium none`.
    #[arg(long, value_enum, default_value = "software")]
    engine: EngineArg,
    /// Seconds per policy run (more than 0, at most 3600).
    #[arg(long, default_value_t = 2.0, value_parser = args::seconds)]
    seconds: f64,
    /// L requests per second (Poisson arrivals; more than 0, at most 1e6).
    #[arg(long, default_value_t = 2000.0, value_parser = args::rate)]
    rate: f64,
    /// L latency target in µs; default 1.5 × its p99 when running alone.
    #[arg(long, value_parser = args::positive_micros)]
    target_us: Option<f64>,
    /// Epoch of the throttling loop, µs (1 to 1000000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    epoch_us: u64,
    /// Medium model: `ioat` (default, see above), `optane`, `cxl` or `none`.
    #[arg(long, default_value = "ioat", value_parser = ["ioat", "optane", "cxl", "none"])]
    medium: String,
    /// Width of the time windows of the latency-over-time series, ms (1 to 60000).
    #[arg(long, default_value_t = 100, value_parser = args::millis())]
    window_ms: u64,
    /// Thresholds from `easyio calibrate`; default: copies up to 64 KiB by CPU (what
    /// calibration finds on a software engine), so L's reads go by CPU and B's bulk
    /// copies by engine.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Write the plot (SVG) here (default: qos.svg; with --json, no plot unless this
    /// is given).
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Policy {
    None,
    Cpu,
    Engine,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::None => "no throttling",
            Policy::Cpu => "CPU throttling",
            Policy::Engine => "engine throttling",
        }
    }
}

#[derive(Serialize, Clone)]
struct Window {
    t_ms: u64,
    requests: u64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    b_gb_per_s: f64,
}

#[derive(Serialize)]
struct Run {
    policy: Policy,
    requests: u64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    b_gb_per_s: f64,
    /// The B limit in force at the end (engine throttling only).
    b_limit_gb_per_s: Option<f64>,
    /// B channel suspensions (engine throttling only).
    suspensions: u64,
    /// CPU time of the throttling loop as a share of one core (engine throttling only).
    loop_cpu_share: Option<f64>,
    windows: Vec<Window>,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    medium: String,
    seconds: f64,
    rate: f64,
    epoch_us: u64,
    alone_p50_us: f64,
    alone_p99_us: f64,
    alone_max_us: f64,
    target_us: f64,
    b_alone_gb_per_s: f64,
    b_limit_gb_per_s: f64,
    runs: Vec<Run>,
    easyio_max_us: (f64, f64),
}

/// What the B client does during a run.
#[derive(Clone, Copy, PartialEq)]
enum BMode {
    Off,
    Free,
    CpuThrottled,
}

struct Bench {
    fs: Arc<FileSystem>,
    l_fd: fs::Fd,
    b_fd: fs::Fd,
    rate: f64,
    window: Duration,
    epoch: Duration,
}

/// One run's raw results.
struct Raw {
    lat: Histogram<u64>,
    windows: Vec<Window>,
    b_bytes: u64,
    wall: Duration,
}

/// The latency windows of a run being recorded.
struct Windows {
    start: Instant,
    width: Duration,
    /// Latencies of the current window.
    win: Histogram<u64>,
    win_start: Instant,
    /// B's bytes when the current window began.
    win_b: u64,
    done: Vec<Window>,
}

impl Windows {
    fn new(start: Instant, width: Duration) -> anyhow::Result<Windows> {
        Ok(Windows {
            start,
            width,
            win: Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?,
            win_start: start,
            win_b: 0,
            done: Vec::new(),
        })
    }

    /// Closes the current window if it is over (or the run is, at `end`); `b_now` is
    /// B's bytes so far.
    fn roll(&mut self, now: Instant, end: Instant, b_now: u64) {
        if now < self.win_start + self.width && now < end {
            return;
        }
        let secs = now.duration_since(self.win_start).as_secs_f64();
        self.done.push(Window {
            t_ms: self.win_start.duration_since(self.start).as_millis() as u64,
            requests: self.win.len(),
            p50_us: self.win.value_at_quantile(0.5) as f64 / 1e3,
            p99_us: self.win.value_at_quantile(0.99) as f64 / 1e3,
            max_us: self.win.max() as f64 / 1e3,
            b_gb_per_s: (b_now - self.win_b) as f64 / secs / 1e9,
        });
        self.win.reset();
        self.win_start = now;
        self.win_b = b_now;
    }
}

impl Bench {
    /// Starts the B client (unless `b` is off): 2 MiB reads back to back on its own
    /// thread, CPU-throttled if asked, until `stop`; it counts its bytes in `done`.
    fn start_b(
        &self,
        b: BMode,
        stop: &Arc<AtomicBool>,
        done: &Arc<AtomicU64>,
    ) -> Option<std::thread::JoinHandle<anyhow::Result<()>>> {
        (b != BMode::Off).then(|| {
            let (fs, stop, done) = (self.fs.clone(), stop.clone(), done.clone());
            let (fd, epoch) = (self.b_fd, self.epoch);
            std::thread::spawn(move || -> anyhow::Result<()> {
                let mut throttle =
                    (b == BMode::CpuThrottled).then(|| CpuThrottle::new(B_SHARE, epoch));
                let mut buf = vec![0u8; B_BYTES];
                let mut off = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(t) = throttle.as_mut() {
                        t.gate();
                    }
                    let token = fs.submit_pread(fd, buf, off)?;
                    // A bulk client waits by yielding, not spinning (a uthread would).
                    while !token.is_done() {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                    buf = token.wait()?;
                    done.fetch_add(B_BYTES as u64, Ordering::Relaxed);
                    off = (off + B_BYTES as u64) % B_FILE_BYTES as u64;
                }
                Ok(())
            })
        })
    }

    /// One run of `seconds`: B as `b` says, L's requests at Poisson arrivals if
    /// `l_on`, latencies recorded per window.
    fn run(&self, seconds: f64, b: BMode, l_on: bool) -> anyhow::Result<Raw> {
        let stop = Arc::new(AtomicBool::new(false));
        let b_done = Arc::new(AtomicU64::new(0));
        let b_thread = self.start_b(b, &stop, &b_done);
        let mut lat = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(12);
        let mut buf = vec![0u8; L_BYTES];
        let slots = (L_FILE_BYTES / L_BYTES) as u64;
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(seconds);
        let mut windows = Windows::new(start, self.window)?;
        let mut next = start;
        loop {
            if signals::stopping() {
                break;
            }
            let now = Instant::now();
            windows.roll(now, end, b_done.load(Ordering::Relaxed));
            if now >= end {
                break;
            }
            if !l_on {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            // Poisson arrivals: exponential gaps. Sleep most of a gap, spin the rest.
            let gap = -(1.0 - rng.random::<f64>()).ln() / self.rate;
            next = next.max(now - Duration::from_millis(1)) + Duration::from_secs_f64(gap);
            wait_until(next);
            let off = rng.random_range(0..slots) * L_BYTES as u64;
            let t = Instant::now();
            self.fs.pread(self.l_fd, &mut buf, off)?;
            let ns = (t.elapsed().as_nanos() as u64).max(1);
            lat.record(ns)?;
            windows.win.record(ns)?;
        }
        let wall = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        if let Some(h) = b_thread {
            h.join()
                .map_err(|_| anyhow::anyhow!("bulk client panicked"))??;
        }
        signals::check()?;
        Ok(Raw {
            lat,
            windows: windows.done,
            b_bytes: b_done.load(Ordering::Relaxed),
            wall,
        })
    }
}

/// Sleeps most of the time to `next`, then spins the rest (a sleep overshoots).
fn wait_until(next: Instant) {
    if let Some(d) = next.checked_duration_since(Instant::now()) {
        if d > Duration::from_micros(200) {
            std::thread::sleep(d - Duration::from_micros(100));
        }
        while Instant::now() < next {
            std::hint::spin_loop();
        }
    }
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

/// `easyio bench qos`: set up the file system and its two clients, run L alone, B
/// alone and the three policies, then report and plot.
pub fn run(args: QosArgs) -> anyhow::Result<()> {
    let svg_path = match (&args.svg, args.json) {
        (Some(p), _) => Some(p.clone()),
        (None, false) => Some(PathBuf::from("qos.svg")),
        (None, true) => None,
    };
    let svg_out = svg_path
        .as_deref()
        .map(|p| Output::create(p, None))
        .transpose()?;
    let (fs, medium) = mount(&args)?;
    let report = measure(&args, &fs, medium);
    if let Ok(fs) = Arc::try_unwrap(fs) {
        fs.unmount()?;
    }
    let report = report?;
    if let Some(out) = svg_out {
        out.write_all(svg(&report)?.as_bytes())?;
    }
    if args.json {
        return report::print_json(&report);
    }
    print_report(&report, svg_path.as_deref());
    Ok(())
}

/// The medium `--medium` names, with its description.
fn medium(name: &str) -> anyhow::Result<(Option<Model>, String)> {
    let model = match name {
        "ioat" => Some(IOAT_MEDIUM),
        "none" => None,
        m => Some(
            Model::preset(m)
                .with_context(|| format!("unknown medium {m:?} (ioat, optane, cxl, none)"))?,
        ),
    };
    let description = match model {
        Some(m) => format!(
            "EMULATED {}: read {:.1} GB/s, {} ns ({})",
            m.name,
            m.read_bw / 1e9,
            m.read_latency.as_nanos(),
            m.source
        ),
        None => "region (no emulation)".into(),
    };
    Ok((model, description))
}

/// Formats the region (behind the medium model) and mounts it in `async` mode with
/// the channel manager; returns the file system and the medium's description.
fn mount(args: &QosArgs) -> anyhow::Result<(Arc<FileSystem>, String)> {
    let region = Arc::new(open_region(args.image.as_deref())?);
    let (model, medium) = medium(&args.medium)?;
    let pm: Arc<dyn Pmem> = match model {
        Some(m) => Arc::new(SlowMem::new(region.clone(), m)),
        None => region.clone(),
    };
    FileSystem::format(&*pm, &FormatOptions::default())?;
    let epoch = Duration::from_micros(args.epoch_us);
    let base = match &args.profile {
        Some(p) => MountOptions::with_mode(Mode::Async)
            .with_engine(args.engine.backend())
            .with_profile(p)?,
        None => MountOptions {
            mover: MoverConfig {
                cpu_max: L_BYTES,
                engine: args.engine.backend(),
                ..MoverConfig::default()
            },
            ..MountOptions::with_mode(Mode::Async)
        },
    };
    let opts = MountOptions {
        mover: MoverConfig {
            qos: Some(QosConfig {
                epoch,
                ..QosConfig::default()
            }),
            ..base.mover
        },
        ..base
    };
    let (fs, _) = FileSystem::mount(pm, opts)?;
    Ok((Arc::new(fs), medium))
}

/// Writes the two clients' files and runs L alone (its p99 sets the target), B alone
/// (its bandwidth sets the limit), then each policy.
fn measure(args: &QosArgs, fs: &Arc<FileSystem>, medium: String) -> anyhow::Result<Report> {
    let flags = fs::OpenFlags::RDWR | fs::OpenFlags::CREAT;
    let b_fd = fs.open_with_class("/bulk", flags, 0o644, Class::Bandwidth)?;
    fs.pwrite(b_fd, &vec![0xb5; B_FILE_BYTES], 0)?;
    let warm = fs.open("/web", flags, 0o644)?;
    fs.pwrite(warm, &vec![0x1a; L_FILE_BYTES], 0)?;
    fs.close(warm)?;
    // Five runs: L alone, B alone, then the three policies.
    let progress = progress::bar(5, args.json);
    progress.set_message("L alone");
    let mut bench = Bench {
        fs: fs.clone(),
        l_fd: fs.open("/web", fs::OpenFlags::RDONLY, 0)?,
        b_fd,
        rate: args.rate,
        window: Duration::from_millis(args.window_ms),
        epoch: Duration::from_micros(args.epoch_us),
    };
    // L alone: its latency without contention sets the target.
    let alone = bench.run(args.seconds.min(1.0), BMode::Off, true)?;
    let target_us = args
        .target_us
        .unwrap_or(1.5 * us(&alone.lat, 0.99))
        .max(1.0);
    bench.l_fd = fs.open_with_class(
        "/web",
        fs::OpenFlags::RDONLY,
        0,
        Class::Latency {
            target: Duration::from_secs_f64(target_us / 1e6),
        },
    )?;
    progress.inc(1);
    progress.set_message("B alone");
    // B alone: its bandwidth sets the limit.
    let b_alone = bench.run(0.5, BMode::Free, false)?;
    progress.inc(1);
    let b_bw = b_alone.b_bytes as f64 / b_alone.wall.as_secs_f64();
    let limit = (b_bw * B_SHARE).max(1.0) as u64;
    let mut runs = Vec::new();
    for policy in [Policy::None, Policy::Cpu, Policy::Engine] {
        progress.set_message(policy.name());
        runs.push(run_policy(&bench, args.seconds, policy, limit)?);
        progress.inc(1);
    }
    progress.finish_and_clear();
    Ok(Report {
        machine: Machine::this(),
        medium,
        seconds: args.seconds,
        rate: args.rate,
        epoch_us: args.epoch_us,
        alone_p50_us: us(&alone.lat, 0.5),
        alone_p99_us: us(&alone.lat, 0.99),
        alone_max_us: alone.lat.max() as f64 / 1e3,
        target_us,
        b_alone_gb_per_s: b_bw / 1e9,
        b_limit_gb_per_s: limit as f64 / 1e9,
        runs,
        easyio_max_us: EASYIO_MAX_US,
    })
}

/// One run under `policy`; engine throttling runs the channel manager's loop with B
/// limited to `limit` bytes per second.
fn run_policy(bench: &Bench, seconds: f64, policy: Policy, limit: u64) -> anyhow::Result<Run> {
    let qos = bench
        .fs
        .qos()
        .context("mount without a channel manager")?
        .clone();
    let bmode = match policy {
        Policy::Cpu => BMode::CpuThrottled,
        _ => BMode::Free,
    };
    let engine = policy == Policy::Engine;
    let before = qos.stats();
    if engine {
        qos.set_b_limit_max(Some(limit));
        qos.start();
    }
    let raw = bench.run(seconds, bmode, true)?;
    let after = qos.stats();
    if engine {
        qos.stop();
        qos.set_b_limit_max(None);
    }
    Ok(Run {
        policy,
        requests: raw.lat.len(),
        p50_us: us(&raw.lat, 0.5),
        p99_us: us(&raw.lat, 0.99),
        max_us: raw.lat.max() as f64 / 1e3,
        b_gb_per_s: raw.b_bytes as f64 / raw.wall.as_secs_f64() / 1e9,
        b_limit_gb_per_s: engine.then(|| after.b_limit as f64 / 1e9),
        suspensions: after.suspensions - before.suspensions,
        loop_cpu_share: (engine && after.loop_wall_ns > 0)
            .then(|| after.loop_cpu_ns as f64 / after.loop_wall_ns as f64),
        windows: raw.windows,
    })
}

/// The report for people: the settings and L and B alone, a row per policy, and
/// EASYIO's figures beside them.
fn print_report(r: &Report, plot: Option<&std::path::Path>) {
    println!("machine: {}", r.machine.describe());
    println!("medium:  {}", r.medium);
    println!(
        "L alone: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs; target {:.1} µs; B alone {:.2} GB/s, \
         limit {:.2} GB/s; epoch {} µs; {} L req/s, {:.1} s per run",
        r.alone_p50_us,
        r.alone_p99_us,
        r.alone_max_us,
        r.target_us,
        r.b_alone_gb_per_s,
        r.b_limit_gb_per_s,
        r.epoch_us,
        r.rate,
        r.seconds
    );
    let rows = r
        .runs
        .iter()
        .map(|r| {
            vec![
                r.policy.name().to_string(),
                r.requests.to_string(),
                format!("{:.1}", r.p50_us),
                format!("{:.1}", r.p99_us),
                format!("{:.1}", r.max_us),
                format!("{:.2}", r.b_gb_per_s),
                r.b_limit_gb_per_s.map_or("-".into(), |l| format!("{l:.2}")),
                r.loop_cpu_share
                    .map_or("-".into(), |c| format!("{:.1}%", c * 100.0)),
            ]
        })
        .collect();
    println!(
        "{}",
        report::table(
            &[
                "policy",
                "L requests",
                "L p50 µs",
                "L p99 µs",
                "L max µs",
                "B GB/s",
                "B limit GB/s",
                "loop CPU"
            ],
            rows
        )
    );
    println!(
        "EASYIO Fig. 12: max {} µs with engine throttling vs {} µs without; plot: {}",
        EASYIO_MAX_US.0,
        EASYIO_MAX_US.1,
        plot.unwrap_or(std::path::Path::new("-")).display()
    );
}

/// Two panels over time: L's p99 latency per window, and B's bandwidth; a line per
/// policy, the L target and the B limit marked.
fn svg(r: &Report) -> anyhow::Result<String> {
    // Scheduler stalls of a shared machine make single windows jump by milliseconds:
    // the latency axis stops at twice the worst whole-run p99 (higher values are
    // drawn at the top edge).
    let lat_max = r.runs.iter().map(|x| x.p99_us).fold(r.target_us, f64::max) * 2.0;
    let bw_max = r
        .runs
        .iter()
        .flat_map(|x| x.windows.iter().map(|w| w.b_gb_per_s))
        .fold(r.b_alone_gb_per_s, f64::max)
        * 1.1;
    let panel = |title: &str, y_label: &str, value: fn(&Window) -> f64, mark, top| plot::Panel {
        title: title.into(),
        y_label: y_label.into(),
        series: r
            .runs
            .iter()
            .map(|run| plot::Series {
                name: run.policy.name().into(),
                points: run
                    .windows
                    .iter()
                    .map(|w| (w.t_ms as f64, value(w)))
                    .collect(),
                dots: false,
            })
            .collect(),
        mark: Some(mark),
        y_top: Some(top),
    };
    let latency = plot::Mark {
        y: r.target_us,
        label: "L target".into(),
    };
    let bandwidth = plot::Mark {
        y: r.b_limit_gb_per_s,
        label: "B limit".into(),
    };
    let figure = plot::Figure {
        title: "easyio bench qos: L 64 KiB reads beside B 2 MiB copies".into(),
        x_label: "time (ms)".into(),
        caption: std::iter::once(format!(
            "medium: {}",
            r.medium.split(':').next().unwrap_or("")
        ))
        .chain(r.runs.iter().map(|run| {
            format!(
                "{}: p99 {:.1} µs, max {:.1} µs, B {:.2} GB/s",
                run.policy.name(),
                run.p99_us,
                run.max_us,
                run.b_gb_per_s
            )
        }))
        .collect(),
        columns: 1,
        panel_size: (760, 250),
        panels: vec![
            panel(
                "L p99 latency per window",
                "L p99 latency (µs)",
                |w| w.p99_us,
                latency,
                lat_max,
            ),
            panel(
                "B bandwidth per window",
                "B bandwidth (GB/s)",
                |w| w.b_gb_per_s,
                bandwidth,
                bw_max,
            ),
        ],
    };
    plot::svg(&figure)
}
