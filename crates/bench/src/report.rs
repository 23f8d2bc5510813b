//! Output of results: a table for people and JSON for machines (those of every command,
//! `command::report`), a description of the machine a measurement came from, sizes.

pub use command::report::{print_json, table};
use serde::Serialize;

/// The machine a measurement came from, printed beside every benchmark result.
#[derive(Serialize, Clone, Debug)]
pub struct Machine {
    /// The CPU's model name.
    pub cpu: String,
    /// Cores this process may use.
    pub cores: usize,
    /// The non-temporal copy routine `pmem` chose.
    pub copy: &'static str,
    /// The cache-line write-back instruction `pmem` chose.
    pub flush: &'static str,
}

impl Machine {
    /// This machine.
    pub fn this() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            copy: pmem::persist::best_copy().name(),
            flush: pmem::persist::best_flush().name(),
        }
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        format!(
            "{} ({} cores; non-temporal copy {}, write-back {})",
            self.cpu, self.cores, self.copy, self.flush
        )
    }
}

/// Human-readable byte count for sizes that are powers of two (4 KiB, 2 MiB).
pub fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}
