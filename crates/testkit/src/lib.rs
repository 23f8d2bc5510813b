//! What the tests of every crate share, and only the tests: this crate is a
//! dev-dependency of the others, never a normal one.
//!
//! - [`Running`], [`run`] and [`run_ok`]: a child process with a time limit. Its
//!   standard output and error are read while it runs (a chatty child never blocks on a
//!   full pipe); past the limit it is killed and the test fails naming the command and
//!   what it printed so far; a test that panics leaves no child running.
//!   [`child_half`]: this test program run again on the half of a test that needs a
//!   process of its own.
//! - [`pattern`]: the bytes a test writes, one function with one argument order.
//! - [`skip`] (and [`missing`], [`fuse_missing`], [`not_root`]): a test that cannot
//!   run here (no `/dev/fuse`, not root, a program missing) says so and returns, except
//!   under CI (the variable `CI` set), where that is a failure: a skipped test in CI
//!   never passes green.
//! - [`SmallTmpfs`]: a host file system that fills up (mounting it needs root).
//! - [`Watchdog`]: ends a test that hangs on a mount or a server.
//! - [`preload_shim`] (the shim built beside the test) and [`unwritten_pages`] (the
//!   page cache's dirty pages of a file).
//!
//! What it must not do: depend on any easyio crate (every crate's tests use it, `pmem`'s
//! included), or hold a test's logic: only the plumbing the tests repeat.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

mod host;
mod watchdog;

pub use host::{preload_shim, unwritten_pages};
pub use watchdog::Watchdog;

use std::fmt::Display;
use std::io::Read;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

/// This test program run again on its test `name` alone, ignored ones included, its
/// output not captured: the child half of a test that needs a process of its own. The
/// half is `#[ignore]` (with a reason naming its parent), so that a plain run does not
/// run it by itself.
pub fn child_half(name: &str) -> Command {
    let exe = std::env::current_exe().expect("the path of this test program");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--ignored",
        "--exact",
        name,
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd
}

/// Whether the tests run under CI: the variable `CI` set to anything but empty, `0`
/// or `false` (CI services set it to `true`; `.ci/run` sets it).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Says why a test cannot run here, for the caller to return after; under CI
/// ([`in_ci`]) it fails the test instead, so that a skip is never a pass there.
///
/// ```
/// if !std::path::Path::new("/").exists() {
///     testkit::skip("no root directory");
///     return;
/// }
/// ```
#[track_caller]
pub fn skip(why: impl Display) {
    assert!(
        !in_ci(),
        "this test cannot run here, and under CI a skip is a failure: {why}"
    );
    eprintln!("skipped: {why}");
}

/// Whether `path` is missing, skipping the test ([`skip`]) if it is: `what` names it
/// and how to get it.
#[track_caller]
pub fn missing(path: &str, what: &str) -> bool {
    if std::path::Path::new(path).exists() {
        return false;
    }
    skip(format_args!("no {path} here ({what})"));
    true
}

/// Whether the kernel's FUSE device is missing, skipping the test ([`skip`]) if it is.
#[track_caller]
pub fn fuse_missing() -> bool {
    missing(
        "/dev/fuse",
        "load the fuse module; fusermount3 is in Debian's fuse3",
    )
}

/// Whether the test runs without root, skipping it ([`skip`]) if so: `needs` says
/// what the test needs root for.
#[track_caller]
pub fn not_root(needs: &str) -> bool {
    // SAFETY: geteuid(2) reads the caller's effective user id; no memory is touched.
    if unsafe { libc::geteuid() } == 0 {
        return false;
    }
    skip(format_args!("needs root ({needs})"));
    true
}

/// A tmpfs of a given size mounted on a fresh directory, unmounted and removed on
/// drop: a host file system that fills up. Mounting needs root.
#[derive(Debug)]
pub struct SmallTmpfs(PathBuf);

