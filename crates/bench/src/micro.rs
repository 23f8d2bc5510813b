//! `easyio bench micro`: FxMark-style microbenchmarks, each workload in each mode.
//!
//! Modes are the file system with each data mover (`cpu`, `semaphore`, `delegate`,
//! `dma-sync`, `async`, and `async-locked`, the async mode holding a per-inode lock
//! across the copy as a file system without two-level locking must) and `kernel`, the
//! same workload through `std::fs` on a directory in /dev/shm — the host's tmpfs, whose
//! writes are not persistent, as the external peer. In `async` modes each workload
//! thread is a uthread, `--uthreads-per-core` of them on each of `--threads` workers.
//! `--slowmem` applies the slow-memory emulation model to the region (labelled in the
//! output). Workloads (FxMark's names, plus two of EASYIO's):
//!
//! | name | what each thread does                                    |
//! |------|----------------------------------------------------------|
//! | DWAL | appends `io-size` to a private file                      |
//! | DWOL | overwrites the first block of a private file             |
//! | DWOM | overwrites its own block of a shared file                |
//! | DRBL | reads the first block of a private file                  |
//! | DRBM | reads its own block of a shared file                     |
//! | MWCL | creates empty files in a private directory               |
//! | MWUL | unlinks files from a private directory                   |
//! | MWRL | renames a file within a private directory                |
//! | CIOW | computes `--compute-us`, then writes `io-size` to a private file |
//! | CIOR | computes `--compute-us`, then reads `io-size` of a private file  |

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use pmem::slowmem::{Model, Preset};
use pmem::{Pmem, Region};
use serde::Serialize;

use crate::args;
use crate::report::{self, Machine};
use crate::target::{
    collect_clients, cpu_seconds, engine_cpu_seconds, timed_loop, EngineArg, Gate, Mount, Target,
    ThreadResult,
};
use crate::{gib_per_s, raw};
use command::{progress, signals};

/// Private files grow to at most this many bytes (and at most a quarter of the region
/// shared among the threads) before DWAL starts them over.
const APPEND_CAP: u64 = 64 << 20;
/// Files a metadata workload keeps in its directory before clearing it (untimed).
const NAMESPACE_BATCH: u64 = 2_000;
/// Rounds, and time per round, of the single-core limit measured beside data workloads
/// (the median is used, as in `bench raw`).
const LIMIT_ROUNDS: usize = 5;
const LIMIT_ROUND: Duration = Duration::from_millis(60);

/// A workload: FxMark's names, plus two of EASYIO's (see the table above).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[clap(rename_all = "UPPER")]
#[serde(rename_all = "UPPERCASE")]
pub enum Workload {
    /// Appends to a private file.
    Dwal,
    /// Overwrites the first block of a private file.
    Dwol,
    /// Overwrites its own block of a shared file.
    Dwom,
    /// Reads the first block of a private file.
    Drbl,
    /// Reads its own block of a shared file.
    Drbm,
    /// Creates empty files in a private directory.
    Mwcl,
    /// Unlinks files from a private directory.
    Mwul,
    /// Renames a file within a private directory.
    Mwrl,
    /// Computes, then writes a private file.
    Ciow,
    /// Computes, then reads a private file.
    Cior,
}

impl Workload {
    fn moves_data(self) -> bool {
        !matches!(self, Workload::Mwcl | Workload::Mwul | Workload::Mwrl)
    }
    fn reads(self) -> bool {
        matches!(self, Workload::Drbl | Workload::Drbm | Workload::Cior)
    }

    /// The single-core limit this workload is measured against, taken the way it moves
    /// its data: every read workload re-reads one block per thread, so its limit
    /// re-reads one hot block of `io` bytes; writes are copy-on-write into fresh blocks
    /// with non-temporal stores, so theirs copies into a span larger than any cache.
    fn limit(self, io: u64) -> Limit {
        if self.reads() {
            Limit {
                read: true,
                span: io,
            }
        } else {
            Limit {
                read: false,
                span: raw::REGION_BYTES,
            }
        }
    }
}

