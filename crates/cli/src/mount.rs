//! `easyio mount` and `easyio umount`: an image served through FUSE to every program
//! on the machine (the server is the `easyio-fuse` crate).
//!
//! `mount` checks what it can first (`/dev/fuse`, the mount point), then, unless
//! `--foreground`, starts itself again in the background with `--foreground`, its
//! standard error in a log file, and waits until that server has mounted (printing
//! where it logs) or failed (printing its one-line error and exiting with its status).
//! The server ends when the file system is unmounted — `easyio umount`, `umount`,
//! `fusermount3 -u` — or at SIGINT/SIGTERM (a lazy unmount: it ends once no file is
//! open); then it unmounts the image as every command does, so the next mount needs
//! no recovery. `umount` waits for the server to finish that.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use fs::{FileSystem, Mode, MountOptions};
use pmem::{Pmem, Region};

use crate::signals;

/// Set in the environment of the background server: it prints [`READY`] on its
/// standard output once the mount is up.
const NOTIFY_ENV: &str = "EASYIO_MOUNT_NOTIFY";
/// What the background server says when the mount is up.
const READY: &str = "ready";
/// How long `umount` waits for the server to save the image and exit.
const SERVER_EXIT_WAIT: Duration = Duration::from_secs(60);

#[derive(Args)]
pub struct MountArgs {
    /// The image (a region file, e.g. in /dev/shm, or a devdax device).
    image: PathBuf,
    /// An existing empty directory to mount on.
    mountpoint: PathBuf,
    /// Stay in the foreground, logging to standard error.
    #[arg(short, long)]
    foreground: bool,
    /// Mount options, comma-separated (allow_other, allow_root, ro, nosuid, nodev,
    /// noexec, noatime, fsname=..., subtype=...); default_permissions is always on.
    #[arg(short = 'o', value_name = "OPTS")]
    options: Vec<String>,
    /// Who moves file data.
    #[arg(long, default_value = "cpu")]
    mode: Mode,
    /// Mount read-only: nothing is written to the image.
    #[arg(long)]
    read_only: bool,
    /// Threads serving requests.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Log file of the background server (default: one in the temporary directory).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
}

#[derive(Args)]
pub struct UmountArgs {
    /// Where an image is mounted.
    mountpoint: PathBuf,
}

/// `easyio mount`.
pub fn mount(a: MountArgs) -> anyhow::Result<()> {
    let mountpoint = check_mountpoint(&a.mountpoint)?;
    if !Path::new("/dev/fuse").exists() {
        let what = "no /dev/fuse: the kernel's fuse module is not loaded (modprobe fuse)";
        return Err(errno(libc::ENODEV, what.into()));
    }
    // The mount opens /dev/fuse itself and turns to fusermount3 only when mount(2) is
    // refused, not when the device is: say so now rather than after detaching.
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return Err(anyhow::Error::new(e).context(
            "cannot open /dev/fuse (mount as root, or make it readable and writable by all, \
             as distributions do)",
        ));
    }
    if !a.foreground {
        return detach(&a, &mountpoint);
    }
    serve(&a, &mountpoint)
}

/// The mount point, made absolute: an existing directory that is not a mount already.
fn check_mountpoint(p: &Path) -> anyhow::Result<PathBuf> {
    let meta = std::fs::metadata(p).with_context(|| format!("mount point {}", p.display()))?;
    if !meta.is_dir() {
        return Err(errno(libc::ENOTDIR, format!("mount point {}", p.display())));
    }
    let abs = p.canonicalize()?;
    if mount_of(&abs)?.is_some() {
        let what = format!("{} is already a mount point", abs.display());
        return Err(errno(libc::EBUSY, what));
    }
    Ok(abs)
}

/// An error saying `what`, exiting with `code` (an errno).
fn errno(code: i32, what: String) -> anyhow::Error {
    anyhow::Error::new(std::io::Error::from_raw_os_error(code)).context(what)
}

/// The file system type of the mount at exactly `p` (absolute, canonical), if any.
fn mount_of(p: &Path) -> anyhow::Result<Option<String>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let want = p.to_string_lossy();
    // Fields: id parent major:minor root mountpoint options [optional...] - fstype ...
    Ok(info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let at = unescape(f.get(4)?);
        let dash = f.iter().position(|x| *x == "-")?;
        (at == want).then(|| f.get(dash + 1).unwrap_or(&"").to_string())
    }))
}

/// A mountinfo path: spaces, tabs, newlines and backslashes are octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(u8::is_ascii_digit));
        match oct {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Starts the server in the background and waits until it has mounted or failed.
fn detach(a: &MountArgs, mountpoint: &Path) -> anyhow::Result<()> {
    let log = a.log.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("easyio-mount-{}.log", std::process::id()))
    });
    let log_file =
        std::fs::File::create(&log).with_context(|| format!("log file {}", log.display()))?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(std::env::args_os().skip(1))
        .arg("--foreground")
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
        println!(
            "easyio: {} mounted on {} (server pid {}, log {})",
            a.image.display(),
            mountpoint.display(),
            child.id(),
            log.display()
        );
        return Ok(());
    }
    let status = child.wait()?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let last = text
        .lines()
        .last()
        .unwrap_or("the server ended without a message");
    eprintln!("{last}");
    if a.log.is_none() {
        let _ = std::fs::remove_file(&log);
    }
    std::process::exit(status.code().unwrap_or(1).max(1));
}

