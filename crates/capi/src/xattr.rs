//! Extended attributes: get, set, list and remove, by path (a final symbolic link
//! followed), by path of the link itself (`l*`), or by descriptor (`f*`). Names are
//! `user.*`, `trusted.*`, `security.*`; a list is the names each followed by a NUL.
//! A buffer of size 0 asks for the size needed. These calls run in the trusted
//! context whatever [`crate::easyio_set_cred`] says (the file system checks no
//! credentials on attributes).

use std::ffi::{c_char, c_int, c_void};

use crate::args::{bytes, bytes_mut, string};
use crate::error::CResult;
use crate::files::{xsized, xstatus};
use crate::mount::easyio_fs;
use crate::mount::mount_of;

/// What an attribute call names: a path (following a final link or not) or a
/// descriptor.
enum On<'a> {
    Path(&'a str, bool),
    Fd(fs::Fd),
}

fn path(p: *const c_char, follow: bool) -> CResult<On<'static>> {
    Ok(On::Path(string(p, "path")?, follow))
}

fn fd(f: c_int) -> CResult<On<'static>> {
    Ok(On::Fd(crate::args::fd(f)?))
}

fn get(
    fs: *mut easyio_fs,
    on: CResult<On>,
    name: *const c_char,
    v: *mut c_void,
    size: usize,
) -> libc::ssize_t {
    xsized(|| {
        let m = mount_of(fs)?;
        let (on, name, buf) = (on?, string(name, "name")?, bytes_mut(v, size, "value")?);
        let buf = &mut buf.place();
        Ok(match on {
            On::Path(p, true) => m.fs.getxattr(p, name, buf)?,
            On::Path(p, false) => m.fs.lgetxattr(p, name, buf)?,
            On::Fd(f) => m.fs.fgetxattr(f, name, buf)?,
        })
    })
}

fn set(
    fs: *mut easyio_fs,
    on: CResult<On>,
    name: *const c_char,
    v: *const c_void,
    (size, flags): (usize, c_int),
) -> c_int {
    xstatus(|| {
        let m = mount_of(fs)?;
        let (on, name, val) = (on?, string(name, "name")?, bytes(v, size, "value")?);
        let val = &val.view();
        let r = match on {
            On::Path(p, true) => m.fs.setxattr(p, name, val, flags),
            On::Path(p, false) => m.fs.lsetxattr(p, name, val, flags),
            On::Fd(f) => m.fs.fsetxattr(f, name, val, flags),
        };
        Ok(r?)
    })
}

fn list(fs: *mut easyio_fs, on: CResult<On>, l: *mut c_char, size: usize) -> libc::ssize_t {
    xsized(|| {
        let m = mount_of(fs)?;
        let (on, buf) = (on?, bytes_mut(l.cast(), size, "list")?);
        let buf = &mut buf.place();
        Ok(match on {
            On::Path(p, true) => m.fs.listxattr(p, buf)?,
            On::Path(p, false) => m.fs.llistxattr(p, buf)?,
            On::Fd(f) => m.fs.flistxattr(f, buf)?,
        })
    })
}

fn remove(fs: *mut easyio_fs, on: CResult<On>, name: *const c_char) -> c_int {
    xstatus(|| {
        let m = mount_of(fs)?;
        let (on, name) = (on?, string(name, "name")?);
        let r = match on {
            On::Path(p, true) => m.fs.removexattr(p, name),
            On::Path(p, false) => m.fs.lremovexattr(p, name),
            On::Fd(f) => m.fs.fremovexattr(f, name),
        };
        Ok(r?)
    })
}

/// `getxattr`: copies the value of attribute `name` into `value` (`size` bytes;
/// ERANGE if too small; 0 asks for the length); returns its length. ENODATA if the
/// file has no such attribute.
#[no_mangle]
pub extern "C" fn easyio_getxattr(
    fs: *mut easyio_fs,
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> libc::ssize_t {
    get(fs, self::path(path, true), name, value, size)
}

/// `lgetxattr`: of a final symbolic link itself.
#[no_mangle]
pub extern "C" fn easyio_lgetxattr(
    fs: *mut easyio_fs,
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> libc::ssize_t {
    get(fs, self::path(path, false), name, value, size)
}

/// `fgetxattr`: of an open file.
#[no_mangle]
pub extern "C" fn easyio_fgetxattr(
    fs: *mut easyio_fs,
    fd: c_int,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> libc::ssize_t {
    get(fs, self::fd(fd), name, value, size)
}

/// `setxattr`: sets attribute `name` to the `size` bytes at `value`; `flags` is 0,
/// `XATTR_CREATE` (EEXIST if it exists) or `XATTR_REPLACE` (ENODATA if not).
#[no_mangle]
pub extern "C" fn easyio_setxattr(
    fs: *mut easyio_fs,
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    set(fs, self::path(path, true), name, value, (size, flags))
}

/// `lsetxattr`: of a final symbolic link itself.
#[no_mangle]
pub extern "C" fn easyio_lsetxattr(
    fs: *mut easyio_fs,
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    set(fs, self::path(path, false), name, value, (size, flags))
}

/// `fsetxattr`: of an open file.
#[no_mangle]
pub extern "C" fn easyio_fsetxattr(
    fs: *mut easyio_fs,
    fd: c_int,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    set(fs, self::fd(fd), name, value, (size, flags))
}

/// `listxattr`: the names of the file's attributes, each NUL-terminated, into
/// `list` (`size` bytes; ERANGE if too small; 0 asks for the length needed).
#[no_mangle]
pub extern "C" fn easyio_listxattr(
    fs: *mut easyio_fs,
    path: *const c_char,
    list: *mut c_char,
    size: usize,
) -> libc::ssize_t {
    self::list(fs, self::path(path, true), list, size)
}

/// `llistxattr`: of a final symbolic link itself.
#[no_mangle]
pub extern "C" fn easyio_llistxattr(
    fs: *mut easyio_fs,
    path: *const c_char,
    list: *mut c_char,
    size: usize,
) -> libc::ssize_t {
    self::list(fs, self::path(path, false), list, size)
}

/// `flistxattr`: of an open file.
#[no_mangle]
pub extern "C" fn easyio_flistxattr(
    fs: *mut easyio_fs,
    fd: c_int,
    list: *mut c_char,
    size: usize,
) -> libc::ssize_t {
    self::list(fs, self::fd(fd), list, size)
}

/// `removexattr`: removes attribute `name` (ENODATA if there is none).
#[no_mangle]
pub extern "C" fn easyio_removexattr(
    fs: *mut easyio_fs,
    path: *const c_char,
    name: *const c_char,
) -> c_int {
    remove(fs, self::path(path, true), name)
}

/// `lremovexattr`: of a final symbolic link itself.
#[no_mangle]
pub extern "C" fn easyio_lremovexattr(
    fs: *mut easyio_fs,
    path: *const c_char,
    name: *const c_char,
) -> c_int {
    remove(fs, self::path(path, false), name)
}

/// `fremovexattr`: of an open file.
#[no_mangle]
pub extern "C" fn easyio_fremovexattr(fs: *mut easyio_fs, fd: c_int, name: *const c_char) -> c_int {
    remove(fs, self::fd(fd), name)
}
