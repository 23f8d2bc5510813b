//! Which paths are the mount's: absolute paths under the prefix, relative paths from
//! a current directory inside it (kept here: the kernel's stays where it was) or from
//! an easyio directory descriptor, and relative paths that reach the prefix from
//! outside (`easyio/x` from `/`, `../easyio` from a kernel directory); and the prefix
//! itself, as the environment gives it ([`config`]).

use std::ffi::{c_char, CStr};
use std::sync::Arc;

use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::table::{self, Desc};

/// Where the image is mounted when `EASYIO_MOUNT` is not set.
pub(crate) const DEFAULT_MOUNT: &str = "/easyio";

/// What the environment asked for, read once.
pub(crate) struct Config {
    /// Components of the mount prefix (`["easyio"]` for `/easyio`).
    pub prefix: Vec<String>,
    /// The prefix as given, normalised (`/easyio`).
    pub prefix_str: String,
    /// Why calls under the prefix fail before anything is mounted, if they must.
    pub bad: Option<(i32, String)>,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration (the prefix is known even when the rest is bad).
pub(crate) fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        let raw = std::env::var("EASYIO_MOUNT").unwrap_or_else(|_| DEFAULT_MOUNT.into());
        let (mount, bad) = if raw.starts_with('/') && !raw.trim_matches('/').is_empty() {
            (raw, None)
        } else {
            let why = format!("EASYIO_MOUNT={raw:?} is not an absolute path below /");
            (DEFAULT_MOUNT.into(), Some((libc::EINVAL, why)))
        };
        let prefix: Vec<String> = normalize(&mount);
        Config {
            prefix_str: format!("/{}", prefix.join("/")),
            prefix,
            bad,
        }
    })
}

/// Where a path leads.
pub(crate) enum Target {
    /// Not the mount's: libc's call.
    Kernel,
    /// The mount's: `path` from the image root, or relative to `dir` when given.
    Easy {
        dir: Option<Arc<Desc>>,
        path: String,
    },
}

/// The current directory when it is inside the mount: its path from the image root.
static CWD: Mutex<Option<String>> = Mutex::new(None);

/// The current directory inside the mount, if it is there.
pub(crate) fn cwd() -> Option<String> {
    CWD.lock().clone()
}

/// Sets (or, with `None`, leaves) the current directory inside the mount. Entering
/// it moves the kernel's current directory into a void (see [`enter_void`]), so
/// that a relative path the shim does not see (a raw system call, glibc's internal
/// calls, a program without the shim) fails instead of reaching a host directory.
pub(crate) fn set_cwd(p: Option<String>) {
    let mut cwd = CWD.lock();
    if p.is_some() && cwd.is_none() {
        enter_void();
    }
    *cwd = p;
}

/// Moves the kernel's current directory into a directory removed at once, under two
/// more removed ones: the kernel finds no name in a removed directory (ENOENT) and
/// creates none there, and `..` or `../..` lead only to removed directories too.
fn enter_void() {
    let mut template = *b"/tmp/.easyio-void-XXXXXX\0";
    // SAFETY: a writable NUL-terminated template; the calls below take C paths of
    // our own and change only the calling process's current directory.
    unsafe {
        let base = libc::mkdtemp(template.as_mut_ptr().cast());
        if base.is_null() {
            crate::real::raw_stderr(
                b"easyio preload: no directory to stand in for the current directory in /tmp\n",
            );
            return;
        }
        let base = CStr::from_ptr(base).to_owned();
        let mid = std::ffi::CString::new([base.to_bytes(), b"/v"].concat()).unwrap_or_default();
        let inner = std::ffi::CString::new([mid.as_bytes(), b"/v"].concat()).unwrap_or_default();
        let made = libc::mkdir(mid.as_ptr(), 0o500) == 0 && libc::mkdir(inner.as_ptr(), 0o500) == 0;
        if made {
            libc::chdir(inner.as_ptr());
        }
        libc::rmdir(inner.as_ptr());
        libc::rmdir(mid.as_ptr());
        libc::rmdir(base.as_ptr());
    }
}

/// The components of `path` with `.`, empty names and `..` resolved lexically.
pub(crate) fn normalize(path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c.to_owned()),
        }
    }
    out
}

/// The components of an absolute path, resolved lexically, except that `..` at the
/// mount's root stays there (the image's root is its own parent, as the root of a
/// chroot), so that `/easyio/..` is the mount's and not the kernel's `/`.
fn components(path: &str) -> Vec<String> {
    let prefix = &config().prefix;
    let mut out: Vec<String> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if out.len() != prefix.len() || out[..] != prefix[..] {
                    out.pop();
                }
            }
            c => out.push(c.to_owned()),
        }
    }
    out
}

/// An absolute path's place: the mount's when it is the prefix or below it.
fn absolute(path: &str) -> Result<Target, i32> {
    let parts = components(path);
    let prefix = &config().prefix;
    if parts.len() < prefix.len() || parts[..prefix.len()] != prefix[..] {
        return Ok(Target::Kernel);
    }
    // Below a prefix the path names as written, the rest goes to the file system as
    // the program wrote it: it resolves `.`, `..` and links on the way as the kernel
    // does (`l/..` is the parent of where `l` leads; `d/.` is `d` as a directory).
    let raw = path
        .strip_prefix(config().prefix_str.as_str())
        .filter(|r| r.is_empty() || r.starts_with('/'));
    let inner = match raw {
        Some("") => "/".to_owned(),
        Some(r) => r.to_owned(),
        None => {
            let mut inner = format!("/{}", parts[prefix.len()..].join("/"));
            // A trailing slash or "/." asks for a directory: keep that.
            if (path.ends_with('/') || path.ends_with("/.")) && inner.len() > 1 {
                inner.push('/');
            }
            inner
        }
    };
    Ok(Target::Easy {
        dir: None,
        path: inner,
    })
}

