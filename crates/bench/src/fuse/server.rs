//! The FUSE server `bench fuse` measures: `easyio mount --foreground` run as a child
//! process on a fresh image in /dev/shm, its CPU time read from `/proc/PID/stat`, and
//! its clean unmount. Dropped without [`Server::stop`] (an error, a signal), it still
//! unmounts, waits for the server (killing it after [`EXIT_WAIT`]) and removes the
//! image, the mount point and the log.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fs::{FileSystem, FormatOptions, Mode};
use pmem::Region;

/// How long the server may take to mount before it is killed and the run fails.
const MOUNT_WAIT: Duration = Duration::from_secs(30);
/// How long the server may take to save the image and exit after the unmount.
pub const EXIT_WAIT: Duration = Duration::from_secs(60);

/// A running `easyio mount` child serving a fresh image.
pub struct Server {
    child: Child,
    /// Whether the child has been waited for.
    reaped: bool,
    image: PathBuf,
    mountpoint: PathBuf,
    log: PathBuf,
}

/// Creates a region of `size` bytes at `image` and formats it (the region is closed,
/// and its lock released, on return).
fn format_image(image: &Path, size: u64) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(image);
    let region = Region::create(image, size).with_context(|| image.display().to_string())?;
    FileSystem::format(&region, &FormatOptions::default())?;
    Ok(())
}

impl Server {
    /// Formats a fresh image of `size` bytes and mounts it with the `easyio` binary
    /// `exe` (`easyio mount --foreground --mode MODE --threads THREADS --transport
    /// TRANSPORT`, and the `cache` flag if any: `--direct-io` or `--writeback-cache`);
    /// returns once the mount is up.
    pub fn start(
        exe: &Path,
        size: u64,
        mode: Mode,
        threads: usize,
        cache: Option<&str>,
        transport: &str,
    ) -> anyhow::Result<Server> {
        let tag = match transport {
            "dev" => format!("easyio-bench-fuse-{}", std::process::id()),
            t => format!("easyio-bench-fuse-{t}-{}", std::process::id()),
        };
        let image = PathBuf::from(format!("/dev/shm/{tag}.img"));
        let mountpoint = std::env::temp_dir().join(&tag);
        let log = std::env::temp_dir().join(format!("{tag}.log"));
        format_image(&image, size)?;
        std::fs::create_dir_all(&mountpoint)
            .with_context(|| format!("mount point {}", mountpoint.display()))?;
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("server log {}", log.display()))?;
        let child = Command::new(exe)
            .arg("mount")
            .args([&image, &mountpoint])
            .args(["--foreground", "--mode", mode.name(), "--threads"])
            .arg(threads.to_string())
            .args(["--transport", transport])
            .args(cache)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {} mount", exe.display()))?;
        let mut server = Server {
            child,
            reaped: false,
            image,
            mountpoint,
            log,
        };
        server.wait_mounted()?;
        Ok(server)
    }

    /// Waits for the server to say the mount is up, failing with its last log line
    /// if it exits first or takes longer than [`MOUNT_WAIT`].
    fn wait_mounted(&mut self) -> anyhow::Result<()> {
        let stdout = self.child.stdout.take().context("server stdout")?;
        let (tx, rx) = mpsc::channel();
        // The reader keeps draining the pipe after the first line, so that the server
        // never writes to a closed pipe.
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            let _ = r.read_to_end(&mut Vec::new());
        });
        // The server prints one line once the mount is up, or ends without one; the
        // mount table, not the line's wording, says which.
        match rx.recv_timeout(MOUNT_WAIT) {
            Ok(_) if is_mount_point(&self.mountpoint) => Ok(()),
            Ok(_) => {
                let status = self.child.wait()?;
                self.reaped = true;
                bail!(
                    "the FUSE server failed ({status}): {}",
                    self.last_log_line()
                )
            }
            Err(_) => bail!(
                "the FUSE server did not mount within {} s: {}",
                MOUNT_WAIT.as_secs(),
                self.last_log_line()
            ),
        }
    }

    /// The last line the server logged.
    fn last_log_line(&self) -> String {
        std::fs::read_to_string(&self.log)
            .ok()
            .and_then(|t| t.lines().last().map(str::to_string))
            .unwrap_or_else(|| "(nothing logged)".into())
    }

    /// Where the image is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds (user plus system, all its threads) the server has used, from
    /// `/proc/PID/stat` (in clock ticks, 10 ms on most kernels).
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .context("the FUSE server's /proc/PID/stat")?;
        proc_stat_cpu_seconds(&stat)
    }

    /// Unmounts, waits for the server to save the image and exit, and requires that
    /// it did so cleanly.
    pub fn stop(mut self) -> anyhow::Result<()> {
        unmount(&self.mountpoint)?;
        let status = self.wait_exit()?;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        if !status.success() || !log.contains("unmounted cleanly") {
            bail!(
                "the FUSE server did not end cleanly ({status}): {}",
                self.last_log_line()
            );
        }
        Ok(())
    }

    /// Waits up to [`EXIT_WAIT`] for the server to exit, then kills it.
    fn wait_exit(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait()? {
                self.reaped = true;
                return Ok(s);
            }
            if start.elapsed() > EXIT_WAIT {
                let _ = self.child.kill();
                self.child.wait()?;
                self.reaped = true;
                bail!(
                    "the FUSE server had not exited {} s after the unmount: killed",
                    EXIT_WAIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether a file system is mounted on `dir` (it is on another device than its parent).
fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev());
    match (dev(dir), dir.parent().map(dev)) {
        (Ok(d), Some(Ok(parent))) => d != parent,
        _ => false,
    }
}

/// Unmounts `mountpoint`, retrying while the kernel still holds it busy (a file just
/// closed is released asynchronously).
fn unmount(mountpoint: &Path) -> anyhow::Result<()> {
    use rustix::mount::UnmountFlags;
    let start = Instant::now();
    loop {
        match rustix::mount::unmount(mountpoint, UnmountFlags::empty()) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::BUSY) if start.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(std::io::Error::from(e))
                    .with_context(|| format!("unmounting {}", mountpoint.display()))
            }
        }
    }
}

