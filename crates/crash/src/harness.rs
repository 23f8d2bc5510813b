//! The harness: runs a workload on a tracing region, chooses crash points in the
//! trace, builds the crash images there and has the oracle check each.
//!
//! Cost is kept down by walking the trace once: crash points are visited in order and
//! a [`CrashCursor`] keeps the durable image up to date between them, so an image is
//! one copy of the durable image plus the pending stores chosen, never a re-run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use fs::{FileSystem, FormatOptions, Geometry, MountOptions};
use pmem::trace::{EventKind, Role, Trace};
use pmem::{CrashChoice, CrashCursor, MemPmem, Pmem, TracePmem};
use serde::Serialize;

use crate::error::{Error, TraceFileError};
use crate::model::{Shadow, Snapshot};
use crate::ops::Op;
use crate::oracle::{check_image, Problem};
use crate::rng::{seeded, Below};
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

/// Who moves file data while the workload runs: every data-movement mode of the file
/// system (DESIGN.md, "Baselines as modes"), each on the tracing region with every
/// store it makes traced, by whichever thread makes it. A crash image is mounted in
/// the mode that made it: recovery itself needs no engine (it reads the completion
/// records), but the writes after it then run on an engine resumed from those records.
/// What each mode means for the trace:
/// - `cpu`: the fence that makes a write's log entry durable covers its data too;
/// - `semaphore`: each copy has its own fence before the entry is staged;
/// - `delegate`: delegation threads copy and fence on their own threads, so the data is
///   durable only by their fences, not the caller's;
/// - `dma-sync`: the engine's worker copies, fences and publishes its completion
///   counter; the entry is staged (with no SN) only after the counter says done;
/// - `async`: the log entry carrying the copy's SN commits before the copy is done.
pub use fs::Mode;

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The workload.
    pub workload: Workload,
    /// The data-movement mode the file system runs in.
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
    /// Replay from this saved recording instead of recording afresh (in a mode that
    /// copies off the caller's thread, the engine's workers or the delegation threads
    /// interleave with the file system's thread as the scheduler decides, so a trace
    /// position means something only in its own recording).
    pub trace: Option<PathBuf>,
    /// Save the recording here: always, or (`on_failure`) only if a crash point fails.
    pub save_trace: Option<(PathBuf, bool)>,
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
            trace: None,
            save_trace: None,
        }
    }
}

/// One failing crash image, with what it takes to replay it.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// The workload.
    pub workload: Workload,
    /// The mode.
    pub mode: Mode,
    /// The seed of the run.
    pub seed: u64,
    /// Trace position of the crash.
    pub position: usize,
    /// Which image at that position (`none`, `all`, `random:SEED`).
    pub state: String,
    /// Operations that had returned.
    pub returned: usize,
    /// The operation in flight, if any: index and description.
    pub in_flight: Option<(usize, String)>,
    /// What was wrong with the image.
    pub problem: Problem,
    /// The saved recording this failure's position refers to, if any.
    pub trace_file: Option<String>,
}

impl Failure {
    /// The command that replays exactly this image.
    pub fn replay_command(&self) -> String {
        let mut cmd = format!(
            "easyio crashtest --workload {} --mode {} --seed {} --at {} --state {}",
            self.workload.name(),
            self.mode.name(),
            self.seed,
            self.position,
            self.state
        );
        if let Some(f) = &self.trace_file {
            cmd += &format!(" --trace {f}");
        }
        cmd
    }
}

