//! Where a benchmark runs and how its threads are timed: the targets ([`Target`]:
//! easyio in each mover mode, `async-locked`, or the host kernel's tmpfs) and their
//! set-up instances ([`Mount`]), slow-memory presets, the start line, the timed loop
//! and the process's CPU time, shared by `bench micro` and `bench app`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::ValueEnum;
use fs::{FileSystem, FormatOptions, Mode, MountOptions, OpenFlags};
use hdrhistogram::Histogram;
use pmem::slowmem::{Model, SlowMem};
use pmem::Pmem;
use serde::Serialize;

/// What a benchmark runs on (`--mode`): easyio with one of its data movers, easyio
/// `async` holding the per-inode lock across the copy, or the host kernel's tmpfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// easyio in one of the file system's modes.
    Easyio(Mode),
    /// `async` holding a per-inode lock across the copy (no two-level locking).
    AsyncLocked,
    /// The host kernel's tmpfs through std::fs (not persistent).
    Kernel,
}

/// The help of `--mode` for the targets that are not a file system mode (clap shows a
/// one-line doc comment without its final period; these are said the same way).
const ASYNC_LOCKED_HELP: &str =
    "`async` holding a per-inode lock across the copy (no two-level locking)";
const KERNEL_HELP: &str = "The host kernel's tmpfs through std::fs (not persistent)";

impl Target {
    /// Every target, in the order `--help` lists them.
    pub const ALL: [Target; 7] = [
        Target::Easyio(Mode::Cpu),
        Target::Easyio(Mode::Semaphore),
        Target::Easyio(Mode::Delegate),
        Target::Easyio(Mode::DmaSync),
        Target::Easyio(Mode::Async),
        Target::AsyncLocked,
        Target::Kernel,
    ];

    /// The file system mode easyio runs in, or `None` for the kernel.
    pub fn mover(self) -> Option<Mode> {
        match self {
            Target::Easyio(m) => Some(m),
            Target::AsyncLocked => Some(Mode::Async),
            Target::Kernel => None,
        }
    }

    /// Whether the workload's clients are uthreads (the `async` targets).
    pub fn uthreads(self) -> bool {
        self.mover() == Some(Mode::Async)
    }

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Target::Easyio(m) => m.name(),
            Target::AsyncLocked => "async-locked",
            Target::Kernel => "kernel",
        }
    }
}

impl ValueEnum for Target {
    fn value_variants<'a>() -> &'a [Self] {
        &Target::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let help = match self {
            Target::Easyio(m) => {
                let mode = m.to_possible_value()?;
                format!("easyio, {}", mode.get_help().map(|h| h.to_string())?)
            }
            Target::AsyncLocked => ASYNC_LOCKED_HELP.to_string(),
            Target::Kernel => KERNEL_HELP.to_string(),
        };
        Some(clap::builder::PossibleValue::new(self.name()).help(help))
    }
}

impl Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Where a workload runs: a mounted easyio, or a directory of the kernel's tmpfs.
pub enum Mount {
    /// easyio, formatted and mounted on the benchmark region.
    Easyio(Box<FileSystem>),
    /// A directory of the host's tmpfs.
    Kernel(KernelDir),
}

/// The host directory of the `kernel` mode, removed when dropped: also when a run
/// ends early (an error, a signal) without [`Mount::tear_down`].
pub struct KernelDir(PathBuf);

impl Drop for KernelDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An open file of a [`Mount`].
pub enum Handle {
    /// A descriptor of easyio.
    Fd(fs::Fd),
    /// A file of the kernel's.
    File(std::fs::File),
}

impl Mount {
    /// Where the path `p` of the workload is on the host (the kernel's directory) or
    /// in easyio.
    pub fn path(&self, p: &str) -> PathBuf {
        match self {
            Mount::Kernel(root) => root.0.join(p.trim_start_matches('/')),
            Mount::Easyio(_) => PathBuf::from(p),
        }
    }

    /// Opens `p` for reading and writing, creating it or appending if asked.
    pub fn open(&self, p: &str, create: bool, append: bool) -> anyhow::Result<Handle> {
        Ok(match self {
            Mount::Easyio(fs) => {
                let mut f = OpenFlags::RDWR;
                if create {
                    f = f | OpenFlags::CREAT;
                }
                if append {
                    f = f | OpenFlags::APPEND;
                }
                Handle::Fd(fs.open(p, f, 0o644).with_context(|| p.to_string())?)
            }
            Mount::Kernel(_) => Handle::File(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(create)
                    .append(append)
                    .truncate(false)
                    .open(self.path(p))
                    .with_context(|| p.to_string())?,
            ),
        })
    }