/// User plus system seconds from the text of a `/proc/PID/stat`.
fn proc_stat_cpu_seconds(stat: &str) -> anyhow::Result<f64> {
    // The command name (field 2) may hold spaces: count fields after its ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    let ticks = |i: usize| -> anyhow::Result<u64> {
        Ok(fields
            .get(i)
            .context("short /proc/PID/stat")?
            .parse::<u64>()?)
    };
    let hz = rustix::param::clock_ticks_per_second() as f64;
    Ok((ticks(11)? + ticks(12)?) as f64 / hz)
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.reaped {
            // Lazily: the files this process still has open on it keep working; the
            // server ends once they are closed (or has already unmounted, at a
            // SIGINT that reached it too). A server that does not end is killed.
            let lazy = rustix::mount::UnmountFlags::DETACH;
            let _ = rustix::mount::unmount(&self.mountpoint, lazy);
            let _ = self.wait_exit();
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_file(&self.log);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_are_read_after_the_command_name() {
        let hz = rustix::param::clock_ticks_per_second() as f64;
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 5 0";
        let s = proc_stat_cpu_seconds(stat).unwrap();
        assert!((s - 300.0 / hz).abs() < 1e-9, "{s}");
        assert!(proc_stat_cpu_seconds("42 (x) S 1").is_err());
    }

    #[test]
    fn cpu_seconds_of_this_process_grow_with_work() {
        let read = || {
            let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
            proc_stat_cpu_seconds(&stat).unwrap()
        };
        let before = read();
        let until = Instant::now() + Duration::from_millis(120);
        let mut x = 1u64;
        while Instant::now() < until {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        assert!(read() > before, "{x}");
    }
}
