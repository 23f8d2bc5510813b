//! `easyio bench rt`: the cost of the user-level thread runtime's basic operations beside
//! the same operations with kernel threads, measured in the same run.
//!
//! - yield round trip: a uthread alone on its worker calling `rt::yield_now` vs a thread
//!   calling `std::thread::yield_now` (a `sched_yield` system call) with nothing else to run;
//! - yield switch: the same with a second uthread (thread) that also yields in a loop on the
//!   same worker (CPU), so that every yield switches to the other and back;
//! - spawn + join: a uthread spawning and joining a uthread vs `std::thread::spawn` + join;
//! - ping-pong: one round trip of a message between two uthreads over `rt::sync` channels
//!   vs between two threads over `std::sync::mpsc` channels;
//! - ping-pong across workers: the same on a runtime of `WORKERS_APART` workers, the two
//!   uthreads started on different workers. A started uthread stays on its worker, so every
//!   message wakes a uthread of the other worker (and that worker, if it slept).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::report::{self, Machine};
use crate::{median, time_per_op};

/// Alternating rounds per operation and kind; the median is reported.
const ROUNDS: usize = 5;
/// Targets for the ratio kernel thread / uthread (from the issue that introduced `rt`).
const YIELD_TARGET: f64 = 20.0;
const SPAWN_TARGET: f64 = 10.0;

/// Workers of the runtime under test: one, so that the uthreads of an operation share a
/// worker the way the threads of the kernel-thread peer share a core (yield switch) or not
/// (the peer's ping-pong threads may run on two cores).
const WORKERS: usize = 1;
/// Workers of the runtime of the ping-pong across workers.
const WORKERS_APART: usize = 2;

/// The options of `easyio bench rt`.
#[derive(Args)]
pub struct RtArgs {
    /// Milliseconds per measurement round (1 to 60000).
    #[arg(long, default_value_t = 60, value_parser = crate::args::millis())]
    round_ms: u64,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// What is measured.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Yield,
    YieldSwitch,
    SpawnJoin,
    PingPong,
    PingPongApart,
}

impl Op {
    const ALL: [Op; 5] = [
        Op::Yield,
        Op::YieldSwitch,
        Op::SpawnJoin,
        Op::PingPong,
        Op::PingPongApart,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::Yield => "yield-round-trip",
            Op::YieldSwitch => "yield-switch",
            Op::SpawnJoin => "spawn-join",
            Op::PingPong => "ping-pong",
            Op::PingPongApart => "ping-pong-2-workers",
        }
    }

    fn target(self) -> Option<f64> {
        match self {
            Op::Yield => Some(YIELD_TARGET),
            Op::SpawnJoin => Some(SPAWN_TARGET),
            Op::YieldSwitch | Op::PingPong | Op::PingPongApart => None,
        }
    }
}

#[derive(Serialize)]
struct Row {
    op: &'static str,
    uthread_ns: f64,
    os_thread_ns: f64,
    /// How many times cheaper the uthread operation is: `os_thread_ns / uthread_ns`.
    ratio: f64,
    /// The ratio the runtime is meant to reach, where there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    workers: usize,
    round_ms: u64,
    results: Vec<Row>,
    stats: Vec<WorkerRow>,
}

#[derive(Serialize)]
struct WorkerRow {
    worker: usize,
    switches: u64,
    steals: u64,
    parks: u64,
    wait_polls: u64,
}

/// `easyio bench rt`: start the two runtimes, measure every operation beside its
/// kernel-thread peer, report.
pub fn run(args: RtArgs) -> anyhow::Result<()> {
    let runtime = ::rt::Runtime::builder()
        .workers(WORKERS)
        .name("bench-rt")
        .build()
        .context("starting the runtime")?;
    let apart = ::rt::Runtime::builder()
        .workers(WORKERS_APART)
        .name("bench-rt-apart")
        .build()
        .context("starting the two-worker runtime")?;
    let round = Duration::from_millis(args.round_ms);
    let results = Op::ALL
        .into_iter()
        .map(|op| {
            let on = if op == Op::PingPongApart {
                &apart
            } else {
                &runtime
            };
            measure(on, op, round)
        })
        .collect();
    let stats = runtime
        .stats()
        .into_iter()
        .map(|s| WorkerRow {
            worker: s.worker,
            switches: s.switches,
            steals: s.steals,
            parks: s.parks,
            wait_polls: s.wait_polls,
        })
        .collect();
    runtime.shutdown();
    apart.shutdown();
    let report = Report {
        machine: Machine::this(),
        workers: WORKERS,
        round_ms: args.round_ms,
        results,
        stats,
    };
    if args.json {
        return report::print_json(&report);
    }
    print_report(&report);
    Ok(())
}

/// `op` by uthreads of `runtime` and by kernel threads, in alternating rounds.
fn measure(runtime: &::rt::Runtime, op: Op, round: Duration) -> Row {
    let mut uthread = Vec::new();
    let mut os = Vec::new();
    for r in 0..ROUNDS {
        // Alternate the order so that neither kind always runs on a warmer machine.
        if r % 2 == 0 {
            uthread.push(measure_uthread(runtime, op, round));
            os.push(measure_os(op, round));
        } else {
            os.push(measure_os(op, round));
            uthread.push(measure_uthread(runtime, op, round));
        }
    }
    let (u, o) = (median(uthread), median(os));
    Row {
        op: op.name(),
        uthread_ns: u,
        os_thread_ns: o,
        ratio: o / u,
        target: op.target(),
    }
}