    /// Closes `h`.
    pub fn close(&self, h: Handle) -> anyhow::Result<()> {
        if let (Mount::Easyio(fs), Handle::Fd(fd)) = (self, h) {
            fs.close(fd)?;
        }
        Ok(())
    }

    /// Writes all of `buf` at `off`.
    pub fn pwrite(&self, h: &Handle, buf: &[u8], off: u64) -> anyhow::Result<()> {
        use std::os::unix::fs::FileExt;
        match (self, h) {
            (Mount::Easyio(fs), Handle::Fd(fd)) => {
                fs.pwrite(*fd, buf, off)?;
            }
            (_, Handle::File(f)) => f.write_all_at(buf, off)?,
            _ => unreachable!(),
        }
        Ok(())
    }

    /// Appends all of `buf` (the file was opened to append).
    pub fn append(&self, h: &Handle, buf: &[u8]) -> anyhow::Result<()> {
        use std::io::Write;
        match (self, h) {
            (Mount::Easyio(fs), Handle::Fd(fd)) => {
                fs.write(*fd, buf)?;
            }
            (_, Handle::File(f)) => (&*f).write_all(buf)?,
            _ => unreachable!(),
        }
        Ok(())
    }

    /// Reads into `buf` from `off`; returns the bytes read.
    pub fn pread(&self, h: &Handle, buf: &mut [u8], off: u64) -> anyhow::Result<usize> {
        use std::os::unix::fs::FileExt;
        Ok(match (self, h) {
            (Mount::Easyio(fs), Handle::Fd(fd)) => fs.pread(*fd, buf, off)?,
            (_, Handle::File(f)) => f.read_at(buf, off)?,
            _ => unreachable!(),
        })
    }

    /// Sets the file's length.
    pub fn truncate(&self, h: &Handle, len: u64) -> anyhow::Result<()> {
        match (self, h) {
            (Mount::Easyio(fs), Handle::Fd(fd)) => fs.ftruncate(*fd, len)?,
            (_, Handle::File(f)) => f.set_len(len)?,
            _ => unreachable!(),
        }
        Ok(())
    }

    /// Creates `p` empty (or leaves it as it is).
    pub fn create_empty(&self, p: &str) -> anyhow::Result<()> {
        let h = self.open(p, true, false)?;
        self.close(h)
    }

    /// Removes the file `p`.
    pub fn unlink(&self, p: &str) -> anyhow::Result<()> {
        match self {
            Mount::Easyio(fs) => fs.unlink(p)?,
            Mount::Kernel(_) => std::fs::remove_file(self.path(p))?,
        }
        Ok(())
    }

    /// Renames `a` to `b`.
    pub fn rename(&self, a: &str, b: &str) -> anyhow::Result<()> {
        match self {
            Mount::Easyio(fs) => fs.rename(a, b)?,
            Mount::Kernel(_) => std::fs::rename(self.path(a), self.path(b))?,
        }
        Ok(())
    }

    /// Asks for the attributes of the root (of easyio) or of the directory (of the
    /// kernel's), with `AT_STATX_FORCE_SYNC`: a FUSE mount asks its server every time,
    /// whatever it caches.
    pub fn stat_uncached(&self) -> anyhow::Result<()> {
        use rustix::fs::{statx, AtFlags, StatxFlags, CWD};
        match self {
            Mount::Easyio(fs) => {
                fs.getattr(fs::ROOT_INO)?;
            }
            Mount::Kernel(root) => {
                statx(
                    CWD,
                    &root.0,
                    AtFlags::STATX_FORCE_SYNC,
                    StatxFlags::BASIC_STATS,
                )?;
            }
        }
        Ok(())
    }

    /// Creates the directory `p`.
    pub fn mkdir(&self, p: &str) -> anyhow::Result<()> {
        match self {
            Mount::Easyio(fs) => fs.mkdir(p, 0o755)?,
            Mount::Kernel(_) => std::fs::create_dir(self.path(p))?,
        }
        Ok(())
    }
}

/// What one thread measured.
pub struct ThreadResult {
    /// Operations done.
    pub ops: u64,
    /// Bytes they moved.
    pub bytes: u64,
    /// Time spent on them (upkeep left out).
    pub active: Duration,
    /// Their latencies, ns.
    pub hist: Histogram<u64>,
}