/// The descriptor a path of the kernel's names: `/dev/stdin` (and `stdout`,
/// `stderr`), `/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N` and
/// `/proc/PID/fd/N` of this process. Opening one reopens the descriptor's file, as
/// the kernel does; for a descriptor of the mount the shim must do it (the kernel
/// would reopen the placeholder). A file renamed since it was opened is looked up
/// under its old name.
fn fd_alias(s: &str) -> Option<i32> {
    let n = match s {
        "/dev/stdin" => return Some(0),
        "/dev/stdout" => return Some(1),
        "/dev/stderr" => return Some(2),
        _ => {
            if let Some(n) = s.strip_prefix("/dev/fd/") {
                n
            } else {
                let rest = s.strip_prefix("/proc/")?;
                let (who, n) = rest.split_once("/fd/")?;
                let me = who == "self"
                    || who == "thread-self"
                    || who.parse::<u32>().ok() == Some(std::process::id());
                if !me {
                    return None;
                }
                n
            }
        }
    };
    n.parse().ok()
}

/// Whether `path` is a kernel's path of a descriptor of the mount (see
/// [`fd_alias`]): a link that only calls that follow it reach the file through.
pub(crate) fn is_alias(path: *const c_char) -> bool {
    if path.is_null() {
        return false;
    }
    // SAFETY: a non-NULL path argument of a libc call is a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(path) }.to_str();
    s.ok().and_then(fd_alias).is_some_and(table::is_ours)
}

/// What `readlink` of a descriptor's path of the kernel (see [`fd_alias`]) reads
/// when the descriptor is the mount's: its file's name as the program sees it.
pub(crate) fn alias_target(path: *const c_char) -> Option<String> {
    if path.is_null() {
        return None;
    }
    // SAFETY: a non-NULL path argument of a libc call is a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(path) }.to_str().ok()?;
    // `/dev/stdin` is itself a link, to `/proc/self/fd/0`: the kernel's to read.
    if !s.starts_with("/dev/fd/") && !s.starts_with("/proc/") {
        return None;
    }
    let d = table::get(fd_alias(s)?)?;
    Some(outer(&d.path))
}

/// Whether a relative path could climb or step into the prefix from a directory
/// outside the mount: it has `..` or the prefix's last name as a component. Only
/// such paths cost a look at where the directory is.
fn may_reach(rel: &str) -> bool {
    let last = config().prefix.last().map(String::as_str).unwrap_or("");
    rel.split('/').any(|c| c == ".." || c == last)
}

/// The kernel's current directory, or a kernel descriptor's directory.
fn kernel_dir(dirfd: i32) -> Option<String> {
    if dirfd == libc::AT_FDCWD {
        std::env::current_dir().ok()?.to_str().map(str::to_owned)
    } else {
        std::fs::read_link(format!("/proc/self/fd/{dirfd}"))
            .ok()?
            .to_str()
            .map(str::to_owned)
    }
}

/// Where `path` (a C string, relative to `dirfd` as the `*at` calls take it) leads.
/// A NULL or non-UTF-8 path outside the mount is the kernel's to judge.
pub(crate) fn classify(dirfd: i32, path: *const c_char) -> Result<Target, i32> {
    if path.is_null() {
        return Ok(Target::Kernel);
    }
    // SAFETY: a non-NULL path argument of a libc call is a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    let Ok(s) = std::str::from_utf8(bytes) else {
        return Ok(Target::Kernel);
    };
    classify_str(dirfd, s)
}

/// [`classify`] of a Rust string.
pub(crate) fn classify_str(dirfd: i32, s: &str) -> Result<Target, i32> {
    if s.starts_with('/') {
        if let Some(d) = fd_alias(s).and_then(table::get) {
            return Ok(Target::Easy {
                dir: None,
                path: d.path.clone(),
            });
        }
        return absolute(s);
    }
    if dirfd != libc::AT_FDCWD {
        if let Some(d) = table::get(dirfd) {
            return Ok(Target::Easy {
                dir: Some(d),
                path: s.to_owned(),
            });
        }
    } else if let Some(c) = cwd() {
        if s.is_empty() {
            return Ok(Target::Easy { dir: None, path: c });
        }
        let joined = format!("{}{c}/{s}", config().prefix_str);
        return match absolute(&joined)? {
            // Climbing out of the mount from a current directory inside it would
            // need the kernel to see that directory, which it does not.
            Target::Kernel => Err(libc::EXDEV),
            t => Ok(t),
        };
    }
    if !s.is_empty() && may_reach(s) {
        if let Some(base) = kernel_dir(dirfd) {
            return absolute(&format!("{base}/{s}"));
        }
    }
    Ok(Target::Kernel)
}

/// The absolute path a program sees for a path of the image (`/x` → `/easyio/x`).
pub(crate) fn outer(inner: &str) -> String {
    let p = &config().prefix_str;
    if inner == "/" || inner.is_empty() {
        p.clone()
    } else {
        format!("{p}{inner}")
    }
}
