//! The `easyio` command: parses the arguments, calls the library that does the work
//! (`fs` for the file commands, `bench` for benchmarks, calibration and the demo,
//! `crash` for crash tests) and prints the result. It holds no measurement, workload
//! or file system logic of its own, and nothing imports it.

#![warn(clippy::too_many_lines)]

mod args;
mod crashtest;
mod dates;
mod engines;
mod files;
mod generate;
mod mount;
mod serve;
mod signals;

use bench::{app, calibrate, demo, micro, qos, raw, rt, startup};
use clap::{CommandFactory, Parser, Subcommand};

/// The exit statuses, shown at the end of `--help`.
const EXIT_STATUS: &str = "\
Exit status:
  0    success
  1    failure with no errno of its own (e.g. a refusal: rm -r /, writing over the image)
  4    fsck found problems (fsck --repair: problems remain after repair)
  64   usage error: an unknown command, or a bad or missing argument (nothing was done)
  N    otherwise the errno of what failed, e.g. 2 ENOENT (no such file or image),
       5 EIO, 16 EBUSY (image in use), 17 EEXIST, 20 ENOTDIR, 21 EISDIR, 28 ENOSPC,
       36 ENAMETOOLONG, 39 ENOTEMPTY, 117 EUCLEAN (damaged image)
  A command stopped by SIGINT, SIGTERM or SIGPIPE unmounts cleanly, then ends by that
  signal (a shell shows 128 + N: 130, 143, 141); a second SIGINT ends it at once and
  the next command recovers the image as after a crash.";

/// easyio: an asynchronous file system for slow memory.
#[derive(Parser)]
#[command(name = "easyio", version, about, after_help = EXIT_STATUS)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A short comparison of the data movers on two of EASYIO's applications, with and
    /// without slow-memory emulation, on a temporary region: the table and a plot.
    Demo(demo::DemoArgs),
    /// Create (or with --force reformat) a region and format it.
    Mkfs(files::MkfsArgs),
    /// Check an image without changing it; exits 4 if it finds problems.
    Fsck(files::FsckArgs),
    /// Geometry, usage, and what the mount had to do.
    Info(files::InfoArgs),
    /// List a directory.
    Ls(files::LsArgs),
    /// Describe a file, directory or symbolic link (times in local time, as stat(1)
    /// prints them).
    Stat(files::PathArgs),
    /// Copy a local file into the image.
    Put(files::PutArgs),
    /// Copy a file out of the image.
    Get(files::GetArgs),
    /// Print a file of the image.
    Cat(files::CatArgs),
    /// Remove a file (or, with -r, a directory tree).
    Rm(files::RmArgs),
    /// Create a directory.
    Mkdir(files::MkdirArgs),
    /// Rename or move.
    Mv(files::MvArgs),
    /// Benchmarks: the physical limit of the machine and each layer above it.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The copy engines and channels available on this machine.
    Engines(engines::EnginesArgs),
    /// Crash-consistency tests: crash points in a traced workload, each recovered and
    /// checked against a model (EASYIO Table 2).
    Crashtest(crashtest::CrashtestArgs),
    /// Measure CPU and engine copy latency here and write a profile of thresholds that
    /// a mount can load (Fastmove's turning points and saturation concurrency).
    Calibrate(calibrate::CalibrateArgs),
    /// Serve an image through FUSE on a directory, to every program (see docs/FUSE.md).
    Mount(mount::MountArgs),
    /// Unmount what `easyio mount` mounted, waiting until the image is saved.
    Umount(mount::UmountArgs),
    /// Serve an image to client processes on a Unix socket (one server writes the
    /// image; clients map it read-only). Stops cleanly at SIGINT or SIGTERM.
    Serve(serve::ServeArgs),
    /// Write the manual pages or the shell completions into a directory (for packages).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The physical limit: single-core copies into and out of the region.
    Raw(raw::RawArgs),
    /// The slow-memory model on the wall clock: one core's copies of Fastmove Table 4's
    /// sizes, beside the model's computed time and the table's row (EMULATED).
    Emulation(bench::emulation::EmulationArgs),
    /// FxMark-style file system microbenchmarks, beside the kernel's tmpfs.
    Micro(micro::MicroArgs),
    /// Copy engines: latency and bandwidth per backend, size, direction, batch and
    /// channel count, beside the persistent copy and memcpy of the same run.
    Engine(bench::engine::EngineArgs),
    /// The user-level thread runtime: yield, spawn+join and ping-pong vs kernel threads.
    Rt(rt::RtArgs),
    /// EASYIO's real-world applications (Table 1, Fig. 10) in each mode, outputs verified.
    App(app::AppArgs),
    /// Quality of service (EASYIO Fig. 12): a latency-critical reader beside a bulk
    /// copier under no, CPU and engine throttling.
    Qos(qos::QosArgs),
    /// Start-up: `ls` of the same files on images of different sizes (sparse), as a
    /// ratio to the smallest; opening an image should not cost more when it is larger.
    Startup(startup::StartupArgs),
    /// fio-like workloads through a FUSE mount of a fresh image (`easyio mount`),
    /// beside the kernel's tmpfs and the library in the same run.
    Fuse(bench::fuse::FuseArgs),
    /// fio through the LD_PRELOAD shim (libeasyio_preload.so) on a fresh image, beside
    /// the same fio on the kernel's tmpfs in the same run.
    Preload(bench::preload::PreloadArgs),
    /// Client processes of `easyio serve` beside the library in-process: read, write
    /// and create latency, a reader beside writers, create throughput of two clients.
    Shared(bench::shared::SharedArgs),
}

