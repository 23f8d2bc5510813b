//! The mount: lazy start on the first call under the prefix — the image mounted here (`EASYIO_IMAGE`) or a connection to a server
//! (`EASYIO_SERVER`) — clean unmount at exit, and who may use it after a `fork`.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

use fs::{Cred, FileSystem, MountOptions};

use crate::backend::Backend;
use crate::live::{is_forked_child, Live, State, GENERATION, HELD_BY_PARENT, STATE};
use crate::path::config;
use parking_lot::RwLock;

use crate::real::real;
use crate::report::Once;

static AT_EXIT: AtomicBool = AtomicBool::new(false);
static FAILED_MSG: Once = Once::new();
static CHILD_MSG: Once = Once::new();
/// A handoff of descriptors this process adopts when it connects (from its parent
/// before `fork`, or from itself before `exec`); 0 for none.
static ADOPT: AtomicU64 = AtomicU64::new(0);
static ADOPT_MSG: Once = Once::new();

/// The descriptors of the mount this process will keep of what it adopts (the
/// others are closed at once); `None`: those its table names when it connects.
static ADOPT_KEEP: parking_lot::Mutex<Option<Vec<u32>>> = parking_lot::Mutex::new(None);

/// Makes the next connection adopt handoff `token`, keeping `keep` of it (`None`:
/// what the descriptor table names then).
pub(crate) fn adopt_at_connect(token: u64, keep: Option<Vec<u32>>) {
    *ADOPT_KEEP.lock() = keep;
    ADOPT.store(token, Ordering::Relaxed);
}

