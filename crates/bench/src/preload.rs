//! `easyio bench preload`: `fio` (psync, one process, jobs as threads) through the
//! LD_PRELOAD shim (`libeasyio_preload.so`) on a fresh image in /dev/shm, and in the
//! same run on a directory of the host's tmpfs (/dev/shm).
//!
//! | job       | fio's `--rw` | block  |
//! |-----------|--------------|--------|
//! | randread  | randread     | 4 KiB  |
//! | randwrite | randwrite    | 4 KiB  |
//! | seqread   | read         | 64 KiB, 1 MiB |
//! | seqwrite  | write        | 64 KiB, 1 MiB |
//!
//! Each with one and with two fio jobs (`--numjobs`, `--thread`: the shim lets one
//! process hold an image, so fio's jobs run as threads of one process; tmpfs gets the
//! same). Every shim run gets a fresh image, and after fio exits the image is mounted
//! here and must hold fio's files with the size asked: fio that silently wrote to the
//! host instead fails the run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use clap::Args;
use fs::{FileSystem, FormatOptions, Mode, MountOptions};
use pmem::{Pmem, Region};
use serde::Serialize;

use crate::args;
use crate::report::{self, Machine};
use crate::target::children_cpu_seconds;

/// Where the shim shows the image to fio.
const PREFIX: &str = "/easyio";
/// The shim's file name, as cargo builds it.
const SHIM: &str = "libeasyio_preload.so";
/// Extra time fio may take beyond its runtime (laying out files, mounting) before it
/// is killed and the run fails.
const GRACE: Duration = Duration::from_secs(120);

/// What each target asks: (job, block, easyio over tmpfs). Issue 20 asked for the
/// reads and the sequential write; the 4 KiB random write's target is issue 37's
/// (a durable write against tmpfs's, which is not).
const GOALS: [(&str, u64, f64); 3] = [
    ("randwrite", 4 << 10, 1.3),
    ("randread", 4 << 10, 1.5),
    ("seqwrite", 1 << 20, 1.0),
];

/// The options of `easyio bench preload`.
#[derive(Args)]
pub struct PreloadArgs {
    /// Who moves file data in the shim (its EASYIO_MODE).
    #[arg(long, default_value = "cpu")]
    mode: Mode,
    /// Seconds each fio run lasts (more than 0, at most 3600; fio's `--runtime`).
    #[arg(long, default_value_t = 2.0, value_parser = args::seconds)]
    runtime: f64,
    /// Size of each fio job's file (whole MiB, 1M to 16G; fio's `--size`).
    #[arg(long, default_value = "64M", value_parser = file_size)]
    size: u64,
    /// The fio program.
    #[arg(long, default_value = "fio")]
    fio: PathBuf,
    /// The shim; default: `libeasyio_preload.so` beside the `easyio` binary.
    #[arg(long)]
    shim: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// A file size: 1 MiB to 16 GiB, rounded up to whole MiB.
fn file_size(s: &str) -> Result<u64, String> {
    let n = command::args::size(s)?;
    if n > 16 << 30 {
        return Err(format!("{s} is larger than 16G"));
    }
    Ok(n.div_ceil(1 << 20).max(1) << 20)
}

/// One fio job: what it does, and how many of it run at once.
#[derive(Clone, Copy)]
struct Job {
    name: &'static str,
    rw: &'static str,
    block: u64,
    numjobs: u32,
}

impl Job {
    /// Every job of the module's table, with one and with two fio jobs.
    fn all() -> Vec<Job> {
        let kinds = [
            ("randread", "randread", 4 << 10),
            ("randwrite", "randwrite", 4 << 10),
            ("seqread", "read", 64 << 10),
            ("seqwrite", "write", 64 << 10),
            ("seqread", "read", 1 << 20),
            ("seqwrite", "write", 1 << 20),
        ];
        let mut jobs = Vec::new();
        for numjobs in [1, 2] {
            for (name, rw, block) in kinds {
                jobs.push(Job {
                    name,
                    rw,
                    block,
                    numjobs,
                });
            }
        }
        jobs
    }

