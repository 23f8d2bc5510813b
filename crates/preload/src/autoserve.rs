//! A server started on demand: with only `EASYIO_IMAGE` set, every process of the
//! shim is a client of one `easyio serve`-like server of that image, which the first
//! process that needs it starts and which ends shortly after its last client. So a
//! shell's children, both ends of a pipeline and a `make` share the image as
//! processes share a kernel file system, and the user names no socket.
//!
//! The server is a grandchild of the process that starts it (double `fork`, a
//! session of its own, every descriptor of the program closed), made from the
//! shim's own code, so it needs no binary on the `PATH`. In it every intercepted call
//! passes straight to libc (`guard::is_daemon`). Its socket lives in a directory of the
//! user's (`$XDG_RUNTIME_DIR/easyio-UID` or `/tmp/easyio-UID`, mode 0700), named
//! after the image's device and inode; a lock file beside it makes sure one process
//! at a time starts a server.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs::{FileSystem, MountOptions};

use crate::real::real;

/// How long a server with no client waits for one before it ends. Long enough that
/// the commands of a script that follow one another find it still up.
const LINGER: Duration = Duration::from_millis(300);
/// How long a new server waits for the image while the last one lets it go.
const IMAGE_WAIT: Duration = Duration::from_secs(10);

thread_local! {
    /// Set while this thread forks the server: the shim's `fork` handlers stand aside.
    static SPAWNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is forking a server (the `pthread_atfork` handlers do
/// nothing then).
pub(crate) fn is_spawning() -> bool {
    SPAWNING.with(|s| s.get())
}

/// Where the server of one image listens, and the lock that one starter holds.
pub(crate) struct Place {
    pub socket: PathBuf,
    lock: PathBuf,
}

type Failure = (i32, String);

/// The socket of `image`'s server (the directory is made if need be).
pub(crate) fn place(image: &str) -> Result<Place, Failure> {
    let meta = std::fs::metadata(image).map_err(|e| {
        (
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("cannot mount {image}: {e}"),
        )
    })?;
    // SAFETY: geteuid only reads.
    let uid = unsafe { libc::geteuid() };
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let dir = base.join(format!("easyio-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    let unsafe_dir = |why: &str| {
        (
            libc::EPERM,
            format!("cannot serve {image}: {}: {why}", dir.display()),
        )
    };
    let d = std::fs::symlink_metadata(&dir).map_err(|e| unsafe_dir(&e.to_string()))?;
    if !d.is_dir() || d.uid() != uid || d.mode() & 0o077 != 0 {
        return Err(unsafe_dir(
            "not a directory of this user's alone (mode 0700): remove it",
        ));
    }
    let name = format!("{:x}-{:x}", meta.dev(), meta.ino());
    Ok(Place {
        socket: dir.join(format!("{name}.sock")),
        lock: dir.join(format!("{name}.lock")),
    })
}

/// Makes sure a server of `image` listens at `place`: under the starters' lock, if
/// no server answers there, starts one and waits until it serves (or says why it
/// cannot).
pub(crate) fn ensure(image: &str, place: &Place) -> Result<(), Failure> {
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&place.lock)
        .map_err(|e| {
            (
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("cannot serve {image}: {}: {e}", place.lock.display()),
            )
        })?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&lock);
    // SAFETY: flock of our own descriptor; released when `lock` closes.
    while unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
        if crate::real::errno() != libc::EINTR {
            break;
        }
    }
    if std::os::unix::net::UnixStream::connect(&place.socket).is_ok() {
        // Started by another process meanwhile (the server ends this probe at once).
        return Ok(());
    }
    spawn(image, &place.socket)
}

