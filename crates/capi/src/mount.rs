//! Mounting and unmounting an image, formatting one, and the credentials calls are
//! checked with.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use easyio_serve::Remote;
use fs::{Cred, DirEntryAt, Fd, FileSystem, FormatOptions, MountOptions, Stat, Whence};
use parking_lot::{Mutex, RwLock};
use pmem::{Pmem, Region};

use crate::args::{opt_string, slice, string, In, Out};
use crate::error::{call, CResult, Failure};
use crate::handles::{into_sole, Registry};
use crate::requests::InFlight;

/// A mounted image (opaque).
pub struct easyio_fs {
    _opaque: [u8; 0],
}

/// Options of [`easyio_mount`]; every field may be left 0/NULL for the default.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct easyio_mount_options {
    /// Who moves file data: "cpu" (default), "semaphore", "delegate", "dma-sync",
    /// "async".
    pub mode: *const c_char,
    /// Copy engine of the modes that use one: "software" (default), "dsa", "cpu".
    pub engine: *const c_char,
    /// Slow-memory emulation over the region: "optane" or "cxl"; NULL: none (the
    /// region as it is).
    pub emulate: *const c_char,
    /// Calibration profile (`easyio calibrate`) whose thresholds replace the
    /// defaults; NULL: none.
    pub profile: *const c_char,
    /// Engine channels the file system uses; 0: the default (one).
    pub engine_channels: c_uint,
    /// Nonzero: mount read-only (every change is EROFS).
    pub read_only: c_int,
}

/// A mount: the file system, the caller credentials, the asynchronous requests in
/// flight.
pub(crate) struct Mount {
    /// Declared before `fs`: requests (which borrow it) are dropped, waiting for their
    /// copies, before it.
    pub requests: Mutex<HashMap<u64, InFlight>>,
    pub next_request: AtomicU64,
    pub fs: Target,
    /// `None`: the trusted context (no permission checks).
    pub cred: RwLock<Option<Arc<Cred>>>,
    /// I/O buffers given out on an image mounted here (`easyio_buffer_alloc`).
    pub buffers: Buffers,
}

pub(crate) static MOUNTS: Registry<Mount> = Registry::new("easyio_fs");

/// The mount of a handle, for one call.
pub(crate) fn mount_of(fs: *mut easyio_fs) -> CResult<Arc<Mount>> {
    MOUNTS.get(fs)
}

/// The buffers given out on an image mounted here, by address; what is left is
/// freed with the mount.
#[derive(Default)]
pub(crate) struct Buffers(pub Mutex<HashMap<usize, std::alloc::Layout>>);

impl Drop for Buffers {
    fn drop(&mut self) {
        for (at, layout) in self.0.get_mut().drain() {
            // SAFETY: allocated by `easyio_buffer_alloc` with this layout, and not
            // freed since (freeing removes it from the map).
            unsafe { std::alloc::dealloc(at as *mut u8, layout) };
        }
    }
}

/// Who answers a mount's calls.
pub(crate) enum Target {
    /// The image, mounted in this process.
    Here(Arc<FileSystem>),
    /// A server's (`easyio_connect`): every call is a request, checked by the
    /// server with this process's credentials as the kernel gives them.
    Server(Box<Remote>),
}

/// Defines each call on an open descriptor (or by path, trusted) of both targets,
/// under its name and types in the file system.
macro_rules! either {
    ($( fn $name:ident(&self $(, $a:ident : $t:ty)*) -> $r:ty; )*) => {
        impl Target {
            $( pub fn $name(&self $(, $a: $t)*) -> fs::Result<$r> {
                match self {
                    Target::Here(fs) => fs.$name($($a),*),
                    Target::Server(r) => r.$name($($a),*),
                }
            } )*
        }
    };
}

either! {
    fn close(&self, fd: Fd) -> ();
    fn read(&self, fd: Fd, buf: &mut [u8]) -> usize;
    fn write(&self, fd: Fd, buf: &[u8]) -> usize;
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> usize;
    fn pwrite(&self, fd: Fd, buf: &[u8], off: u64) -> usize;
    fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> u64;
    fn fstat(&self, fd: Fd) -> Stat;
    fn ftruncate(&self, fd: Fd, len: u64) -> ();
    fn fsync(&self, fd: Fd) -> ();
    fn fallocate(&self, fd: Fd, mode: i32, off: u64, len: u64) -> ();
    fn readdir_fd(&self, fd: Fd, offset: u64) -> Vec<DirEntryAt>;
    fn getxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> usize;
    fn lgetxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> usize;
    fn fgetxattr(&self, fd: Fd, name: &str, buf: &mut [u8]) -> usize;
    fn setxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> ();
    fn lsetxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> ();
    fn fsetxattr(&self, fd: Fd, name: &str, value: &[u8], flags: i32) -> ();
    fn listxattr(&self, path: &str, buf: &mut [u8]) -> usize;
    fn llistxattr(&self, path: &str, buf: &mut [u8]) -> usize;
    fn flistxattr(&self, fd: Fd, buf: &mut [u8]) -> usize;
    fn removexattr(&self, path: &str, name: &str) -> ();
    fn lremovexattr(&self, path: &str, name: &str) -> ();
    fn fremovexattr(&self, fd: Fd, name: &str) -> ();
}

