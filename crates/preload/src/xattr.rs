//! Extended attributes (`getxattr`, `setxattr`, `listxattr`, `removexattr` and their
//! `l`/`f` forms): what `ls -l` and libacl ask of every file.

use std::ffi::{c_char, c_int, c_void, CStr};

use libc::{size_t, ssize_t};

use crate::call::{fd_call, path_at};
use crate::guard::{errno_of, export, Answer};
use crate::real::{buf, buf_mut};

const CWD: c_int = libc::AT_FDCWD;

/// The attribute name, or the errno of a bad one.
fn name<'a>(n: *const c_char) -> Result<&'a str, i32> {
    if n.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: a non-NULL name argument is a NUL-terminated string.
    unsafe { CStr::from_ptr(n) }
        .to_str()
        .map_err(|_| libc::EINVAL)
}

/// Runs a path form: `follow` selects the plain call, else the `l` one.
fn by_path<T>(
    path: *const c_char,
    f: impl FnOnce(&crate::backend::Backend, &str) -> fs::Result<T>,
) -> Answer<T> {
    path_at(CWD, path, |s, _, p| f(s, p))
}

fn get(
    path: *const c_char,
    n: *const c_char,
    v: *mut c_void,
    size: size_t,
    follow: bool,
) -> Answer<ssize_t> {
    let nm = match name(n) {
        Ok(nm) => nm,
        Err(e) => return by_path(path, |_, _| Ok(())).map(|_| Err(e)),
    };
    by_path(path, |s, p| {
        let b = &mut buf_mut(v, size);
        if follow {
            s.getxattr(p, nm, b)
        } else {
            s.lgetxattr(p, nm, b)
        }
    })
    .map(|r| r.map(|n| n as ssize_t))
}

fn set(
    path: *const c_char,
    n: *const c_char,
    v: *const c_void,
    size: size_t,
    flags: c_int,
    follow: bool,
) -> Answer<c_int> {
    let nm = match name(n) {
        Ok(nm) => nm,
        Err(e) => return by_path(path, |_, _| Ok(())).map(|_| Err(e)),
    };
    by_path(path, |s, p| {
        let b = &buf(v, size);
        if follow {
            s.setxattr(p, nm, b, flags)
        } else {
            s.lsetxattr(p, nm, b, flags)
        }
    })
    .map(|r| r.map(|_| 0))
}

fn list(path: *const c_char, out: *mut c_char, size: size_t, follow: bool) -> Answer<ssize_t> {
    by_path(path, |s, p| {
        let b = &mut buf_mut(out.cast(), size);
        if follow {
            s.listxattr(p, b)
        } else {
            s.llistxattr(p, b)
        }
    })
    .map(|r| r.map(|n| n as ssize_t))
}

fn remove(path: *const c_char, n: *const c_char, follow: bool) -> Answer<c_int> {
    let nm = match name(n) {
        Ok(nm) => nm,
        Err(e) => return by_path(path, |_, _| Ok(())).map(|_| Err(e)),
    };
    by_path(path, |s, p| {
        if follow {
            s.removexattr(p, nm)
        } else {
            s.lremovexattr(p, nm)
        }
    })
    .map(|r| r.map(|_| 0))
}

export! {
    fn getxattr(p: *const c_char, n: *const c_char, v: *mut c_void, size: size_t) -> ssize_t { get(p, n, v, size, true) }
    fn lgetxattr(p: *const c_char, n: *const c_char, v: *mut c_void, size: size_t) -> ssize_t { get(p, n, v, size, false) }
    fn fgetxattr(fd: c_int, n: *const c_char, v: *mut c_void, size: size_t) -> ssize_t {
        fd_call(fd, |d, l| crate::call::session(l).fgetxattr(d.fd, name(n)?, &mut buf_mut(v, size)).map(|n| n as ssize_t).map_err(errno_of))
    }
    fn setxattr(p: *const c_char, n: *const c_char, v: *const c_void, size: size_t, f: c_int) -> c_int { set(p, n, v, size, f, true) }
    fn lsetxattr(p: *const c_char, n: *const c_char, v: *const c_void, size: size_t, f: c_int) -> c_int { set(p, n, v, size, f, false) }
    fn fsetxattr(fd: c_int, n: *const c_char, v: *const c_void, size: size_t, f: c_int) -> c_int {
        fd_call(fd, |d, l| crate::call::session(l).fsetxattr(d.fd, name(n)?, &buf(v, size), f).map(|_| 0).map_err(errno_of))
    }
    fn listxattr(p: *const c_char, out: *mut c_char, size: size_t) -> ssize_t { list(p, out, size, true) }
    fn llistxattr(p: *const c_char, out: *mut c_char, size: size_t) -> ssize_t { list(p, out, size, false) }
    fn flistxattr(fd: c_int, out: *mut c_char, size: size_t) -> ssize_t {
        fd_call(fd, |d, l| crate::call::session(l).flistxattr(d.fd, &mut buf_mut(out.cast(), size)).map(|n| n as ssize_t).map_err(errno_of))
    }
    fn removexattr(p: *const c_char, n: *const c_char) -> c_int { remove(p, n, true) }
    fn lremovexattr(p: *const c_char, n: *const c_char) -> c_int { remove(p, n, false) }
    fn fremovexattr(fd: c_int, n: *const c_char) -> c_int {
        fd_call(fd, |d, l| crate::call::session(l).fremovexattr(d.fd, name(n)?).map(|_| 0).map_err(errno_of))
    }
}
