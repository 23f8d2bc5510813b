//! What surrounds a server: the checks before mounting, the kernel's mount table, the
//! state file through which `umount` finds the server, and the wait for its exit.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long [`umount`] waits for the server to save the image and exit.
pub const SERVER_EXIT_WAIT: Duration = Duration::from_secs(60);

/// Why mounting, serving or unmounting failed. [`Error::errno`] is the status a
/// command exits with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// `what` failed with the system error in `source`.
    #[error("{what}")]
    Os {
        /// What was being done, or what was wrong.
        what: String,
        /// The system error, whose errno is the exit status.
        #[source]
        source: io::Error,
    },
    /// The image could not be opened.
    #[error(transparent)]
    Region(#[from] pmem::Error),
    /// The file system on the image failed to mount or to unmount.
    #[error("{what}")]
    Fs {
        /// What was being done.
        what: String,
        /// The file system's error.
        #[source]
        source: fs::Error,
    },
    /// `umount` of a mount that is not FUSE's.
    #[error("{} is a {fstype} mount, not a FUSE mount", .mountpoint.display())]
    NotFuse {
        /// The mount point.
        mountpoint: PathBuf,
        /// Its file system type.
        fstype: String,
    },
    /// The server did not exit within [`SERVER_EXIT_WAIT`] of the unmount.
    #[error("the server (pid {pid}) has not exited {} s after the unmount", SERVER_EXIT_WAIT.as_secs())]
    ServerStuck {
        /// The server's pid.
        pid: u32,
    },
    /// The FUSE session ended but still holds the file system.
    #[error("the server still holds the file system")]
    StillHeld,
}

impl Error {
    /// `what` failing with errno `code`.
    pub fn errno_of(code: i32, what: String) -> Error {
        Error::Os {
            what,
            source: io::Error::from_raw_os_error(code),
        }
    }

    /// `what` failing with the system error `source`.
    pub fn os(what: String, source: io::Error) -> Error {
        Error::Os { what, source }
    }

    /// The errno this error stands for, if it has one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io(e) | Error::Os { source: e, .. } => e.raw_os_error(),
            Error::Region(e) => Some(e.errno()),
            Error::Fs { source, .. } => Some(source.errno()),
            Error::NotFuse { .. } | Error::ServerStuck { .. } | Error::StillHeld => None,
        }
    }
}

/// A result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Checks that FUSE can be used here: `/dev/fuse` exists and can be opened.
pub fn check_fuse_device() -> Result<()> {
    if !Path::new("/dev/fuse").exists() {
        let what = "no /dev/fuse: the kernel's fuse module is not loaded (modprobe fuse)";
        return Err(Error::errno_of(libc::ENODEV, what.into()));
    }
    // The mount opens /dev/fuse itself and turns to fusermount3 only when mount(2) is
    // refused, not when the device is: say so before anything else is done.
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| Error::os(fuse_device_refusal(), e))?;
    // Only root may mount(2); anyone else mounts through the setuid fusermount3.
    if !is_root() && !on_path("fusermount3") {
        let what = "a user who is not root mounts through fusermount3, which is not \
                    installed (Debian package fuse3)";
        return Err(Error::errno_of(libc::ENOENT, what.into()));
    }
    Ok(())
}

/// Whether this process runs as root (its `/proc/self` belongs to its effective uid).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Whether `prog` is an executable file in a directory of `PATH`.
fn on_path(prog: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            std::fs::metadata(d.join(prog))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Why `/dev/fuse` cannot be opened by this user, in one line: its mode and owner, and
/// that `fusermount3` is no way around it (it opens the device as the calling user).
fn fuse_device_refusal() -> String {
    use std::os::unix::fs::MetadataExt;
    let how = std::fs::metadata("/dev/fuse")
        .map(|m| format!("mode {:04o}, owner uid {}", m.mode() & 0o7777, m.uid()))
        .unwrap_or_else(|_| "mode unknown".into());
    format!(
        "cannot open /dev/fuse ({how}): only a user who may read and write it can mount, \
         through fusermount3 too (mount as root, or give /dev/fuse mode 0666, as \
         distributions ship it)"
    )
}

/// The mount point, made absolute: an existing directory that is not a mount already.
pub fn check_mountpoint(p: &Path) -> Result<PathBuf> {
    let what = || format!("mount point {}", p.display());
    let meta = std::fs::metadata(p).map_err(|e| stale_or(p, e, what()))?;
    if !meta.is_dir() {
        return Err(Error::errno_of(libc::ENOTDIR, what()));
    }
    let abs = p.canonicalize()?;
    if mount_of(&abs)?.is_some() {
        let what = format!("{} is already a mount point", abs.display());
        return Err(Error::errno_of(libc::EBUSY, what));
    }
    Ok(abs)
}

/// The file system type of the mount at exactly `p` (absolute, canonical), if any.
pub fn mount_of(p: &Path) -> Result<Option<String>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(find_mount(&info, &p.to_string_lossy()))
}

/// The file system type of the last mount at `want` in mountinfo text `info`.
fn find_mount(info: &str, want: &str) -> Option<String> {
    // Fields: id parent major:minor root mountpoint options [optional...] - fstype ...
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let at = unescape(f.get(4)?);
        let dash = f.iter().position(|x| *x == "-")?;
        (at == want).then(|| f.get(dash + 1).unwrap_or(&"").to_string())
    })
}

/// The device number (`major:minor`) of the last mount at `p` (as given, not
/// resolved: resolving a FUSE mount point would ask its server), from the kernel's
/// mount table.
pub(crate) fn device_of(p: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    find_device(&info, &p.to_string_lossy())
}

