//! `easyio bench fuse`: fio-like workloads run by this process through a real FUSE
//! mount of a fresh image (served by `easyio mount`, a child process) and, in the same
//! run, through a directory of the kernel's tmpfs and through the `fs` library in this
//! process (the same file system without the kernel round trip, to show where the time
//! goes). One client thread, psync style: each operation is one `pread`/`pwrite` (or
//! create, write, close) on the file the run opened.
//!
//! | name      | what the client does                                              |
//! |-----------|-------------------------------------------------------------------|
//! | randread  | `pread` 4 KiB at random 4 KiB-aligned offsets of a pre-filled file |
//! | randwrite | `pwrite` 4 KiB at random 4 KiB-aligned offsets of it               |
//! | seqread   | `pread` 1 MiB after 1 MiB from its start, starting over at its end |
//! | seqwrite  | `pwrite` 1 MiB after 1 MiB from its start, starting over at its end |
//! | create    | create a file in one directory, write 4 KiB, close               |
//! | programs  | real programs (tar, cp, git, make, sqlite3, rm) timed beside tmpfs: [`programs`] |
//!
//! Every byte is checked: each 4 KiB block of the data file carries its block number
//! and the operation that wrote it, and a fill byte of its number. A read checks the
//! number and fill of every block it got; after a write workload the whole file is
//! read back and checked byte by byte (untimed), as is every created file. A wrong
//! block fails the run.
//!
//! CPU: the benchmark process's (getrusage) plus, for the FUSE mount, the server
//! process's (user plus system time of all its threads, from `/proc/PID/stat`).

pub mod programs;
mod requests;
mod server;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use fs::Mode;
use pmem::{Pmem, Region};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::args;
use crate::report::{self, Machine};
use crate::target::{cpu_seconds, timed_loop, EngineArg, Handle, Mount, Target, ThreadResult};
use command::{progress, signals};

pub use server::EXIT_WAIT;

/// Bytes of a block: the small I/O size, and the unit of the data's stamps.
const BLOCK: usize = 4096;
/// Bytes of a sequential I/O.
const SEQ_IO: usize = 1 << 20;
/// Blocks in the pattern buffer: a block's fill byte repeats every this many blocks,
/// so one buffer serves every 1 MiB-aligned write.
const PATTERN_BLOCKS: u64 = (SEQ_IO / BLOCK) as u64;
/// Marks a block's number, so that zeroes or another file's bytes never pass.
const MAGIC: u64 = 0x6561_7379_696f_4655;
/// Seed of the random offsets: every door gets the same sequence.
const SEED: u64 = 0x5EED_F05E;
/// Files the create workload makes before it checks and removes them (untimed).
const CREATE_BATCH: u64 = 1_000;
/// What the 1 MiB sequential workloads through the mount should reach, as a fraction of
/// tmpfs's bandwidth.
const SEQ_TARGET: f64 = 0.8;
/// What the 4 KiB and create workloads through the mount should reach, as a fraction
/// of tmpfs's operations per second.
const SMALL_TARGET: f64 = 0.3;

/// A workload (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// 4 KiB random reads.
    Randread,
    /// 4 KiB random writes.
    Randwrite,
    /// 1 MiB sequential reads.
    Seqread,
    /// 1 MiB sequential writes.
    Seqwrite,
    /// Create, write 4 KiB, close: many small files in one directory.
    Create,
    /// Real programs on the mount and on tmpfs, by wall time (see [`programs`]).
    Programs,
}

impl Workload {
    /// Bytes per operation.
    fn io(self) -> usize {
        match self {
            Workload::Seqread | Workload::Seqwrite => SEQ_IO,
            _ => BLOCK,
        }
    }

    fn reads(self) -> bool {
        matches!(self, Workload::Randread | Workload::Seqread)
    }

    fn sequential(self) -> bool {
        matches!(self, Workload::Seqread | Workload::Seqwrite)
    }

    fn name(self) -> &'static str {
        match self {
            Workload::Randread => "randread",
            Workload::Randwrite => "randwrite",
            Workload::Seqread => "seqread",
            Workload::Seqwrite => "seqwrite",
            Workload::Create => "create",
            Workload::Programs => "programs",
        }
    }
}

/// Where a workload's calls go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Door {
    /// System calls on the FUSE mount of the image, served through `/dev/fuse`.
    EasyioFuse,
    /// The same on a mount served through FUSE over io_uring.
    EasyioFuseUring,
    /// System calls on a directory of the host's tmpfs (/dev/shm).
    Tmpfs,
    /// The `fs` library's calls in this process, on an image of the same size.
    EasyioLib,
}

