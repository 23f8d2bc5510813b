//! stdio streams on the mount: `fopen(64)`, `fdopen`, `freopen` make a stream with
//! `fopencookie` whose reads, writes and seeks are the shim's calls on an easyio
//! descriptor (glibc's `fopen` opens with its internal `open`, not ours), and
//! `fileno` of such a stream answers that descriptor.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};

use libc::{off64_t, size_t, ssize_t, FILE};
use parking_lot::Mutex;

use crate::call::open;
use crate::guard::Answer;
use crate::path::{classify, Target};
use crate::real::export;

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
fn flags_of(mode: *const c_char) -> Result<c_int, i32> {
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

fn easy_fopen(path: *const c_char, mode: *const c_char) -> Answer<*mut FILE> {
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
    fn freopen(path: *const c_char, mode: *const c_char, old: *mut FILE) -> *mut FILE {
        // The stream cannot become a cookie stream in place: the old one is closed
        // and a new one returned (a program that keeps using `old` is not served).
        let new = easy_fopen(path, mode)?;
        if !old.is_null() {
            // SAFETY: the program's stream, closed as freopen closes it.
            unsafe { libc::fclose(old) };
        }
        Some(new)
    }
    fn freopen64(path: *const c_char, mode: *const c_char, old: *mut FILE) -> *mut FILE {
        let new = easy_fopen(path, mode)?;
        if !old.is_null() {
            // SAFETY: as in freopen.
            unsafe { libc::fclose(old) };
        }
        Some(new)
    }
    fn fileno(f: *mut FILE) -> c_int {
        STREAMS.lock().as_ref().and_then(|m| m.get(&(f as usize)).copied()).map(Ok)
    }
}

extern "C" {
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// After an `exec` that handed standard descriptors over (a shell's redirection into
/// the mount): the program's `stdin`, `stdout` and `stderr` become streams of the
/// shim, since glibc's own write to their descriptors with its internal `write`,
/// which the shim does not see.
pub(crate) fn adopt_std_streams(kfds: &[c_int]) {
    for &k in kfds {
        // libc's standard stream variables (or the program's copies of them).
        let (slot, mode) = match k {
            0 => (std::ptr::addr_of_mut!(stdin), c"r"),
            1 => (std::ptr::addr_of_mut!(stdout), c"w"),
            2 => (std::ptr::addr_of_mut!(stderr), c"w"),
            _ => continue,
        };
        if let Ok(f) = stream(k, mode.as_ptr()) {
            // SAFETY: `f` is a stream just made; `slot` is a standard stream
            // variable, written once before the program reads it.
            unsafe {
                if k == 2 {
                    libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
                }
                *slot = f;
            }
        }
    }
}