/// The result of a run.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The workload.
    pub workload: Workload,
    /// The mode.
    pub mode: Mode,
    /// The seed of the run.
    pub seed: u64,
    /// Operations of the workload.
    pub ops: usize,
    /// Events in the trace.
    pub trace_events: usize,
    /// Fences among them.
    pub fences: usize,
    /// Crash points tested.
    pub points: usize,
    /// Crash points that passed (every image there recovered right).
    pub passed: usize,
    /// Crash images mounted and checked.
    pub images: usize,
    /// Copies made off the caller's thread, as the trace shows them
    /// ([`offloaded_copies`]): from an engine worker's first data store to the store
    /// of the completion counter that covers it, or from a delegation thread's first
    /// data store to the fence that makes its stripe durable.
    pub offloaded_copies: usize,
    /// Crash points inside such a stretch: some of a copy's data issued, its counter
    /// not yet advanced or its fence not yet made.
    pub offloaded_copy_points: usize,
    /// Every failing image.
    pub failures: Vec<Failure>,
    /// Wall-clock time of the run.
    pub seconds: f64,
}

/// A workload run on a tracing region: its trace and where each operation began and
/// returned.
pub struct Recording {
    /// The workload's operations.
    pub ops: Vec<Op>,
    /// Every store, flush and fence of the run.
    pub trace: Trace,
    /// Trace position before each operation began and after it returned.
    pub spans: Vec<(usize, usize)>,
    /// Model states: `states[k]` is the namespace after the first `k` operations.
    pub states: Vec<Snapshot>,
    /// Copies made off the caller's thread: trace positions of their first data
    /// store and of the store or fence that ends them (see [`offloaded_copies`]).
    pub copy_windows: Vec<(usize, usize)>,
}

/// A formatted, empty region image.
pub fn formatted_image() -> Vec<u8> {
    formatted().0
}

/// Where the engine's completion records lie: one cache line a channel.
fn records_area(geo: &Geometry) -> std::ops::Range<u64> {
    geo.records_off()..geo.records_off() + geo.channels * pmem::CACHE_LINE as u64
}

fn formatted() -> (Vec<u8>, Geometry) {
    let mem = MemPmem::new(REGION_BYTES);
    let geo =
        FileSystem::format(&mem, &FormatOptions::default()).expect("format of the crash region");
    (mem.into_image(), geo)
}

/// The calling thread held on the first CPU it may run on until dropped, its former
/// CPUs then given back. The file system's allocator, retired blocks and journals are
/// kept per CPU slot, so a recording that ran on another CPU, or moved between CPUs,
/// would place blocks, and so lay out its trace, differently from run to run: pinned to
/// the same CPU every time, the same workload and seed give the same trace.
struct Pinned(Option<rustix::thread::CpuSet>);

impl Pinned {
    fn first() -> Pinned {
        let Ok(before) = rustix::thread::sched_getaffinity(None) else {
            return Pinned(None);
        };
        let Some(cpu) = (0..rustix::thread::CpuSet::MAX_CPU).find(|&c| before.is_set(c)) else {
            return Pinned(None);
        };
        let mut one = rustix::thread::CpuSet::new();
        one.set(cpu);
        match rustix::thread::sched_setaffinity(None, &one) {
            Ok(()) => Pinned(Some(before)),
            Err(_) => Pinned(None),
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            let _ = rustix::thread::sched_setaffinity(None, before);
        }
    }
}

/// The copies made off the caller's thread in a trace, as (position of the first data
/// store, position of the event that ends the copy):
///
/// - an engine worker's stores, from its first after a counter store up to its next
///   store to a completion counter (in the records area `records`), which publishes
///   them (the worker fences before it);
/// - a delegation thread's stores, from its first after a fence up to its next fence,
///   which makes its stripe durable (each stripe is copied, then fenced).
pub fn offloaded_copies(trace: &Trace, records: std::ops::Range<u64>) -> Vec<(usize, usize)> {
    let mut open: HashMap<u16, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, e) in trace.events.iter().enumerate() {
        let ends = match trace.role_of(e) {
            Some(r) if r.is_engine() => e.kind == EventKind::Store && records.contains(&e.off),
            Some(Role::Delegation) => e.kind == EventKind::Fence,
            _ => continue,
        };
        if ends {
            if let Some(start) = open.remove(&e.thread) {
                out.push((start, i));
            }
        } else if matches!(e.kind, EventKind::Store | EventKind::NtStore) {
            open.entry(e.thread).or_insert(i);
        }
    }
    out.sort_unstable();
    out
}