    fn reads(self) -> bool {
        self.rw.contains("read")
    }

    /// fio's job name, which names its files (`NAME.J.0`).
    fn fio_name(self) -> String {
        format!("{}-{}k", self.name, self.block >> 10)
    }
}

/// Where fio's files go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Through the shim, on a fresh image.
    EasyioPreload,
    /// A directory of the host's tmpfs.
    Tmpfs,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::EasyioPreload => "easyio-preload",
            Target::Tmpfs => "tmpfs",
        }
    }
}

/// One job on one target.
#[derive(Serialize, Clone)]
struct Row {
    job: &'static str,
    /// fio's `--rw`.
    rw: &'static str,
    /// Bytes per operation.
    io_size: u64,
    numjobs: u32,
    target: Target,
    ops: u64,
    bytes: u64,
    ops_per_s: f64,
    gib_per_s: f64,
    /// fio's completion latency percentiles (all jobs together).
    p50_us: f64,
    p99_us: f64,
    /// User plus system CPU-seconds of the fio process (getrusage of the child).
    cpu_s: f64,
    cpu_s_per_gib: f64,
    /// Throughput as a fraction of tmpfs's for the same job in this run.
    vs_tmpfs: Option<f64>,
    /// fio's files found afterwards with the size asked (on the image, or in tmpfs).
    files_checked: u64,
}

/// A target (issue 20's or 37's) and whether this run met it.
#[derive(Serialize)]
struct Goal {
    job: &'static str,
    io_size: u64,
    numjobs: u32,
    /// easyio-preload over tmpfs throughput.
    ratio: f64,
    asked: f64,
    met: bool,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    mode: Mode,
    runtime_s: f64,
    file_bytes: u64,
    fio: String,
    shim: PathBuf,
    note: &'static str,
    results: Vec<Row>,
    goals: Vec<Goal>,
}

/// What the table's footnote says.
const NOTE: &str = "fio --ioengine=psync --thread --group_reporting --time_based; \
easyio-preload = fio under LD_PRELOAD=libeasyio_preload.so on a fresh image in /dev/shm \
(files under /easyio, checked on the image afterwards); tmpfs = the same fio on a \
directory of /dev/shm. easyio's writes are durable when they return; tmpfs's are not \
persistent. p50/p99 = fio's completion latency. CPU-s/GiB = user + system CPU of the \
fio process (getrusage of the child, laying out its files included) per GiB moved.";

/// The shim to preload: `--shim`, else beside the `easyio` binary.
fn find_shim(given: Option<&Path>, easyio_exe: &Path) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        ensure!(p.is_file(), "no shim at {}", p.display());
        return Ok(p.to_path_buf());
    }
    let dir = easyio_exe.parent().unwrap_or(Path::new("."));
    let p = dir.join(SHIM);
    ensure!(
        p.is_file(),
        "{SHIM} not found beside {}: build it with `cargo build --release -p preload` \
         (it lands beside easyio) or give --shim PATH",
        easyio_exe.display()
    );
    Ok(p)
}

/// fio's version line, or one line saying how to get fio.
fn check_fio(fio: &Path) -> anyhow::Result<String> {
    let out = Command::new(fio)
        .arg("--version")
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        _ => bail!(
            "{} not found or not working: install the Debian package fio \
             (apt-get install -y fio) or give --fio PATH",
            fio.display()
        ),
    }
}

