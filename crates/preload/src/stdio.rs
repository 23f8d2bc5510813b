//! stdio streams on the mount: `fopen(64)`, `fdopen`, `freopen` make a stream with
//! `fopencookie` whose reads, writes and seeks are the shim's calls on an easyio
//! descriptor (glibc's `fopen` opens with its internal `open`, not ours), and
//! `fileno` of such a stream answers that descriptor. (`freopen` is in `freopen.rs`.)

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_void, CStr};

use libc::{off64_t, size_t, ssize_t, FILE};
use parking_lot::Mutex;

use crate::call::open;
use crate::guard::{export, Answer};
use crate::path::{classify, Target};

/// glibc's `cookie_io_functions_t` (`<stdio.h>`, `_GNU_SOURCE`).
#[repr(C)]
struct CookieIo {
    read: extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t,
    write: extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t,
    seek: extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int,
    close: extern "C" fn(*mut c_void) -> c_int,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
}

/// The easyio descriptor of each stream the shim made.
static STREAMS: Mutex<Option<HashMap<usize, c_int>>> = Mutex::new(None);

/// `open` flags of an `fopen` mode string, or EINVAL.
pub(crate) fn flags_of(mode: *const c_char) -> Result<c_int, i32> {
    if mode.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: a mode argument is a NUL-terminated string.
    let m = unsafe { CStr::from_ptr(mode) }.to_bytes();
    let plus = m.contains(&b'+');
    let mut f = match (m.first(), plus) {
        (Some(b'r'), false) => libc::O_RDONLY,
        (Some(b'r'), true) => libc::O_RDWR,
        (Some(b'w'), p) => {
            libc::O_CREAT | libc::O_TRUNC | if p { libc::O_RDWR } else { libc::O_WRONLY }
        }
        (Some(b'a'), p) => {
            libc::O_CREAT | libc::O_APPEND | if p { libc::O_RDWR } else { libc::O_WRONLY }
        }
        _ => return Err(libc::EINVAL),
    };
    if m.contains(&b'x') {
        f |= libc::O_EXCL;
    }
    if m.contains(&b'e') {
        f |= libc::O_CLOEXEC;
    }
    Ok(f)
}

fn cookie_fd(c: *mut c_void) -> c_int {
    c as usize as c_int
}

extern "C" fn cookie_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // glibc's stdio calls this with the guard off: it is the program's read.
    // SAFETY: stdio's buffer of `n` bytes.
    unsafe { libc::read(cookie_fd(c), buf.cast(), n) }
}

extern "C" fn cookie_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // SAFETY: stdio's buffer of `n` bytes.
    unsafe { libc::write(cookie_fd(c), buf.cast(), n) }
}

extern "C" fn cookie_seek(c: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    // SAFETY: stdio passes a valid offset to update.
    unsafe {
        let r = libc::lseek64(cookie_fd(c), *off, whence);
        if r < 0 {
            return -1;
        }
        *off = r;
    }
    0
}

extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    let fd = cookie_fd(c);
    if let Some(m) = STREAMS.lock().as_mut() {
        m.retain(|_, v| *v != fd);
    }
    // SAFETY: closing the stream's own descriptor.
    unsafe { libc::close(fd) }
}

/// A stream over easyio descriptor `fd` (which it then owns).
fn stream(fd: c_int, mode: *const c_char) -> Result<*mut FILE, i32> {
    let funcs = CookieIo {
        read: cookie_read,
        write: cookie_write,
        seek: cookie_seek,
        close: cookie_close,
    };
    // SAFETY: `mode` is the program's mode string; the cookie is a number.
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, funcs) };
    if f.is_null() {
        return Err(crate::real::errno());
    }
    STREAMS
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(f as usize, fd);
    Ok(f)
}

pub(crate) fn easy_fopen(path: *const c_char, mode: *const c_char) -> Answer<*mut FILE> {
    let t = classify(libc::AT_FDCWD, path);
    if let Ok(Target::Kernel) = t {
        return None;
    }
    let flags = match flags_of(mode) {
        Ok(f) => f,
        Err(e) => return Some(Err(e)),
    };
    let fd = open(t, flags, 0o666)?;
    Some(fd.and_then(|fd| {
        let r = stream(fd, mode);
        if r.is_err() {
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
        }
        r
    }))
}

