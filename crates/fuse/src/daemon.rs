//! A server's life: [`detach`] starts it in the background and waits until it has
//! mounted or failed; [`serve`] opens the image, mounts it and serves it until it is
//! unmounted (by `umount`, `fusermount3 -u`, or lazily at a stop request), then
//! unmounts the image so that the next mount needs no recovery.
//!
//! The server logs to standard error. Started by [`detach`], it says on standard
//! output when the mount is up; otherwise it prints where the image is mounted.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fs::{FileSystem, Mode, MountOptions};
use pmem::slowmem::{Model, SlowMem};
use pmem::{Pmem, Region};

use crate::control::{state_file, write_state, Error, Result};

/// Set in the environment of the background server: it prints [`READY`] on its
/// standard output once the mount is up.
const NOTIFY_ENV: &str = "EASYIO_MOUNT_NOTIFY";
/// What the background server says when the mount is up.
const READY: &str = "ready";
/// Set in the environment of the background server to the log file [`detach`] chose
/// for it: the server removes it once it has unmounted the image cleanly.
const LOG_ENV: &str = "EASYIO_MOUNT_LOG";

/// How to start a server in the background.
#[derive(Clone, Debug)]
pub struct DetachOptions {
    /// The arguments this program is run again with, to serve in the foreground.
    pub args: Vec<OsString>,
    /// The server's log file (standard error); `None`: one in the temporary directory,
    /// removed by the server once it has unmounted the image cleanly, kept when the
    /// mount or the server fails.
    pub log: Option<PathBuf>,
}

/// How a background server started.
#[derive(Debug)]
pub enum Detached {
    /// The mount is up.
    Mounted {
        /// The server's pid.
        pid: u32,
        /// Its log file.
        log: PathBuf,
    },
    /// The server failed before mounting.
    Failed {
        /// Its exit status (at least 1).
        status: i32,
        /// The last line of its log (its error) and where the log is.
        message: String,
    },
}

/// Runs this program again with `o.args` in the background, its standard error in a
/// log file and in its own process group, and waits until it has mounted or failed.
pub fn detach(o: &DetachOptions) -> Result<Detached> {
    let log = o.log.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("easyio-mount-{}.log", std::process::id()))
    });
    let log_file = std::fs::File::create(&log)
        .map_err(|e| Error::os(format!("log file {}", log.display()), e))?;
    let mut cmd = Command::new(std::env::current_exe()?);
    if o.log.is_none() {
        cmd.env(LOG_ENV, &log);
    }
    let mut child = cmd
        .args(&o.args)
        .env(NOTIFY_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        // Its own process group: a Ctrl-C meant for the shell's job does not reach it.
        .process_group(0)
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    if line.trim_end() == READY {
        // What the mount said of the image before it was up (a recovery, damage) is
        // the user's to see, not only the log's.
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for said in text.lines().filter(|l| is_about_the_image(l)) {
            eprintln!("{said}");
        }
        let pid = child.id();
        return Ok(Detached::Mounted { pid, log });
    }
    let status = child.wait()?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let last = text
        .lines()
        .last()
        .unwrap_or("the server ended without a message");
    let message = format!("{last} (server log: {})", log.display());
    let status = status.code().unwrap_or(1).max(1);
    Ok(Detached::Failed { status, message })
}

/// Whether a line of the server's log reports what mounting found in the image: a
/// recovery after a crash, or damage.
fn is_about_the_image(line: &str) -> bool {
    line.contains("was not cleanly unmounted") || line.contains("is damaged")
}

/// What to serve, where and how.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The image (a region file or a devdax device).
    pub image: PathBuf,
    /// The mount point (absolute, as [`crate::check_mountpoint`] returns it).
    pub mountpoint: PathBuf,
    /// Who moves file data.
    pub mode: Mode,
    /// Mount read-only: nothing is written to the image.
    pub read_only: bool,
    /// Slow-memory emulation: every copy into or out of the image takes as long as
    /// this model of a slow medium says (labelled EMULATED in the log and the output).
    pub slowmem: Option<Model>,
    /// How to mount (threads, read-only, `-o` options).
    pub mount: crate::Options,
    /// Polled while serving: true asks for a lazy unmount (the mount point is free at
    /// once and the server ends once the last file open on it is closed).
    pub stop_requested: fn() -> bool,
}