/// Operations of a timed loop between two looks at whether a signal arrived (a load of
/// one atomic: nothing beside even the smallest operation).
const SIGNAL_CHECK_OPS: u64 = 64;

/// Times `op` until the deadline; `op` returns the bytes it moved. `maintain` does
/// untimed upkeep (restarting a file, clearing or refilling a directory) and says
/// whether it did any: its time counts in no latency and is left out of the thread's
/// active time. A signal ends it with [`command::signals::Interrupted`].
pub fn timed_loop(
    deadline: Instant,
    mut op: impl FnMut(u64) -> anyhow::Result<u64>,
    mut maintain: impl FnMut(u64) -> anyhow::Result<bool>,
) -> anyhow::Result<ThreadResult> {
    let mut hist = Histogram::<u64>::new(3)?;
    let (mut ops, mut bytes) = (0u64, 0u64);
    let mut upkeep = Duration::ZERO;
    // Two clock reads an operation: the end of one is the start of the next (so a
    // latency includes the loop's own few nanoseconds), unless upkeep ran between.
    let begin = Instant::now();
    let mut now = begin;
    let mut i = 0u64;
    while now < deadline {
        let t0 = now;
        let n = op(i)?;
        let t1 = Instant::now();
        hist.record((t1 - t0).as_nanos() as u64)?;
        ops += 1;
        bytes += n;
        i += 1;
        now = t1;
        // A signal ends the run early, through the same unwinding as an error.
        if i.is_multiple_of(SIGNAL_CHECK_OPS) {
            command::signals::check()?;
        }
        if maintain(i)? {
            now = Instant::now();
            upkeep += now - t1;
        }
    }
    Ok(ThreadResult {
        ops,
        bytes,
        active: now.saturating_duration_since(begin).saturating_sub(upkeep),
        hist,
    })
}

/// A start line every workload thread (or uthread) reaches after its setup; waiting
/// yields in a uthread, so it works with more uthreads than workers.
pub struct Gate {
    arrived: AtomicUsize,
    expected: usize,
    /// Set when a party ends (fails, panics) without arriving: the others stop waiting.
    abandoned: AtomicBool,
    /// When the first waiter saw everyone arrive: the common start of the run.
    opened: OnceLock<Instant>,
}

impl Gate {
    /// A gate for `expected` parties.
    pub fn new(expected: usize) -> Gate {
        Gate {
            arrived: AtomicUsize::new(0),
            expected,
            abandoned: AtomicBool::new(false),
            opened: OnceLock::new(),
        }
    }

    /// Waits for every party; returns the instant the gate opened, the same for all,
    /// so that clients which a worker runs one after another share one deadline. Fails
    /// if a party ended without arriving (its own error says why).
    pub fn arrive_and_wait(&self) -> anyhow::Result<Instant> {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let all_in = || self.arrived.load(Ordering::Acquire) >= self.expected;
        rt::wait_until(|| all_in() || self.abandoned.load(Ordering::Acquire));
        anyhow::ensure!(all_in(), GATE_ABANDONED);
        Ok(*self.opened.get_or_init(Instant::now))
    }

    /// A guard for a party's whole life: dropped before the party arrived (an error or
    /// a panic on the way), it releases everyone waiting; dropped after the gate
    /// opened, it does nothing.
    pub fn party(self: &Arc<Self>) -> GateParty {
        GateParty(self.clone())
    }
}

/// What a party that was waiting at the gate reports when another failed first.
const GATE_ABANDONED: &str = "another client failed before the start line";

/// The clients' results, or the error of a client that failed on its own account
/// rather than one that only saw another fail at the start line.
pub fn collect_clients<T>(results: Vec<anyhow::Result<T>>) -> anyhow::Result<Vec<T>> {
    let (ok, errs): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.is_ok());
    let mut errs: Vec<anyhow::Error> = errs.into_iter().filter_map(Result::err).collect();
    if errs.is_empty() {
        return Ok(ok.into_iter().filter_map(Result::ok).collect());
    }
    let first_hand = errs.iter().position(|e| e.to_string() != GATE_ABANDONED);
    Err(errs.swap_remove(first_hand.unwrap_or(0)))
}

/// See [`Gate::party`].
pub struct GateParty(Arc<Gate>);

impl Drop for GateParty {
    fn drop(&mut self) {
        self.0.abandoned.store(true, Ordering::Release);
    }
}

/// CPU time (user plus system) this process has used, in seconds.
pub fn cpu_seconds() -> f64 {
    rusage_seconds(libc::RUSAGE_SELF)
}