/// The device number of the last mount at `want` in mountinfo text `info`.
fn find_device(info: &str, want: &str) -> Option<String> {
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (unescape(f.get(4)?) == want).then(|| f.get(2).map(|d| d.to_string()))?
    })
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

/// Where the server of a mount point records its pid and image, for [`umount`].
pub fn state_file(mountpoint: &Path) -> PathBuf {
    state_file_in(&std::env::temp_dir(), mountpoint)
}

/// [`state_file`] under the temporary directory `tmp`.
fn state_file_in(tmp: &Path, mountpoint: &Path) -> PathBuf {
    let name: String = mountpoint
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '%' } else { c })
        .collect();
    tmp.join("easyio-mounts").join(name)
}

/// Records server `pid` and its image in `state`.
pub fn write_state(state: &Path, pid: u32, image: &Path) -> io::Result<()> {
    if let Some(dir) = state.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(state, format!("{pid}\n{}\n", image.display()))
}

/// The server pid recorded in `state`, if it can be read.
pub fn read_state(state: &Path) -> Option<u32> {
    std::fs::read_to_string(state)
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.parse::<u32>().ok()))
}

/// Unmounts the FUSE mount at `mountpoint`, then waits (up to [`SERVER_EXIT_WAIT`])
/// for its server to save the image and exit.
pub fn umount(mountpoint: &Path) -> Result<()> {
    let mp = mountpoint.canonicalize().map_err(|e| {
        stale_or(
            mountpoint,
            e,
            format!("mount point {}", mountpoint.display()),
        )
    })?;
    match mount_of(&mp)? {
        Some(t) if t == "fuse" || t.starts_with("fuse.") => {}
        Some(fstype) => {
            return Err(Error::NotFuse {
                mountpoint: mp,
                fstype,
            })
        }
        None => {
            let what = format!("{} is not a mount point", mp.display());
            return Err(Error::errno_of(libc::EINVAL, what));
        }
    }
    let pid = read_state(&state_file(&mp));
    crate::unmount(&mp, false).map_err(|e| {
        let what = format!("unmounting {}", mp.display());
        if busy(&e) {
            Error::errno_of(libc::EBUSY, format!("{what}: {}", holders_of(&mp)))
        } else {
            Error::os(what, e)
        }
    })?;
    let Some(pid) = pid else { return Ok(()) };
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && is_server(pid) {
        if t0.elapsed() > SERVER_EXIT_WAIT {
            return Err(Error::ServerStuck { pid });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Most processes a busy [`umount`] names.
const MAX_HOLDERS_NAMED: usize = 5;

/// `what` failing with `e`, unless `e` is ENOTCONN: then `p` is a FUSE mount whose
/// server is gone, and the error says how to clear it (the errno stays ENOTCONN).
fn stale_or(p: &Path, e: io::Error, what: String) -> Error {
    if e.raw_os_error() != Some(libc::ENOTCONN) {
        return Error::os(what, e);
    }
    let what = format!(
        "{} is a stale FUSE mount (its server is gone): run fusermount3 -uz {0}",
        p.display()
    );
    Error::errno_of(libc::ENOTCONN, what)
}

/// Whether an unmount failed because the mount is in use: EBUSY from umount2(2), or
/// `fusermount3` saying so (it gives no errno).
fn busy(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EBUSY) || e.to_string().contains("busy")
}

/// Who keeps the mount at `mp` busy: up to [`MAX_HOLDERS_NAMED`] processes whose
/// current directory or an open file is under it, by pid and name, for a busy
/// [`umount`]'s message.
fn holders_of(mp: &Path) -> String {
    let held = |link: &Path| std::fs::read_link(link).is_ok_and(|t| t.starts_with(mp));
    let mut found = Vec::new();
    let pids = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    for pid in pids.filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()) {
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let why = if held(&proc.join("cwd")) {
            "current directory"
        } else if std::fs::read_dir(proc.join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| held(&fd.path()))
        {
            "open file"
        } else {
            continue;
        };
        let name = std::fs::read_to_string(proc.join("comm")).unwrap_or_default();
        found.push(format!("{pid} ({}, {why})", name.trim()));
    }
    match found.len() {
        0 => "in use (no process found holding it; try again as root to see all)".into(),
        n if n > MAX_HOLDERS_NAMED => format!(
            "in use by {} and {} more",
            found[..MAX_HOLDERS_NAMED].join(", "),
            n - MAX_HOLDERS_NAMED
        ),
        _ => format!("in use by {}", found.join(", ")),
    }
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

    #[test]
    fn mountinfo_finds_the_last_mount_at_a_path() {
        let info = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    40 22 0:50 / /mnt/a\\040b rw shared:1 - tmpfs tmpfs rw\n\
                    41 40 0:51 / /mnt/a\\040b rw - fuse.easyio easyio rw\n";
        assert_eq!(find_mount(info, "/mnt/a b").as_deref(), Some("fuse.easyio"));
        assert_eq!(find_mount(info, "/").as_deref(), Some("ext4"));
        assert_eq!(find_mount(info, "/mnt"), None);
        assert_eq!(find_device(info, "/mnt/a b").as_deref(), Some("0:51"));
        assert_eq!(find_device(info, "/mnt"), None);
    }

    #[test]
    fn state_file_round_trips() {
        let tmp = std::env::temp_dir().join(format!("easyio-state-test-{}", std::process::id()));
        let state = state_file_in(&tmp, Path::new("/mnt/x y"));
        assert_eq!(state.file_name().unwrap(), "%mnt%x y");
        assert_eq!(read_state(&state), None);
        write_state(&state, 4242, Path::new("/dev/shm/img")).unwrap();
        assert_eq!(read_state(&state), Some(4242));
        let text = std::fs::read_to_string(&state).unwrap();
        assert_eq!(text, "4242\n/dev/shm/img\n");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