/// Mounts the image and serves it until it is unmounted, then unmounts the image.
pub fn serve(o: &ServeOptions) -> Result<()> {
    let fs = Arc::new(open_image(&o.image, o.mode, o.read_only, o.slowmem)?);
    let m = crate::Mount::new(fs.clone(), &o.mountpoint, &o.mount)
        .map_err(|e| Error::os(format!("mounting on {}", o.mountpoint.display()), e))?;
    if let Some(line) = m.dirty_limit() {
        eprintln!("easyio: {line}");
    }
    let state = state_file(&o.mountpoint);
    if let Err(e) = write_state(&state, std::process::id(), &o.image) {
        eprintln!(
            "easyio: warning: {}: {e}; `easyio umount` will not wait for this server",
            state.display()
        );
    }
    let handler_stats = m.handler_stats();
    let ring_stats = m.ring_stats();
    let announcer = announce_when_ready(o, m.transport(), ring_stats.clone());
    let inval = m.invalidator();
    let done = Arc::new(AtomicBool::new(false));
    let watcher = watch_stop(o, done.clone());
    let served = m.run();
    let _ = announcer.join();
    done.store(true, Ordering::SeqCst);
    if let Some(h) = handler_stats {
        eprintln!("easyio: {}", h.summary());
    }
    if let Some(r) = ring_stats {
        eprintln!(
            "easyio: requests served through the io_uring queues: {}",
            r.requests()
        );
    }
    let sent = inval.stats();
    eprintln!(
        "easyio: invalidations sent to the kernel: {} inodes, {} entries",
        sent.inodes, sent.entries
    );
    let _ = watcher.join();
    let _ = std::fs::remove_file(&state);
    served.map_err(|e| Error::os("serving FUSE requests".into(), e))?;
    let fs = Arc::try_unwrap(fs).map_err(|_| Error::StillHeld)?;
    fs.unmount().map_err(|source| Error::Fs {
        what: "unmounting the image".into(),
        source,
    })?;
    eprintln!("easyio: {} unmounted cleanly", o.image.display());
    // Nothing in the log is needed any more: a log chosen for the user goes.
    if let Some(log) = std::env::var_os(LOG_ENV) {
        let _ = std::fs::remove_file(log);
    }
    Ok(())
}

/// Longest the mount waits for its io_uring queues before saying it is up (requests
/// come through `/dev/fuse` until they are registered).
const RING_WAIT: Duration = Duration::from_secs(2);

/// Says that the mount is up ([`announce`]) once its io_uring queues, if it has any,
/// are registered (or after [`RING_WAIT`]), so that the first programs on the mount
/// are served through the rings.
fn announce_when_ready(
    o: &ServeOptions,
    transport: String,
    ring: Option<Arc<crate::RingStats>>,
) -> std::thread::JoinHandle<()> {
    let o = o.clone();
    std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        while ring.as_ref().is_some_and(|r| !r.ready()) && t0.elapsed() < RING_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        announce(&o, &transport);
    })
}

/// Says that the mount is up: in the log, and to [`detach`] or the user.
fn announce(o: &ServeOptions, transport: &str) {
    eprintln!(
        "easyio: serving {} on {} ({})",
        o.image.display(),
        o.mountpoint.display(),
        describe(o, transport)
    );
    if std::env::var_os(NOTIFY_ENV).is_some() {
        println!("{READY}");
    } else {
        println!(
            "easyio: {} mounted on {}{}",
            o.image.display(),
            o.mountpoint.display(),
            label(o.slowmem)
        );
    }
}