/// Forks the server and waits for its first word: `ok`, or an errno and why.
fn spawn(image: &str, socket: &Path) -> Result<(), Failure> {
    let fork = real!(fork: fn() -> libc::pid_t);
    let mut ends = [0; 2];
    // SAFETY: pipe2 fills the two numbers.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        let e = crate::real::errno();
        return Err((e, format!("cannot serve {image}: pipe: errno {e}")));
    }
    let [from_server, to_parent] = ends;
    let (image_c, socket_c) = (image.to_owned(), socket.to_path_buf());
    SPAWNING.with(|s| s.set(true));
    // SAFETY: fork; the child only forks again and becomes the server (below).
    let pid = unsafe { fork() };
    if pid == 0 {
        // SAFETY: setsid and fork in the child; the intermediate child exits at once
        // without running any of the program's exit handlers.
        unsafe {
            libc::setsid();
            if fork() != 0 {
                libc::_exit(0);
            }
        }
        become_server(to_parent, &image_c, &socket_c);
    }
    SPAWNING.with(|s| s.set(false));
    // SAFETY: closing our copy of the write end; reaping the intermediate child (a
    // program's SIGCHLD handler may have reaped it first: ECHILD is fine).
    unsafe {
        libc::close(to_parent);
        if pid > 0 {
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    let mut said = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        // SAFETY: reading into our own buffer.
        let n = unsafe { libc::read(from_server, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n > 0 {
            said.extend_from_slice(&chunk[..n as usize]);
        } else if n == 0 || crate::real::errno() != libc::EINTR {
            break;
        }
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(from_server) };
    if pid < 0 {
        let e = crate::real::errno();
        return Err((e, format!("cannot serve {image}: fork: errno {e}")));
    }
    let said = String::from_utf8_lossy(&said);
    match said.trim_end().split_once(' ') {
        _ if said.trim_end() == "ok" => Ok(()),
        Some((e, why)) => Err((e.parse().unwrap_or(libc::EIO), why.to_owned())),
        None => Err((
            libc::EIO,
            format!("cannot serve {image}: the server it started ended without a word"),
        )),
    }
}

/// In the grandchild: closes the program's descriptors, resets its signals, serves
/// the image until idle, unmounts it and exits. Never returns.
fn become_server(to_parent: i32, image: &str, socket: &Path) -> ! {
    crate::guard::become_daemon();
    // SAFETY: in a fresh process of one thread: closing every descriptor but the
    // pipe, putting /dev/null on 0-2, resetting signals and naming the process.
    unsafe {
        let keep = libc::fcntl(to_parent, libc::F_DUPFD_CLOEXEC, 3);
        libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32);
        libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for std_fd in 0..3 {
            if null != std_fd {
                libc::dup2(null, std_fd);
            }
        }
        if null > 2 {
            libc::close(null);
        }
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::prctl(libc::PR_SET_NAME, c"easyio-serve".as_ptr());
        libc::chdir(c"/".as_ptr());
        let code = match serve(keep, image, socket) {
            Ok(()) => 0,
            Err((e, why)) => {
                say(keep, &format!("{e} {why}"));
                1
            }
        };
        libc::_exit(code)
    }
}

/// Writes `s` to the starter.
fn say(fd: i32, s: &str) {
    // SAFETY: writing our own bytes to our own descriptor.
    unsafe { libc::write(fd, s.as_ptr().cast(), s.len()) };
}

/// Mounts the image, serves it until no client is left for [`LINGER`], unmounts.
fn serve(ready: i32, image: &str, socket: &Path) -> Result<(), Failure> {
    let fail = |e: fs::Error| (e.errno(), format!("cannot mount {image}: {e}"));
    let mode = std::env::var("EASYIO_MODE").unwrap_or_else(|_| "cpu".into());
    let mode: fs::Mode = mode.parse().map_err(|_| {
        (
            libc::EINVAL,
            format!("EASYIO_MODE={mode:?} is not a mode of easyio"),
        )
    })?;
    let model = match std::env::var("EASYIO_EMULATE") {
        Ok(name) => Some(pmem::slowmem::Model::preset(&name).ok_or_else(|| {
            (
                libc::EINVAL,
                format!("EASYIO_EMULATE={name:?} is not a slow-memory model (optane, cxl)"),
            )
        })?),
        Err(_) => None,
    };
    // The last server of this image may still be letting it go.
    let start = Instant::now();
    let region = loop {
        match pmem::Region::open(image) {
            Err(pmem::Error::Busy { .. }) if start.elapsed() < IMAGE_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => break r.map_err(|e| fail(fs::Error::Region(e)))?,
        }
    };
    let mut pm: Arc<dyn pmem::Pmem> = Arc::new(region);
    if let Some(m) = model {
        pm = Arc::new(pmem::slowmem::SlowMem::new(pm, m));
    }
    let mut opts = MountOptions::with_mode(mode);
    // The mover routes `async` copies by the medium's speeds.
    opts.mover.medium = model;
    let (fs, _report) = FileSystem::mount(pm, opts).map_err(fail)?;
    let fs = Arc::new(fs);
    let server =
        easyio_serve::Server::bind(fs.clone(), Path::new(image), socket, false, model.is_none())
            .map_err(|e| (e.errno(), format!("cannot serve {image}: {e}")))?;
    drop(fs);
    say(ready, "ok\n");
    // SAFETY: the starter has its answer; nothing more is said.
    unsafe { libc::close(ready) };
    let fs = server
        .run_until_idle(LINGER)
        .map_err(|e| (e.errno(), e.to_string()))?;
    if let Ok(fs) = Arc::try_unwrap(fs) {
        let _ = fs.unmount();
    }
    Ok(())
}