/// A scratch directory in /dev/shm (the image and the tmpfs directory), removed on drop.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let dir = PathBuf::from(format!(
            "/dev/shm/easyio-bench-preload-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmpfs")).with_context(|| dir.display().to_string())?;
        Ok(Scratch { dir })
    }

    fn image(&self) -> PathBuf {
        self.dir.join("image")
    }

    fn tmpfs(&self) -> PathBuf {
        self.dir.join("tmpfs")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The fio command for `job` in `dir`.
fn fio_command(a: &PreloadArgs, job: Job, dir: &str) -> Command {
    let mut c = Command::new(&a.fio);
    c.arg(format!("--name={}", job.fio_name()))
        .arg(format!("--directory={dir}"))
        .arg(format!("--rw={}", job.rw))
        .arg(format!("--bs={}", job.block))
        .arg(format!("--size={}", a.size))
        .arg(format!("--numjobs={}", job.numjobs))
        .arg(format!(
            "--runtime={}ms",
            (a.runtime * 1000.0).ceil() as u64
        ))
        .args(["--time_based", "--thread", "--group_reporting"])
        .args(["--ioengine=psync", "--output-format=json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs fio to its end (killing it after its runtime plus [`GRACE`]); returns its JSON
/// report and the CPU-seconds it used.
fn run_fio(mut cmd: Command, runtime: f64) -> anyhow::Result<(serde_json::Value, f64)> {
    let before = children_cpu_seconds();
    let mut child = cmd.spawn().context("starting fio")?;
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut so, &mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut se, &mut v);
        v
    });
    let limit = Duration::from_secs_f64(runtime) + GRACE;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("fio still running after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let cpu = children_cpu_seconds() - before;
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let err = String::from_utf8_lossy(&err);
    ensure!(status.success(), "fio failed ({status}): {}", err.trim());
    let v: serde_json::Value = serde_json::from_slice(&out)
        .with_context(|| format!("fio's JSON output; its stderr: {}", err.trim()))?;
    Ok((v, cpu))
}

/// What fio measured for one job (its group's read or write side).
struct Measured {
    bytes: u64,
    ops: u64,
    runtime_s: f64,
    p50_us: f64,
    p99_us: f64,
}

/// Reads the numbers of `job` from fio's JSON report.
fn parse(v: &serde_json::Value, job: Job) -> anyhow::Result<Measured> {
    let j = &v["jobs"][0];
    ensure!(j.is_object(), "fio's report has no job: {v}");
    ensure!(
        j["error"].as_i64() == Some(0),
        "fio's job failed: error {}",
        j["error"]
    );
    let side = &j[if job.reads() { "read" } else { "write" }];
    let num = |x: &serde_json::Value| x.as_f64().with_context(|| format!("not a number: {x}"));
    let pct = &side["clat_ns"]["percentile"];
    let m = Measured {
        bytes: num(&side["io_bytes"])? as u64,
        ops: num(&side["total_ios"])? as u64,
        runtime_s: num(&side["runtime"])? / 1000.0,
        p50_us: num(&pct["50.000000"])? / 1000.0,
        p99_us: num(&pct["99.000000"])? / 1000.0,
    };
    ensure!(
        m.ops > 0 && m.runtime_s > 0.0,
        "fio moved nothing for {}",
        job.fio_name()
    );
    Ok(m)
}

/// Checks that `job`'s files (`NAME.J.0`) are in `dir` of `fs` with `size` bytes.
fn check_image_files(fs: &FileSystem, job: Job, size: u64) -> anyhow::Result<u64> {
    for j in 0..job.numjobs {
        let name = format!("/{}.{j}.0", job.fio_name());
        let st = fs.stat(&name).with_context(|| {
            format!("fio's file {name} is not on the image: fio did not go through the shim")
        })?;
        ensure!(
            st.size == size,
            "fio's file {name} on the image holds {} bytes, {size} asked",
            st.size
        );
    }
    Ok(u64::from(job.numjobs))
}

/// Checks the same in a host directory.
fn check_host_files(dir: &Path, job: Job, size: u64) -> anyhow::Result<u64> {
    for j in 0..job.numjobs {
        let p = dir.join(format!("{}.{j}.0", job.fio_name()));
        let len = std::fs::metadata(&p)
            .with_context(|| p.display().to_string())?
            .len();
        ensure!(
            len == size,
            "{} holds {len} bytes, {size} asked",
            p.display()
        );
    }
    Ok(u64::from(job.numjobs))
}

/// Bytes of the image for `job`: its files three times over plus 256 MiB.
fn image_bytes(size: u64, job: Job) -> u64 {
    3 * size * u64::from(job.numjobs) + (256 << 20)
}

/// Runs `job` under the shim on a fresh image, then checks the image.
fn run_preload(
    a: &PreloadArgs,
    shim: &Path,
    scratch: &Scratch,
    job: Job,
) -> anyhow::Result<(Measured, f64, u64)> {
    let image = scratch.image();
    let _ = std::fs::remove_file(&image);
    {
        let region = Region::create(&image, image_bytes(a.size, job))
            .with_context(|| image.display().to_string())?;
        FileSystem::format(&region, &FormatOptions::default())?;
    }
    let mut cmd = fio_command(a, job, PREFIX);
    cmd.env("LD_PRELOAD", shim)
        .env("EASYIO_IMAGE", &image)
        // fio's jobs are threads of one process: the image mounted in it, the
        // shim's fastest way (the figures the README quotes).
        .env("EASYIO_PRIVATE", "1")
        .env("EASYIO_MOUNT", PREFIX)
        .env("EASYIO_MODE", a.mode.name());
    let (v, cpu) = run_fio(cmd, a.runtime)?;
    let m = parse(&v, job)?;
    let pm: Arc<dyn Pmem> = Arc::new(Region::open(&image)?);
    let (fs, _) = FileSystem::mount(pm, MountOptions::default())
        .with_context(|| format!("mounting {} after fio", image.display()))?;
    let files = check_image_files(&fs, job, a.size)?;
    fs.unmount()?;
    std::fs::remove_file(&image)?;
    Ok((m, cpu, files))
}

/// Runs `job` on the tmpfs directory, then checks and removes its files.
fn run_tmpfs(a: &PreloadArgs, scratch: &Scratch, job: Job) -> anyhow::Result<(Measured, f64, u64)> {
    let dir = scratch.tmpfs();
    let (v, cpu) = run_fio(fio_command(a, job, &dir.to_string_lossy()), a.runtime)?;
    let m = parse(&v, job)?;
    let files = check_host_files(&dir, job, a.size)?;
    for j in 0..job.numjobs {
        std::fs::remove_file(dir.join(format!("{}.{j}.0", job.fio_name())))?;
    }
    Ok((m, cpu, files))
}

/// A row of the table from what one run measured.
fn row(job: Job, target: Target, (m, cpu, files): (Measured, f64, u64)) -> Row {
    let gib = (m.bytes as f64 / (1u64 << 30) as f64).max(1e-12);
    Row {
        job: job.name,
        rw: job.rw,
        io_size: job.block,
        numjobs: job.numjobs,
        target,
        ops: m.ops,
        bytes: m.bytes,
        ops_per_s: m.ops as f64 / m.runtime_s,
        gib_per_s: gib / m.runtime_s,
        p50_us: m.p50_us,
        p99_us: m.p99_us,
        cpu_s: cpu,
        cpu_s_per_gib: cpu / gib,
        vs_tmpfs: None,
        files_checked: files,
    }
}

/// Every job on both targets, easyio first, each ratio filled in.
fn measure_all(a: &PreloadArgs, shim: &Path) -> anyhow::Result<Vec<Row>> {
    let scratch = Scratch::new()?;
    let mut rows = Vec::new();
    for job in Job::all() {
        if !a.json {
            eprintln!("easyio bench preload: {} x{}", job.fio_name(), job.numjobs);
        }
        let mut easy = row(
            job,
            Target::EasyioPreload,
            run_preload(a, shim, &scratch, job)?,
        );
        let tmpfs = row(job, Target::Tmpfs, run_tmpfs(a, &scratch, job)?);
        easy.vs_tmpfs = Some(easy.ops_per_s / tmpfs.ops_per_s);
        rows.push(easy);
        rows.push(tmpfs);
    }
    Ok(rows)
}

/// The targets of issues 20 and 37, for each number of fio jobs.
fn goals(rows: &[Row]) -> Vec<Goal> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.target == Target::EasyioPreload) {
        for (job, io, asked) in GOALS {
            if r.job == job && r.io_size == io {
                let ratio = r.vs_tmpfs.unwrap_or(0.0);
                out.push(Goal {
                    job,
                    io_size: io,
                    numjobs: r.numjobs,
                    ratio,
                    asked,
                    met: ratio >= asked,
                });
            }
        }
    }
    out
}

