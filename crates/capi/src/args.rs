//! Arguments from C: strings, descriptors, buffers. Each conversion checks for NULL
//! and range first; the `unsafe` ones rely only on what the header asks of the caller.

use std::ffi::{c_char, c_int, c_void, CStr};

use fs::Fd;

use crate::error::{CResult, Failure};
pub(crate) use crate::names::EASYIO_AT_ROOT;

/// A NUL-terminated UTF-8 string (paths and names; other bytes are EINVAL).
pub(crate) fn string<'a>(p: *const c_char, what: &str) -> CResult<&'a str> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL, and the header asks for a NUL-terminated string that lives for
    // the call.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|_| Failure::new(libc::EINVAL, format!("{what} is not UTF-8")))
}

/// An optional string: NULL is `None`.
pub(crate) fn opt_string<'a>(p: *const c_char, what: &str) -> CResult<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        string(p, what).map(Some)
    }
}

/// A descriptor number (negative ones are EBADF, as in the kernel).
pub(crate) fn fd(fd: c_int) -> CResult<Fd> {
    u32::try_from(fd)
        .map(Fd)
        .map_err(|_| Failure::new(libc::EBADF, format!("bad descriptor {fd}")))
}

/// The directory of an `*at` call: [`EASYIO_AT_ROOT`] is the root.
pub(crate) fn dirfd(d: c_int) -> CResult<Option<Fd>> {
    if d == EASYIO_AT_ROOT {
        Ok(None)
    } else {
        fd(d).map(Some)
    }
}

/// A buffer the call reads from; NULL is allowed only with length 0.
pub(crate) fn bytes<'a>(p: *const c_void, len: usize, what: &str) -> CResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; the header asks for `len` readable bytes that live, unchanged
    // by others, for the call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// A buffer the call writes into; NULL is allowed only with length 0.
pub(crate) fn bytes_mut<'a>(p: *mut c_void, len: usize, what: &str) -> CResult<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; the header asks for `len` writable bytes that nobody else
    // touches during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// A place for one answer (NULL: EINVAL).
pub(crate) fn out<'a, T>(p: *mut T, what: &str) -> CResult<&'a mut T> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; the header asks for a valid, writable `T` for the call.
    Ok(unsafe { &mut *p })
}

/// An array of `n` items to read; NULL only with `n` 0.
pub(crate) fn slice<'a, T>(p: *const T, n: usize, what: &str) -> CResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; the header asks for `n` valid items for the call.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// An array of `n` items to write; NULL only with `n` 0.
pub(crate) fn slice_mut<'a, T>(p: *mut T, n: usize, what: &str) -> CResult<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; the header asks for `n` writable items for the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// A non-negative offset or length (negative: EINVAL, as the kernel says).
pub(crate) fn offset(o: libc::off_t, what: &str) -> CResult<u64> {
    u64::try_from(o).map_err(|_| Failure::new(libc::EINVAL, format!("{what} is negative")))
}

/// A count returned to C as `ssize_t`.
pub(crate) fn count(n: usize) -> libc::ssize_t {
    n as libc::ssize_t
}