/// How a single-core limit is measured: the direction and the span of the region its
/// copies rotate through (`io` bytes: one hot block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Limit {
    read: bool,
    span: u64,
}

impl Limit {
    /// The limit in words, for the report.
    fn describe(self, io: u64) -> String {
        let what = if self.read {
            "memcpy out of the region"
        } else {
            "persistent copy into the region"
        };
        if self.span <= io {
            format!("{what}, one hot block")
        } else {
            format!("{what}, a cold {} span", report::size_label(self.span))
        }
    }
}

/// The options of `easyio bench micro`.
#[derive(Args)]
pub struct MicroArgs {
    /// Workloads, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "DWAL,DWOL,DWOM,DRBL,DRBM,MWCL,MWUL,MWRL"
    )]
    workload: Vec<Workload>,
    /// Modes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "cpu,async,kernel")]
    mode: Vec<Target>,
    /// Thread counts, comma-separated (1 to 1024 each).
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = args::threads())]
    threads: Vec<usize>,
    /// Bytes per read or write (K, M suffixes; 1 byte to 1G), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4K", value_parser = args::io_size)]
    io_size: Vec<u64>,
    /// Slow-memory emulation applied to the region (easyio modes only).
    #[arg(long, value_enum, default_value = "none")]
    slowmem: Preset,
    /// Copy engine of the dma-sync and async modes.
    #[arg(long, value_enum, default_value = "software")]
    engine: EngineArg,
    /// Uthreads per worker in async modes (1 to 1024).
    #[arg(long, default_value_t = 1, value_parser = args::threads())]
    uthreads_per_core: usize,
    /// Microseconds of computation before each I/O of CIOW/CIOR; in DWOM with
    /// `--compute-uthread`, the length of each compute burst (0 to 1e7).
    #[arg(long, default_value_t = 10.0, value_parser = args::micros)]
    compute_us: f64,
    /// DWOM: each worker also runs a compute-only uthread (EASYIO Fig. 11 right).
    #[arg(long)]
    compute_uthread: bool,
    /// Seconds per run (more than 0, at most 3600).
    #[arg(long, default_value_t = 1.0, value_parser = args::seconds)]
    duration: f64,
    /// Size of the easyio region (a temporary file in /dev/shm).
    #[arg(long, default_value = "1G", value_parser = command::args::size)]
    region_size: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Clone)]
struct Row {
    workload: Workload,
    mode: Target,
    threads: usize,
    /// Workload threads (uthreads in async modes).
    clients: usize,
    io_size: u64,
    ops_per_s: f64,
    gib_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    /// The median of one bare copy of `io_size` bytes (persistent non-temporal copy for
    /// writes, memcpy for reads), timed one by one in the same run as `limit` says:
    /// what `p50_us` would be if the file system cost nothing but the copy.
    bare_p50_us: Option<f64>,
    /// For writes, the median of one such copy followed by one ordered 8-byte commit
    /// (store, write-back, fence), timed the same way: what `p50_us` would be if a
    /// crash-consistent write cost nothing but its copy and its commit.
    floor_p50_us: Option<f64>,
    /// CPU-microseconds of the whole process per operation.
    cpu_us_per_op: f64,
    /// CPU-seconds of the whole process per GiB moved (data workloads).
    cpu_s_per_gib: Option<f64>,
    /// Of `cpu_s_per_gib`, the part spent by the software copy engine's threads (a
    /// hardware engine would spend none).
    engine_cpu_s_per_gib: Option<f64>,
    /// Bandwidth as a fraction of the single-core limit (`bench raw`'s persistent copy
    /// for writes, memcpy for reads) measured in the same run the way the workload
    /// moves data (see `limit`).
    of_limit: Option<f64>,
    /// How the limit of `of_limit` was measured.
    limit: Option<String>,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    duration_s: f64,
    /// The slow-memory model applied, if any: these results are emulated.
    slowmem: Option<String>,
    note: &'static str,
    results: Vec<Row>,
}

