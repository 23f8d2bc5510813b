//! The `easyio` command.

mod bench;
mod calibrate;
mod crashtest;
mod demo;
mod engines;
mod files;
mod report;

use clap::{Parser, Subcommand};

/// easyio: an asynchronous file system for slow memory.
#[derive(Parser)]
#[command(name = "easyio", version, about)]
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
    /// Describe a file, directory or symbolic link.
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
    Bench(bench::BenchCommand),
    /// The copy engines and channels available on this machine.
    Engines(engines::EnginesArgs),
    /// Crash-consistency tests: crash points in a traced workload, each recovered and
    /// checked against a model (EASYIO Table 2).
    Crashtest(crashtest::CrashtestArgs),
    /// Measure CPU and engine copy latency here and write a profile of thresholds that
    /// a mount can load (Fastmove's turning points and saturation concurrency).
    Calibrate(calibrate::CalibrateArgs),
}

fn main() {
    // Die quietly on a closed pipe (`easyio ls | head`), as other command-line tools do,
    // instead of panicking on the failed write.
    // SAFETY: resetting a signal disposition to its default before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let result = match cli.command {
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
        Command::Bench(cmd) => bench::run(cmd),
        Command::Engines(args) => engines::run(args),
        Command::Crashtest(args) => crashtest::run(args),
        Command::Calibrate(args) => calibrate::run(args),
    };
    if let Err(err) = result {
        eprintln!("easyio: {err:#}");
        std::process::exit(exit_code(&err));
    }
}

/// Exit with the errno of the underlying error where there is one, so scripts can tell
/// "in use" (EBUSY) from "no such region" (ENOENT); 1 otherwise.
fn exit_code(err: &anyhow::Error) -> i32 {
    err.chain()
        .find_map(|e| {
            e.downcast_ref::<pmem::Error>()
                .map(pmem::Error::errno)
                .or_else(|| e.downcast_ref::<fs::Error>().map(fs::Error::errno))
                .or_else(|| e.downcast_ref::<engine::Error>().map(engine::Error::errno))
        })
        .map(|errno| errno.clamp(1, 125))
        .unwrap_or(1)
}
