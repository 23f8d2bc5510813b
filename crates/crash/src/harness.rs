//! The harness: runs a workload on a tracing region, chooses crash points in the
//! trace, builds the crash images there and has the oracle check each.
//!
//! Cost is kept down by walking the trace once: crash points are visited in order and
//! a [`CrashCursor`] keeps the durable image up to date between them, so an image is
//! one copy of the durable image plus the pending stores chosen, never a re-run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use fs::{FileSystem, FormatOptions, MountOptions};
use pmem::crash::SplitMix;
use pmem::trace::{EventKind, Trace};
use pmem::{CrashChoice, CrashCursor, MemPmem, Pmem, TracePmem};
use serde::Serialize;

use crate::model::{Model, Snapshot};
use crate::ops::Op;
use crate::oracle::{check_image, Problem};
use crate::workload::Workload;

/// Bytes of the region a workload runs on: room for every workload's files with
/// copy-on-write, small enough that an image is cheap to copy.
pub const REGION_BYTES: usize = 4 << 20;
/// Crash points per workload of a default run (EASYIO Table 2).
pub const DEFAULT_POINTS: usize = 1000;
/// Random images per crash point, besides "none" and "all".
pub const DEFAULT_RANDOM_STATES: usize = 2;
/// Seed of a default run.
pub const DEFAULT_SEED: u64 = 1;

/// Who moves file data while the workload runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The calling thread copies (NOVA's data path).
    Cpu,
}

impl Mode {
    /// Modes that exist; `async` joins when the engine-backed data path lands.
    pub const ALL: [Mode; 1] = [Mode::Cpu];

    /// Name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
        }
    }

    /// Mount options selecting this mode's mover.
    pub fn mount_options(self) -> MountOptions {
        match self {
            Mode::Cpu => MountOptions::default(),
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "cpu" => Ok(Mode::Cpu),
            "async" => Err(
                "mode async: the engine-backed data path has not landed yet; \
                 modes: cpu"
                    .into(),
            ),
            _ => Err(format!("unknown mode {s:?}; modes: cpu")),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub workload: Workload,
    pub mode: Mode,
    /// Crash points (trace positions) to test.
    pub points: usize,
    /// Seed of the workload, the crash points and the random images.
    pub seed: u64,
    /// Random images per crash point besides "none" and "all".
    pub random_states: usize,
    /// Stop at the first failing image.
    pub stop_at_first_failure: bool,
    /// Test only this trace position (and, if given, only this image there): replay.
    pub only: Option<(usize, Option<CrashChoice>)>,
}

impl Config {
    /// A default run of `workload` in `mode`.
    pub fn new(workload: Workload, mode: Mode) -> Config {
        Config {
            workload,
            mode,
            points: DEFAULT_POINTS,
            seed: DEFAULT_SEED,
            random_states: DEFAULT_RANDOM_STATES,
            stop_at_first_failure: false,
            only: None,
        }
    }
}

/// One failing crash image, with what it takes to replay it.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub workload: Workload,
    pub mode: Mode,
    pub seed: u64,
    /// Trace position of the crash.
    pub position: usize,
    /// Which image at that position (`none`, `all`, `random:SEED`).
    pub state: String,
    /// Operations that had returned.
    pub returned: usize,
    /// The operation in flight, if any: index and description.
    pub in_flight: Option<(usize, String)>,
    pub problem: Problem,
}

impl Failure {
    /// The command that replays exactly this image.
    pub fn replay_command(&self) -> String {
        format!(
            "easyio crashtest --workload {} --mode {} --seed {} --at {} --state {}",
            self.workload.name(),
            self.mode.name(),
            self.seed,
            self.position,
            self.state
        )
    }
}

/// The result of a run.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub workload: Workload,
    pub mode: Mode,
    pub seed: u64,
    /// Operations of the workload.
    pub ops: usize,
    /// Events in the trace, and of them fences.
    pub trace_events: usize,
    pub fences: usize,
    /// Crash points tested, and how many passed (every image there recovered right).
    pub points: usize,
    pub passed: usize,
    /// Crash images mounted and checked.
    pub images: usize,
    pub failures: Vec<Failure>,
    pub seconds: f64,
}

/// A workload run on a tracing region: its trace and where each operation began and
/// returned.
pub struct Recording {
    pub ops: Vec<Op>,
    pub trace: Trace,
    /// Trace position before each operation began and after it returned.
    pub spans: Vec<(usize, usize)>,
    /// Model states: `states[k]` is the namespace after the first `k` operations.
    pub states: Vec<Snapshot>,
}

/// A formatted, empty region image.
pub fn formatted_image() -> Vec<u8> {
    let mem = MemPmem::new(REGION_BYTES);
    FileSystem::format(&mem, &FormatOptions::default()).expect("format of the crash region");
    mem.into_image()
}