export! {
    fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE { easy_fopen(path, mode) }
    fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE { easy_fopen(path, mode) }
    fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
        crate::table::is_ours(fd).then(|| stream(fd, mode))
    }
    fn fileno(f: *mut FILE) -> c_int {
        if let Some(c) = STD_STREAMS.lock().get(&(f as usize)) {
            return Some(Ok(std_cookie(*c as *mut c_void).fd));
        }
        STREAMS.lock().as_ref().and_then(|m| m.get(&(f as usize)).copied()).map(Ok)
    }
}

extern "C" {
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// The program's own stream of each standard descriptor while a stream of the shim
/// stands in for it (0: none stands in).
static SAVED: Mutex<[usize; 3]> = Mutex::new([0; 3]);

/// A standard stream of the shim: its descriptor, and whether it still stands for
/// it (a stream let go is closed without closing the descriptor).
struct StdCookie {
    fd: c_int,
    attached: std::sync::atomic::AtomicBool,
}

fn std_cookie<'a>(c: *mut c_void) -> &'a StdCookie {
    // SAFETY: the cookie of a standard stream of the shim is a leaked `StdCookie`,
    // freed only by its close.
    unsafe { &*c.cast::<StdCookie>() }
}

/// A read or write of a standard stream's descriptor: `shim`, the shim's own
/// call on the mount's descriptor (glibc may call this from inside the shim, while
/// it flushes), else libc's (`kernel`). A panic in the shim is EIO.
fn std_io(
    shim: impl FnOnce() -> Option<Result<usize, i32>> + std::panic::UnwindSafe,
    kernel: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let _g = crate::guard::Guard::enter();
    match std::panic::catch_unwind(shim) {
        Ok(Some(Ok(n))) => n as ssize_t,
        Ok(Some(Err(e))) => {
            crate::real::set_errno(e);
            -1
        }
        Ok(None) => kernel(),
        Err(_) => {
            crate::real::set_errno(libc::EIO);
            -1
        }
    }
}

/// A read of a standard stream (see [`std_io`]).
extern "C" fn std_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    let fd = std_cookie(c).fd;
    std_io(
        || {
            crate::call::fd_call(fd, |d, l| {
                crate::io::read_at(l, d.fd, &mut crate::real::buf_mut(buf.cast(), n), None)
            })
        },
        || crate::real::libc_call!(read: fn(c_int, *mut c_void, size_t) -> ssize_t, fd, buf.cast(), n),
    )
}

/// A write of a standard stream (see [`std_io`]).
extern "C" fn std_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    let fd = std_cookie(c).fd;
    std_io(
        || {
            crate::call::fd_call(fd, |d, l| {
                crate::io::write_at(l, d.fd, &crate::real::buf(buf.cast(), n), None)
            })
        },
        || crate::real::libc_call!(write: fn(c_int, *const c_void, size_t) -> ssize_t, fd, buf.cast(), n),
    )
}

extern "C" fn std_seek(c: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    let fd = std_cookie(c).fd;
    let _g = crate::guard::Guard::enter();
    // SAFETY: stdio passes a valid offset to update.
    let want = unsafe { *off };
    let r = std::panic::catch_unwind(|| crate::io::seek(fd, want, whence));
    let at = match r {
        Ok(Some(Ok(at))) => at,
        Ok(Some(Err(e))) => {
            crate::real::set_errno(e);
            return -1;
        }
        Ok(None) => {
            let r = crate::real::libc_call!(lseek64: fn(c_int, off64_t, c_int) -> off64_t, fd, want, whence);
            if r < 0 {
                return -1;
            }
            r
        }
        Err(_) => {
            crate::real::set_errno(libc::EIO);
            return -1;
        }
    };
    // SAFETY: as above.
    unsafe { *off = at };
    0
}