impl Door {
    const ALL: [Door; 4] = [
        Door::EasyioFuse,
        Door::EasyioFuseUring,
        Door::Tmpfs,
        Door::EasyioLib,
    ];

    fn name(self) -> &'static str {
        match self {
            Door::EasyioFuse => "easyio-fuse",
            Door::EasyioFuseUring => "easyio-fuse-uring",
            Door::Tmpfs => "tmpfs",
            Door::EasyioLib => "easyio-lib",
        }
    }
}

/// The options of `easyio bench fuse`.
#[derive(Args)]
pub struct FuseArgs {
    /// Workloads, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "randread,randwrite,seqread,seqwrite,create"
    )]
    workload: Vec<Workload>,
    /// Who moves file data in the server (and in the library column).
    #[arg(long, default_value = "cpu")]
    mode: Mode,
    /// Threads serving FUSE requests (default: as `easyio mount`'s, one per core, at
    /// most 8).
    #[arg(long, default_value_t = server_threads(), value_parser = args::threads())]
    threads: usize,
    /// Seconds per workload and door (more than 0, at most 3600).
    #[arg(long, default_value_t = 2.0, value_parser = args::seconds)]
    duration: f64,
    /// Size of the data file (rounded up to whole MiB; 1M to 16G); the images are
    /// three times as large plus 256 MiB.
    #[arg(long, default_value = "64M", value_parser = file_size)]
    size: u64,
    /// Open the files of the mount and of tmpfs with `O_DIRECT` (fio's `direct=1`):
    /// through the mount, the kernel copies between the caller's buffer and the
    /// server's, skipping the page cache.
    #[arg(long)]
    direct: bool,
    /// Mount with `easyio mount --direct-io`: file data bypasses the kernel's page
    /// cache, so every read and write through the mount reaches the server. Default:
    /// the kernel keeps file pages (write-through), so repeated reads stay in it.
    #[arg(long)]
    direct_io: bool,
    /// Deprecated, the default now (the mount keeps file pages in the kernel).
    #[arg(long, hide = true, conflicts_with = "direct_io")]
    page_cache: bool,
    /// Which FUSE transports to measure: `both` (a mount served through /dev/fuse and,
    /// where the kernel offers FUSE over io_uring, one served through it, measured in
    /// turn), `uring` or `dev`.
    #[arg(long, value_enum, default_value = "both")]
    transport: Transports,
    #[arg(long)]
    json: bool,
}

/// The transports `bench fuse` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Transports {
    /// `/dev/fuse`, and FUSE over io_uring where the kernel offers it.
    Both,
    /// FUSE over io_uring only (an error where the kernel does not offer it).
    Uring,
    /// `/dev/fuse` only.
    Dev,
}

/// The `fuse` module's switch for FUSE over io_uring.
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Why FUSE over io_uring cannot be measured here, or `None` if the kernel offers it.
fn uring_missing() -> Option<String> {
    match std::fs::read_to_string(ENABLE_URING) {
        Ok(s) if s.trim() == "Y" => None,
        Ok(_) => Some(format!(
            "FUSE over io_uring is off in the kernel (as root: echo Y > {ENABLE_URING})"
        )),
        Err(_) => Some("the kernel has no FUSE over io_uring (Linux 6.14+)".into()),
    }
}

/// The servers of a run: one per transport measured.
struct Servers {
    dev: Option<server::Server>,
    uring: Option<server::Server>,
}

impl Servers {
    /// Starts the servers `a.transport` asks for (FUSE over io_uring only where the
    /// kernel offers it); says why io_uring is not measured, if it is not.
    fn start(a: &FuseArgs, exe: &Path) -> anyhow::Result<(Servers, Option<String>)> {
        let missing = uring_missing();
        if a.transport == Transports::Uring {
            if let Some(why) = &missing {
                bail!("--transport uring: {why}");
            }
        }
        let start = |transport| {
            let size = image_bytes(a.size);
            server::Server::start(exe, size, a.mode, a.threads, a.direct_io, transport)
        };
        let dev = (a.transport != Transports::Uring)
            .then(|| start("dev"))
            .transpose()?;
        let uring = (a.transport != Transports::Dev && missing.is_none())
            .then(|| start("uring"))
            .transpose()?;
        let note = missing.filter(|_| a.transport == Transports::Both);
        Ok((Servers { dev, uring }, note))
    }

