//! The real libc functions, found once with `dlsym(RTLD_NEXT, ...)`, errno, and
//! stderr written with libc's own `write`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};

use easyio_serve::shared::Place;

/// The next definition of C function `$name` (libc's) with C type `fn($t..) -> $r`,
/// resolved on first use and kept.
macro_rules! real {
    ($name:ident: fn($($t:ty),*) -> $r:ty) => {{
        static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let f = $crate::real::resolve(&SLOT, concat!(stringify!($name), "\0"));
        // SAFETY: `f` is the address of libc's function of this name, whose C type
        // is the one written here (the prototype of glibc's header).
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(f) }
    }};
}
pub(crate) use real;

/// The address of the next definition of `name` (NUL-terminated). A symbol libc
/// lacks aborts with one line: a shim that cannot reach libc cannot run anything.
pub(crate) fn resolve(slot: &AtomicUsize, name: &'static str) -> usize {
    let v = slot.load(Ordering::Relaxed);
    if v != 0 {
        return v;
    }
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT searches the objects after ours.
    let mut p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if p == 0 {
        // glibc keeps some old entry points (`__xstat`, ...) only as compatibility
        // symbols of the first x86-64 version, which plain dlsym does not return.
        // SAFETY: as above; the version string is NUL-terminated.
        p = unsafe {
            libc::dlvsym(
                libc::RTLD_NEXT,
                name.as_ptr().cast(),
                c"GLIBC_2.2.5".as_ptr(),
            )
        } as usize;
    }
    if p == 0 {
        let msg = format!(
            "easyio preload: libc has no {}\n",
            name.trim_end_matches('\0')
        );
        raw_stderr(msg.as_bytes());
        // SAFETY: abort never returns and touches nothing of ours.
        unsafe { libc::abort() };
    }
    slot.store(p, Ordering::Relaxed);
    p
}

/// Writes `bytes` to descriptor 2 with libc's own `write` (never ours).
pub(crate) fn raw_stderr(bytes: &[u8]) {
    let write = real!(write: fn(libc::c_int, *const libc::c_void, libc::size_t) -> libc::ssize_t);
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: `rest` is a live byte slice of the given length.
        let n = unsafe { write(2, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// Sets the calling thread's errno.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: glibc's errno location of the calling thread is always valid.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's errno.
pub(crate) fn errno() -> i32 {
    // SAFETY: as in `set_errno`.
    unsafe { *libc::__errno_location() }
}

/// Calls libc's `$name` with the program's own arguments.
macro_rules! libc_call {
    ($name:ident: fn($($t:ty),*) -> $r:ty, $($a:expr),*) => {{
        let f = $crate::real::real!($name: fn($($t),*) -> $r);
        // SAFETY: the program's own arguments, passed on unchanged to libc's call of
        // the same name and type.
        unsafe { f($($a),*) }
    }};
}
pub(crate) use libc_call;

/// The program's buffer of `n` bytes at `p` (empty when `n` is 0), to read: the
/// program's memory itself, or a private copy made through raw pointers where it lies
/// in a shared mapping of the shim's, which other processes may store into at any
/// time ([`crate::mmap::shared`]).
pub(crate) fn buf<'a>(p: *const libc::c_void, n: usize) -> Cow<'a, [u8]> {
    if n == 0 || p.is_null() {
        return Cow::Borrowed(&[]);
    }
    let shared = crate::mmap::shared(p as usize, n);
    // SAFETY: a read or write call's contract: `p` points to `n` readable bytes that
    // live for the call, unchanged by the program's other threads; `shared` says
    // whether another process may store into them (the shim's shared mappings are
    // the only memory it shares).
    unsafe { easyio_serve::shared::view(p.cast(), n, shared) }
}

/// The program's writable buffer of `n` bytes at `p` (empty when `n` is 0): its
/// memory itself, or a private copy copied back when dropped where it lies in a
/// shared mapping of the shim's (as [`buf`]).
pub(crate) fn buf_mut<'a>(p: *mut libc::c_void, n: usize) -> Place<'a, u8> {
    if n == 0 || p.is_null() {
        return Place::Own(&mut []);
    }
    let shared = crate::mmap::shared(p as usize, n);
    // SAFETY: a read call's contract: `p` points to `n` writable bytes that live for
    // the call and that the program's other threads do not touch meanwhile;
    // `shared` as in `buf`.
    unsafe { Place::new(p.cast(), n, shared) }
}

/// The program's `iovec` array.
pub(crate) fn iovecs<'a>(
    iov: *const libc::iovec,
    n: libc::c_int,
) -> Result<Cow<'a, [libc::iovec]>, i32> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(Cow::Borrowed(&[]));
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    let n = n as usize;
    let shared = crate::mmap::shared(iov as usize, n * std::mem::size_of::<libc::iovec>());
    // SAFETY: a vector call's contract: `iov` points to `n` iovecs; `shared` as in
    // `buf`.
    Ok(unsafe { easyio_serve::shared::view(iov, n, shared) })
}

/// Writes `v` to the program's `*out`.
pub(crate) fn put<T>(out: *mut T, v: T) -> Result<(), i32> {
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the call's contract: `out` points to a writable `T`.
    unsafe { out.write(v) };
    Ok(())
}