/// The model's state before the operations and after each: `states[k]` follows the
/// first `k`.
fn model_states(ops: &[Op]) -> Result<Vec<Snapshot>, Error> {
    let mut model = Shadow::new();
    let mut states = vec![model.snapshot()];
    for op in ops {
        op.apply(&mut model).map_err(|errno| Error::ModelRefuses {
            op: op.to_string(),
            errno,
        })?;
        states.push(model.snapshot());
    }
    Ok(states)
}

/// Runs `ops` on a tracing region in `mode`: mount, the operations, unmount, all
/// traced. Fails if an operation fails or the live file system disagrees with the
/// model at the end (the workload or the file system is wrong, not the recovery).
pub fn record(ops: Vec<Op>, mode: Mode) -> Result<Recording, Error> {
    let _pinned = Pinned::first();
    let states = model_states(&ops)?;
    let (image, geo) = formatted();
    let records = records_area(&geo);
    let tp = Arc::new(TracePmem::new(image));
    let (fs, _) = FileSystem::mount(tp.clone() as Arc<dyn Pmem>, MountOptions::with_mode(mode))
        .map_err(Error::Mount)?;
    let mut fds = HashMap::new();
    let mut spans = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        let start = tp.position();
        op.run(&fs, &mut fds).map_err(|source| Error::Operation {
            index,
            op: op.to_string(),
            source,
        })?;
        spans.push((start, tp.position()));
    }
    let live = crate::oracle::snapshot_of(&fs)?;
    let last = states.last().expect("the state before the operations");
    if live != *last {
        return Err(Error::LiveMismatch(last.diff(&live)));
    }
    fs.unmount().map_err(Error::Unmount)?;
    let trace = Arc::try_unwrap(tp)
        .map_err(|_| Error::TraceShared)?
        .into_trace();
    Ok(Recording {
        copy_windows: offloaded_copies(&trace, records),
        ops,
        trace,
        spans,
        states,
    })
}

/// First bytes of a saved recording.
const RECORDING_MAGIC: &[u8; 8] = b"EIOCRSH1";