    /// The server behind `door`, if it is a mount's.
    fn of(&self, door: Door) -> Option<&server::Server> {
        match door {
            Door::EasyioFuse => self.dev.as_ref(),
            Door::EasyioFuseUring => self.uring.as_ref(),
            _ => None,
        }
    }

    /// Unmounts the images and waits for the servers.
    fn stop(self) -> anyhow::Result<()> {
        for s in [self.dev, self.uring].into_iter().flatten() {
            s.stop()?;
        }
        Ok(())
    }
}

/// `easyio mount`'s default number of threads: one per core, at most 8.
fn server_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
}

/// A data file size: 1 MiB to 16 GiB, rounded up to whole MiB.
fn file_size(s: &str) -> Result<u64, String> {
    let n = command::args::size(s)?;
    if n > 16 << 30 {
        return Err(format!("{s} is larger than 16G"));
    }
    Ok(n.div_ceil(SEQ_IO as u64).max(1) * SEQ_IO as u64)
}

/// One workload through one door.
#[derive(Serialize, Clone)]
struct Row {
    workload: Workload,
    door: Door,
    /// Bytes per operation.
    io_size: u64,
    ops: u64,
    bytes: u64,
    ops_per_s: f64,
    gib_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    /// CPU-seconds of the benchmark process during the run.
    client_cpu_s: f64,
    /// CPU-seconds of the FUSE server process during the run (easyio-fuse only).
    server_cpu_s: Option<f64>,
    /// Client plus server CPU-seconds per GiB moved.
    cpu_s_per_gib: f64,
    /// Throughput as a fraction of tmpfs's in this run.
    vs_tmpfs: Option<f64>,
    /// 4 KiB blocks whose number, generation and fill were checked: every block read
    /// (reads), the whole file read back (writes), every file (create).
    checked_blocks: u64,
    /// Files created, each checked for its size and content (create only).
    files_checked: Option<u64>,
    /// Bandwidth of the first pass over the file (sequential workloads that made
    /// one): through the mount, the pass whose reads all reach the server.
    first_pass_gib_per_s: Option<f64>,
}

/// A target of issue 19 and whether this run met it.
#[derive(Serialize)]
struct Goal {
    workload: Workload,
    /// The mount's door (its transport).
    door: Door,
    /// easyio-fuse over tmpfs throughput.
    ratio: f64,
    asked: f64,
    met: bool,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    mode: Mode,
    server_threads: usize,
    /// The mount keeps file pages in the kernel's page cache (the default; false with
    /// `--direct-io`).
    page_cache: bool,
    /// Files of the mount and of tmpfs opened with `O_DIRECT`.
    direct: bool,
    duration_s: f64,
    file_bytes: u64,
    note: &'static str,
    results: Vec<Row>,
    goals: Vec<Goal>,
    /// `--workload programs`: each step's wall time on the mount and on tmpfs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    programs: Vec<programs::ProgramRow>,
    /// Why FUSE over io_uring was not measured (`--transport both` where the kernel
    /// does not offer it).
    #[serde(skip_serializing_if = "Option::is_none")]
    uring_note: Option<String>,
}

/// What the table's footnote says.
const NOTE: &str = "easyio-fuse = this process's system calls on a FUSE mount of a fresh image \
in /dev/shm served by `easyio mount --transport dev` (a child process; requests read from \
/dev/fuse); easyio-fuse-uring = the same on a second mount served by `easyio mount \
--transport uring` (FUSE over io_uring, one ring per CPU); tmpfs = the same calls on a \
directory of /dev/shm; easyio-lib = the same calls through the fs library in this \
process, no kernel round trip (easyio-fuse minus easyio-lib is the cost of FUSE). \
Writes through easyio (both doors) are durable when they return (no writeback cache); \
tmpfs's are not persistent. The mount keeps file pages in the kernel's page cache \
(write-through: every write reaches the server before it returns), so reads of pages \
the kernel holds (the pre-fill wrote them through the mount) do not reach the server; \
with --direct-io it serves files without it (as a DAX file system does) and every read \
and write reaches the server (1st pass GiB/s: the first pass over the file). Entries and attributes are cached \
by the kernel (1 h, invalidated on changes through other doors). \
CPU-s/GiB = CPU of this process (getrusage) \
plus, for easyio-fuse, of the server process (user + system of all its threads, \
/proc/PID/stat); 'of it server' is the server's part. 1 client thread. With --direct \
(O_DIRECT), the kernel copies between the caller's buffer and the server's without the \
page cache; tmpfs has no direct path (its O_DIRECT is the same page cache copy).";