/// User plus system CPU seconds of this process's children that have been waited for.
pub fn children_cpu_seconds() -> f64 {
    rusage_seconds(libc::RUSAGE_CHILDREN)
}

/// User plus system CPU seconds `getrusage(who)` answers (0 if it fails).
fn rusage_seconds(who: libc::c_int) -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct; we read it only on success.
    let ru = unsafe {
        if libc::getrusage(who, ru.as_mut_ptr()) != 0 {
            return 0.0;
        }
        ru.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU seconds used so far by the copy engine's threads (registered by the engine as
/// copy engines or devices): the stand-in for a hardware engine (DSA), which would cost
/// no CPU; reported apart from the rest.
pub fn engine_cpu_seconds() -> f64 {
    let roles = threads::Role::ALL.into_iter().filter(|r| r.is_engine());
    roles
        .map(threads::cpu_time)
        .sum::<std::time::Duration>()
        .as_secs_f64()
}

/// The software engine's idle policy for a run with `workers` application threads:
/// nap ([`engine::DEFAULT_NAP`]) when the engine's `channels` threads and the workers
/// fit the machine's cores, so a nap costs only the wait it asks for; spin otherwise,
/// since on a machine whose cores are all busy a nap lasts until the scheduler frees
/// one (measured: DWOM with 2 workers on 2 cores, napping cut `async` to a fifth).
/// Either way, on DRAM `async` then copies everything on the caller
/// ([`mover::engine_costly`]).
pub fn engine_nap(workers: usize, channels: usize) -> Option<std::time::Duration> {
    (!engine_shares_cores(workers, channels)).then_some(engine::DEFAULT_NAP)
}

/// Whether a software engine's `channels` threads must share the machine's cores with
/// `workers` application threads ([`mover::Config::engine_shares_cores`]: where the
/// engine copies no faster than a core, reads and writes then go by CPU).
pub fn engine_shares_cores(workers: usize, channels: usize) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    workers + channels > cores
}

/// The copy engine of the modes that use one (`--engine`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// Worker threads copy (the embedded default).
    #[default]
    Software,
    /// The machine's DSA work queues; the region must not be emulated slow memory.
    Dsa,
}

impl EngineArg {
    /// The engine's backend.
    pub fn backend(self) -> engine::BackendKind {
        match self {
            EngineArg::Software => engine::BackendKind::Software,
            EngineArg::Dsa => engine::BackendKind::Dsa,
        }
    }
}

impl Mount {
    /// Formats `region` and mounts it in `mode`'s file system mode (wrapped in the
    /// slow-memory model if one is given), its copy engine on `engine` if the mode uses
    /// one, or for [`Target::Kernel`] makes an empty `kernel_dir` in the host tmpfs. `workers`: the application's
    /// threads, for the engine's idle policy ([`engine_nap`]).
    pub fn set_up(
        mode: Target,
        engine: EngineArg,
        region: &Arc<dyn Pmem>,
        slowmem: Option<Model>,
        kernel_dir: &Path,
        workers: usize,
    ) -> anyhow::Result<Mount> {
        Ok(match mode.mover() {
            Some(m) => {
                FileSystem::format(&**region, &FormatOptions::default())?;
                let pm: Arc<dyn Pmem> = match slowmem {
                    Some(model) => Arc::new(SlowMem::new(region.clone(), model)),
                    None => region.clone(),
                };
                let mut opts = MountOptions {
                    lock_across_wait: mode == Target::AsyncLocked,
                    ..MountOptions::with_mode(m)
                };
                if m.uses_engine() {
                    opts.mover.engine = engine.backend();
                }
                let channels = opts.mover.channels_needed();
                opts.mover.engine_nap = engine_nap(workers, channels);
                opts.mover.engine_shares_cores = opts.mover.engine == engine::BackendKind::Software
                    && engine_shares_cores(workers, channels);
                opts.mover.medium = slowmem;
                Mount::Easyio(Box::new(FileSystem::mount(pm, opts)?.0))
            }
            None => {
                let _ = std::fs::remove_dir_all(kernel_dir);
                std::fs::create_dir_all(kernel_dir)?;
                Mount::Kernel(KernelDir(kernel_dir.to_path_buf()))
            }
        })
    }

    /// Unmounts the file system, or removes the kernel directory.
    pub fn tear_down(self) -> anyhow::Result<()> {
        match self {
            Mount::Easyio(fs) => fs.unmount()?,
            Mount::Kernel(dir) => drop(dir),
        }
        Ok(())
    }