fn main() {
    if let Err(e) = signals::install() {
        eprintln!("easyio: installing signal handlers: {e}");
        std::process::exit(1);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { args::USAGE } else { 0 });
        }
    };
    // Tables and reports are printed with `println!`, which panics when stdout is a
    // pipe closed early (`easyio bench raw | head -1`): such a panic is the SIGPIPE
    // already recorded, not a bug, so it is not reported and ends the command below.
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if signals::received() != Some(libc::SIGPIPE) {
            report_panic(info);
        }
    }));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli.command)));
    let result = match result {
        Ok(result) => result,
        Err(panic) if signals::received() == Some(libc::SIGPIPE) => {
            drop(panic);
            signals::die_by(libc::SIGPIPE)
        }
        Err(panic) => std::panic::resume_unwind(panic),
    };
    // Everything the command held (the mounted image, temporary files) is dropped by
    // now: a signal ends the process only after that clean unwind.
    if let Some(sig) = signals::received().or_else(|| result.as_ref().err().and_then(pipe)) {
        // An error of its own (not the stop itself) is still said: a signal must not
        // hide that the command failed on the way out (e.g. the image not saved).
        if let Some(err) = result.as_ref().err() {
            if !err.chain().any(|e| e.is::<signals::Interrupted>()) && pipe(err).is_none() {
                eprintln!("easyio: {}", message(err));
            }
        }
        if sig != libc::SIGPIPE {
            eprintln!("easyio: {}", signals::Interrupted(sig));
        }
        signals::die_by(sig);
    }
    if let Err(err) = result {
        eprintln!("easyio: {}", message(&err));
        std::process::exit(exit_code(&err));
    }
}

/// Runs one command.
fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Demo(a) => demo::run(a),
        Command::Mkfs(a) => files::mkfs(a),
        Command::Fsck(a) => files::fsck(a),
        Command::Info(a) => files::info(a),
        Command::Ls(a) => files::ls(a),
        Command::Stat(a) => files::stat(a),
        Command::Put(a) => files::put(a),
        Command::Get(a) => files::get(a),
        Command::Cat(a) => files::cat(a),
        Command::Rm(a) => files::rm(a),
        Command::Mkdir(a) => files::mkdir(a),
        Command::Mv(a) => files::mv(a),
        Command::Bench(cmd) => run_bench(cmd),
        Command::Engines(args) => engines::run(args),
        Command::Crashtest(args) => crashtest::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Mount(a) => mount::mount(a),
        Command::Umount(a) => mount::umount(a),
        Command::Serve(a) => serve::serve(a),
        Command::Generate(a) => generate::run(a, Cli::command()),
    }
}

/// Runs one benchmark.
fn run_bench(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Raw(args) => raw::run(args),
        BenchCommand::Emulation(args) => bench::emulation::run(args),
        BenchCommand::Micro(args) => micro::run(args),
        BenchCommand::Engine(args) => bench::engine::run(args),
        BenchCommand::Rt(args) => rt::run(args),
        BenchCommand::App(args) => app::run(args),
        BenchCommand::Qos(args) => qos::run(args),
        BenchCommand::Startup(args) => startup::run(args),
        BenchCommand::Fuse(args) => bench::fuse::run(args, &std::env::current_exe()?),
        BenchCommand::Preload(args) => bench::preload::run(args, &std::env::current_exe()?),
        BenchCommand::Shared(args) => bench::shared::run(args, &std::env::current_exe()?),
    }
}

/// SIGPIPE, if the command failed writing to a closed pipe.
fn pipe(err: &anyhow::Error) -> Option<i32> {
    err.chain()
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
        .then_some(libc::SIGPIPE)
}

/// The error and its causes on one line, each said once: a cause whose text its
/// context already shows is not repeated.
fn message(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

/// The exit status of a failed command (see [`EXIT_STATUS`]): a usage error, else the
/// errno of the underlying error where there is one, so scripts can tell "in use"
/// (EBUSY) from "no such region" (ENOENT); 1 otherwise.
fn exit_code(err: &anyhow::Error) -> i32 {
    if err.chain().any(|e| e.is::<args::UsageError>()) {
        return args::USAGE;
    }
    err.chain()
        .find_map(|e| {
            e.downcast_ref::<pmem::Error>()
                .map(pmem::Error::errno)
                .or_else(|| e.downcast_ref::<fs::Error>().map(fs::Error::errno))
                .or_else(|| e.downcast_ref::<engine::Error>().map(engine::Error::errno))
                .or_else(|| e.downcast_ref::<easyio_fuse::Error>()?.errno())
                .or_else(|| e.downcast_ref::<easyio_serve::Error>().map(|e| e.errno()))
                .or_else(|| {
                    e.downcast_ref::<std::io::Error>()
                        .and_then(std::io::Error::raw_os_error)
                })
        })
        .map(|errno| errno.clamp(1, 125))
        .unwrap_or(1)
}