/// Spins for about `us` microseconds of computation.
fn compute(us: f64) -> u64 {
    let until = Instant::now() + Duration::from_secs_f64(us * 1e-6);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while Instant::now() < until {
        for _ in 0..64 {
            x = std::hint::black_box(x.rotate_left(7) ^ 0x5DEE_CE66D);
        }
    }
    x
}

/// What a run needs to know besides the workload.
#[derive(Clone, Copy)]
struct RunParams {
    io: u64,
    duration: Duration,
    append_cap: u64,
    compute_us: f64,
}

/// One workload thread: its target, buffers, private directory and start line.
struct Thread<'a> {
    t: &'a Mount,
    tid: usize,
    p: RunParams,
    start: &'a Gate,
    dir: String,
    buf: Vec<u8>,
    rbuf: Vec<u8>,
}

impl Thread<'_> {
    /// Waits for every thread at the start line; returns the run's deadline.
    fn go(&self) -> anyhow::Result<Instant> {
        Ok(self.start.arrive_and_wait()? + self.p.duration)
    }

    /// The path of `name` in the thread's private directory.
    fn path(&self, name: impl std::fmt::Display) -> String {
        format!("{}/{name}", self.dir)
    }
}

/// Sets up one thread's files, waits for every thread at `start`, then runs the
/// workload for the run's duration.
fn run_thread(
    t: &Mount,
    w: Workload,
    tid: usize,
    p: RunParams,
    start: &Gate,
) -> anyhow::Result<ThreadResult> {
    let dir = format!("/t{tid}");
    t.mkdir(&dir)?;
    let mut th = Thread {
        t,
        tid,
        p,
        start,
        dir,
        buf: vec![tid as u8 ^ 0x5A; p.io as usize],
        rbuf: vec![0u8; p.io as usize],
    };
    match w {
        Workload::Dwal => append(&th),
        Workload::Dwol | Workload::Drbl | Workload::Ciow | Workload::Cior => {
            private_file(&mut th, w)
        }
        Workload::Dwom | Workload::Drbm => shared_file(&mut th, w),
        Workload::Mwcl => create_files(&th),
        Workload::Mwul => unlink_files(&th),
        Workload::Mwrl => rename_file(&th),
    }
}

/// DWAL: appends to a private file, starting it over at the append cap.
fn append(th: &Thread) -> anyhow::Result<ThreadResult> {
    let (t, io) = (th.t, th.p.io);
    let h = t.open(&th.path("f"), true, true)?;
    let deadline = th.go()?;
    let cap_ops = (th.p.append_cap / io).max(1);
    let r = timed_loop(
        deadline,
        |_| t.append(&h, &th.buf).map(|_| io),
        |i| {
            let due = i % cap_ops == 0;
            if due {
                t.truncate(&h, 0)?;
            }
            Ok(due)
        },
    );
    t.close(h)?;
    r
}

/// DWOL, DRBL, CIOW, CIOR: the first block of a private file, with computation
/// before each I/O in the CIO workloads.
fn private_file(th: &mut Thread, w: Workload) -> anyhow::Result<ThreadResult> {
    let (t, io, us) = (th.t, th.p.io, th.p.compute_us);
    let h = t.open(&th.path("f"), true, false)?;
    t.pwrite(&h, &th.buf, 0)?;
    let deadline = th.go()?;
    let (buf, rbuf) = (&th.buf, &mut th.rbuf);
    let r = match w {
        Workload::Dwol => timed_loop(
            deadline,
            |_| t.pwrite(&h, buf, 0).map(|_| io),
            |_| Ok(false),
        ),
        Workload::Drbl => timed_loop(
            deadline,
            |_| t.pread(&h, rbuf, 0).map(|n| n as u64),
            |_| Ok(false),
        ),
        Workload::Ciow => timed_loop(
            deadline,
            |_| {
                compute(us);
                t.pwrite(&h, buf, 0).map(|_| io)
            },
            |_| Ok(false),
        ),
        _ => timed_loop(
            deadline,
            |_| {
                compute(us);
                t.pread(&h, rbuf, 0).map(|n| n as u64)
            },
            |_| Ok(false),
        ),
    };
    t.close(h)?;
    r
}

