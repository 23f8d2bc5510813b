//! `easyio crashtest`, the harness's command: its arguments, the runs they ask for
//! (each workload in each mode), the recordings they save, and the table of outcomes
//! (EASYIO Table 2). The binary parses the command line and calls [`run`].

use clap::Args;
use command::output::Output;
use command::{progress, report, signals, usage};
use pmem::CrashChoice;

use crate::{Config, Mode, Outcome, Workload};

/// Most crash points per workload, and random images per point, a run accepts.
const MAX_POINTS: u64 = 1_000_000;
const MAX_RANDOM_STATES: u64 = 10_000;

/// Failures printed in full per workload; the rest are counted.
const SHOWN_FAILURES: usize = 5;

/// The arguments of `easyio crashtest`.
#[derive(Args)]
pub struct CrashtestArgs {
    /// Workload: create_delete, generic_056, generic_090, generic_322, random, or all.
    #[arg(long, default_value = "all")]
    workload: String,
    /// Data-movement mode: cpu, semaphore, delegate, dma-sync, async, or all (each
    /// mode in turn, every workload in each).
    #[arg(long, default_value = "cpu", value_parser = parse_modes)]
    mode: Modes,
    /// Crash points per workload (1 to 1000000).
    #[arg(
        long,
        default_value_t = crate::harness::DEFAULT_POINTS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_POINTS)
    )]
    points: usize,
    /// Seed of the workload, the crash points and the sampled images.
    #[arg(long, default_value_t = crate::harness::DEFAULT_SEED)]
    seed: u64,
    /// Random images per crash point besides "none" and "all" (0 to 10000).
    #[arg(
        long,
        default_value_t = crate::harness::DEFAULT_RANDOM_STATES,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=MAX_RANDOM_STATES)
    )]
    random_states: usize,
    /// Replay: test only this trace position (as printed for a failure).
    #[arg(long)]
    at: Option<usize>,
    /// Replay: with --at, only this image (none, all or random:SEED).
    #[arg(long, requires = "at", value_parser = parse_state)]
    state: Option<CrashChoice>,
    /// Replay from a recording saved by an earlier run (--save-trace, or the file a
    /// failing run of a mode that copies off the caller's thread saves) instead of
    /// recording afresh.
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
    /// Save the recording (trace and operation spans) to this file. Without it, a
    /// failing run in delegate, dma-sync or async mode saves it to
    /// easyio-crash-WORKLOAD-MODE-seedS.trace, since the interleaving of the copying
    /// threads with the file system's differs from run to run (not with --json, which
    /// writes no file unasked).
    #[arg(long)]
    save_trace: Option<std::path::PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// The modes to run, in order.
#[derive(Clone)]
struct Modes(Vec<Mode>);

fn parse_modes(s: &str) -> Result<Modes, String> {
    if s == "all" {
        return Ok(Modes(Mode::ALL.to_vec()));
    }
    match Mode::ALL.iter().find(|m| m.name() == s) {
        Some(&m) => Ok(Modes(vec![m])),
        None => {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            Err(format!("unknown mode {s:?}; modes: {}", names.join(", ")))
        }
    }
}

fn parse_state(s: &str) -> Result<CrashChoice, String> {
    s.parse()
}

/// Runs every workload asked for in every mode asked for, prints the outcomes, and
/// fails if a crash point failed.
pub fn run(args: CrashtestArgs) -> anyhow::Result<()> {
    let workloads: Vec<Workload> = if args.workload == "all" {
        Workload::ALL.to_vec()
    } else {
        match args.workload.parse() {
            Ok(w) => vec![w],
            Err(e) => usage!("--workload: {e}"),
        }
    };
    let modes = args.mode.0.clone();
    if (workloads.len() > 1 || modes.len() > 1)
        && (args.trace.is_some() || args.save_trace.is_some())
    {
        usage!("--trace and --save-trace take one workload and one mode, not all");
    }
    let runs: Vec<(Mode, Workload)> = modes
        .iter()
        .flat_map(|&m| workloads.iter().map(move |&w| (m, w)))
        .collect();
    // Each trace file is prepared before any work and put in place when written.
    let traces = runs
        .iter()
        .map(|&(mode, w)| trace_output(&args, mode, w))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let progress = progress::bar(runs.len() as u64, args.json);
    let mut outcomes = Vec::new();
    for ((mode, w), trace) in runs.into_iter().zip(traces) {
        signals::check()?;
        progress.set_message(format!("{} {}", mode.name(), w.name()));
        outcomes.push(run_one(&args, mode, w, trace)?);
        progress.inc(1);
    }
    progress.finish_and_clear();
    if args.json {
        report::print_json(&outcomes)?;
    } else {
        print_table(&outcomes);
        let (points, passed) = outcomes
            .iter()
            .fold((0, 0), |(n, p), o| (n + o.points, p + o.passed));
        let seconds: f64 = outcomes.iter().map(|o| o.seconds).sum();
        println!(
            "{passed} of {points} crash points passed: {} workload(s) in {} mode(s), {seconds:.1} s",
            workloads.len(),
            modes.len()
        );
    }
    let failed: usize = outcomes.iter().map(|o| o.points - o.passed).sum();
    if failed > 0 {
        anyhow::bail!("{failed} crash point(s) failed");
    }
    Ok(())
}

