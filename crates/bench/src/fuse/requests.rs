//! The FUSE requests the kernel sends to one mount, counted by kind through the
//! kernel's own trace event (`fuse:fuse_request_send`, Linux 6.15 and later), in a
//! tracefs instance of this process's (its own buffer, filtered to the mount's
//! connection), so other users of tracing and other FUSE mounts change nothing.
//!
//! It needs tracefs mounted at `/sys/kernel/tracing` and the right to write there
//! (root); without them nothing is counted and the benchmark says so.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const TRACEFS: &str = "/sys/kernel/tracing";
/// Per-CPU buffer of the instance, KiB: a step of the programs sends up to about
/// 100 000 requests, about 50 bytes of buffer each.
const BUFFER_KB: u32 = 32 * 1024;

/// Requests by kind (`FUSE_LOOKUP`, ...).
pub type Counts = BTreeMap<String, u64>;

/// A tracefs instance recording the requests of one mount.
pub struct Tracer {
    dir: PathBuf,
}

impl Tracer {
    /// An instance for the FUSE mount at `mountpoint`, not yet recording; why there is
    /// none if tracefs or its event is missing or not writable.
    pub fn new(mountpoint: &Path) -> Result<Tracer, String> {
        let event = Path::new(TRACEFS).join("events/fuse/fuse_request_send");
        if !event.exists() {
            return Err(format!(
                "no {} (tracefs not mounted, or a kernel without the fuse trace events)",
                event.display()
            ));
        }
        let dev = std::fs::metadata(mountpoint)
            .map_err(|e| format!("{}: {e}", mountpoint.display()))?
            .dev();
        // The event's `connection` is the kernel's dev_t (major << 20 | minor).
        let conn = (libc::major(dev) << 20) | libc::minor(dev);
        let dir = Path::new(TRACEFS).join(format!("instances/easyio-bench-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let t = Tracer { dir };
        let ev = t.dir.join("events/fuse/fuse_request_send");
        let set =
            |p: &Path, v: &str| std::fs::write(p, v).map_err(|e| format!("{}: {e}", p.display()));
        set(&t.dir.join("buffer_size_kb"), &BUFFER_KB.to_string())?;
        set(&ev.join("filter"), &format!("connection == {conn}"))?;
        set(&ev.join("enable"), "1")?;
        set(&t.dir.join("tracing_on"), "0")?;
        Ok(t)
    }

    /// Empties the buffer and records until [`Tracer::stop`].
    pub fn start(&self) -> std::io::Result<()> {
        std::fs::write(self.dir.join("trace"), "")?;
        std::fs::write(self.dir.join("tracing_on"), "1")
    }

    /// Stops recording; the requests recorded since [`Tracer::start`], by kind. An error
    /// if the buffer overflowed (the counts would be short).
    pub fn stop(&self) -> anyhow::Result<Counts> {
        std::fs::write(self.dir.join("tracing_on"), "0")?;
        let lost: u64 = std::fs::read_dir(self.dir.join("per_cpu"))?
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stats")).ok())
            .flat_map(|s| {
                s.lines()
                    .filter_map(|l| l.strip_prefix("overrun:")?.trim().parse::<u64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum();
        if lost > 0 {
            anyhow::bail!("the trace buffer lost {lost} FUSE requests");
        }
        Ok(parse(&std::fs::read_to_string(self.dir.join("trace"))?))
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("tracing_on"), "0");
        let _ = std::fs::write(self.dir.join("events/fuse/fuse_request_send/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Counts the `opcode N (NAME)` of each line of a trace.
fn parse(trace: &str) -> Counts {
    let mut c = Counts::new();
    for l in trace.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = l.split(" opcode ").nth(1) else {
            continue;
        };
        let name = rest
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .map_or("?", |(n, _)| n);
        *c.entry(name.to_string()).or_default() += 1;
    }
    c
}

/// The total of `c`.
pub fn total(c: &Counts) -> u64 {
    c.values().sum()
}

/// The kinds of `c`, most first, as `NAME N` without the `FUSE_` prefix, at most `n`.
pub fn top(c: &Counts, n: usize) -> String {
    let mut v: Vec<_> = c.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .take(n)
        .map(|(k, n)| format!("{} {n}", k.trim_start_matches("FUSE_").to_lowercase()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_counted_by_kind() {
        let t = "# tracer: nop\n\
            tar-1 [000] ..... 1.0: fuse_request_send: connection 61 req 2 opcode 1 (FUSE_LOOKUP) len 47\n\
            tar-1 [000] ..... 1.1: fuse_request_send: connection 61 req 4 opcode 35 (FUSE_CREATE) len 60\n\
            tar-1 [001] ..... 1.2: fuse_request_send: connection 61 req 6 opcode 1 (FUSE_LOOKUP) len 47\n";
        let c = parse(t);
        assert_eq!(c.get("FUSE_LOOKUP"), Some(&2));
        assert_eq!(c.get("FUSE_CREATE"), Some(&1));
        assert_eq!(total(&c), 3);
        assert_eq!(top(&c, 1), "lookup 2");
    }
}