impl Recording {
    /// Writes the trace and the operations' spans to `path`.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let mut b = RECORDING_MAGIC.to_vec();
        b.extend_from_slice(&(self.spans.len() as u64).to_le_bytes());
        for &(a, z) in &self.spans {
            b.extend_from_slice(&(a as u64).to_le_bytes());
            b.extend_from_slice(&(z as u64).to_le_bytes());
        }
        b.extend_from_slice(&self.trace.to_bytes());
        std::fs::write(path, b).map_err(|source| Error::SaveTrace {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads a recording of `ops` saved by [`Recording::save`].
    pub fn load(ops: Vec<Op>, path: &Path) -> Result<Recording, Error> {
        let (spans, trace) = read_recording(path, ops.len()).map_err(|why| Error::TraceFile {
            path: path.to_path_buf(),
            why,
        })?;
        let (_, geo) = formatted();
        Ok(Recording {
            copy_windows: offloaded_copies(&trace, records_area(&geo)),
            states: model_states(&ops)?,
            ops,
            trace,
            spans,
        })
    }

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

    /// Crash points for a run, sorted, drawn from `seed`: half just before a fence
    /// (where the most stores are pending), half anywhere. With offloaded copies in
    /// the trace, a third each: before a fence, inside such a copy (its data partly
    /// issued, its counter not yet advanced or its fence not yet made), anywhere.
    pub fn choose_points(&self, n: usize, seed: u64) -> Vec<usize> {
        let fences: Vec<usize> = (0..self.trace.len())
            .filter(|&i| self.trace.events[i].kind == EventKind::Fence)
            .collect();
        let mut rng = seeded(seed ^ 0xC2B2_AE3D_27D4_EB4F);
        let len = self.trace.len() as u64;
        let copies = &self.copy_windows;
        let kinds = if copies.is_empty() { 2 } else { 3 };
        let mut pts: Vec<usize> = (0..n)
            .map(|k| match k % kinds {
                0 if !fences.is_empty() => fences[rng.below(fences.len() as u64) as usize],
                2 => {
                    let (a, b) = copies[rng.below(copies.len() as u64) as usize];
                    a + 1 + rng.below((b - a) as u64) as usize
                }
                _ => rng.below(len + 1) as usize,
            })
            .collect();
        pts.sort_unstable();
        pts
    }
}

/// The spans and the trace of a recording of `n_ops` operations saved at `path`.
fn read_recording(
    path: &Path,
    n_ops: usize,
) -> Result<(Vec<(usize, usize)>, Trace), TraceFileError> {
    let b = std::fs::read(path)?;
    let word = |i: usize| -> Result<usize, TraceFileError> {
        let w = b
            .get(8 + i * 8..16 + i * 8)
            .ok_or(TraceFileError::Truncated)?;
        Ok(u64::from_le_bytes(w.try_into().expect("eight bytes")) as usize)
    };
    if !b.starts_with(RECORDING_MAGIC) {
        return Err(TraceFileError::NotARecording);
    }
    let n = word(0)?;
    if n != n_ops {
        return Err(TraceFileError::OtherWorkload {
            recorded: n,
            workload: n_ops,
        });
    }
    let spans = (0..n)
        .map(|k| Ok((word(1 + 2 * k)?, word(2 + 2 * k)?)))
        .collect::<Result<Vec<_>, TraceFileError>>()?;
    let trace = Trace::from_bytes(&b[16 + 16 * n..]).map_err(TraceFileError::Trace)?;
    if spans.iter().any(|&(a, z)| a > z || z > trace.len()) {
        return Err(TraceFileError::SpansOutside);
    }
    Ok((spans, trace))
}

impl Outcome {
    /// The outcome of `cfg` on `rec` before any of `points` is checked.
    fn empty(cfg: &Config, rec: &Recording, points: &[usize]) -> Outcome {
        Outcome {
            workload: cfg.workload,
            mode: cfg.mode,
            seed: cfg.seed,
            ops: rec.ops.len(),
            trace_events: rec.trace.len(),
            fences: rec.trace.counts().3,
            points: 0,
            passed: 0,
            images: 0,
            offloaded_copies: rec.copy_windows.len(),
            offloaded_copy_points: points
                .iter()
                .filter(|&&p| rec.copy_windows.iter().any(|&(a, b)| a < p && p <= b))
                .count(),
            failures: Vec::new(),
            seconds: 0.0,
        }
    }
}

/// Runs a configuration: record, then check every crash point.
pub fn run(cfg: &Config) -> Result<Outcome, Error> {
    let start = Instant::now();
    let ops = cfg.workload.generate_for(cfg.seed, cfg.mode);
    let rec = match &cfg.trace {
        Some(path) => Recording::load(ops, path)?,
        None => record(ops, cfg.mode)?,
    };
    let points = match cfg.only {
        Some((pos, _)) if pos > rec.trace.len() => {
            return Err(Error::PositionPastEnd {
                pos,
                len: rec.trace.len(),
            })
        }
        Some((pos, _)) => vec![pos],
        None => rec.choose_points(cfg.points, cfg.seed),
    };
    let mut out = Outcome::empty(cfg, &rec, &points);
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
                    trace_file: None,
                });
                if cfg.stop_at_first_failure {
                    break 'points;
                }
            }
        }
        out.passed += ok as usize;
    }
    let saved = match &cfg.save_trace {
        Some((path, on_failure)) if !on_failure || !out.failures.is_empty() => {
            rec.save(path)?;
            Some(path)
        }
        _ => cfg.trace.as_ref(),
    };
    for f in &mut out.failures {
        f.trace_file = saved.map(|p| p.display().to_string());
    }
    out.seconds = start.elapsed().as_secs_f64();
    Ok(out)
}