/// Where a run saves its recording, if anywhere, and whether only on a failure: the
/// file asked for, or for a mode whose copies run off the caller's thread a file
/// named after the run (not with --json, which writes no file unasked).
fn trace_output(
    args: &CrashtestArgs,
    mode: Mode,
    w: Workload,
) -> anyhow::Result<Option<(Output, bool)>> {
    Ok(match &args.save_trace {
        Some(p) => Some((Output::create(p, None)?, false)),
        None if mode.copies_off_thread() && args.trace.is_none() && !args.json => {
            let p = format!(
                "easyio-crash-{}-{}-seed{}.trace",
                w.name(),
                mode.name(),
                args.seed
            );
            Some((Output::create(p.as_ref(), None)?, true))
        }
        None => None,
    })
}

/// Runs workload `w` in `mode`; puts its recording in place if the harness wrote one.
fn run_one(
    args: &CrashtestArgs,
    mode: Mode,
    w: Workload,
    trace: Option<(Output, bool)>,
) -> anyhow::Result<Outcome> {
    let cfg = Config {
        points: args.points,
        seed: args.seed,
        random_states: args.random_states,
        only: args.at.map(|pos| (pos, args.state)),
        trace: args.trace.clone(),
        save_trace: trace
            .as_ref()
            .map(|(out, on_failure)| (out.path().to_path_buf(), *on_failure)),
        ..Config::new(w, mode)
    };
    let mut outcome = crate::run(&cfg).map_err(anyhow::Error::msg)?;
    if let Some((out, _)) = trace {
        // Written by the harness (always, or on a failure): put it in place, and
        // name that place in the replay commands.
        if std::fs::metadata(out.path()).is_ok_and(|m| m.len() > 0) {
            let target = out.target().display().to_string();
            out.commit()?;
            for f in &mut outcome.failures {
                if f.trace_file.is_some() {
                    f.trace_file = Some(target.clone());
                }
            }
        }
    }
    Ok(outcome)
}

fn print_table(outcomes: &[Outcome]) {
    let rows = outcomes
        .iter()
        .map(|o| {
            vec![
                o.workload.name().to_string(),
                o.workload.description().to_string(),
                o.mode.name().to_string(),
                o.ops.to_string(),
                o.trace_events.to_string(),
                o.points.to_string(),
                o.images.to_string(),
                o.offloaded_copies.to_string(),
                o.offloaded_copy_points.to_string(),
                o.passed.to_string(),
                format!("{:.1}", o.seconds),
            ]
        })
        .collect();
    println!(
        "{}",
        report::table(
            &[
                "workload",
                "description",
                "mode",
                "ops",
                "trace events",
                "crash points",
                "images",
                "offloaded copies",
                "points in a copy",
                "passed",
                "seconds",
            ],
            rows
        )
    );
    for o in outcomes {
        for f in o.failures.iter().take(SHOWN_FAILURES) {
            println!();
            println!(
                "FAILED {} (mode {}) seed {} at trace position {}, image {}",
                o.workload.name(),
                o.mode.name(),
                f.seed,
                f.position,
                f.state
            );
            println!("  operations returned: {}", f.returned);
            if let Some((i, op)) = &f.in_flight {
                println!("  in flight: operation {i}: {op}");
            }
            println!("  {}", f.problem.what);
            for line in &f.problem.diff {
                println!("    {line}");
            }
            println!("  replay: {}", f.replay_command());
        }
        if o.failures.len() > SHOWN_FAILURES {
            println!(
                "\n… {} more failing images of {}",
                o.failures.len() - SHOWN_FAILURES,
                o.workload.name()
            );
        }
    }
}