impl Target {
    /// `pread` (from `off`) or `read` (`None`: from the position) into the caller's
    /// buffer. On a server's connection a staging buffer goes to the server by its
    /// address (the server stores into it); any other buffer as [`Out::place`] gives
    /// it.
    pub fn read_into(&self, fd: Fd, buf: Out, off: Option<u64>) -> fs::Result<usize> {
        if let Target::Server(r) = self {
            if let Some(n) = r.0.read_staged_at(fd.0, buf.ptr(), buf.len(), off) {
                return n.map_err(|e| fs::Error::Errno(e.errno()));
            }
        }
        let mut b = buf.place();
        match off {
            Some(off) => self.pread(fd, &mut b, off),
            None => self.read(fd, &mut b),
        }
    }

    /// `pwrite` (at `off`) or `write` (`None`: at the position) of the caller's
    /// buffer: a staging buffer by its address on a server's connection, any other
    /// as [`In::view`] gives it.
    pub fn write_from(&self, fd: Fd, buf: In, off: Option<u64>) -> fs::Result<usize> {
        if let Target::Server(r) = self {
            if let Some(n) = r.0.write_staged_at(fd.0, buf.ptr(), buf.len(), off) {
                return n.map_err(|e| fs::Error::Errno(e.errno()));
            }
        }
        let b = buf.view();
        match off {
            Some(off) => self.pwrite(fd, &b, off),
            None => self.write(fd, &b),
        }
    }
}

/// Runs a path or `*at` call as the mount's caller: checked with its credentials when
/// [`easyio_set_cred`] gave some, in the trusted context otherwise; a server's
/// connection makes the call of the same name.
macro_rules! as_caller {
    ($m:expr, $method:ident($($a:expr),* $(,)?)) => {{
        match &$m.fs {
            $crate::mount::Target::Server(r) => r.$method($($a),*),
            $crate::mount::Target::Here(fs) => {
                let cred = $m.cred.read().clone();
                match cred {
                    Some(c) => fs.as_user(&c).$method($($a),*),
                    None => fs.$method($($a),*),
                }
            }
        }
    }};
}
pub(crate) use as_caller;

/// The mount options C asked for.
fn options(o: &easyio_mount_options) -> CResult<(MountOptions, Option<pmem::slowmem::Model>)> {
    let bad = |what: &str, v: &str| Failure::new(libc::EINVAL, format!("unknown {what} {v:?}"));
    let mut opts = MountOptions::default();
    if let Some(m) = opt_string(o.mode, "mode")? {
        opts.mode = m.parse().map_err(|_| bad("mode", m))?;
    }
    if let Some(e) = opt_string(o.engine, "engine")? {
        opts = opts.with_engine(e.parse().map_err(|_| bad("engine", e))?);
    }
    if let Some(p) = opt_string(o.profile, "profile")? {
        opts = opts.with_profile(std::path::Path::new(p))?;
    }
    if o.engine_channels != 0 {
        opts.mover.engine_channels = o.engine_channels as usize;
    }
    opts.read_only = o.read_only != 0;
    let model = match opt_string(o.emulate, "emulate")? {
        Some(n) => Some(pmem::slowmem::Model::preset(n).ok_or_else(|| bad("emulation", n))?),
        None => None,
    };
    Ok((opts, model))
}

fn mount(image: *const c_char, o: *const easyio_mount_options) -> CResult<*mut easyio_fs> {
    let image = string(image, "image")?;
    let o = if o.is_null() {
        easyio_mount_options::default()
    } else {
        // SAFETY: not NULL; the header asks for a valid options struct for the call.
        unsafe { *o }
    };
    let (mut opts, model) = options(&o)?;
    // The mover routes `async` copies by the medium's speeds (see `mover::Config`).
    opts.mover.medium = model;
    // What the mount keeps open (the region file, an engine's) sits at high numbers,
    // out of the way of the program's own.
    let (fs, _report) = crate::descriptors::above_floor(|| {
        let region = if opts.read_only {
            Region::open_read_only(image)
        } else {
            Region::open(image)
        }
        .map_err(fs::Error::Region)?;
        let mut pm: Arc<dyn Pmem> = Arc::new(region);
        if let Some(model) = model {
            pm = Arc::new(pmem::slowmem::SlowMem::new(pm, model));
        }
        FileSystem::mount(pm, opts)
    })?;
    Ok(MOUNTS.insert(Mount {
        requests: Mutex::new(HashMap::new()),
        next_request: AtomicU64::new(1),
        fs: Target::Here(Arc::new(fs)),
        cred: RwLock::new(None),
        buffers: Default::default(),
    }))
}

