//! Copies between descriptors (`sendfile`, `copy_file_range`) when either side is the
//! mount's, through a buffer.

use std::ffi::{c_int, c_uint, c_void};

use fs::Fd;
use libc::{loff_t, off_t, size_t, ssize_t};

use crate::guard::{export, Answer};
use crate::live::Live;
use crate::real::libc_call;
use crate::table;

/// Bytes copied per step.
const CHUNK: usize = 1 << 20;

/// Reads from either kind of descriptor, at `off` or the position.
fn read_any(fd: c_int, b: &mut [u8], off: Option<u64>) -> Result<usize, i32> {
    on_any(fd, b, off, crate::io::read_at, |b, off| match off {
        None => {
            libc_call!(read: fn(c_int, *mut c_void, size_t) -> ssize_t, fd, b.as_mut_ptr().cast(), b.len())
        }
        Some(o) => {
            libc_call!(pread64: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t, fd, b.as_mut_ptr().cast(), b.len(), o as off_t)
        }
    })
}

/// Writes all of `b` to either kind of descriptor.
fn write_any(fd: c_int, b: &[u8], off: Option<u64>) -> Result<usize, i32> {
    on_any(fd, b, off, crate::io::write_at, |b, off| match off {
        None => {
            libc_call!(write: fn(c_int, *const c_void, size_t) -> ssize_t, fd, b.as_ptr().cast(), b.len())
        }
        Some(o) => {
            libc_call!(pwrite64: fn(c_int, *const c_void, size_t, off_t) -> ssize_t, fd, b.as_ptr().cast(), b.len(), o as off_t)
        }
    })
}

/// One transfer of buffer `b` on either kind of descriptor: the mount's through `ours`,
/// another through libc's call `theirs` (whose negative answer is an errno to read).
fn on_any<B>(
    fd: c_int,
    b: B,
    off: Option<u64>,
    ours: impl FnOnce(&Live, Fd, B, Option<u64>) -> Result<usize, i32>,
    theirs: impl FnOnce(B, Option<u64>) -> ssize_t,
) -> Result<usize, i32> {
    if let Some(d) = table::get(fd) {
        let l = crate::call::mount_of(&d)?;
        return ours(&l, d.fd, b, off);
    }
    let n = theirs(b, off);
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