/// `easyio bench preload`, finding the shim beside the `easyio` binary at `easyio_exe`.
pub fn run(a: PreloadArgs, easyio_exe: &Path) -> anyhow::Result<()> {
    let shim = find_shim(a.shim.as_deref(), easyio_exe)?;
    let fio = check_fio(&a.fio)?;
    let results = measure_all(&a, &shim)?;
    let report = Report {
        machine: Machine::this(),
        mode: a.mode,
        runtime_s: a.runtime,
        file_bytes: a.size,
        fio,
        shim,
        note: NOTE,
        goals: goals(&results),
        results,
    };
    if a.json {
        return report::print_json(&report);
    }
    print_report(&report);
    Ok(())
}

/// The report for people: settings, machine, the table, the goals and the note.
fn print_report(r: &Report) {
    println!(
        "easyio bench preload — {}, {} s per run, {} per fio job; shim: {} (EASYIO_MODE={})",
        r.fio,
        r.runtime_s,
        report::size_label(r.file_bytes),
        r.shim.display(),
        r.mode.name()
    );
    println!("machine: {}", r.machine.describe());
    println!("{}", table(&r.results));
    for g in &r.goals {
        println!(
            "goal: {} {} x{} through the shim ≥ {}× tmpfs: {:.2}× ({})",
            g.job,
            report::size_label(g.io_size),
            g.numjobs,
            g.asked,
            g.ratio,
            if g.met { "met" } else { "NOT met" }
        );
    }
    println!("note: {}", r.note);
}