    /// The size of the file at `p`.
    pub fn size(&self, p: &str) -> anyhow::Result<u64> {
        Ok(match self {
            Mount::Easyio(fs) => fs.stat(p).with_context(|| p.to_string())?.size,
            Mount::Kernel(_) => std::fs::metadata(self.path(p))
                .with_context(|| p.to_string())?
                .len(),
        })
    }

    /// Reads all of `buf` from `off`, failing on a short file.
    pub fn read_exact(&self, h: &Handle, buf: &mut [u8], off: u64) -> anyhow::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.pread(h, &mut buf[done..], off + done as u64)?;
            if n == 0 {
                anyhow::bail!("file ended {} bytes early", buf.len() - done);
            }
            done += n;
        }
        Ok(())
    }

    /// Writes `data` as the whole content of the file at `p`, creating it.
    pub fn put(&self, p: &str, data: &[u8]) -> anyhow::Result<()> {
        let h = self.open(p, true, false)?;
        self.truncate(&h, 0)?;
        self.pwrite(&h, data, 0)?;
        self.close(h)
    }
}

/// Runs `client(id)` for each of `clients` clients — uthreads on a runtime of `threads`
/// workers in uthread modes, kernel threads otherwise — after each has reached `gate`
/// (which expects one more arrival, ours). Returns their results, and the wall-clock
/// seconds and the process's CPU-seconds from the start line until the last client
/// finished.
pub fn run_clients<T: Send + 'static>(
    mode: Target,
    threads: usize,
    clients: usize,
    gate: &Arc<Gate>,
    client: impl Fn(usize) -> anyhow::Result<T> + Send + Sync + 'static,
) -> anyhow::Result<(Vec<T>, f64, f64)> {
    let client = Arc::new(client);
    let mut results = Vec::with_capacity(clients);
    let (start, cpu0);
    if mode.uthreads() {
        let runtime = rt::Runtime::new(threads)?;
        let handles: Vec<_> = (0..clients)
            .map(|id| {
                let (client, party) = (client.clone(), gate.party());
                runtime.spawn(move || {
                    let _party = party;
                    client(id)
                })
            })
            .collect();
        (start, cpu0) = (gate.arrive_and_wait(), cpu_seconds());
        for h in handles {
            let r = h
                .join()
                .map_err(|e| anyhow::anyhow!("benchmark uthread: {e}"));
            results.push(r.and_then(|r| r));
        }
    } else {
        let handles: Vec<_> = (0..clients)
            .map(|id| {
                let (client, party) = (client.clone(), gate.party());
                std::thread::spawn(move || {
                    let _party = party;
                    client(id)
                })
            })
            .collect();
        (start, cpu0) = (gate.arrive_and_wait(), cpu_seconds());
        for h in handles {
            let r = h
                .join()
                .map_err(|_| anyhow::anyhow!("benchmark thread panicked"));
            results.push(r.and_then(|r| r));
        }
    }
    let results = collect_clients(results)?;
    let wall = start?.elapsed().as_secs_f64();
    Ok((results, wall, cpu_seconds() - cpu0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_parses_by_its_name_with_help() {
        for t in Target::ALL {
            assert_eq!(Target::from_str(t.name(), false), Ok(t));
            let help = t
                .to_possible_value()
                .unwrap()
                .get_help()
                .unwrap()
                .to_string();
            assert_eq!(
                help.starts_with("easyio, "),
                t.mover().is_some() && t != Target::AsyncLocked,
                "{help}"
            );
        }
        assert_eq!(
            Target::from_str("async-locked", false),
            Ok(Target::AsyncLocked)
        );
        assert!(Target::from_str("nope", false).is_err());
        assert_eq!(
            Target::Easyio(Mode::Cpu)
                .to_possible_value()
                .unwrap()
                .get_help()
                .unwrap()
                .to_string(),
            "easyio, data copied by the calling thread (NOVA)"
        );
    }

    #[test]
    fn a_target_is_reported_by_its_name() {
        let names: Vec<String> = Target::ALL
            .iter()
            .map(|t| {
                serde_json::to_value(t)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "cpu",
                "semaphore",
                "delegate",
                "dma-sync",
                "async",
                "async-locked",
                "kernel"
            ]
        );
    }

    #[test]
    fn the_file_system_modes_parse_by_their_names() {
        for m in Mode::ALL {
            assert_eq!(<Mode as ValueEnum>::from_str(m.name(), false), Ok(m));
            assert_eq!(serde_json::to_value(m).unwrap(), m.name());
        }
    }
}
