//! The `easyio` command: parses the arguments, calls the library that does the work
//! (`fs` for the file commands, `crash` for crash tests and, with the `bench` feature,
//! `bench` for benchmarks, calibration and the demo) and prints the result. It holds no
//! measurement, workload or file system logic of its own, and nothing imports it.

#![warn(clippy::too_many_lines)]

mod engines;
mod files;
mod generate;
mod mount;
mod serve;

use std::path::PathBuf;

#[cfg(feature = "bench")]
use bench::{calibrate, demo};
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use command::image::ImagePath;
use command::{args, report, signals};

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
    /// The image of a command that opens one (the file commands, mount, serve): the
    /// same as its own --image or IMAGE argument.
    #[arg(long, value_name = "IMAGE")]
    image: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// Settles the image of a command that opens one from the ways it was given
    /// (`command::image`); a command that opens none refuses `--image`.
    fn place_image(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        let Some((name, sub)) = matches.subcommand() else {
            return Ok(());
        };
        let before = self.image.take();
        let Some((at, positional)) = self.command.image_slots() else {
            let msg = format!("`{name}` opens no image; --image goes with the commands that do");
            let refusal = Cli::command().error(ErrorKind::ArgumentConflict, msg);
            return before.map_or(Ok(()), |_| Err(refusal));
        };
        let own = sub.value_source("image") == Some(ValueSource::CommandLine);
        at.settle(before, own, positional.and_then(Option::take))
            .map_err(|msg| Cli::command().error(ErrorKind::ArgumentConflict, msg))
    }
}

#[derive(Subcommand)]
enum Command {
    /// A short comparison of the data movers on two of EASYIO's applications, with and
    /// without slow-memory emulation, on a temporary region: the table and a plot.
    #[cfg(feature = "bench")]
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
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    Bench(bench::Benchmark),
    /// The copy engines and channels available on this machine.
    Engines(engines::EnginesArgs),
    /// Crash-consistency tests: crash points in a traced workload, each recovered and
    /// checked against a model (EASYIO Table 2).
    Crashtest(crash::runner::CrashtestArgs),
    /// Measure CPU and engine copy latency here and write a profile of thresholds that
    /// a mount can load (Fastmove's turning points and saturation concurrency).
    #[cfg(feature = "bench")]
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

impl Command {
    /// Where a command that opens an image takes it: its `--image`, and its IMAGE
    /// argument where it has one.
    fn image_slots(&mut self) -> Option<(&mut ImagePath, Option<&mut Option<PathBuf>>)> {
        Some(match self {
            Command::Mkfs(a) => (&mut a.image.at, Some(&mut a.given)),
            Command::Fsck(a) => (&mut a.image.at, Some(&mut a.given)),
            Command::Info(a) => (&mut a.image.at, Some(&mut a.given)),
            Command::Ls(files::LsArgs { image, .. })
            | Command::Stat(files::PathArgs { image, .. })
            | Command::Put(files::PutArgs { image, .. })
            | Command::Get(files::GetArgs { image, .. })
            | Command::Cat(files::CatArgs { image, .. })
            | Command::Rm(files::RmArgs { image, .. })
            | Command::Mkdir(files::MkdirArgs { image, .. })
            | Command::Mv(files::MvArgs { image, .. }) => (&mut image.at, None),
            Command::Mount(a) => {
                a.settle_arguments();
                (&mut a.at, Some(&mut a.given))
            }
            Command::Serve(a) => (&mut a.at, Some(&mut a.given)),
            _ => return None,
        })
    }
}

fn main() {
    if let Err(e) = signals::install() {
        eprintln!("easyio: installing signal handlers: {e}");
        std::process::exit(1);
    }
    let parsed = Cli::command().try_get_matches().and_then(|m| {
        let mut cli = Cli::from_arg_matches(&m)?;
        cli.place_image(&m)?;
        Ok(cli)
    });
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { args::USAGE } else { 0 });
        }
    };
    let result = signals::run_to_end(|| run(cli.command));
    if let Err(err) = result {
        eprintln!("easyio: {}", report::one_line(&err));
        std::process::exit(exit_code(&err));
    }
}

/// Runs one command.
fn run(command: Command) -> anyhow::Result<()> {
    match command {
        #[cfg(feature = "bench")]
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
        #[cfg(feature = "bench")]
        Command::Bench(b) => b.run(&std::env::current_exe()?),
        Command::Engines(args) => engines::run(args),
        Command::Crashtest(args) => crash::runner::run(args),
        #[cfg(feature = "bench")]
        Command::Calibrate(args) => calibrate::run(args),
        Command::Mount(a) => mount::mount(a),
        Command::Umount(a) => mount::umount(a),
        Command::Serve(a) => serve::serve(a),
        Command::Generate(a) => generate::run(a, Cli::command()),
    }
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