thread_local! {
    /// The handoff made by this thread's `fork` in progress (see [`before_fork`]).
    static FORK_TOKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Whether this process has a handoff to adopt when it connects.
pub(crate) fn adoption_pending() -> bool {
    ADOPT.load(Ordering::Relaxed) != 0
}

/// The handoff the last `fork` of this thread made for its child, if any.
pub(crate) fn take_fork_token() -> Option<u64> {
    Some(FORK_TOKEN.with(|t| t.replace(0))).filter(|&t| t != 0)
}

/// Set in a forked child whose parent was a server's client (the child let its copy
/// of the connection go).
static PARENT_JOINED: AtomicBool = AtomicBool::new(false);

/// In a forked child whose parent was connected to a server: connects now, as the
/// process is (before it changes its ids, see `ids.rs`: the parent's server may be
/// out of reach of the new ids, and the connection then follows them).
pub(crate) fn connect_if_inherited() {
    let inherited = match &*STATE.read() {
        State::Up(l) => l.is_parents_connection(),
        State::Down => PARENT_JOINED.load(Ordering::Relaxed),
        State::Failed(_) => false,
    };
    if inherited {
        let _ = live();
    }
}

/// The mount, started on first use. Fails with the errno of why it cannot be had
/// (one line on stderr the first time).
pub(crate) fn live() -> Result<Arc<Live>, i32> {
    let holder = HELD_BY_PARENT.load(Ordering::Relaxed);
    if holder != 0 {
        CHILD_MSG.say(|| {
            format!(
                "the image is held by process {holder} (this process's parent before fork): EBUSY"
            )
        });
        return Err(libc::EBUSY);
    }
    match &*STATE.read() {
        State::Up(l) if !l.is_parents_connection() => return Ok(l.clone()),
        State::Failed(e) => return Err(*e),
        State::Up(_) | State::Down => {}
    }
    let mut state = STATE.write();
    if let State::Up(l) = &*state {
        if l.is_parents_connection() {
            if let Some(c) = l.fs.client() {
                c.abandon();
            }
            *state = State::Down;
            PARENT_JOINED.store(true, Ordering::Relaxed);
        }
    }
    match &*state {
        State::Up(l) => Ok(l.clone()),
        State::Failed(e) => Err(*e),
        State::Down => match start() {
            Ok(l) => {
                let l = Arc::new(l);
                *state = State::Up(l.clone());
                Ok(l)
            }
            Err((e, why)) => {
                FAILED_MSG.say(|| why);
                *state = State::Failed(e);
                Err(e)
            }
        },
    }
}

/// Mounts the image the environment names, or connects to its server.
fn start() -> Result<Live, (i32, String)> {
    let cfg = config();
    if let Some((e, why)) = &cfg.bad {
        return Err((*e, why.clone()));
    }
    if let Ok(socket) = std::env::var("EASYIO_SERVER") {
        return connect(socket);
    }
    let image = std::env::var("EASYIO_IMAGE").map_err(|_| {
        (
            libc::ENOENT,
            format!(
                "EASYIO_IMAGE is not set: nothing is mounted at {}",
                cfg.prefix_str
            ),
        )
    })?;
    if !private() {
        return join(&image);
    }
    let mode = std::env::var("EASYIO_MODE").unwrap_or_else(|_| "cpu".into());
    let mode: fs::Mode = mode.parse().map_err(|_| {
        (
            libc::EINVAL,
            format!("EASYIO_MODE={mode:?} is not a mode of easyio"),
        )
    })?;
    let fail = |e: fs::Error| (e.errno(), format!("cannot mount {image}: {e}"));
    let before = open_fds();
    let region =
        above_floor(|| pmem::Region::open(&image)).map_err(|e| fail(fs::Error::Region(e)))?;
    let mut pm: Arc<dyn pmem::Pmem> = Arc::new(region);
    let mut opts = MountOptions::with_mode(mode);
    if let Ok(name) = std::env::var("EASYIO_EMULATE") {
        let model = pmem::slowmem::Model::preset(&name).ok_or_else(|| {
            (
                libc::EINVAL,
                format!("EASYIO_EMULATE={name:?} is not a slow-memory model (optane, cxl)"),
            )
        })?;
        pm = Arc::new(pmem::slowmem::SlowMem::new(pm, model));
        // The mover routes `async` copies by the medium's speeds.
        opts.mover.medium = Some(model);
    }
    let (fs, _report) = above_floor(|| FileSystem::mount(pm, opts)).map_err(fail)?;
    register_hooks();
    note_internal(&before);
    Ok(Live {
        fs: Backend::Local {
            fs: Box::new(fs),
            cred: parking_lot::RwLock::new(process_cred()),
        },
        image,
        generation: GENERATION.load(Ordering::Relaxed),
    })
}

/// Whether the image is mounted in this process alone (`EASYIO_PRIVATE=1`): the
/// fastest way, for one process (its threads); its children and other processes
/// get EBUSY. Otherwise the process joins the image's server, started on demand.
pub(crate) fn private() -> bool {
    matches!(
        std::env::var("EASYIO_PRIVATE").as_deref(),
        Ok("1" | "yes" | "true" | "on")
    )
}

/// Joins the server of `image`, starting one if none serves it.
fn join(image: &str) -> Result<Live, (i32, String)> {
    let place = crate::autoserve::place(image)?;
    let mut started = false;
    loop {
        let before = open_fds();
        match easyio_serve::Client::connect_above(&place.socket, descriptor_floor()) {
            Ok(client) => return Ok(connected(client, image.to_owned(), &before)),
            // No server (or one that just ended): start one, once.
            Err(e) if !started && matches!(e.errno(), libc::ENOENT | libc::ECONNREFUSED) => {
                crate::autoserve::ensure(image, &place)?;
                started = true;
            }
            Err(e) => {
                return Err((
                    e.errno(),
                    format!("cannot reach the server of {image}: {e}"),
                ))
            }
        }
    }
}

/// Connects to the server listening on `socket`, and adopts the descriptors handed
/// to this process, if any.
fn connect(socket: String) -> Result<Live, (i32, String)> {
    let before = open_fds();
    let client = easyio_serve::Client::connect_above(&socket, descriptor_floor()).map_err(|e| {
        (
            e.errno(),
            format!("cannot reach the server at {socket}: {e}"),
        )
    })?;
    Ok(connected(client, socket, &before))
}

/// The mount of a connection made: its descriptors are the shim's own; what was
/// handed to this process is adopted.
fn connected(client: easyio_serve::Client, image: String, before: &[i32]) -> Live {
    register_hooks();
    note_internal(before);
    let token = ADOPT.swap(0, Ordering::Relaxed);
    if token != 0 {
        match client.adopt(token) {
            Ok(adopted) => {
                // What the process closed before it connected is closed now.
                let keep = ADOPT_KEEP.lock().take().unwrap_or_else(|| {
                    crate::table::entries()
                        .iter()
                        .map(|(_, d, _)| d.fd.0)
                        .collect()
                });
                for fd in adopted.iter().filter(|fd| !keep.contains(fd)) {
                    let _ = client.close(*fd);
                }
            }
            Err(e) => ADOPT_MSG.say(|| {
                format!("descriptors inherited from the parent or before exec are lost: {e}")
            }),
        }
    }
    Live {
        fs: Backend::Remote(Box::new(easyio_serve::Remote(client))),
        image,
        generation: GENERATION.load(Ordering::Relaxed),
    }
}

/// Records the descriptors the mount opened since `before` (those above the floor:
/// the ones it keeps) as its own.
fn note_internal(before: &[i32]) {
    let floor = descriptor_floor();
    let mine: Vec<i32> = open_fds()
        .into_iter()
        .filter(|f| *f >= floor && !before.contains(f))
        .collect();
    MIN_INTERNAL.store(
        mine.iter().copied().min().unwrap_or(i32::MAX),
        Ordering::Relaxed,
    );
    *INTERNAL.write() = mine;
}

/// The lowest descriptor the mount holds: a cheap first test of [`is_internal`].
static MIN_INTERNAL: AtomicI32 = AtomicI32::new(i32::MAX);

use easyio::descriptors::{above_floor, floor as descriptor_floor};

/// The kernel descriptors the mount itself holds (the region file, an engine's):
/// a program closing descriptors it does not know of must not close these.
static INTERNAL: RwLock<Vec<i32>> = RwLock::new(Vec::new());

/// The kernel descriptors the mount holds, in order.
pub(crate) fn internal_fds() -> Vec<i32> {
    let mut v = INTERNAL.read().clone();
    v.sort_unstable();
    v
}

/// Whether kernel descriptor `fd` is one the mount holds.
pub(crate) fn is_internal(fd: i32) -> bool {
    fd >= MIN_INTERNAL.load(Ordering::Relaxed) && INTERNAL.read().contains(&fd)
}

/// Descriptor numbers looked at for the mount's own: past any a mount opens.
const FD_SCAN: i32 = 4096;

/// The process's open descriptors below [`FD_SCAN`]: the names in `/proc/self/fd`
/// (one directory read, not a call per number), or, without `/proc`, every number
/// asked in turn.
fn open_fds() -> Vec<i32> {
    proc_fds().unwrap_or_else(|| {
        let fcntl =
            crate::real::real!(fcntl: fn(libc::c_int, libc::c_int, libc::c_int) -> libc::c_int);
        // SAFETY: F_GETFD only asks whether a number is open.
        (0..FD_SCAN)
            .filter(|&fd| unsafe { fcntl(fd, libc::F_GETFD, 0) } >= 0)
            .collect()
    })
}

/// The names of `/proc/self/fd` below [`FD_SCAN`], less the descriptor that reads
/// them; `None` if it cannot be read.
fn proc_fds() -> Option<Vec<i32>> {
    let open = real!(open: fn(*const libc::c_char, libc::c_int, libc::mode_t) -> libc::c_int);
    let getdents =
        real!(getdents64: fn(libc::c_int, *mut libc::c_void, libc::size_t) -> libc::ssize_t);
    let close = real!(close: fn(libc::c_int) -> libc::c_int);
    // SAFETY: opening a directory of the kernel's to read its names.
    let dir = unsafe {
        open(
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        )
    };
    if dir < 0 {
        return None;
    }
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    let ok = loop {
        // SAFETY: the kernel writes at most `buf.len()` bytes of entries.
        let n = unsafe { getdents(dir, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break n == 0;
        }
        let mut at = 0usize;
        while at < n as usize {
            // A `linux_dirent64`: ino (8), off (8), reclen (2), type (1), name.
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let name = &buf[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if let Some(fd) = std::str::from_utf8(name)
                .ok()
                .and_then(|s| s.parse::<i32>().ok())
            {
                if fd != dir && fd < FD_SCAN {
                    fds.push(fd);
                }
            }
            at += reclen;
        }
    };
    // SAFETY: our own descriptor.
    unsafe { close(dir) };
    if !ok {
        return None;
    }
    fds.sort_unstable();
    Some(fds)
}

/// The calling process's effective ids and groups.
pub(crate) fn process_cred() -> Cred {
    // SAFETY: these calls only read the process's credentials.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut groups = vec![0; 256];
    // SAFETY: the buffer holds `groups.len()` ids.
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    groups.truncate(n.max(0) as usize);
    // The shim clears the program's umask itself (`umask.rs`).
    Cred {
        uid,
        gid,
        groups,
        umask: 0,
    }
}

fn register_hooks() {
    if AT_EXIT.swap(true, Ordering::Relaxed) {
        return;
    }
    // SAFETY: plain functions of the shim that live as long as the process.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(Some(before_fork), Some(in_parent), Some(in_child));
    }
}

/// Before `fork`: the mount's state and the descriptor table are held across it, so
/// that the child gets them whole (no other thread halfway through a change, no
/// lock held for ever in the child); a client of a server asks it to keep every
/// descriptor of the table for the child (a handoff; see `inherit.rs`).
extern "C" fn before_fork() {
    if crate::autoserve::is_spawning() {
        return;
    }
    let guard = crate::guard::Guard::enter();
    let state = STATE.write();
    // Both released by `in_parent` and `in_child`.
    let fds = crate::table::hold_across_fork();
    // The client's own libc calls go to libc (the guard): a thread already inside
    // the shim that forks hands nothing over.
    if let (State::Up(l), Some(_)) = (&*state, &guard) {
        if let (Some(c), false) = (l.fs.client(), l.is_parents_connection()) {
            if !fds.is_empty() {
                if let Ok(token) = c.handoff(&fds) {
                    FORK_TOKEN.with(|t| t.set(token));
                }
            }
        }
    }
    std::mem::forget(state);
}

/// After `fork`, in the parent: lets go what [`before_fork`] held.
extern "C" fn in_parent() {
    if crate::autoserve::is_spawning() {
        return;
    }
    crate::table::release_after_fork();
    // SAFETY: `before_fork` on this thread took the write lock and forgot its guard.
    unsafe { STATE.force_unlock_write() };
}

/// In a child of `fork`: the parent keeps the image (its lock, its engine threads);
/// the child's calls under the prefix are EBUSY. A server's connection is the
/// parent's too: the child lets its copy go and connects anew (see
/// `inherit::after_fork`), adopting what the parent handed over.
extern "C" fn in_child() {
    if crate::autoserve::is_spawning() {
        return;
    }
    GENERATION.fetch_add(1, Ordering::Relaxed);
    crate::table::release_after_fork();
    // SAFETY: `before_fork` on this thread (the child's only one) took the write lock
    // and forgot its guard; the child's copy of the lock is held by no one else.
    unsafe { STATE.force_unlock_write() };
    if let Some(token) = Some(FORK_TOKEN.with(|t| t.get())).filter(|&t| t != 0) {
        adopt_at_connect(token, None);
    }
    // Closing the parent's socket must reach libc, not the shim's protection of it.
    let _guard = crate::guard::Guard::enter();
    let mut state = STATE.write();
    match &*state {
        State::Up(l) if l.fs.client().is_some() => {
            if let Some(c) = l.fs.client() {
                c.abandon();
            }
            *state = State::Down;
            PARENT_JOINED.store(true, Ordering::Relaxed);
        }
        State::Up(_) => {
            // SAFETY: getppid only reads.
            HELD_BY_PARENT.store(unsafe { libc::getppid() }, Ordering::Relaxed);
        }
        _ => {}
    }
}

extern "C" fn at_exit() {
    let Some(_g) = crate::guard::Guard::enter() else {
        return;
    };
    if is_forked_child() {
        return;
    }
    // Streams on the mount are written out while it is still there (exit flushes
    // them only after the handlers that run before this one's end).
    // SAFETY: fflush(NULL) flushes every stream of the process.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    let _ = std::panic::catch_unwind(|| {
        let _ = release();
    });
}