/// Connects to the `easyio serve` server listening on the Unix socket `socket`:
/// the handle's calls are the server's, made as this process's user (the server
/// takes the ids from the socket; [`easyio_set_cred`] is EPERM on such a handle).
/// Reads of open files are copied straight from the image, mapped read-only, when
/// the server allows it. [`easyio_unmount`] disconnects (the server closes what was
/// left open). `easyio_submit_pwrite` from a buffer of `easyio_buffer_alloc` returns
/// once the server committed the write and completes when the server's copy is
/// durable (polled in the image's completion record, with no request); other
/// asynchronous requests are made at once and complete as they are submitted. Returns
/// NULL with errno: ENOENT or ECONNREFUSED (no server there), EACCES, EPROTO
/// (another version of easyio), EAGAIN (the server has too many clients).
#[no_mangle]
pub extern "C" fn easyio_connect(socket: *const c_char) -> *mut easyio_fs {
    call(std::ptr::null_mut(), || {
        let socket = string(socket, "socket")?;
        let client = easyio_serve::Client::connect(socket)
            .map_err(|e| Failure::new(e.errno(), format!("{socket}: {e}")))?;
        Ok(MOUNTS.insert(Mount {
            requests: Mutex::new(HashMap::new()),
            next_request: AtomicU64::new(1),
            fs: Target::Server(Box::new(Remote(client))),
            cred: RwLock::new(None),
            buffers: Default::default(),
        }))
    })
}

impl Default for easyio_mount_options {
    fn default() -> Self {
        easyio_mount_options {
            mode: std::ptr::null(),
            engine: std::ptr::null(),
            emulate: std::ptr::null(),
            profile: std::ptr::null(),
            engine_channels: 0,
            read_only: 0,
        }
    }
}

/// Mounts the image at `image` (a region file made by `easyio mkfs` or
/// [`easyio_mkfs`]), recovering it if it was not cleanly unmounted. `options` may be
/// NULL for the defaults. Returns the mount, or NULL with errno (ENOENT: no image;
/// EINVAL: an unknown option or not an easyio image; EBUSY: another process holds it).
/// One process holds an image at a time.
#[no_mangle]
pub extern "C" fn easyio_mount(
    image: *const c_char,
    options: *const easyio_mount_options,
) -> *mut easyio_fs {
    call(std::ptr::null_mut(), || mount(image, options))
}

/// Unmounts: waits for the asynchronous requests still in flight, closes every
/// descriptor and directory handle of the mount, and marks the image cleanly
/// unmounted. The handle is dead afterwards (EBADF), even when this fails.
#[no_mangle]
pub extern "C" fn easyio_unmount(fs: *mut easyio_fs) -> c_int {
    call(-1, || {
        let m = into_sole(MOUNTS.remove(fs)?);
        // Waited for outside the lock (a wait may yield).
        let in_flight: Vec<_> = m.requests.lock().drain().collect();
        drop(in_flight);
        let Mount { fs, .. } = m;
        let Target::Here(fs) = fs else {
            // A server's connection: dropping it disconnects.
            return Ok(0);
        };
        let fs = Arc::try_unwrap(fs)
            .map_err(|_| Failure::new(libc::EIO, "the file system is still in use"))?;
        fs.unmount()?;
        Ok(0)
    })
}

/// Creates a region file of `size` bytes at `image` (which must not exist: EEXIST)
/// and formats it with an empty root directory.
#[no_mangle]
pub extern "C" fn easyio_mkfs(image: *const c_char, size: u64) -> c_int {
    call(-1, || {
        let path = string(image, "image")?;
        let region = Region::create(path, size).map_err(fs::Error::Region)?;
        if let Err(e) = FileSystem::format(&region, &FormatOptions::default()) {
            drop(region);
            let _ = pmem::remove(path);
            return Err(e.into());
        }
        Ok(0)
    })
}

/// Makes the calls of this mount that take paths or change attributes check
/// permissions as Linux does for a caller with these ids, supplementary `groups`
/// (`ngroups` of them; NULL with 0) and `umask`, and own what they create by it.
/// Reads and writes of open descriptors are not checked again.
#[no_mangle]
pub extern "C" fn easyio_set_cred(
    fs: *mut easyio_fs,
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: *const libc::gid_t,
    ngroups: usize,
    umask: libc::mode_t,
) -> c_int {
    call(-1, || {
        let m = MOUNTS.get(fs)?;
        if let Target::Server(_) = m.fs {
            return Err(Failure::new(
                libc::EPERM,
                "a server checks calls with this process's own credentials",
            ));
        }
        let groups = slice(groups, ngroups, "groups")?.to_vec();
        *m.cred.write() = Some(Arc::new(Cred {
            uid,
            gid,
            groups,
            umask,
        }));
        Ok(0)
    })
}

/// Back to the trusted context: no permission checks, new inodes owned by the
/// process (the default after [`easyio_mount`]).
#[no_mangle]
pub extern "C" fn easyio_clear_cred(fs: *mut easyio_fs) -> c_int {
    call(-1, || {
        *MOUNTS.get(fs)?.cred.write() = None;
        Ok(0)
    })
}
