//! Copies between descriptors (`sendfile`, `copy_file_range`) when either side is the
//! mount's, through a buffer; and `mmap` of an easyio file.

use std::ffi::{c_int, c_uint, c_void};

use libc::{loff_t, off_t, size_t, ssize_t};

use crate::guard::{errno_of, Answer};
use crate::real::{export, libc_call};
use crate::report::Once;
use crate::table;

/// Bytes copied per step.
const CHUNK: usize = 1 << 20;

/// Reads from either kind of descriptor, at `off` or the position.
fn read_any(fd: c_int, b: &mut [u8], off: Option<u64>) -> Result<usize, i32> {
    if let Some(d) = table::get(fd) {
        let l = crate::call::mount_of(&d)?;
        return crate::io::read_at(&l, d.fd, b, off);
    }
    let n = match off {
        None => {
            libc_call!(read: fn(c_int, *mut c_void, size_t) -> ssize_t, fd, b.as_mut_ptr().cast(), b.len())
        }
        Some(o) => {
            libc_call!(pread64: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t, fd, b.as_mut_ptr().cast(), b.len(), o as off_t)
        }
    };
    if n < 0 {
        Err(crate::real::errno())
    } else {
        Ok(n as usize)
    }
}

/// Writes all of `b` to either kind of descriptor.
fn write_any(fd: c_int, b: &[u8], off: Option<u64>) -> Result<usize, i32> {
    if let Some(d) = table::get(fd) {
        let l = crate::call::mount_of(&d)?;
        return crate::io::write_at(&l, d.fd, b, off);
    }
    let n = match off {
        None => {
            libc_call!(write: fn(c_int, *const c_void, size_t) -> ssize_t, fd, b.as_ptr().cast(), b.len())
        }
        Some(o) => {
            libc_call!(pwrite64: fn(c_int, *const c_void, size_t, off_t) -> ssize_t, fd, b.as_ptr().cast(), b.len(), o as off_t)
        }
    };
    if n < 0 {
        Err(crate::real::errno())
    } else {
        Ok(n as usize)
    }
}

/// Copies up to `len` bytes; offsets given by pointer are used and advanced, else
/// the positions move. Returns the bytes copied (short at the end of the input).
fn copy(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: usize,
) -> Answer<ssize_t> {
    if !table::is_ours(fd_in) && !table::is_ours(fd_out) {
        return None;
    }
    let get = |p: *mut i64| {
        // SAFETY: a non-NULL offset argument points to the program's offset.
        (!p.is_null()).then(|| unsafe { *p } as u64)
    };
    let (mut oi, mut oo) = (get(off_in), get(off_out));
    let mut buf = vec![0u8; len.min(CHUNK)];
    let mut done = 0usize;
    let r = (|| {
        while done < len {
            let want = (len - done).min(buf.len());
            let n = read_any(fd_in, &mut buf[..want], oi)?;
            if n == 0 {
                break;
            }
            let mut w = 0;
            while w < n {
                let k = write_any(fd_out, &buf[w..n], oo.map(|o| o + w as u64))?;
                w += k;
            }
            oi = oi.map(|o| o + n as u64);
            oo = oo.map(|o| o + n as u64);
            done += n;
        }
        Ok(())
    })();
    for (p, v) in [(off_in, oi), (off_out, oo)] {
        if let (false, Some(v)) = (p.is_null(), v) {
            // SAFETY: as above.
            unsafe { *p = v as i64 };
        }
    }
    Some(match r {
        Err(e) if done == 0 => Err(e),
        _ => Ok(done as ssize_t),
    })
}

static SHARED_MAP: Once = Once::new();

/// `mmap` of an easyio file: a private copy filled by a read. A shared writable
/// mapping cannot be kept coherent with the file without page faults the shim does
/// not see: ENODEV.
fn easy_mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> Answer<*mut c_void> {
    let d = table::get(fd)?;
    if flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0 {
        SHARED_MAP
            .say(|| "a shared writable mmap of an easyio file is not supported: ENODEV".into());
        return Some(Err(libc::ENODEV));
    }
    let flags = (flags & !(libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE))
        | libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS;
    Some((|| {
        let l = crate::call::mount_of(&d)?;
        let p = libc_call!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void, addr, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0);
        if p == libc::MAP_FAILED {
            return Err(crate::real::errno());
        }
        let dst = crate::real::buf_mut(p, len);
        let mut at = 0;
        while at < len {
            let n =
                l.fs.pread(d.fd, &mut dst[at..], off as u64 + at as u64)
                    .map_err(errno_of)?;
            if n == 0 {
                break;
            }
            at += n;
        }
        // SAFETY: our own fresh mapping of `len` bytes.
        unsafe { libc::mprotect(p, len, prot) };
        Ok(p)
    })())
}

export! {
    fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t { copy(inp, off, out, std::ptr::null_mut(), n) }
    fn sendfile64(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t { copy(inp, off, out, std::ptr::null_mut(), n) }
    fn copy_file_range(fi: c_int, oi: *mut loff_t, fo: c_int, oo: *mut loff_t, n: size_t, flags: c_uint) -> ssize_t {
        if flags != 0 && (table::is_ours(fi) || table::is_ours(fo)) {
            return Some(Err(libc::EINVAL));
        }
        copy(fi, oi, fo, oo, n)
    }
}

// `mmap` returns MAP_FAILED, not NULL, on failure: exported by hand.
#[no_mangle]
extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    map(addr, len, prot, flags, fd, off)
}

#[no_mangle]
extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    map(addr, len, prot, flags, fd, off)
}

fn map(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let pass = || libc_call!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void, addr, len, prot, flags, fd, off);
    if fd < 0 || flags & libc::MAP_ANONYMOUS != 0 {
        return pass();
    }
    let r = crate::guard::intercept(pass, || easy_mmap(addr, len, prot, flags, fd, off));
    if r.is_null() {
        libc::MAP_FAILED
    } else {
        r
    }
}