/// Closing a standard stream of the shim: the descriptor too, if the stream still
/// stands for it (the program's `fclose(stdout)`).
extern "C" fn std_close(c: *mut c_void) -> c_int {
    // SAFETY: the cookie is ours (see `std_cookie`), closed once by stdio.
    let cookie = unsafe { Box::from_raw(c.cast::<StdCookie>()) };
    // The program closes the shim's stream: its own comes back in the variable
    // (NULL-safe: glibc's streams outlive the program's use of them).
    let f = {
        let mut m = STD_STREAMS.lock();
        let f = m.iter().find(|(_, v)| **v == c as usize).map(|(f, _)| *f);
        if let Some(f) = f {
            m.remove(&f);
        }
        f
    };
    if let (Some(f), Some((slot, _))) = (f, std_slot(cookie.fd)) {
        let mut saved = SAVED.lock();
        let i = cookie.fd as usize;
        // SAFETY: the standard stream variable, as in `after_std_change`.
        unsafe {
            if saved[i] != 0 && *slot as usize == f {
                *slot = saved[i] as *mut FILE;
                saved[i] = 0;
            }
        }
    }
    if cookie.attached.load(std::sync::atomic::Ordering::Relaxed) {
        // SAFETY: the program closes its stream, and with it the descriptor.
        unsafe { libc::close(cookie.fd) }
    } else {
        0
    }
}

/// glibc's `stdin`, `stdout` or `stderr` variable (the program's copy of it, which
/// glibc's own functions use too) and the mode of a stream for it.
pub(crate) fn std_slot(k: c_int) -> Option<(*mut *mut FILE, &'static CStr)> {
    Some(match k {
        0 => (std::ptr::addr_of_mut!(stdin), c"r"),
        1 => (std::ptr::addr_of_mut!(stdout), c"w"),
        2 => (std::ptr::addr_of_mut!(stderr), c"w"),
        _ => return None,
    })
}

/// Before descriptor `k` changes (a `dup2` onto it, a `close`): output the program
/// buffered for what it was goes there first.
pub(crate) fn before_std_change(k: c_int) {
    if let Some((slot, _)) = std_slot(k) {
        // SAFETY: the standard stream variable holds a stream (or NULL).
        unsafe {
            let f = *slot;
            if !f.is_null() && k != 0 {
                libc::fflush(f);
            }
        }
    }
}

/// After descriptor `k` changed: if it is now the mount's, glibc's standard stream
/// for it becomes a stream of the shim (glibc writes its own streams with an
/// internal `write` the shim does not see); if it is no longer, the program's own
/// stream comes back.
pub(crate) fn after_std_change(k: c_int) {
    let Some((slot, mode)) = std_slot(k) else {
        return;
    };
    let ours = crate::table::is_ours(k);
    let mut saved = SAVED.lock();
    let i = k as usize;
    // SAFETY: the standard stream variables are read and written by the thread that
    // changes the descriptor, as the program itself would (`stdout = ...`).
    unsafe {
        if saved[i] != 0 {
            // Let the shim's stream go, without its descriptor.
            let f = *slot;
            let cookie = STD_STREAMS.lock().remove(&(f as usize));
            if let Some(c) = cookie {
                std_cookie(c as *mut c_void)
                    .attached
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                libc::fclose(f);
            }
            *slot = saved[i] as *mut FILE;
            saved[i] = 0;
        }
        if ours {
            let cookie = Box::into_raw(Box::new(StdCookie {
                fd: k,
                attached: std::sync::atomic::AtomicBool::new(true),
            }));
            let funcs = CookieIo {
                read: std_read,
                write: std_write,
                seek: std_seek,
                close: std_close,
            };
            let f = fopencookie(cookie.cast(), mode.as_ptr(), funcs);
            if f.is_null() {
                drop(Box::from_raw(cookie));
                return;
            }
            if k == 2 {
                libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
            }
            STD_STREAMS.lock().insert(f as usize, cookie as usize);
            saved[i] = *slot as usize;
            *slot = f;
        }
    }
}

/// The cookie of each standard stream of the shim.
static STD_STREAMS: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

/// After an `exec` that handed standard descriptors over (a shell's redirection into
/// the mount): the program's `stdin`, `stdout` and `stderr` become streams of the
/// shim, since glibc's own write to their descriptors with its internal `write`,
/// which the shim does not see.
pub(crate) fn adopt_std_streams(kfds: &[c_int]) {
    for &k in kfds {
        after_std_change(k);
    }
}