/// The report for people: the settings and a row per operation.
fn print_report(report: &Report) {
    println!(
        "easyio bench rt — {} worker(s) ({} for {}), {} rounds of {} ms per operation and kind, median",
        WORKERS,
        WORKERS_APART,
        Op::PingPongApart.name(),
        ROUNDS,
        report.round_ms
    );
    println!("machine: {}", report.machine.describe());
    let rows = report
        .results
        .iter()
        .map(|r| {
            vec![
                r.op.to_string(),
                format!("{:.1}", r.uthread_ns),
                format!("{:.1}", r.os_thread_ns),
                format!("{:.1}x", r.ratio),
                r.target.map_or(String::new(), |t| format!(">= {t:.0}x")),
            ]
        })
        .collect();
    println!(
        "{}",
        report::table(
            &[
                "operation",
                "uthread ns",
                "kernel thread ns",
                "ratio",
                "target"
            ],
            rows
        )
    );
}

/// Nanoseconds per operation, done by uthreads of `runtime`.
fn measure_uthread(runtime: &::rt::Runtime, op: Op, round: Duration) -> f64 {
    runtime.block_on(move || match op {
        Op::Yield => time_per_op(round, |_| ::rt::yield_now()),
        Op::YieldSwitch => {
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let partner = ::rt::spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    ::rt::yield_now();
                }
            });
            let ns = time_per_op(round, |_| ::rt::yield_now());
            stop.store(true, Ordering::Relaxed);
            partner.join().expect("partner finished");
            ns
        }
        Op::SpawnJoin => time_per_op(round, |i| {
            let v = ::rt::spawn(move || i).join().expect("uthread ran");
            std::hint::black_box(v);
        }),
        Op::PingPong | Op::PingPongApart => {
            let (ping_tx, ping_rx) = ::rt::sync::bounded::<u64>(1);
            let (pong_tx, pong_rx) = ::rt::sync::bounded::<u64>(1);
            let started = Arc::new(AtomicBool::new(false));
            let s = started.clone();
            let ponger = ::rt::spawn(move || {
                s.store(true, Ordering::Release);
                while let Ok(v) = ping_rx.recv() {
                    if pong_tx.send(v).is_err() {
                        break;
                    }
                }
            });
            if op == Op::PingPongApart {
                // Keep this worker busy, without a switch, until another worker has stolen
                // the ponger and started it there.
                while !started.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            }
            let ns = time_per_op(round, |i| {
                ping_tx.send(i).expect("ponger alive");
                std::hint::black_box(pong_rx.recv().expect("ponger alive"));
            });
            drop(ping_tx);
            ponger.join().expect("ponger finished");
            ns
        }
    })
}

/// Nanoseconds per operation, done by kernel threads.
fn measure_os(op: Op, round: Duration) -> f64 {
    match op {
        Op::Yield => time_per_op(round, |_| std::thread::yield_now()),
        Op::YieldSwitch => {
            // Both threads on one CPU, started together, so every yield is a context switch.
            let cpu = first_allowed_cpu();
            let stop = Arc::new(AtomicBool::new(false));
            let start = Arc::new(Barrier::new(2));
            let (s, b) = (stop.clone(), start.clone());
            let partner = std::thread::spawn(move || {
                pin_to(cpu);
                b.wait();
                while !s.load(Ordering::Relaxed) {
                    std::thread::yield_now();
                }
            });
            let measurer = std::thread::spawn(move || {
                pin_to(cpu);
                start.wait();
                time_per_op(round, |_| std::thread::yield_now())
            });
            let ns = measurer.join().expect("measuring thread ran");
            stop.store(true, Ordering::Relaxed);
            partner.join().expect("partner finished");
            ns
        }
        Op::SpawnJoin => time_per_op(round, |i| {
            let v = std::thread::spawn(move || i).join().expect("thread ran");
            std::hint::black_box(v);
        }),
        Op::PingPong | Op::PingPongApart => {
            let (ping_tx, ping_rx) = mpsc::sync_channel::<u64>(1);
            let (pong_tx, pong_rx) = mpsc::sync_channel::<u64>(1);
            let ponger = std::thread::spawn(move || {
                while let Ok(v) = ping_rx.recv() {
                    if pong_tx.send(v).is_err() {
                        break;
                    }
                }
            });
            let ns = time_per_op(round, |i| {
                ping_tx.send(i).expect("ponger alive");
                std::hint::black_box(pong_rx.recv().expect("ponger alive"));
            });
            drop(ping_tx);
            ponger.join().expect("ponger finished");
            ns
        }
    }
}

/// The first CPU this process may run on.
fn first_allowed_cpu() -> usize {
    rustix::thread::sched_getaffinity(None).map_or(0, |set| {
        (0..rustix::thread::CpuSet::MAX_CPU)
            .find(|&c| set.is_set(c))
            .unwrap_or(0)
    })
}

/// Pins the calling thread to `cpu` (best effort: unpinned, the measurement is only less
/// faithful).
fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}