/// DWOM, DRBM: the thread's own block of the shared file.
fn shared_file(th: &mut Thread, w: Workload) -> anyhow::Result<ThreadResult> {
    let (t, io) = (th.t, th.p.io);
    let h = t.open("/shared", false, false)?;
    let off = th.tid as u64 * io;
    let deadline = th.go()?;
    let (buf, rbuf) = (&th.buf, &mut th.rbuf);
    let r = if w == Workload::Dwom {
        timed_loop(
            deadline,
            |_| t.pwrite(&h, buf, off).map(|_| io),
            |_| Ok(false),
        )
    } else {
        timed_loop(
            deadline,
            |_| t.pread(&h, rbuf, off).map(|n| n as u64),
            |_| Ok(false),
        )
    };
    t.close(h)?;
    r
}

/// MWCL: creates empty files, clearing the directory every batch (untimed).
fn create_files(th: &Thread) -> anyhow::Result<ThreadResult> {
    let t = th.t;
    let deadline = th.go()?;
    let mut cleared = 0u64;
    timed_loop(
        deadline,
        |i| t.create_empty(&th.path(format_args!("f{i}"))).map(|_| 0),
        |i| {
            let due = i % NAMESPACE_BATCH == 0;
            if due {
                for k in cleared..i {
                    t.unlink(&th.path(format_args!("f{k}")))?;
                }
                cleared = i;
            }
            Ok(due)
        },
    )
}

/// MWUL: unlinks files, refilling the directory every batch (untimed).
fn unlink_files(th: &Thread) -> anyhow::Result<ThreadResult> {
    let t = th.t;
    let refill = |from: u64| -> anyhow::Result<()> {
        for k in from..from + NAMESPACE_BATCH {
            t.create_empty(&th.path(format_args!("f{k}")))?;
        }
        Ok(())
    };
    refill(0)?;
    let deadline = th.go()?;
    timed_loop(
        deadline,
        |i| t.unlink(&th.path(format_args!("f{i}"))).map(|_| 0),
        |i| {
            let due = i % NAMESPACE_BATCH == 0;
            if due {
                refill(i)?;
            }
            Ok(due)
        },
    )
}

/// MWRL: renames a file back and forth within the private directory.
fn rename_file(th: &Thread) -> anyhow::Result<ThreadResult> {
    let t = th.t;
    t.create_empty(&th.path("a"))?;
    let deadline = th.go()?;
    timed_loop(
        deadline,
        |i| {
            let (a, b) = if i % 2 == 0 { ("a", "b") } else { ("b", "a") };
            t.rename(&th.path(a), &th.path(b)).map(|_| 0)
        },
        |_| Ok(false),
    )
}

/// The measured span of a run: from the start line (the main thread's arrival) to
/// the clients' end, with the CPU seconds (whole process, software engine) spent in it.
struct Measure {
    start: anyhow::Result<Instant>,
    cpu0: (f64, f64),
}

impl Measure {
    fn start(gate: &Gate) -> Measure {
        Measure {
            start: gate.arrive_and_wait(),
            cpu0: (cpu_seconds(), engine_cpu_seconds()),
        }
    }

    /// CPU seconds since the start: (whole process, software engine threads).
    fn cpu(&self) -> (f64, f64) {
        (
            cpu_seconds() - self.cpu0.0,
            engine_cpu_seconds() - self.cpu0.1,
        )
    }