/// Where the server of a mount point records its pid and image, for `umount`.
fn state_file(mountpoint: &Path) -> PathBuf {
    let name: String = mountpoint
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '%' } else { c })
        .collect();
    std::env::temp_dir().join("easyio-mounts").join(name)
}

/// Records this server's pid and image where `umount` looks for them.
fn write_state(state: &Path, image: &Path) -> std::io::Result<()> {
    if let Some(dir) = state.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(
        state,
        format!("{}\n{}\n", std::process::id(), image.display()),
    )
}

/// Mounts the image and serves it until it is unmounted.
fn serve(a: &MountArgs, mountpoint: &Path) -> anyhow::Result<()> {
    let fs = Arc::new(open_image(a)?);
    let opts = easyio_fuse::Options {
        threads: a.threads,
        read_only: a.read_only,
        extra: a
            .options
            .iter()
            .flat_map(|o| easyio_fuse::parse_options(o))
            .collect(),
    };
    let m = easyio_fuse::Mount::new(fs.clone(), mountpoint, &opts)
        .with_context(|| format!("mounting on {}", mountpoint.display()))?;
    let state = state_file(mountpoint);
    if let Err(e) = write_state(&state, &a.image) {
        eprintln!(
            "easyio: warning: {}: {e}; `easyio umount` will not wait for this server",
            state.display()
        );
    }
    eprintln!(
        "easyio: serving {} on {} (mode {}, {} threads)",
        a.image.display(),
        mountpoint.display(),
        a.mode,
        a.threads
    );
    if std::env::var_os(NOTIFY_ENV).is_some() {
        println!("{READY}");
    } else {
        println!(
            "easyio: {} mounted on {}",
            a.image.display(),
            mountpoint.display()
        );
    }
    let done = Arc::new(AtomicBool::new(false));
    let watcher = watch_signals(mountpoint.to_path_buf(), done.clone());
    let served = m.run();
    done.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    let _ = std::fs::remove_file(&state);
    served.context("serving FUSE requests")?;
    let fs = Arc::try_unwrap(fs).map_err(|_| anyhow!("the server still holds the file system"))?;
    fs.unmount().context("unmounting the image")?;
    eprintln!("easyio: {} unmounted cleanly", a.image.display());
    Ok(())
}

/// Opens and mounts the image as `a` says, saying when recovery had work to do.
fn open_image(a: &MountArgs) -> anyhow::Result<FileSystem> {
    let region = if a.read_only {
        Region::open_read_only(&a.image)?
    } else {
        Region::open(&a.image)?
    };
    let pm: Arc<dyn Pmem> = Arc::new(region);
    let opts = MountOptions {
        read_only: a.read_only,
        ..MountOptions::with_mode(a.mode)
    };
    let (fs, report) =
        FileSystem::mount(pm, opts).with_context(|| format!("mounting {}", a.image.display()))?;
    if !report.damage.is_empty() {
        eprintln!(
            "easyio: warning: {} is damaged ({} problem(s), first: {}); mounted read-only",
            a.image.display(),
            report.damage.len(),
            report.damage[0]
        );
    } else if !report.clean && !report.read_only {
        eprintln!(
            "easyio: {} was not cleanly unmounted; recovered in {} µs",
            a.image.display(),
            report.mount_us
        );
    }
    Ok(fs)
}

/// At SIGINT or SIGTERM, unmounts lazily: the mount point is free at once and the
/// server ends once the last file open on it is closed.
fn watch_signals(mountpoint: PathBuf, done: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !done.load(Ordering::SeqCst) {
            if matches!(signals::received(), Some(libc::SIGINT | libc::SIGTERM)) {
                if let Err(e) = easyio_fuse::unmount(&mountpoint, true) {
                    eprintln!("easyio: unmounting {}: {e}", mountpoint.display());
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

/// `easyio umount`: unmounts, then waits for the server to save the image.
pub fn umount(a: UmountArgs) -> anyhow::Result<()> {
    let mp = a
        .mountpoint
        .canonicalize()
        .with_context(|| format!("mount point {}", a.mountpoint.display()))?;
    match mount_of(&mp)? {
        Some(t) if t == "fuse" || t.starts_with("fuse.") => {}
        Some(t) => bail!("{} is a {t} mount, not a FUSE mount", mp.display()),
        None => {
            let what = format!("{} is not a mount point", mp.display());
            return Err(errno(libc::EINVAL, what));
        }
    }
    let state = state_file(&mp);
    let pid = std::fs::read_to_string(&state)
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.parse::<u32>().ok()));
    easyio_fuse::unmount(&mp, false).with_context(|| format!("unmounting {}", mp.display()))?;
    let Some(pid) = pid else { return Ok(()) };
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && is_server(pid) {
        if t0.elapsed() > SERVER_EXIT_WAIT {
            bail!(
                "the server (pid {pid}) has not exited {} s after the unmount",
                SERVER_EXIT_WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Whether process `pid` is still an easyio server (not a zombie, not a reused pid).
fn is_server(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next());
    stat.contains("(easyio") && !matches!(state, Some("Z" | "X") | None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/x\\134y"), "/x\\y");
    }
}