impl SmallTmpfs {
    /// Mounts a tmpfs of `size` (`mount -o size=`, as `8m`) on a directory named after
    /// `tag`; `None`, the test skipped ([`skip`]), where it cannot be mounted.
    #[track_caller]
    pub fn mount(tag: &str, size: &str) -> Option<SmallTmpfs> {
        let dir = std::env::temp_dir().join(format!("easyio-small-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output();
        let why = match out {
            Ok(o) if o.status.success() => return Some(SmallTmpfs(dir)),
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        let _ = std::fs::remove_dir(&dir);
        skip(format_args!(
            "cannot mount a small tmpfs ({why}); run as root to test a full host file system"
        ));
        None
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// `name` on the file system.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Bytes in use on the file system (as `df` says).
    pub fn used(&self) -> u64 {
        let out = Command::new("df")
            .args(["--output=used", "-B1"])
            .arg(&self.0)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines().nth(1).unwrap().trim().parse().unwrap()
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `len` bytes that differ from `seed` to `seed` and from position to position, each
/// in `1..=0x7F`: never zero (bytes never written, which read as zero, are told apart)
/// and never a byte of `0x80` or above (fill a buffer with one, such as [`POISON`], to
/// see which bytes a copy did not reach). A longer pattern of the same seed starts
/// with the shorter one.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = seed;
    while out.len() < len {
        // splitmix64: a well-mixed word per step.
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend(z.to_le_bytes().map(|b| b % 0x7F + 1));
    }
    out.truncate(len);
    out
}

/// A byte [`pattern`] never holds.
pub const POISON: u8 = 0xA5;

/// A child process killed (and reaped) on drop: a test that fails or panics leaves
/// nothing running. Derefs to the [`Child`].
#[derive(Debug)]
pub struct Running(pub Child);

impl Running {
    /// Starts `cmd` with its standard input empty and its output and error piped, for
    /// [`Running::output`] to read.
    #[track_caller]
    pub fn spawn(cmd: &mut Command) -> Running {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        Running(child)
    }

    /// Waits for the child to exit within `limit`; past it, kills it and fails.
    /// (Named so as not to hide [`Child::wait`], which waits without a limit.)
    #[track_caller]
    pub fn wait_for(&mut self, limit: Duration) -> ExitStatus {
        wait(&mut self.0, limit)
    }

    /// Reads what the child prints while waiting for it to exit within `limit`
    /// ([`output`]).
    #[track_caller]
    pub fn output(mut self, limit: Duration) -> Output {
        output(&mut self.0, limit)
    }
}

/// Reads what `child` prints (the streams left piped) while waiting for it to exit
/// within `limit`; past it, kills it and fails with what it printed so far. A process
/// it started that keeps its output open past the limit fails too.
#[track_caller]
pub fn output(child: &mut Child, limit: Duration) -> Output {
    let start = Instant::now();
    let out = Drain::start(child.stdout.take());
    let err = Drain::start(child.stderr.take());
    let id = child.id();
    let status = child
        .wait_timeout(limit)
        .unwrap_or_else(|e| panic!("waiting for process {id}: {e}"));
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "process {id} still running after {limit:?}: killed\nstdout:\n{}\nstderr:\n{}",
            out.so_far(),
            err.so_far()
        );
    };
    let deadline = start + limit;
    let (stdout, stderr) = match (out.finish(deadline), err.finish(deadline)) {
        (Some(o), Some(e)) => (o, e),
        _ => panic!(
            "process {id} exited ({status}), but a process it started still holds its \
             output open after {limit:?}\nstdout:\n{}\nstderr:\n{}",
            out.so_far(),
            err.so_far()
        ),
    };
    Output {
        status,
        stdout,
        stderr,
    }
}

/// A thread reading a stream to its end into a buffer the test can look at meanwhile.
struct Drain {
    buf: Arc<Mutex<Vec<u8>>>,
    done: Receiver<()>,
}

impl Drain {
    fn start(stream: Option<impl Read + Send + 'static>) -> Drain {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let (tx, done) = mpsc::channel();
        let filled = Arc::clone(&buf);
        match stream {
            Some(mut r) => {
                std::thread::spawn(move || {
                    let mut chunk = [0u8; 1 << 16];
                    while let Ok(n @ 1..) = r.read(&mut chunk) {
                        filled.lock().unwrap().extend_from_slice(&chunk[..n]);
                    }
                    let _ = tx.send(());
                });
            }
            None => drop(tx),
        }
        Drain { buf, done }
    }

    /// Everything read, once the stream ends by `deadline`.
    fn finish(&self, deadline: Instant) -> Option<Vec<u8>> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.done.recv_timeout(left.max(Duration::from_millis(100))) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                Some(std::mem::take(&mut *self.buf.lock().unwrap()))
            }
            Err(RecvTimeoutError::Timeout) => None,
        }
    }

    /// What was read so far, as text.
    fn so_far(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap()).into_owned()
    }
}