/// How the server runs, for its log: mode, threads, handlers, slow memory, cache,
/// transport.
fn describe(o: &ServeOptions, transport: &str) -> String {
    let mut s = format!("mode {}", o.mode);
    if !transport.contains("io_uring (") {
        s += &format!(", {} threads", o.mount.threads);
    }
    if o.mount.uthread_workers > 0 {
        s += &format!(
            ", reads/writes/fsyncs as uthreads on {} workers",
            o.mount.uthread_workers
        );
    }
    if let Some(m) = o.slowmem {
        s += &format!(", slowmem {} EMULATED", m.name);
    }
    if o.mount.writeback_cache() {
        s += ", kernel writeback cache: a returned write is durable only after fsync or close";
    }
    s += &format!(
        ", entries and attributes cached by the kernel {} s, {}",
        crate::ENTRY_TTL.as_secs(),
        transport
    );
    s
}

/// Which transport a mount of this machine serves through by default (`--transport
/// auto`): FUSE over io_uring where the kernel offers it, `/dev/fuse` otherwise.
pub fn transport() -> String {
    match crate::kernel_offers_uring() {
        Some(true) => format!("transport FUSE over io_uring ({})", uring_note(Some(true))),
        other => format!("transport /dev/fuse ({})", uring_note(other)),
    }
}

/// What the log says of FUSE over io_uring, given the module's switch (`None`: the
/// kernel has none).
pub(crate) fn uring_note(enable_uring: Option<bool>) -> &'static str {
    match enable_uring {
        Some(true) => "the kernel offers it: one queue per CPU",
        Some(false) => {
            "FUSE over io_uring is off in the kernel: as root, echo Y > /sys/module/fuse/parameters/enable_uring"
        }
        None => "the kernel has no FUSE over io_uring",
    }
}

/// What `easyio mount`'s output line adds for slow-memory emulation.
pub fn label(slowmem: Option<Model>) -> String {
    slowmem
        .map(|m| format!(" (slowmem {} EMULATED)", m.name))
        .unwrap_or_default()
}

/// Opens and mounts `image` (read-only if asked, through the slow-memory model if
/// one is given), saying on standard error when recovery had work to do or the
/// image is damaged (then mounted read-only).
pub fn open_image(
    image: &Path,
    mode: Mode,
    read_only: bool,
    slowmem: Option<Model>,
) -> Result<FileSystem> {
    let region = if read_only {
        Region::open_read_only(image)?
    } else {
        Region::open(image)?
    };
    let pm: Arc<dyn Pmem> = match slowmem {
        Some(model) => Arc::new(SlowMem::new(Arc::new(region), model)),
        None => Arc::new(region),
    };
    let mut opts = MountOptions {
        read_only,
        ..MountOptions::with_mode(mode)
    };
    // The mover routes `async` copies by the medium's speeds (see `mover::Config`).
    opts.mover.medium = slowmem;
    let (fs, report) = FileSystem::mount(pm, opts).map_err(|source| Error::Fs {
        what: format!("mounting {}", image.display()),
        source,
    })?;
    if !report.damage.is_empty() {
        eprintln!(
            "easyio: warning: {} is damaged ({} problem(s), first: {}); mounted read-only",
            image.display(),
            report.damage.len(),
            report.damage[0]
        );
    } else if !report.clean && !report.read_only {
        eprintln!(
            "easyio: {} was not cleanly unmounted; recovered in {} µs",
            image.display(),
            report.mount_us
        );
    }
    Ok(fs)
}

/// Unmounts lazily once `o.stop_requested` says so, until `done`.
fn watch_stop(o: &ServeOptions, done: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (mountpoint, stop) = (o.mountpoint.clone(), o.stop_requested);
    std::thread::spawn(move || {
        while !done.load(Ordering::SeqCst) {
            if stop() {
                if let Err(e) = crate::unmount(&mountpoint, true) {
                    eprintln!("easyio: unmounting {}: {e}", mountpoint.display());
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_says_whether_the_kernel_offers_fuse_over_io_uring() {
        assert!(uring_note(Some(true)).contains("offers"));
        assert!(uring_note(Some(false)).contains("off"));
        assert!(uring_note(None).contains("no FUSE over io_uring"));
        let expected = match crate::kernel_offers_uring() {
            Some(true) => "transport FUSE over io_uring (",
            _ => "transport /dev/fuse (",
        };
        assert!(transport().starts_with(expected));
    }
}