    /// The clients' results (or the first-hand error of one) with `cpu`.
    fn finish(
        self,
        joined: Vec<anyhow::Result<ThreadResult>>,
        cpu: (f64, f64),
    ) -> anyhow::Result<(Vec<ThreadResult>, (f64, f64))> {
        let results = collect_clients(joined)?;
        self.start?;
        Ok((results, cpu))
    }
}

/// One measured configuration.
struct RunSpec {
    workload: Workload,
    mode: Target,
    threads: usize,
    uthreads_per_core: usize,
    slowmem: Option<Model>,
    engine: EngineArg,
    compute_uthread: bool,
    params: RunParams,
}

/// The clients' results and the CPU seconds (whole process, software engine) of a run.
type Joined = (Vec<ThreadResult>, (f64, f64));

/// Measures one configuration: set up the target and its files, run the clients,
/// tear down, and sum up what the clients measured.
fn run_one(spec: &RunSpec, region: &Arc<dyn Pmem>) -> anyhow::Result<Row> {
    let (target, clients, params) = set_up(spec, region)?;
    let gate = Arc::new(Gate::new(clients + 1));
    let (results, cpu) = if spec.mode.uthreads() {
        run_uthreads(spec, &target, clients, params, &gate)?
    } else {
        run_threads(spec, &target, clients, params, &gate)?
    };
    Arc::into_inner(target)
        .ok_or_else(|| anyhow::anyhow!("benchmark target still shared after the run"))?
        .tear_down()?;
    row(spec, clients, &results, cpu)
}

/// Formats and mounts the target (or makes the kernel's directory) and writes the
/// shared file of DWOM/DRBM; returns it with the number of clients and their
/// parameters.
fn set_up(
    spec: &RunSpec,
    region: &Arc<dyn Pmem>,
) -> anyhow::Result<(Arc<Mount>, usize, RunParams)> {
    let (w, mode, threads) = (spec.workload, spec.mode, spec.threads);
    let io = spec.params.io;
    let kernel_dir = std::path::PathBuf::from(format!(
        "/dev/shm/easyio-bench-kernel-{}",
        std::process::id()
    ));
    let target = Mount::set_up(
        mode,
        spec.engine,
        region,
        spec.slowmem,
        &kernel_dir,
        threads,
    )?;
    let target = Arc::new(target);
    let clients = if mode.uthreads() {
        threads * spec.uthreads_per_core
    } else {
        threads
    };
    if matches!(w, Workload::Dwom | Workload::Drbm) {
        let h = target.open("/shared", true, false)?;
        let fill = vec![0xA5u8; io as usize];
        for t in 0..clients {
            target.pwrite(&h, &fill, t as u64 * io)?;
        }
        target.close(h)?;
    }
    let params = RunParams {
        append_cap: (region.len() / 4 / clients as u64).min(APPEND_CAP),
        ..spec.params
    };
    Ok((target, clients, params))
}

/// Runs the clients as uthreads on a runtime of `spec.threads` workers, with the
/// compute-only uthreads beside them if asked.
fn run_uthreads(
    spec: &RunSpec,
    target: &Arc<Mount>,
    clients: usize,
    params: RunParams,
    gate: &Arc<Gate>,
) -> anyhow::Result<Joined> {
    let (w, threads) = (spec.workload, spec.threads);
    let runtime = rt::Runtime::new(threads)?;
    let handles: Vec<_> = (0..clients)
        .map(|tid| {
            let (target, gate, party) = (target.clone(), gate.clone(), gate.party());
            runtime.spawn(move || {
                let _party = party;
                run_thread(&target, w, tid, params, &gate)
            })
        })
        .collect();
    // Compute-only uthreads beside the workload (Fig. 11 right): they yield between
    // bursts, so a worker runs them whenever its I/O uthreads wait.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let computes: Vec<_> = (0..if spec.compute_uthread { threads } else { 0 })
        .map(|_| {
            let stop = stop.clone();
            let us = params.compute_us;
            runtime.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    compute(us);
                    rt::yield_now();
                }
            })
        })
        .collect();
    let measure = Measure::start(gate);
    let joined = handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|e| anyhow::anyhow!("benchmark uthread: {e}"))
        })
        .map(|r| r.and_then(|r| r))
        .collect();
    let cpu = measure.cpu();
    stop.store(true, Ordering::Relaxed);
    for c in computes {
        let _ = c.join();
    }
    measure.finish(joined, cpu)
}

