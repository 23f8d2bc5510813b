//! Calls on names and attributes: `access`, `mkdir`, `unlink`, `rmdir`, `rename`,
//! `link`, `symlink`, `readlink`, `chmod`, `chown`, `utimensat`, `truncate`.

use std::ffi::{c_char, c_int, c_uint, CStr};

use fs::{Fd, Time};

use crate::backend::Backend;
use libc::{gid_t, mode_t, size_t, ssize_t, uid_t};

use crate::call::{at, fd_call, path_at, session};
use crate::guard::{errno_of, export, Answer};
use crate::path::{classify, Target};
use crate::real::buf_mut;

/// `faccessat`, checked by the file system with the mount's credentials (the
/// effective ids: `access` and `AT_EACCESS` are the same here).
fn access_at(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> Answer<c_int> {
    path_at(dirfd, path, |s, d, p| s.faccessat(d, p, mode, flags)).map(|r| r.map(|_| 0))
}

/// A call on two names: both the mount's (`f`), both the kernel's (`None`), or
/// across (EXDEV, as between two file systems).
fn two<T>(
    t1: Result<Target, i32>,
    t2: Result<Target, i32>,
    f: impl FnOnce(&Backend, (Option<Fd>, &str), (Option<Fd>, &str)) -> fs::Result<T>,
) -> Answer<T> {
    let (t1, t2) = match (t1, t2) {
        (Err(e), _) | (_, Err(e)) => return Some(Err(e)),
        (Ok(a), Ok(b)) => (a, b),
    };
    match (t1, t2) {
        (Target::Kernel, Target::Kernel) => None,
        (Target::Easy { dir: d1, path: p1 }, Target::Easy { dir: d2, path: p2 }) => {
            let fd2 = d2.as_ref().map(|d| d.fd);
            at(Ok(Target::Easy { dir: d1, path: p1 }), |s, fd1, p1| {
                f(s, (fd1, p1), (fd2, &p2))
            })
        }
        _ => Some(Err(libc::EXDEV)),
    }
}

fn rename2(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: c_uint,
) -> Answer<c_int> {
    two(
        classify(od, old),
        classify(nd, new),
        |s, (d1, p1), (d2, p2)| s.renameat2(d1, p1, d2, p2, flags),
    )
    .map(|r| r.map(|_| 0))
}

fn link2(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: c_int,
) -> Answer<c_int> {
    two(
        classify(od, old),
        classify(nd, new),
        |s, (d1, p1), (d2, p2)| s.linkat(d1, p1, d2, p2, flags),
    )
    .map(|r| r.map(|_| 0))
}

fn symlink2(target: *const c_char, dirfd: c_int, path: *const c_char) -> Answer<c_int> {
    let t = classify(dirfd, path);
    if let Ok(Target::Kernel) = t {
        return None;
    }
    if target.is_null() {
        return Some(Err(libc::EFAULT));
    }
    // SAFETY: a non-NULL path argument is a NUL-terminated string.
    let Ok(target) = unsafe { CStr::from_ptr(target) }.to_str() else {
        return Some(Err(libc::EINVAL));
    };
    let stored = match inner_target(target) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    at(t, |s, d, p| s.symlinkat(&stored, d, p)).map(|r| r.map(|_| 0))
}

/// What a link's target is stored as. The image's root is the mount's prefix: the
/// file system resolves an absolute target from the image's root, so a target under
/// the prefix is stored from there (`/easyio/a` as `/a`) and read back with the
/// prefix; any other target is stored as given.
fn inner_target(target: &str) -> Result<String, i32> {
    if target.starts_with('/') {
        if let Target::Easy { path, .. } = crate::path::classify_str(libc::AT_FDCWD, target)? {
            return Ok(path);
        }
    }
    Ok(target.to_owned())
}

fn readlink2(dirfd: c_int, path: *const c_char, out: *mut c_char, n: size_t) -> Answer<ssize_t> {
    // `/proc/self/fd/N` of a descriptor of the mount links to its file's name.
    if let Some(t) = crate::path::alias_target(path) {
        let k = t.len().min(n);
        buf_mut(out.cast(), k).copy_from_slice(&t.as_bytes()[..k]);
        return Some(Ok(k as ssize_t));
    }
    if crate::path::is_alias(path) {
        // `/dev/stdin` and the like: the kernel's links to `/proc/self/fd/N`.
        return None;
    }
    path_at(dirfd, path, |s, d, p| s.readlinkat(d, p)).map(|r| {
        let t = r?;
        let t = if t.starts_with('/') {
            crate::path::outer(&t)
        } else {
            t
        };
        let k = t.len().min(n);
        buf_mut(out.cast(), k).copy_from_slice(&t.as_bytes()[..k]);
        Ok(k as ssize_t)
    })
}

fn id(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

fn time(t: libc::timespec) -> Option<Time> {
    match t.tv_nsec {
        libc::UTIME_OMIT => None,
        libc::UTIME_NOW => Some(Time::Now),
        ns => Some(Time::At(t.tv_sec * 1_000_000_000 + ns)),
    }
}

/// The two times of `utimensat` (NULL: both now).
fn times(ts: *const libc::timespec) -> Result<(Option<Time>, Option<Time>), i32> {
    if ts.is_null() {
        return Ok((Some(Time::Now), Some(Time::Now)));
    }
    // SAFETY: a non-NULL `times` argument points to two timespecs.
    let (a, m) = unsafe { (*ts, *ts.add(1)) };
    for t in [a, m] {
        if !(0..1_000_000_000).contains(&t.tv_nsec)
            && t.tv_nsec != libc::UTIME_NOW
            && t.tv_nsec != libc::UTIME_OMIT
        {
            return Err(libc::EINVAL);
        }
    }
    Ok((time(a), time(m)))
}

/// The two times of `utimes` (NULL: both now).
fn timevals(tv: *const libc::timeval) -> Option<[libc::timespec; 2]> {
    if tv.is_null() {
        return None;
    }
    // SAFETY: a non-NULL `times` argument points to two timevals.
    let (a, m) = unsafe { (*tv, *tv.add(1)) };
    let ts = |t: libc::timeval| libc::timespec {
        tv_sec: t.tv_sec,
        tv_nsec: t.tv_usec * 1000,
    };
    Some([ts(a), ts(m)])
}

fn utimens_at(
    dirfd: c_int,
    path: *const c_char,
    ts: *const libc::timespec,
    flags: c_int,
) -> Answer<c_int> {
    let t = classify(dirfd, path);
    if let Ok(Target::Kernel) = t {
        return None;
    }
    let (a, m) = match times(ts) {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    // `utimensat(fd, NULL, ...)` is `futimens(fd, ...)`.
    if path.is_null() {
        return fd_call(dirfd, |d, l| {
            session(l).futimens(d.fd, a, m).map(|_| 0).map_err(errno_of)
        });
    }
    at(t, |s, d, p| s.utimensat(d, p, a, m, flags)).map(|r| r.map(|_| 0))
}

fn utimes_at(
    dirfd: c_int,
    path: *const c_char,
    tv: *const libc::timeval,
    flags: c_int,
) -> Answer<c_int> {
    let ts = timevals(tv);
    let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    utimens_at(dirfd, path, p, flags)
}

/// `utime`'s two times, whole seconds (NULL: both now).
fn utimbuf_at(path: *const c_char, b: *const libc::utimbuf) -> Answer<c_int> {
    if b.is_null() {
        return utimens_at(CWD, path, std::ptr::null(), 0);
    }
    // SAFETY: a non-NULL `times` argument of `utime` points to one utimbuf.
    let b = unsafe { *b };
    let ts = |s| libc::timespec {
        tv_sec: s,
        tv_nsec: 0,
    };
    let t = [ts(b.actime), ts(b.modtime)];
    utimens_at(CWD, path, t.as_ptr(), 0)
}

fn truncate_path(path: *const c_char, len: libc::off_t) -> Answer<c_int> {
    path_at(libc::AT_FDCWD, path, |s, d, p| {
        let len = u64::try_from(len).map_err(|_| fs::Error::Invalid("negative length".into()))?;
        match d {
            None => s.truncate(p, len),
            Some(_) => Err(fs::Error::Invalid("relative".into())),
        }
    })
    .map(|r| r.map(|_| 0))
}

const CWD: c_int = libc::AT_FDCWD;

export! {
    fn access(p: *const c_char, mode: c_int) -> c_int { access_at(CWD, p, mode, 0) }
    fn faccessat(d: c_int, p: *const c_char, mode: c_int, flags: c_int) -> c_int { access_at(d, p, mode, flags) }
    fn euidaccess(p: *const c_char, mode: c_int) -> c_int { access_at(CWD, p, mode, 0) }
    fn eaccess(p: *const c_char, mode: c_int) -> c_int { access_at(CWD, p, mode, 0) }
    fn mkdir(p: *const c_char, mode: mode_t) -> c_int { path_at(CWD, p, |s, d, p| s.mkdirat(d, p, crate::umask::masked(mode))).map(|r| r.map(|_| 0)) }
    fn mkdirat(dd: c_int, p: *const c_char, mode: mode_t) -> c_int { path_at(dd, p, |s, d, p| s.mkdirat(d, p, crate::umask::masked(mode))).map(|r| r.map(|_| 0)) }
    fn unlink(p: *const c_char) -> c_int { path_at(CWD, p, |s, d, p| s.unlinkat(d, p, 0)).map(|r| r.map(|_| 0)) }
    fn rmdir(p: *const c_char) -> c_int { path_at(CWD, p, |s, d, p| s.unlinkat(d, p, libc::AT_REMOVEDIR)).map(|r| r.map(|_| 0)) }
    fn unlinkat(dd: c_int, p: *const c_char, f: c_int) -> c_int { path_at(dd, p, |s, d, p| s.unlinkat(d, p, f)).map(|r| r.map(|_| 0)) }
    fn rename(o: *const c_char, n: *const c_char) -> c_int { rename2(CWD, o, CWD, n, 0) }
    fn renameat(od: c_int, o: *const c_char, nd: c_int, n: *const c_char) -> c_int { rename2(od, o, nd, n, 0) }
    fn renameat2(od: c_int, o: *const c_char, nd: c_int, n: *const c_char, f: c_uint) -> c_int { rename2(od, o, nd, n, f) }
    fn link(o: *const c_char, n: *const c_char) -> c_int { link2(CWD, o, CWD, n, 0) }
    fn linkat(od: c_int, o: *const c_char, nd: c_int, n: *const c_char, f: c_int) -> c_int { link2(od, o, nd, n, f) }
    fn symlink(t: *const c_char, p: *const c_char) -> c_int { symlink2(t, CWD, p) }
    fn symlinkat(t: *const c_char, d: c_int, p: *const c_char) -> c_int { symlink2(t, d, p) }
    fn readlink(p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t { readlink2(CWD, p, b, n) }
    fn readlinkat(d: c_int, p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t { readlink2(d, p, b, n) }
    fn chmod(p: *const c_char, mode: mode_t) -> c_int { path_at(CWD, p, |s, d, p| s.fchmodat(d, p, mode, 0)).map(|r| r.map(|_| 0)) }
    fn fchmodat(dd: c_int, p: *const c_char, mode: mode_t, f: c_int) -> c_int { path_at(dd, p, |s, d, p| s.fchmodat(d, p, mode, f)).map(|r| r.map(|_| 0)) }
    fn fchmod(fd: c_int, mode: mode_t) -> c_int { fd_call(fd, |d, l| session(l).fchmod(d.fd, mode).map(|_| 0).map_err(errno_of)) }
    fn chown(p: *const c_char, u: uid_t, g: gid_t) -> c_int { path_at(CWD, p, |s, d, p| s.fchownat(d, p, id(u), id(g), 0)).map(|r| r.map(|_| 0)) }
    fn lchown(p: *const c_char, u: uid_t, g: gid_t) -> c_int { path_at(CWD, p, |s, d, p| s.fchownat(d, p, id(u), id(g), libc::AT_SYMLINK_NOFOLLOW)).map(|r| r.map(|_| 0)) }
    fn fchownat(dd: c_int, p: *const c_char, u: uid_t, g: gid_t, f: c_int) -> c_int { path_at(dd, p, |s, d, p| s.fchownat(d, p, id(u), id(g), f)).map(|r| r.map(|_| 0)) }
    fn fchown(fd: c_int, u: uid_t, g: gid_t) -> c_int { fd_call(fd, |d, l| session(l).fchown(d.fd, id(u), id(g)).map(|_| 0).map_err(errno_of)) }
    fn utimensat(d: c_int, p: *const c_char, ts: *const libc::timespec, f: c_int) -> c_int { utimens_at(d, p, ts, f) }
    fn futimens(fd: c_int, ts: *const libc::timespec) -> c_int {
        fd_call(fd, |d, l| {
            let (a, m) = times(ts)?;
            session(l).futimens(d.fd, a, m).map(|_| 0).map_err(errno_of)
        })
    }
    fn utimes(p: *const c_char, tv: *const libc::timeval) -> c_int { utimes_at(CWD, p, tv, 0) }
    fn lutimes(p: *const c_char, tv: *const libc::timeval) -> c_int { utimes_at(CWD, p, tv, libc::AT_SYMLINK_NOFOLLOW) }
    fn futimesat(d: c_int, p: *const c_char, tv: *const libc::timeval) -> c_int { utimes_at(d, p, tv, 0) }
    fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
        fd_call(fd, |d, l| {
            let ts = timevals(tv);
            let (a, m) = times(ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()))?;
            session(l).futimens(d.fd, a, m).map(|_| 0).map_err(errno_of)
        })
    }
    fn utime(p: *const c_char, b: *const libc::utimbuf) -> c_int { utimbuf_at(p, b) }
    fn lchmod(p: *const c_char, mode: mode_t) -> c_int { path_at(CWD, p, |s, d, p| s.fchmodat(d, p, mode, libc::AT_SYMLINK_NOFOLLOW)).map(|r| r.map(|_| 0)) }
    fn truncate(p: *const c_char, len: libc::off_t) -> c_int { truncate_path(p, len) }
    fn truncate64(p: *const c_char, len: libc::off_t) -> c_int { truncate_path(p, len) }
}
