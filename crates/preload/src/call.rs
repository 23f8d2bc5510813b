//! The shared steps of the shim's calls: reaching the mount from a path target or a
//! descriptor, and opening a descriptor.

use std::ffi::c_int;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use fs::{Fd, OpenFlags};

use crate::backend::Backend;

use crate::guard::{errno_of, Answer};
use crate::live::{is_forked_child, Live};
use crate::mount::live;
use crate::path::{classify, Target};
use crate::table::{self, Desc};

/// The mount a descriptor belongs to; EBUSY in a forked child of a process that
/// mounted the image (the parent holds it). A child's descriptors of a server's
/// connection are its own connection's, which adopted them.
pub(crate) fn mount_of(d: &Desc) -> Result<LiveRef<'_>, i32> {
    if is_forked_child() {
        // Says so once and answers EBUSY.
        live()?;
    }
    if d.live.is_parents_connection() {
        return live().map(LiveRef::Own);
    }
    Ok(LiveRef::Desc(&d.live))
}

/// The mount of a descriptor: its own (borrowed: a descriptor call takes no
/// reference count that threads would contend on), or this process's connection in
/// place of a parent's.
pub(crate) enum LiveRef<'a> {
    Desc(&'a Live),
    Own(Arc<Live>),
}

impl std::ops::Deref for LiveRef<'_> {
    type Target = Live;

    fn deref(&self) -> &Live {
        match self {
            LiveRef::Desc(l) => l,
            LiveRef::Own(l) => l,
        }
    }
}

/// The calls of a mount (path calls checked with the process's credentials).
pub(crate) fn session(l: &Live) -> &Backend {
    &l.fs
}

/// Runs `f` with the session, the directory handle and the path of a target of the
/// mount; `None` for a kernel target.
pub(crate) fn at<T>(
    t: Result<Target, i32>,
    f: impl FnOnce(&Backend, Option<Fd>, &str) -> fs::Result<T>,
) -> Answer<T> {
    match t {
        Err(e) => Some(Err(e)),
        Ok(Target::Kernel) => None,
        Ok(Target::Easy { dir, path }) => Some((|| {
            let l = match &dir {
                Some(d) => mount_of(d)?,
                None => LiveRef::Own(live()?),
            };
            f(session(&l), dir.as_ref().map(|d| d.fd), &path).map_err(errno_of)
        })()),
    }
}

/// [`at`] of a C path relative to `dirfd`.
pub(crate) fn path_at<T>(
    dirfd: c_int,
    path: *const libc::c_char,
    f: impl FnOnce(&Backend, Option<Fd>, &str) -> fs::Result<T>,
) -> Answer<T> {
    at(classify(dirfd, path), f)
}

/// The description of an easyio descriptor, and its mount; `None` for a kernel one.
/// A descriptor the mount itself holds (the region file, a server's socket) is out
/// of the program's reach: EBADF, as if it were not open.
pub(crate) fn fd_call<T>(kfd: c_int, f: impl FnOnce(&Desc, &Live) -> Result<T, i32>) -> Answer<T> {
    if crate::mount::is_internal(kfd) {
        return Some(Err(libc::EBADF));
    }
    let d = table::get(kfd)?;
    Some(mount_of(&d).and_then(|l| f(&d, &l)))
}

/// Status flags the file system does not take: kept for `F_GETFL` only. Every write
/// is durable when it returns (`O_SYNC`, `O_DSYNC`), nothing blocks (`O_NONBLOCK`),
/// and there is no page cache to bypass (`O_DIRECT`) nor atime to spare (`O_NOATIME`).
const KEPT_ONLY: c_int = libc::O_NONBLOCK
    | libc::O_SYNC
    | libc::O_DSYNC
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_ASYNC;

/// `O_LARGEFILE` as the x86-64 kernel reports it in `F_GETFL` (the libc crate
/// defines it as 0 there, since opening needs no such flag).
const O_LARGEFILE: c_int = 0o100000;

/// Opens a target of the mount; the placeholder's number is the descriptor.
pub(crate) fn open(t: Result<Target, i32>, flags: c_int, mode: libc::mode_t) -> Answer<c_int> {
    let path = match &t {
        Ok(Target::Easy { dir: Some(d), path }) => format!("{}/{path}", d.path),
        Ok(Target::Easy { dir: None, path }) => path.clone(),
        _ => String::new(),
    };
    let path = format!("/{}", crate::path::normalize(&path).join("/"));
    let fs_flags = OpenFlags(flags & !KEPT_ONLY);
    let mode = crate::umask::masked(mode);
    let fd = at(t, |s, dir, p| s.openat(dir, p, fs_flags, mode))?;
    Some(fd.and_then(|fd| finish_open(path, fd, flags)))
}

/// Gives an open file of the mount its placeholder descriptor.
fn finish_open(path: String, fd: Fd, flags: c_int) -> Result<c_int, i32> {
    let l = live()?;
    let kfd = match table::placeholder() {
        Ok(k) => k,
        Err(e) => {
            let _ = l.fs.close(fd);
            return Err(e);
        }
    };
    let status =
        (flags & (libc::O_ACCMODE | libc::O_APPEND | libc::O_PATH | KEPT_ONLY)) | O_LARGEFILE;
    let desc = Desc {
        live: l,
        fd,
        path,
        status: AtomicI32::new(status),
    };
    table::insert(kfd, Arc::new(desc), flags & libc::O_CLOEXEC != 0);
    Ok(kfd)
}