/// The results as a table.
fn table(rows: &[Row]) -> String {
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                r.job.to_string(),
                report::size_label(r.io_size),
                r.numjobs.to_string(),
                r.target.name().to_string(),
                format!("{:.0}", r.ops_per_s),
                format!("{:.3}", r.gib_per_s),
                format!("{:.1}", r.p50_us),
                format!("{:.1}", r.p99_us),
                format!("{:.2}", r.cpu_s_per_gib),
                r.vs_tmpfs.map_or(String::new(), |v| format!("{v:.2}x")),
            ]
        })
        .collect();
    report::table(
        &[
            "job",
            "io",
            "jobs",
            "target",
            "ops/s",
            "GiB/s",
            "p50 µs",
            "p99 µs",
            "CPU-s/GiB",
            "vs tmpfs",
        ],
        cells,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use fs::OpenFlags;

    /// Writes a file of `len` bytes at `name` (created or truncated).
    fn put(fs: &FileSystem, name: &str, len: usize) {
        let flags = OpenFlags::WRONLY | OpenFlags::CREAT | OpenFlags::TRUNC;
        let fd = fs.open(name, flags, 0o644).unwrap();
        assert_eq!(fs.write(fd, &vec![7u8; len]).unwrap(), len);
        fs.close(fd).unwrap();
    }

    /// The check that catches fio falling through to the host: an image without fio's
    /// files, or with a file of the wrong size, fails; the right files pass.
    #[test]
    fn files_missing_from_the_image_fail_the_run() {
        let pm: Arc<dyn Pmem> = Arc::new(Region::create_temp(64 << 20).unwrap());
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let (fs, _) = FileSystem::mount(pm, MountOptions::default()).unwrap();
        let job = Job::all()[6 + 1];
        assert_eq!(job.numjobs, 2);
        let e = check_image_files(&fs, job, 8192).unwrap_err();
        assert!(
            format!("{e:#}").contains("did not go through the shim"),
            "{e:#}"
        );
        for j in 0..2 {
            let name = format!("/{}.{j}.0", job.fio_name());
            put(&fs, &name, if j == 0 { 8192 } else { 4096 });
        }
        let e = check_image_files(&fs, job, 8192).unwrap_err();
        assert!(format!("{e:#}").contains("4096 bytes, 8192 asked"), "{e:#}");
        put(&fs, &format!("/{}.1.0", job.fio_name()), 8192);
        assert_eq!(check_image_files(&fs, job, 8192).unwrap(), 2);
    }
}