/// Runs the clients as kernel threads.
fn run_threads(
    spec: &RunSpec,
    target: &Arc<Mount>,
    clients: usize,
    params: RunParams,
    gate: &Arc<Gate>,
) -> anyhow::Result<Joined> {
    let w = spec.workload;
    let handles: Vec<_> = (0..clients)
        .map(|tid| {
            let (target, gate, party) = (target.clone(), gate.clone(), gate.party());
            std::thread::spawn(move || {
                let _party = party;
                run_thread(&target, w, tid, params, &gate)
            })
        })
        .collect();
    let measure = Measure::start(gate);
    let joined = handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("benchmark thread panicked"))
        })
        .map(|r| r.and_then(|r| r))
        .collect();
    let cpu = measure.cpu();
    measure.finish(joined, cpu)
}

/// The row of one configuration from its clients' results and CPU seconds.
fn row(
    spec: &RunSpec,
    clients: usize,
    results: &[ThreadResult],
    (cpu, engine_cpu): (f64, f64),
) -> anyhow::Result<Row> {
    let (w, mode) = (spec.workload, spec.mode);
    let mut hist = Histogram::<u64>::new(3)?;
    let (mut ops_per_s, mut bytes_per_s, mut bytes, mut ops) = (0.0, 0.0, 0u64, 0u64);
    for r in results {
        hist.add(&r.hist)?;
        // Each thread's rate over its active time (upkeep excluded).
        if r.active > Duration::ZERO {
            ops_per_s += r.ops as f64 / r.active.as_secs_f64();
            bytes_per_s += r.bytes as f64 / r.active.as_secs_f64();
        }
        bytes += r.bytes;
        ops += r.ops;
    }
    let gib = bytes as f64 / (1u64 << 30) as f64;
    Ok(Row {
        workload: w,
        mode,
        threads: spec.threads,
        clients,
        io_size: spec.params.io,
        ops_per_s,
        gib_per_s: bytes_per_s / (1u64 << 30) as f64,
        p50_us: hist.value_at_quantile(0.5) as f64 / 1e3,
        p99_us: hist.value_at_quantile(0.99) as f64 / 1e3,
        cpu_us_per_op: cpu * 1e6 / ops.max(1) as f64,
        cpu_s_per_gib: (w.moves_data() && gib > 0.0).then(|| cpu / gib),
        engine_cpu_s_per_gib: (w.moves_data()
            && gib > 0.0
            && mode.mover().is_some_and(|m| m.uses_engine()))
        .then(|| engine_cpu / gib),
        of_limit: None,
        limit: None,
        bare_p50_us: None,
        floor_p50_us: None,
    })
}

