//! Arguments from C: strings, descriptors, buffers. Each conversion checks for NULL
//! and range first; the `unsafe` ones rely only on what the header asks of the caller,
//! and on a check that the memory is not shared with another process: a caller's
//! pointer into a staging buffer (`easyio_buffer_alloc` on a server's connection),
//! which the server maps too, never becomes a reference. The data calls hand such a
//! buffer to the server by its address ([`In`], [`Out`]); the other calls, and a data
//! call on another handle, work on a private copy made through raw pointers
//! ([`Place`]).

use std::borrow::Cow;
use std::ffi::{c_char, c_int, c_void, CStr};

use easyio_serve::shared::view as view_of;
pub(crate) use easyio_serve::shared::Place;

use fs::Fd;

use crate::error::{CResult, Failure};
pub(crate) use crate::names::EASYIO_AT_ROOT;

/// A NUL-terminated UTF-8 string (paths and names; other bytes are EINVAL).
pub(crate) fn string<'a>(p: *const c_char, what: &str) -> CResult<&'a str> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL, and the header asks for a NUL-terminated string that lives for
    // the call; measured by C's `strlen`, through a raw pointer.
    let n = unsafe { libc::strlen(p) };
    if shared(p, n + 1) {
        return Err(Failure::new(
            libc::EINVAL,
            format!("{what} lies in a staging buffer (shared with the server)"),
        ));
    }
    // SAFETY: as above, and the string lies in no memory this process shares with
    // another (checked just above), so nothing outside the program changes it while
    // the reference lives.
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

/// Whether `n` items at `p` meet memory the library shares with another process: a staging
/// buffer of `easyio_buffer_alloc` on any server's connection, which the server may
/// store into. Such memory is reached only through raw-pointer copies, never through
/// a reference (Rust allows none to memory another process may write meanwhile).
fn shared<T>(p: *const T, n: usize) -> bool {
    easyio_serve::staging::overlaps(p.cast(), n.saturating_mul(std::mem::size_of::<T>()))
}

/// A buffer of the C caller's that a call reads from, checked for NULL: its address
/// and length, no byte touched yet.
#[derive(Clone, Copy)]
pub(crate) struct In {
    p: *const u8,
    len: usize,
}

impl In {
    /// Where it starts.
    pub(crate) fn ptr(self) -> *const u8 {
        self.p
    }

    /// Its bytes.
    pub(crate) fn len(self) -> usize {
        self.len
    }

    /// Its bytes to read: the caller's memory itself, or a private copy of it where
    /// it lies in shared memory (a staging buffer handed to a call that cannot take
    /// it as one).
    pub(crate) fn view<'a>(self) -> Cow<'a, [u8]> {
        if self.len == 0 {
            return Cow::Borrowed(&[]);
        }
        // SAFETY: not NULL (`bytes`); the header asks for `len` readable bytes that
        // live, unchanged by the program's other threads, for the call; `shared`
        // tells whether another process may store into them (every staging buffer
        // mapped here is the only memory the library shares).
        unsafe { view_of(self.p, self.len, shared(self.p, self.len)) }
    }
}

/// A buffer of the C caller's that a call writes into, checked for NULL.
#[derive(Clone, Copy)]
pub(crate) struct Out {
    p: *mut u8,
    len: usize,
}

impl Out {
    /// Where it starts.
    pub(crate) fn ptr(self) -> *mut u8 {
        self.p
    }

    /// Its bytes.
    pub(crate) fn len(self) -> usize {
        self.len
    }

    /// The same bytes, to read from.
    pub(crate) fn readable(self) -> In {
        In {
            p: self.p,
            len: self.len,
        }
    }

    /// The bytes to write into ([`Place`]).
    pub(crate) fn place<'a>(self) -> Place<'a, u8> {
        if self.len == 0 {
            return Place::Own(&mut []);
        }
        // SAFETY: not NULL (`bytes_mut`); the header asks for `len` writable bytes
        // that the program's other threads do not touch during the call; `shared` as
        // in `In::view`.
        unsafe { Place::new(self.p, self.len, shared(self.p, self.len)) }
    }
}

/// A buffer the call reads from; NULL is allowed only with length 0.
pub(crate) fn bytes(p: *const c_void, len: usize, what: &str) -> CResult<In> {
    if p.is_null() && len != 0 {
        return Err(Failure::null(what));
    }
    Ok(In { p: p.cast(), len })
}

/// A buffer the call writes into; NULL is allowed only with length 0.
pub(crate) fn bytes_mut(p: *mut c_void, len: usize, what: &str) -> CResult<Out> {
    if p.is_null() && len != 0 {
        return Err(Failure::null(what));
    }
    Ok(Out { p: p.cast(), len })
}

/// A place for one answer (NULL: EINVAL).
pub(crate) fn out<'a, T: Copy>(p: *mut T, what: &str) -> CResult<One<'a, T>> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; the header asks for a valid, writable `T` for the call;
    // `shared` as in `In::view`.
    Ok(One(unsafe { Place::new(p, 1, shared(p, 1)) }))
}

/// One answer's place ([`Place`] of one item).
pub(crate) struct One<'a, T: Copy>(Place<'a, T>);

impl<T: Copy> std::ops::Deref for One<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0[0]
    }
}

impl<T: Copy> std::ops::DerefMut for One<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0[0]
    }
}

/// An array of `n` items to read; NULL only with `n` 0.
pub(crate) fn slice<'a, T: Copy>(p: *const T, n: usize, what: &str) -> CResult<Cow<'a, [T]>> {
    if n == 0 {
        return Ok(Cow::Borrowed(&[]));
    }
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; the header asks for `n` valid items for the call; `shared`
    // as in `In::view`.
    Ok(unsafe { view_of(p, n, shared(p, n)) })
}

/// An array of `n` items to write; NULL only with `n` 0.
pub(crate) fn slice_mut<'a, T: Copy>(p: *mut T, n: usize, what: &str) -> CResult<Place<'a, T>> {
    if n == 0 {
        return Ok(Place::Own(&mut []));
    }
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; the header asks for `n` writable items for the call;
    // `shared` as in `In::view`.
    Ok(unsafe { Place::new(p, n, shared(p, n)) })
}

/// A non-negative offset or length (negative: EINVAL, as the kernel says).
pub(crate) fn offset(o: libc::off_t, what: &str) -> CResult<u64> {
    u64::try_from(o).map_err(|_| Failure::new(libc::EINVAL, format!("{what} is negative")))
}

/// A count returned to C as `ssize_t`.
pub(crate) fn count(n: usize) -> libc::ssize_t {
    n as libc::ssize_t
}