/// The stamp of block `b` written by operation `generation` (0: the pre-fill).
fn stamp(block: &mut [u8], b: u64, generation: u64) {
    block[..8].copy_from_slice(&(b ^ MAGIC).to_le_bytes());
    block[8..16].copy_from_slice(&generation.to_le_bytes());
}

/// The fill byte of block `b` (a function of `b` modulo [`PATTERN_BLOCKS`]).
fn fill(b: u64) -> u8 {
    (b % PATTERN_BLOCKS) as u8 ^ 0xA5
}

/// A buffer of I/O that starts on a 4 KiB boundary, as `O_DIRECT` may require.
struct Buf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl Buf {
    /// `len` zero bytes.
    fn zeroed(len: usize) -> Buf {
        let v = vec![0u8; len + BLOCK];
        let off = v.as_ptr().align_offset(BLOCK);
        Buf { v, off, len }
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// A 1 MiB buffer whose block `j` is filled with `fill(j)`: a write of block `b`
/// sends block `b % PATTERN_BLOCKS` of it after stamping it.
fn pattern() -> Buf {
    let mut p = Buf::zeroed(SEQ_IO);
    for (j, block) in p.chunks_mut(BLOCK).enumerate() {
        block.fill(fill(j as u64));
    }
    p
}

/// Opens `p` of `t` for reading and writing (creating it if asked), with `O_DIRECT`
/// if `direct` and `t` is a directory of the host (the library has no page cache).
fn open(t: &Mount, p: &str, create: bool, direct: bool) -> anyhow::Result<Handle> {
    use std::os::unix::fs::OpenOptionsExt;
    if !direct || matches!(t, Mount::Easyio(_)) {
        return t.open(p, create, false);
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .custom_flags(libc::O_DIRECT)
        .open(t.path(p))
        .with_context(|| format!("{p} with O_DIRECT"))?;
    Ok(Handle::File(f))
}

/// Whether `block` is block `b`: its number and its last byte (the quick check made
/// on every block a timed read returns).
fn looks_right(block: &[u8], b: u64) -> bool {
    block[..8] == (b ^ MAGIC).to_le_bytes() && block[BLOCK - 1] == fill(b)
}

/// Whether `block` is block `b` as written by an operation up to `last_generation`,
/// every byte checked.
fn is_right(block: &[u8], b: u64, last_generation: u64) -> bool {
    let generation = u64::from_le_bytes(block[8..16].try_into().expect("8 bytes"));
    block.len() == BLOCK
        && block[..8] == (b ^ MAGIC).to_le_bytes()
        && generation <= last_generation
        && block[16..].iter().all(|&x| x == fill(b))
}

/// The file every data workload uses, pre-filled (generation 0) before each run.
const DATA: &str = "/data";
/// The directory of the create workload.
const CREATE_DIR: &str = "/created";

/// Writes the data file: `size` bytes of generation-0 blocks.
fn prefill(t: &Mount, size: u64) -> anyhow::Result<()> {
    let mut buf = pattern();
    let h = t.open(DATA, true, false)?;
    t.truncate(&h, 0)?;
    for off in (0..size).step_by(SEQ_IO) {
        let b0 = off / BLOCK as u64;
        for (j, block) in buf.chunks_mut(BLOCK).enumerate() {
            stamp(block, b0 + j as u64, 0);
        }
        t.pwrite(&h, &buf, off)?;
    }
    t.close(h)
}

/// Reads the whole data file back and checks every byte; returns the blocks checked.
fn verify_file(t: &Mount, size: u64, last_generation: u64) -> anyhow::Result<u64> {
    if t.size(DATA)? != size {
        bail!("{DATA} is {} bytes, not {size}", t.size(DATA)?);
    }
    let h = t.open(DATA, false, false)?;
    let mut buf = Buf::zeroed(SEQ_IO);
    for off in (0..size).step_by(SEQ_IO) {
        t.read_exact(&h, &mut buf, off)?;
        for (j, block) in buf.chunks(BLOCK).enumerate() {
            let b = off / BLOCK as u64 + j as u64;
            if !is_right(block, b, last_generation) {
                bail!("block {b} of {DATA} is wrong after the run");
            }
        }
    }
    t.close(h)?;
    Ok(size / BLOCK as u64)
}

/// What a run measured, before it becomes a row.
struct Measured {
    result: ThreadResult,
    client_cpu_s: f64,
    server_cpu_s: Option<f64>,
    checked_blocks: u64,
    files_checked: Option<u64>,
    first_pass_gib_per_s: Option<f64>,
}

/// What a timed data workload measured: the client's result, the blocks its reads
/// checked, and the time of its first pass over the file (sequential workloads).
type DataLoop = (ThreadResult, u64, Option<Duration>);

/// A timed data workload on the open data file (bad blocks read are an error).
fn data_loop(
    t: &Mount,
    h: &Handle,
    w: Workload,
    size: u64,
    deadline: Instant,
) -> anyhow::Result<DataLoop> {
    let io = w.io();
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(SEED);
    let (blocks, ios) = (size / BLOCK as u64, size / io as u64);
    let mut buf = Buf::zeroed(io);
    let mut pat = pattern();
    let (mut checked, mut bad) = (0u64, 0u64);
    let mut first_pass = None;
    let begin = Instant::now();
    let r = timed_loop(
        deadline,
        |i| {
            let off = if w.sequential() {
                (i % ios) * io as u64
            } else {
                rng.random_range(0..blocks) * BLOCK as u64
            };
            let b0 = off / BLOCK as u64;
            if w.reads() {
                let n = t.pread(h, &mut buf[..io], off)?;
                if n != io {
                    bail!("short read: {n} of {io} bytes at {off}");
                }
                for (j, block) in buf[..io].chunks(BLOCK).enumerate() {
                    bad += u64::from(!looks_right(block, b0 + j as u64));
                }
                checked += (io / BLOCK) as u64;
                if w.sequential() && i + 1 == ios {
                    first_pass = Some(begin.elapsed());
                }
                return Ok(io as u64);
            }
            let at = (b0 % PATTERN_BLOCKS) as usize * BLOCK;
            let src = &mut pat[at..at + io];
            for (j, block) in src.chunks_mut(BLOCK).enumerate() {
                stamp(block, b0 + j as u64, i + 1);
            }
            t.pwrite(h, src, off)?;
            if w.sequential() && i + 1 == ios {
                first_pass = Some(begin.elapsed());
            }
            Ok(io as u64)
        },
        |_| Ok(false),
    )?;
    if bad > 0 {
        bail!("{bad} of {checked} blocks read were wrong");
    }
    Ok((r, checked, first_pass))
}

/// The path of created file `k`.
fn created(k: u64) -> String {
    format!("{CREATE_DIR}/f{k}")
}

/// Checks created files `from..to` (size and every byte) and removes them.
fn check_created(t: &Mount, from: u64, to: u64) -> anyhow::Result<()> {
    let mut buf = Buf::zeroed(BLOCK);
    for k in from..to {
        let p = created(k);
        if t.size(&p)? != BLOCK as u64 {
            bail!("{p} is {} bytes, not {BLOCK}", t.size(&p)?);
        }
        let h = t.open(&p, false, false)?;
        t.read_exact(&h, &mut buf, 0)?;
        t.close(h)?;
        if !is_right(&buf, k, 1) {
            bail!("{p} holds the wrong bytes");
        }
        t.unlink(&p)?;
    }
    Ok(())
}

/// The timed create workload: returns the client's result and the files checked.
fn create_loop(t: &Mount, deadline: Instant, direct: bool) -> anyhow::Result<(ThreadResult, u64)> {
    t.mkdir(CREATE_DIR)?;
    let mut pat = pattern();
    let mut cleared = 0u64;
    let r = timed_loop(
        deadline,
        |k| {
            let at = (k % PATTERN_BLOCKS) as usize * BLOCK;
            let block = &mut pat[at..at + BLOCK];
            stamp(block, k, 1);
            let h = open(t, &created(k), true, direct)?;
            t.pwrite(&h, block, 0)?;
            t.close(h)?;
            Ok(BLOCK as u64)
        },
        |k| {
            let due = k % CREATE_BATCH == 0;
            if due {
                check_created(t, cleared, k)?;
                cleared = k;
            }
            Ok(due)
        },
    )?;
    check_created(t, cleared, r.ops)?;
    let files = r.ops;
    Ok((r, files))
}

/// How a run goes: its length, the data file's size, and whether files are opened
/// with `O_DIRECT`.
#[derive(Clone, Copy)]
struct Plan {
    duration: Duration,
    size: u64,
    direct: bool,
}

/// Runs `w` on `t` as `plan` says (the data file pre-filled first, untimed), with the
/// CPU of this process and of `server` if given.
fn measure(
    t: &Mount,
    w: Workload,
    plan: Plan,
    server: Option<&server::Server>,
) -> anyhow::Result<Measured> {
    let (size, direct) = (plan.size, plan.direct);
    if w != Workload::Create {
        prefill(t, size)?;
    }
    let h = (w != Workload::Create)
        .then(|| open(t, DATA, false, direct))
        .transpose()?;
    let server_cpu = || server.map(server::Server::cpu_seconds).transpose();
    let (cpu0, srv0) = (cpu_seconds(), server_cpu()?);
    let deadline = Instant::now() + plan.duration;
    let (result, checked, first_pass) = match &h {
        Some(h) => data_loop(t, h, w, size, deadline)?,
        None => {
            let (r, files) = create_loop(t, deadline, direct)?;
            (r, files, None)
        }
    };
    let client_cpu_s = cpu_seconds() - cpu0;
    let server_cpu_s = server_cpu()?.zip(srv0).map(|(a, b)| a - b);
    if let Some(h) = h {
        t.close(h)?;
    }
    let (checked_blocks, files_checked) = match w {
        Workload::Create => (checked, Some(checked)),
        Workload::Randwrite | Workload::Seqwrite => (verify_file(t, size, result.ops)?, None),
        _ => (checked, None),
    };
    Ok(Measured {
        result,
        client_cpu_s,
        server_cpu_s,
        checked_blocks,
        files_checked,
        first_pass_gib_per_s: first_pass.map(|d| gib(size) / d.as_secs_f64().max(1e-9)),
    })
}

/// The row of `w` through `door` from what it measured.
fn row(w: Workload, door: Door, m: Measured) -> anyhow::Result<Row> {
    let r = &m.result;
    let secs = r.active.as_secs_f64().max(1e-9);
    let gib = r.bytes as f64 / (1u64 << 30) as f64;
    let cpu = m.client_cpu_s + m.server_cpu_s.unwrap_or(0.0);
    Ok(Row {
        workload: w,
        door,
        io_size: w.io() as u64,
        ops: r.ops,
        bytes: r.bytes,
        ops_per_s: r.ops as f64 / secs,
        gib_per_s: gib / secs,
        p50_us: r.hist.value_at_quantile(0.5) as f64 / 1e3,
        p99_us: r.hist.value_at_quantile(0.99) as f64 / 1e3,
        client_cpu_s: m.client_cpu_s,
        server_cpu_s: m.server_cpu_s,
        cpu_s_per_gib: if gib > 0.0 { cpu / gib } else { 0.0 },
        vs_tmpfs: None,
        checked_blocks: m.checked_blocks,
        files_checked: m.files_checked,
        first_pass_gib_per_s: m.first_pass_gib_per_s,
    })
}

/// The three doors of a run: the mount's directory, tmpfs's, and the library on its
/// own region (formatted again for each workload).
struct Doors {
    fuse: Option<Mount>,
    fuse_uring: Option<Mount>,
    tmpfs: Mount,
    lib_region: Arc<dyn Pmem>,
    mode: Mode,
}

impl Doors {
    /// Runs `w` through `door`.
    fn run(&self, w: Workload, door: Door, a: &FuseArgs, servers: &Servers) -> anyhow::Result<Row> {
        let d = Plan {
            duration: Duration::from_secs_f64(a.duration),
            size: a.size,
            direct: a.direct,
        };
        let mount = match door {
            Door::EasyioFuse => self.fuse.as_ref(),
            Door::EasyioFuseUring => self.fuse_uring.as_ref(),
            _ => None,
        };
        let m = match door {
            Door::EasyioFuse | Door::EasyioFuseUring => {
                let mount = mount.context("no mount for this door")?;
                measure(mount, w, d, servers.of(door))?
            }
            Door::Tmpfs => measure(&self.tmpfs, w, d, None)?,
            Door::EasyioLib => {
                let none = Path::new("");
                let t = Target::Easyio(self.mode);
                let lib = Mount::set_up(t, EngineArg::Software, &self.lib_region, None, none, 1)?;
                let m = measure(&lib, w, d, None)?;
                lib.tear_down()?;
                m
            }
        };
        row(w, door, m)
    }
}

/// Bytes of each image for a data file of `size`: room for the file, a copy-on-write
/// rewrite of it, and the created files.
fn image_bytes(size: u64) -> u64 {
    3 * size + (256 << 20)
}

/// Runs every workload through every door, in that order.
fn measure_all(a: &FuseArgs, servers: &Servers) -> anyhow::Result<Vec<Row>> {
    let pid = std::process::id();
    let lib_region: Arc<dyn Pmem> = Arc::new(Region::create_temp(image_bytes(a.size))?);
    let kernel = |dir: &Path| {
        Mount::set_up(
            Target::Kernel,
            EngineArg::Software,
            &lib_region,
            None,
            dir,
            1,
        )
    };
    let on =
        |s: Option<&server::Server>| s.map(|s| kernel(&s.mountpoint().join("bench"))).transpose();
    let doors = Doors {
        fuse: on(servers.dev.as_ref())?,
        fuse_uring: on(servers.uring.as_ref())?,
        tmpfs: kernel(Path::new(&format!(
            "/dev/shm/easyio-bench-fuse-tmpfs-{pid}"
        )))?,
        lib_region: lib_region.clone(),
        mode: a.mode,
    };
    let data: Vec<Workload> = a
        .workload
        .iter()
        .copied()
        .filter(|&w| w != Workload::Programs)
        .collect();
    let door_list: Vec<Door> = Door::ALL
        .into_iter()
        .filter(|&d| {
            servers.of(d).is_some() || !matches!(d, Door::EasyioFuse | Door::EasyioFuseUring)
        })
        .collect();
    let runs = data.len() * door_list.len();
    let quiet = a.json || a.duration * runs as f64 <= 3.0;
    let progress = progress::bar(runs as u64, quiet);
    let mut rows = Vec::new();
    for &w in &data {
        for &door in &door_list {
            signals::check()?;
            progress.set_message(format!("{} through {}", w.name(), door.name()));
            let r = doors
                .run(w, door, a, servers)
                .with_context(|| format!("{} through {}", w.name(), door.name()))?;
            rows.push(r);
            progress.inc(1);
        }
    }
    progress.finish_and_clear();
    for m in [doors.fuse, doors.fuse_uring].into_iter().flatten() {
        m.tear_down()?;
    }
    doors.tmpfs.tear_down()?;
    Ok(rows)
}

/// Fills each row's ratio to tmpfs and says whether the sequential targets are met.
fn compare(rows: &mut [Row]) -> Vec<Goal> {
    let tmpfs: Vec<(Workload, f64)> = rows
        .iter()
        .filter(|r| r.door == Door::Tmpfs)
        .map(|r| (r.workload, r.ops_per_s))
        .collect();
    for r in rows.iter_mut() {
        let peer = tmpfs.iter().find(|(w, _)| *w == r.workload);
        if let Some(&(_, ops)) = peer.filter(|_| r.door != Door::Tmpfs) {
            r.vs_tmpfs = (ops > 0.0).then(|| r.ops_per_s / ops);
        }
    }
    rows.iter()
        .filter(|r| matches!(r.door, Door::EasyioFuse | Door::EasyioFuseUring))
        .filter_map(|r| {
            let asked = if r.workload.sequential() {
                SEQ_TARGET
            } else {
                SMALL_TARGET
            };
            r.vs_tmpfs.map(|ratio| Goal {
                workload: r.workload,
                door: r.door,
                ratio,
                asked,
                met: ratio >= asked,
            })
        })
        .collect()
}

/// `easyio bench fuse`, serving the image with the `easyio` binary at `easyio_exe`.
pub fn run(mut a: FuseArgs, easyio_exe: &Path) -> anyhow::Result<()> {
    // Each workload once, in the order given (`create` twice would find its directory).
    let mut seen = Vec::new();
    a.workload.retain(|w| {
        let first = !seen.contains(w);
        seen.push(*w);
        first
    });
    if !Path::new("/dev/fuse").exists() {
        bail!("no /dev/fuse on this machine: load the fuse module (modprobe fuse)");
    }
    if a.page_cache {
        eprintln!("easyio: --page-cache is the default now (--direct-io turns it off)");
    }
    let (servers, uring_note) = Servers::start(&a, easyio_exe)?;
    let mut results = measure_all(&a, &servers)?;
    let programs_on = servers.dev.as_ref().or(servers.uring.as_ref());
    let programs = match (a.workload.contains(&Workload::Programs), programs_on) {
        (true, Some(server)) => programs::measure(
            &server.mountpoint().join("programs"),
            Path::new(&format!(
                "/dev/shm/easyio-bench-fuse-programs-{}",
                std::process::id()
            )),
            a.json,
        )?,
        _ => Vec::new(),
    };
    servers.stop()?;
    let goals = compare(&mut results);
    let report = Report {
        machine: Machine::this(),
        mode: a.mode,
        server_threads: a.threads,
        page_cache: !a.direct_io,
        direct: a.direct,
        duration_s: a.duration,
        file_bytes: a.size,
        note: NOTE,
        results,
        goals,
        programs,
        uring_note,
    };
    if a.json {
        return report::print_json(&report);
    }
    print_report(&report);
    Ok(())
}

/// The report for people: settings, machine, the table, the goals and the note.
fn print_report(r: &Report) {
    if r.results.is_empty() {
        println!(
            "easyio bench fuse — programs; server: --mode {} --threads {}{}",
            r.mode.name(),
            r.server_threads,
            if r.page_cache { "" } else { " --direct-io" }
        );
    } else {
        println!(
            "easyio bench fuse — {} s per run, {} data file, {}; server: --mode {} --threads {}{}",
            r.duration_s,
            report::size_label(r.file_bytes),
            if r.direct { "O_DIRECT" } else { "buffered" },
            r.mode.name(),
            r.server_threads,
            if r.page_cache { "" } else { " --direct-io" }
        );
    }
    println!("machine: {}", r.machine.describe());
    if !r.results.is_empty() {
        println!("{}", table(&r.results));
    }
    if !r.programs.is_empty() {
        println!("{}", programs::table(&r.programs));
        println!("note: {}", programs::NOTE);
        if r.results.is_empty() {
            return;
        }
    }
    for g in &r.goals {
        println!(
            "goal: {} through the mount ({}) ≥ {}× tmpfs: {:.2}× ({})",
            g.workload.name(),
            g.door.name(),
            g.asked,
            g.ratio,
            if g.met { "met" } else { "NOT met" }
        );
    }
    if let Some(why) = &r.uring_note {
        println!("easyio-fuse-uring: not measured: {why}");
    }
    println!("note: {}", r.note);
}

/// The results as a table.
fn table(rows: &[Row]) -> String {
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                r.workload.name().to_string(),
                report::size_label(r.io_size),
                r.door.name().to_string(),
                format!("{:.0}", r.ops_per_s),
                format!("{:.3}", r.gib_per_s),
                format!("{:.1}", r.p50_us),
                format!("{:.1}", r.p99_us),
                format!("{:.2}", r.cpu_s_per_gib),
                r.server_cpu_s
                    .map_or(String::new(), |s| format!("{:.2}", s / gib(r.bytes))),
                r.vs_tmpfs.map_or(String::new(), |v| format!("{v:.2}x")),
                r.first_pass_gib_per_s
                    .map_or(String::new(), |g| format!("{g:.3}")),
            ]
        })
        .collect();
    report::table(
        &[
            "workload",
            "io",
            "door",
            "ops/s",
            "GiB/s",
            "p50 µs",
            "p99 µs",
            "CPU-s/GiB",
            "of it server",
            "vs tmpfs",
            "1st pass GiB/s",
        ],
        cells,
    )
}

/// `bytes` in GiB (at least a tiny amount, to divide by).
fn gib(bytes: u64) -> f64 {
    (bytes as f64 / (1u64 << 30) as f64).max(1e-12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_checks_agree() {
        let mut p = pattern();
        let b = 1_000_003u64;
        let at = (b % PATTERN_BLOCKS) as usize * BLOCK;
        let block = &mut p[at..at + BLOCK];
        stamp(block, b, 7);
        assert!(looks_right(block, b));
        assert!(is_right(block, b, 7));
        assert!(!is_right(block, b, 6), "a generation from the future");
        assert!(!looks_right(block, b + 1));
        block[100] ^= 1;
        assert!(looks_right(block, b), "the quick check reads two places");
        assert!(!is_right(block, b, 7), "the full check reads every byte");
        assert!(!looks_right(&[0u8; BLOCK], 0), "zeroes are never a block");
    }

    #[test]
    fn sizes_round_up_to_whole_mib() {
        assert_eq!(file_size("1"), Ok(1 << 20));
        assert_eq!(file_size("3M"), Ok(3 << 20));
        assert_eq!(file_size("1500K"), Ok(2 << 20));
        assert!(file_size("0").is_err());
        assert!(file_size("17G").is_err());
    }
}