/// Runs `ops` on a tracing region in `mode`: mount, the operations, unmount, all
/// traced. Fails if an operation fails or the live file system disagrees with the
/// model at the end (the workload or the file system is wrong, not the recovery).
pub fn record(ops: Vec<Op>, mode: Mode) -> Result<Recording, String> {
    let mut model = Model::new();
    let mut states = vec![model.snapshot()];
    for op in &ops {
        op.apply(&mut model)
            .map_err(|e| format!("the model refuses {op}: {e}"))?;
        states.push(model.snapshot());
    }
    let tp = Arc::new(TracePmem::new(formatted_image()));
    let (fs, _) = FileSystem::mount(tp.clone() as Arc<dyn Pmem>, mode.mount_options())
        .map_err(|e| format!("mount of the fresh region: {e}"))?;
    let mut fds = HashMap::new();
    let mut spans = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let start = tp.position();
        op.run(&fs, &mut fds)
            .map_err(|e| format!("operation {i} ({op}) failed: {e}"))?;
        spans.push((start, tp.position()));
    }
    let live = crate::oracle::snapshot_of(&fs)?;
    if live != *states.last().unwrap() {
        return Err(format!(
            "the file system disagrees with the model before any crash: {:?}",
            states.last().unwrap().diff(&live)
        ));
    }
    fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    let trace = Arc::try_unwrap(tp)
        .map_err(|_| "the tracing region is still shared after unmount".to_string())?
        .into_trace();
    Ok(Recording {
        ops,
        trace,
        spans,
        states,
    })
}

impl Recording {
    /// Operations returned by `pos`, and the one in flight there.
    pub fn at(&self, pos: usize) -> (usize, Option<usize>) {
        let returned = self.spans.iter().take_while(|s| s.1 <= pos).count();
        let in_flight = self
            .spans
            .get(returned)
            .filter(|s| s.0 < pos)
            .map(|_| returned);
        (returned, in_flight)
    }

    /// Crash points for a run: half just before a fence (where the most stores are
    /// pending), half anywhere; sorted, drawn from `seed`.
    pub fn choose_points(&self, n: usize, seed: u64) -> Vec<usize> {
        let fences: Vec<usize> = (0..self.trace.len())
            .filter(|&i| self.trace.events[i].kind == EventKind::Fence)
            .collect();
        let mut rng = SplitMix(seed ^ 0xC2B2_AE3D_27D4_EB4F);
        let len = self.trace.len() as u64;
        let mut pts: Vec<usize> = (0..n)
            .map(|k| {
                if k % 2 == 0 && !fences.is_empty() {
                    fences[rng.below(fences.len() as u64) as usize]
                } else {
                    rng.below(len + 1) as usize
                }
            })
            .collect();
        pts.sort_unstable();
        pts
    }
}

/// Runs a configuration: record, then check every crash point.
pub fn run(cfg: &Config) -> Result<Outcome, String> {
    let start = Instant::now();
    let rec = record(cfg.workload.generate(cfg.seed), cfg.mode)?;
    let points = match cfg.only {
        Some((pos, _)) if pos > rec.trace.len() => {
            return Err(format!(
                "position {pos} is past the end of the trace ({} events)",
                rec.trace.len()
            ))
        }
        Some((pos, _)) => vec![pos],
        None => rec.choose_points(cfg.points, cfg.seed),
    };
    let mut out = Outcome {
        workload: cfg.workload,
        mode: cfg.mode,
        seed: cfg.seed,
        ops: rec.ops.len(),
        trace_events: rec.trace.len(),
        fences: rec.trace.counts().3,
        points: 0,
        passed: 0,
        images: 0,
        failures: Vec::new(),
        seconds: 0.0,
    };
    let mut cursor = CrashCursor::new(&rec.trace);
    'points: for (k, &pos) in points.iter().enumerate() {
        cursor.advance_to(pos);
        let (returned, in_flight) = rec.at(pos);
        let mut allowed = vec![&rec.states[returned]];
        if in_flight.is_some() {
            allowed.push(&rec.states[returned + 1]);
        }
        let choices = match cfg.only {
            Some((_, Some(choice))) => vec![choice],
            _ => cursor.choices(cfg.random_states, cfg.seed ^ ((k as u64) << 32)),
        };
        out.points += 1;
        let mut ok = true;
        for choice in choices {
            out.images += 1;
            if let Err(problem) = check_image(cursor.image(choice), &allowed, cfg.mode) {
                ok = false;
                out.failures.push(Failure {
                    workload: cfg.workload,
                    mode: cfg.mode,
                    seed: cfg.seed,
                    position: pos,
                    state: choice.to_string(),
                    returned,
                    in_flight: in_flight.map(|i| (i, rec.ops[i].to_string())),
                    problem,
                });
                if cfg.stop_at_first_failure {
                    break 'points;
                }
            }
        }
        out.passed += ok as usize;
    }
    out.seconds = start.elapsed().as_secs_f64();
    Ok(out)
}
