//! The `easyio` command.

mod bench;
mod engines;
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
    /// Benchmarks: the physical limit of the machine and each layer above it.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// The copy engines and channels available on this machine.
    Engines(engines::EnginesArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(cmd) => bench::run(cmd),
        Command::Engines(args) => engines::run(args),
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
                .or_else(|| e.downcast_ref::<engine::Error>().map(engine::Error::errno))
        })
        .map(|errno| errno.clamp(1, 125))
        .unwrap_or(1)
}
