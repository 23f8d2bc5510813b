//! `easyio bench startup`: what it costs to open an image and list its root — the work
//! of `easyio ls` — on images of different sizes holding the same files, measured in
//! one run. Start-up should not grow with the image: the figure reported is each size's
//! time as a ratio to the smallest size's.
//!
//! Images are sparse files (`Region::create_sparse`), so a 16 GiB image in `/dev/shm`
//! costs only the memory its metadata and files touch. Each round measures every size
//! once, in rotating order; the median over rounds is reported, both in-process (open,
//! mount, list and stat the root's entries, unmount, close) and as a whole `easyio ls`
//! process (which adds the same process start-up to every size).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use fs::{FileSystem, FormatOptions, MountOptions, OpenFlags};
use pmem::{Pmem, Region};
use serde::Serialize;

use crate::median;
use crate::report::{self, Machine};
use command::args::parse_size;

/// Files written into the root of every image before measuring.
const FILES: usize = 32;
/// Bytes per file.
const FILE_BYTES: usize = 64 * 1024;

/// The options of `easyio bench startup`.
#[derive(Args)]
pub struct StartupArgs {
    /// Image sizes to compare, smallest first (K, M, G suffixes).
    #[arg(long, value_delimiter = ',', default_value = "64M,16G")]
    sizes: Vec<String>,
    /// Directory for the images (sparse files, removed afterwards).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Measurement rounds; the median is reported.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    size_bytes: u64,
    /// Median of open + mount + list + unmount + close, in microseconds.
    in_process_us: f64,
    /// `in_process_us` over the smallest size's.
    in_process_ratio: f64,
    /// Median wall time of an `easyio ls -l` process, in microseconds.
    process_us: f64,
    /// `process_us` over the smallest size's.
    process_ratio: f64,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    dir: PathBuf,
    files: usize,
    rounds: u32,
    results: Vec<Row>,
}

/// A sparse image file, removed on drop.
struct Image(PathBuf);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `easyio bench startup`: prepare an image of each size, time the listing of each in
/// rotating rounds, report each size's median as a ratio to the smallest's.
pub fn run(args: StartupArgs) -> anyhow::Result<()> {
    let sizes: Vec<u64> = args
        .sizes
        .iter()
        .map(|s| parse_size(s))
        .collect::<anyhow::Result<_>>()?;
    if sizes.is_empty() {
        bail!("--sizes names no size");
    }
    if !args.dir.is_dir() {
        bail!("--dir {}: not a directory", args.dir.display());
    }
    let exe = std::env::current_exe().context("finding the easyio binary")?;
    let mut images = Vec::new();
    for &size in &sizes {
        let path = args
            .dir
            .join(format!("easyio-startup-{}-{size}.img", std::process::id()));
        let image = Image(path);
        prepare(&image.0, size).with_context(|| format!("preparing {}", image.0.display()))?;
        images.push(image);
    }
    let (in_process, process) = measure(&images, &exe, args.rounds as usize)?;
    let report = Report {
        machine: Machine::this(),
        dir: args.dir.clone(),
        files: FILES,
        rounds: args.rounds,
        results: rows(&sizes, &in_process, &process),
    };
    if args.json {
        return report::print_json(&report);
    }
    print_report(&report);
    Ok(())
}

/// Microseconds of each round for each image: in this process, and as a process.
type Samples = Vec<Vec<f64>>;

/// Lists every image in each of `rounds` rounds, in rotating order, after one untimed
/// pass that warms the binary and the page cache for every size alike.
fn measure(images: &[Image], exe: &Path, rounds: usize) -> anyhow::Result<(Samples, Samples)> {
    let mut in_process: Samples = vec![Vec::new(); images.len()];
    let mut process: Samples = vec![Vec::new(); images.len()];
    for image in images {
        list_in_process(&image.0)?;
        list_in_child(exe, &image.0)?;
    }
    for round in 0..rounds {
        for k in 0..images.len() {
            let i = (round + k) % images.len();
            in_process[i].push(list_in_process(&images[i].0)?);
            process[i].push(list_in_child(exe, &images[i].0)?);
        }
    }
    Ok((in_process, process))
}

/// A row per size: the medians and their ratios to the smallest size's.
fn rows(sizes: &[u64], in_process: &Samples, process: &Samples) -> Vec<Row> {
    let base_in = median(in_process[0].clone());
    let base_proc = median(process[0].clone());
    sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let a = median(in_process[i].clone());
            let p = median(process[i].clone());
            Row {
                size_bytes: size,
                in_process_us: a,
                in_process_ratio: a / base_in,
                process_us: p,
                process_ratio: p / base_proc,
            }
        })
        .collect()
}

/// The report for people.
fn print_report(report: &Report) {
    println!("{}", report.machine.describe());
    println!(
        "open + mount + ls -l of / ({FILES} files) + unmount; sparse images in {}; median of {} rounds",
        report.dir.display(),
        report.rounds
    );
    let rows = report
        .results
        .iter()
        .map(|r| {
            vec![
                report::size_label(r.size_bytes),
                format!("{:.0}", r.in_process_us),
                format!("{:.2}", r.in_process_ratio),
                format!("{:.0}", r.process_us),
                format!("{:.2}", r.process_ratio),
            ]
        })
        .collect();
    println!(
        "{}",
        report::table(
            &[
                "image",
                "in-process µs",
                "ratio",
                "`easyio ls -l` µs",
                "ratio",
            ],
            rows
        )
    );
}

/// Creates a sparse image of `size` bytes, formats it and writes the files.
fn prepare(path: &Path, size: u64) -> anyhow::Result<()> {
    let pm: Arc<dyn Pmem> = Arc::new(Region::create_sparse(path, size)?);
    FileSystem::format(&*pm, &FormatOptions::default())?;
    let (fs, _) = FileSystem::mount(pm, MountOptions::default())?;
    let data = vec![0x6Bu8; FILE_BYTES];
    for i in 0..FILES {
        let fd = fs.open(
            &format!("/file{i:02}"),
            OpenFlags::WRONLY | OpenFlags::CREAT,
            0o644,
        )?;
        fs.write(fd, &data)?;
        fs.close(fd)?;
    }
    fs.unmount()?;
    Ok(())
}

/// What `easyio ls -l /` does, timed in this process; microseconds.
fn list_in_process(path: &Path) -> anyhow::Result<f64> {
    let start = Instant::now();
    let pm: Arc<dyn Pmem> = Arc::new(Region::open(path)?);
    let (fs, report) = FileSystem::mount(pm, MountOptions::default())?;
    if !report.clean {
        bail!("{} was not cleanly unmounted", path.display());
    }
    let entries = fs.readdir("/")?;
    if entries.len() != FILES {
        bail!(
            "{} lists {} entries, not {FILES}",
            path.display(),
            entries.len()
        );
    }
    for e in &entries {
        std::hint::black_box(fs.stat(&format!("/{}", e.name))?);
    }
    fs.unmount()?;
    Ok(start.elapsed().as_secs_f64() * 1e6)
}

/// An `easyio ls -l` process on the image: wall microseconds.
fn list_in_child(exe: &Path, path: &Path) -> anyhow::Result<f64> {
    let start = Instant::now();
    let status = Command::new(exe)
        .args(["ls", "-l", "--image"])
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .context("running easyio ls")?;
    let elapsed = start.elapsed().as_secs_f64() * 1e6;
    if !status.success() {
        bail!("easyio ls on {} failed ({status})", path.display());
    }
    Ok(elapsed)
}