impl Deref for Running {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `child` to exit within `limit`; past it, kills it and fails.
#[track_caller]
pub fn wait(child: &mut Child, limit: Duration) -> ExitStatus {
    match child.wait_timeout(limit) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "process {} still running after {limit:?}: killed",
                child.id()
            );
        }
        Err(e) => panic!("waiting for process {}: {e}", child.id()),
    }
}

/// Runs `cmd` to completion within `limit` ([`Running::output`]): its exit status and
/// everything it printed.
#[track_caller]
pub fn run(cmd: &mut Command, limit: Duration) -> Output {
    Running::spawn(cmd).output(limit)
}

/// Runs `cmd` within `limit`, failing with its output unless it exits with 0; returns
/// its standard output.
#[track_caller]
pub fn run_ok(cmd: &mut Command, limit: Duration) -> String {
    let what = format!("{cmd:?}");
    let out = run(cmd, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Fails the test if `program` is not on the `PATH`, naming the Debian package that
/// has it (the tests run real programs; `scripts/test-deps.sh` installs them).
#[track_caller]
pub fn need(program: &str, package: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "`{program}` is missing: install the Debian package `{package}` (apt-get install -y {package})"
    );
}

/// The checked-in corpus directory of the cargo-fuzz target `target`.
pub fn fuzz_corpus(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// Every input of `target`'s checked-in corpus, with its file name, sorted by name (the
/// stable tests replay them without a fuzzer).
pub fn fuzz_seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_corpus(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus of {target} ({}): {e}", dir.display()))
        .map(|f| {
            let f = f.unwrap();
            let input = std::fs::read(f.path()).unwrap();
            (f.file_name().to_string_lossy().into_owned(), input)
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_has_one_order_and_no_zero_or_poison() {
        let a = pattern(1, 10_000);
        assert_eq!(a.len(), 10_000);
        assert!(a.iter().all(|&b| (1..0x80).contains(&b)));
        assert_eq!(&pattern(1, 37)[..], &a[..37]);
        assert_ne!(pattern(2, 64), a[..64]);
        assert!(pattern(0, 0).is_empty());
    }

    #[test]
    fn a_skip_fails_under_ci_only() {
        // The variable is read by a child (this program again), not set in this one:
        // the tests of this program run in threads that read the environment.
        let skipped = |ci: &str| {
            let mut cmd = child_half("tests::skip_of_a_missing_path");
            cmd.env("CI", ci);
            run(&mut cmd, Duration::from_secs(60))
        };
        let out = skipped("");
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("skipped: no /no/such/path"));
        let out = skipped("true");
        assert!(!out.status.success(), "{out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("under CI a skip is a failure"), "{said}");
    }

    #[test]
    #[ignore = "run by a_skip_fails_under_ci_only, with and without CI"]
    fn skip_of_a_missing_path() {
        assert!(missing("/no/such/path", "a path that is never there"));
        assert!(!missing("/", "the root directory"));
    }

    #[test]
    fn a_child_is_drained_while_it_runs() {
        // More than a pipe holds (64 KiB) on both streams before it exits.
        let out = run(
            Command::new("sh").args([
                "-c",
                "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2; exit 3",
            ]),
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(3));
        assert_eq!((out.stdout.len(), out.stderr.len()), (300_000, 200_000));
        assert_eq!(
            run_ok(Command::new("echo").arg("hi"), Duration::from_secs(30)),
            "hi\n"
        );
    }

    #[test]
    fn a_child_past_its_limit_is_killed_and_fails() {
        let started = std::time::Instant::now();
        let r = std::panic::catch_unwind(|| {
            run(
                Command::new("sh").args(["-c", "echo said; exec sleep 60"]),
                Duration::from_millis(300),
            )
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(
            msg.contains("still running after") && msg.contains("said"),
            "{msg}"
        );
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_failing_child_fails_run_ok_with_its_output() {
        let r = std::panic::catch_unwind(|| {
            run_ok(
                Command::new("sh").args(["-c", "echo oops >&2; exit 1"]),
                Duration::from_secs(30),
            )
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("oops"), "{msg}");
    }

    #[test]
    fn a_grandchild_holding_the_output_fails_too() {
        let r = std::panic::catch_unwind(|| {
            run(
                Command::new("sh").args(["-c", "echo left; sleep 3 & exit 0"]),
                Duration::from_millis(500),
            )
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(
            msg.contains("still holds its output") && msg.contains("left"),
            "{msg}"
        );
    }
}