/// Unmounts cleanly: every descriptor and directory stream of the shim is dropped
/// first. Fails (leaving the mount up) only if another thread is inside a call.
pub(crate) fn release() -> Result<(), ()> {
    let mut state = STATE.write();
    let State::Up(l) = &*state else {
        return Ok(());
    };
    if l.fs.client().is_some() {
        // A server's connection: nothing to unmount; the server closes what this
        // process leaves open when it ends.
        return Ok(());
    }
    crate::table::clear();
    INTERNAL.write().clear();
    MIN_INTERNAL.store(i32::MAX, Ordering::Relaxed);
    let State::Up(l) = std::mem::replace(&mut *state, State::Down) else {
        unreachable!()
    };
    match Arc::try_unwrap(l) {
        Ok(live) => {
            let Backend::Local { fs, .. } = live.fs else {
                unreachable!("a server's connection is not released")
            };
            if let Err(e) = fs.unmount() {
                crate::real::raw_stderr(
                    format!("easyio preload: unmount of {}: {e}\n", live.image).as_bytes(),
                );
            }
            Ok(())
        }
        Err(l) => {
            *state = State::Up(l);
            Err(())
        }
    }
}

/// Before a `fork`, `vfork` or `posix_spawn`: a process that has nothing open on the
/// image lets it go, so that the program it starts can mount it (a compiler driver
/// that looked at a source file before running the compiler on it). The next call
/// under the prefix mounts again.
pub(crate) fn release_if_idle() {
    if matches!(&*STATE.read(), State::Up(_))
        && crate::table::is_idle()
        && crate::path::cwd().is_none()
    {
        let _ = release();
    }
}