/// The single-core limit for moving `io` bytes the way `limit` says: persistent copy
/// (writes) or memcpy (reads), measured now on a scratch region: (GiB/s, median µs of
/// one bare copy, and for writes the median µs of one copy and its ordered commit).
fn single_core_limit(io: u64, limit: Limit) -> anyhow::Result<(f64, f64, Option<f64>)> {
    let region = Region::create_temp(raw::REGION_BYTES)?;
    let path = if limit.read {
        raw::Path::Read
    } else {
        raw::Path::PersistentCopy
    };
    let (mut bw, mut p50, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..LIMIT_ROUNDS {
        bw.push(raw::measure_span(
            &region,
            io,
            path,
            LIMIT_ROUND,
            limit.span,
        ));
        p50.push(raw::p50_ns(&region, io, path, LIMIT_ROUND, limit.span));
        if !limit.read {
            floor.push(raw::committed_p50_ns(&region, io, LIMIT_ROUND, limit.span));
        }
    }
    Ok((
        gib_per_s(io, crate::median(bw)),
        crate::median(p50) / 1e3,
        (!floor.is_empty()).then(|| crate::median(floor) / 1e3),
    ))
}

/// What the table's note says about the columns.
const NOTE: &str = "kernel = std::fs on the host tmpfs: its writes are not persistent; \
                    of it engine = CPU-s/GiB of the software copy engine's threads, the \
                    stand-in for a hardware engine that costs no CPU (idle, it naps if its \
                    thread and the workers fit the cores, else spins); \
                    of limit = fraction of one core's raw copy bandwidth measured in this run \
                    the way the workload moves data (reads: one hot block re-read, as the \
                    workloads do; writes: persistent copies into a cold span); \
                    bare p50 = median µs of one such copy of io bytes alone, timed the same way; \
                    floor p50 (writes) = the same copy followed by one ordered 8-byte commit \
                    (store, write-back, fence), the least a crash-consistent write costs";

/// `easyio bench micro`: every configuration asked for, then the report.
pub fn run(a: MicroArgs) -> anyhow::Result<()> {
    let runs = specs(&a);
    let region: Arc<dyn Pmem> = Arc::new(Region::create_temp(a.region_size)?);
    let quiet = a.json || a.duration * runs.len() as f64 <= 3.0;
    let results = measure_all(&runs, &region, quiet)?;
    let report = Report {
        machine: Machine::this(),
        duration_s: a.duration,
        slowmem: a
            .slowmem
            .model()
            .map(|m| format!("EMULATED {} ({})", m.name, m.source)),
        note: NOTE,
        results,
    };
    if a.json {
        return report::print_json(&report);
    }
    print_report(&report);
    Ok(())
}

/// Every configuration of the arguments: workloads × sizes × threads × modes.
fn specs(a: &MicroArgs) -> Vec<RunSpec> {
    let duration = Duration::from_secs_f64(a.duration);
    let mut runs = Vec::new();
    for &w in &a.workload {
        for &io in &a.io_size {
            for &t in &a.threads {
                for &m in &a.mode {
                    runs.push(RunSpec {
                        workload: w,
                        mode: m,
                        threads: t,
                        uthreads_per_core: a.uthreads_per_core,
                        slowmem: a.slowmem.model(),
                        engine: a.engine,
                        compute_uthread: a.compute_uthread,
                        params: RunParams {
                            io,
                            duration,
                            append_cap: APPEND_CAP,
                            compute_us: a.compute_us,
                        },
                    });
                }
            }
        }
    }
    runs
}

/// Runs every configuration in turn, each data workload beside the single-core
/// limit of its size and direction (measured once per pair).
fn measure_all(runs: &[RunSpec], region: &Arc<dyn Pmem>, quiet: bool) -> anyhow::Result<Vec<Row>> {
    let progress = progress::bar(runs.len() as u64, quiet);
    let mut results = Vec::new();
    let mut limits = std::collections::HashMap::new();
    for spec in runs {
        let (w, m, t) = (spec.workload, spec.mode, spec.threads);
        signals::check()?;
        progress.set_message(format!("{w:?} {} {t} thread(s)", m.name()));
        let mut row = run_one(spec, region)
            .with_context(|| format!("{w:?} in mode {} with {t} thread(s)", m.name()))?;
        if w.moves_data() {
            let io = spec.params.io;
            let how = w.limit(io);
            let (limit, bare_p50, floor_p50) = match limits.get(&(how, io)) {
                Some(&l) => l,
                None => {
                    let l = single_core_limit(io, how)?;
                    limits.insert((how, io), l);
                    l
                }
            };
            row.of_limit = Some(row.gib_per_s / limit);
            row.bare_p50_us = Some(bare_p50);
            row.floor_p50_us = floor_p50;
            row.limit = Some(how.describe(io));
        }
        results.push(row);
        progress.inc(1);
    }
    progress.finish_and_clear();
    Ok(results)
}

/// The report for people: settings, machine, note and the table.
fn print_report(report: &Report) {
    println!("easyio bench micro — {} s per run", report.duration_s);
    println!("machine: {}", report.machine.describe());
    if let Some(s) = &report.slowmem {
        println!("slowmem: {s}");
    }
    println!("note:    {}", report.note);
    println!("{}", table(&report.results));
}

/// The results as a table, each beside the kernel's figure of the same configuration.
fn table(results: &[Row]) -> String {
    let rows = results
        .iter()
        .map(|r| {
            let peer = results.iter().find(|p| {
                p.mode == Target::Kernel
                    && p.workload == r.workload
                    && p.threads == r.threads
                    && p.io_size == r.io_size
            });
            vec![
                format!("{:?}", r.workload).to_uppercase(),
                report::size_label(r.io_size),
                r.mode.name().to_string(),
                format!("{}/{}", r.threads, r.clients),
                format!("{:.0}", r.ops_per_s),
                if r.workload.moves_data() {
                    format!("{:.2}", r.gib_per_s)
                } else {
                    String::new()
                },
                format!("{:.2}", r.p50_us),
                r.bare_p50_us.map_or(String::new(), |b| format!("{b:.2}")),
                r.floor_p50_us.map_or(String::new(), |b| format!("{b:.2}")),
                format!("{:.2}", r.p99_us),
                format!("{:.2}", r.cpu_us_per_op),
                r.cpu_s_per_gib.map_or(String::new(), |c| format!("{c:.3}")),
                r.engine_cpu_s_per_gib
                    .map_or(String::new(), |c| format!("{c:.3}")),
                r.of_limit.map_or(String::new(), |f| format!("{f:.2}")),
                match peer {
                    Some(p) if r.mode != Target::Kernel && p.ops_per_s > 0.0 => {
                        format!("{:.2}x", r.ops_per_s / p.ops_per_s)
                    }
                    _ => String::new(),
                },
            ]
        })
        .collect();
    report::table(
        &[
            "workload",
            "io",
            "mode",
            "thr/clients",
            "ops/s",
            "GiB/s",
            "p50 µs",
            "bare p50",
            "floor p50",
            "p99 µs",
            "CPU µs/op",
            "CPU-s/GiB",
            "of it engine",
            "of limit",
            "vs kernel",
        ],
        rows,
    )
}

#[cfg(test)]
mod tests {
    use super::{Limit, Workload};
    use crate::raw;

    #[test]
    fn read_workloads_are_measured_against_a_hot_block() {
        for w in [Workload::Drbl, Workload::Drbm, Workload::Cior] {
            assert_eq!(
                w.limit(64 << 10),
                Limit {
                    read: true,
                    span: 64 << 10
                },
                "{w:?}"
            );
            assert_eq!(
                w.limit(4096).describe(4096),
                "memcpy out of the region, one hot block"
            );
        }
    }

    #[test]
    fn write_workloads_are_measured_against_a_cold_span() {
        for w in [
            Workload::Dwal,
            Workload::Dwol,
            Workload::Dwom,
            Workload::Ciow,
        ] {
            let l = w.limit(4096);
            assert!(!l.read, "{w:?}");
            assert_eq!(l.span, raw::REGION_BYTES, "{w:?}");
            assert_eq!(
                l.describe(4096),
                "persistent copy into the region, a cold 256 MiB span"
            );
        }
    }
}
