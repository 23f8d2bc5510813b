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
//! | roundtrip | `statx` of the directory, `AT_STATX_FORCE_SYNC`: one `getattr` request |
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

mod data;
pub mod programs;
mod requests;
mod server;
mod workload;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use fs::Mode;
use pmem::{Pmem, Region};
use serde::Serialize;

use crate::args;
use crate::report::{self, Machine};
use crate::target::{EngineArg, Mount, Target};
use command::{progress, signals};
use data::SEQ_IO;
use workload::{gib, measure, Measured, Plan};

pub use server::EXIT_WAIT;
pub use workload::Workload;

/// What the 1 MiB sequential workloads through the mount should reach, as a fraction of
/// tmpfs's bandwidth.
const SEQ_TARGET: f64 = 0.8;
/// What the 4 KiB and create workloads through the mount should reach, as a fraction
/// of tmpfs's operations per second.
const SMALL_TARGET: f64 = 0.3;

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
        default_value = "roundtrip,randread,randwrite,seqread,seqwrite,create"
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
    /// Mount with `easyio mount --writeback-cache`: a write through the mount returns
    /// once it is in the kernel's page cache, and reaches the server (durable) at
    /// `close`, `fsync` or the kernel's writeback. Default: write-through.
    #[arg(long, conflicts_with = "direct_io")]
    writeback_cache: bool,
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

impl FuseArgs {
    /// The `easyio mount` flag of the cache asked for, if any.
    fn cache_flag(&self) -> Option<&'static str> {
        if self.direct_io {
            Some("--direct-io")
        } else if self.writeback_cache {
            Some("--writeback-cache")
        } else {
            None
        }
    }
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
            server::Server::start(exe, size, a.mode, a.threads, a.cache_flag(), transport)
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
    /// The mount caches writes (`--writeback-cache`): a write through it is durable
    /// at `close` or `fsync`, not when it returns.
    writeback_cache: bool,
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
Writes through easyio (both doors) are durable when they return (unless --writeback-cache); \
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
        .filter(|r| r.workload != Workload::Roundtrip)
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
        writeback_cache: a.writeback_cache,
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
            r.cache_flag()
        );
    } else {
        println!(
            "easyio bench fuse — {} s per run, {} data file, {}; server: --mode {} --threads {}{}",
            r.duration_s,
            report::size_label(r.file_bytes),
            if r.direct { "O_DIRECT" } else { "buffered" },
            r.mode.name(),
            r.server_threads,
            r.cache_flag()
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
            if r.writeback_cache {
                println!("note: {WRITEBACK_NOTE}");
            }
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
    if r.writeback_cache {
        println!("note: {WRITEBACK_NOTE}");
    }
}

/// What the report adds with `--writeback-cache`.
const WRITEBACK_NOTE: &str = "--writeback-cache: the mount caches writes in the kernel's \
page cache; a write through it is durable once the file is closed or fsynced, not when \
the write returns (the timed writes of randwrite and seqwrite are not).";

impl Report {
    /// The server's cache flag as the report's first line shows it.
    fn cache_flag(&self) -> &'static str {
        if !self.page_cache {
            " --direct-io"
        } else if self.writeback_cache {
            " --writeback-cache"
        } else {
            ""
        }
    }
}

/// The results as a table.
fn table(rows: &[Row]) -> String {
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                r.workload.name().to_string(),
                match r.io_size {
                    0 => "-".to_string(),
                    n => report::size_label(n),
                },
                r.door.name().to_string(),
                format!("{:.0}", r.ops_per_s),
                format!("{:.3}", r.gib_per_s),
                format!("{:.1}", r.p50_us),
                format!("{:.1}", r.p99_us),
                // Per GiB moved: nothing for a workload that moves no data.
                match r.bytes {
                    0 => String::new(),
                    _ => format!("{:.2}", r.cpu_s_per_gib),
                },
                r.server_cpu_s
                    .filter(|_| r.bytes > 0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_whole_mib() {
        assert_eq!(file_size("1"), Ok(1 << 20));
        assert_eq!(file_size("3M"), Ok(3 << 20));
        assert_eq!(file_size("1500K"), Ok(2 << 20));
        assert!(file_size("0").is_err());
        assert!(file_size("17G").is_err());
    }
}
