//! The explicit asynchronous API, shaped like liburing's cycle: submit a read or a
//! write and get a request id, compute, then poll or wait for one or many
//! completions, each a result of bytes or -errno.
//!
//! The caller promises what io_uring asks too: a submitted buffer stays allocated,
//! and is neither freed, reused nor (for a read) looked at, until its request has
//! completed through [`easyio_poll`], [`easyio_wait`] or [`easyio_wait_many`] (or the
//! mount is unmounted, which waits for every request in flight).

use std::borrow::Cow;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use fs::BorrowedToken;

use crate::args::{bytes, bytes_mut, offset, slice, slice_mut};
use crate::error::{call, CResult, Failure};
use crate::mount::{easyio_fs, mount_of, Mount, Target};
use crate::requests::InFlight;

/// The completion of a request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct easyio_completion {
    /// The request id [`easyio_submit_pread`] or [`easyio_submit_pwrite`] returned.
    pub id: u64,
    /// Bytes read or written, or -errno if the copy failed.
    pub res: i64,
}

/// Keeps a started request under a new id.
fn enqueue(m: &Mount, req: InFlight) -> i64 {
    let id = m.next_request.fetch_add(1, Ordering::Relaxed);
    m.requests.lock().insert(id, req);
    id as i64
}

/// A token of the file system mounted here, kept as a request.
fn here(token: BorrowedToken<'_>) -> InFlight {
    // SAFETY: the token borrows `m.fs`, which the mount keeps in an `Arc` that
    // outlives every request: requests are dropped (waiting for their copies) before
    // the file system, in `easyio_unmount` and by the field order of `Mount`.
    InFlight::Here(unsafe {
        std::mem::transmute::<BorrowedToken<'_>, BorrowedToken<'static>>(token)
    })
}

/// Starts reading `len` bytes at `off` of descriptor `fd` into `buf`; returns a
/// request id (>= 1), or -1 with errno if the request could not start (EBADF: not
/// open for reading; EISDIR). The copy runs while the caller goes on; `buf` belongs
/// to it until the request completes. Reading past the end of the file completes
/// with fewer bytes.
#[no_mangle]
pub extern "C" fn easyio_submit_pread(
    fs: *mut easyio_fs,
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    off: libc::off_t,
) -> i64 {
    call(-1, || {
        let m = mount_of(fs)?;
        let (f, off, buf) = (
            crate::args::fd(fd)?,
            offset(off, "offset")?,
            bytes_mut(buf, len, "buf")?,
        );
        let req = match &m.fs {
            Target::Here(fs) => match buf.place().into_own() {
                // SAFETY: the caller keeps `buf` for the request until it completes
                // (the header's contract), and the token waits for the copy before it
                // goes.
                Ok(own) => here(unsafe { fs.submit_pread_borrowed(f, own, off)? }),
                // Shared memory: read into a private copy, copied back when it goes,
                // before this returns.
                Err(mut copy) => InFlight::Finished(fs.pread(f, &mut copy, off)? as i64),
            },
            Target::Server(_) => InFlight::Finished(m.fs.read_into(f, buf, Some(off))? as i64),
        };
        Ok(enqueue(&m, req))
    })
}

/// Starts writing `len` bytes from `buf` at `off` (at the end with `O_APPEND`): the
/// write is committed when this returns (a read after it sees the data), durable
/// when the request completes. Returns a request id (>= 1) or -1 with errno. On a
/// server's connection the copy runs on after this returns only from a buffer of
/// `easyio_buffer_alloc` (and with the server in `async` mode); from other memory
/// the write is made before this returns.
#[no_mangle]
pub extern "C" fn easyio_submit_pwrite(
    fs: *mut easyio_fs,
    fd: c_int,
    buf: *const c_void,
    len: usize,
    off: libc::off_t,
) -> i64 {
    call(-1, || {
        let m = mount_of(fs)?;
        let (f, off, buf) = (
            crate::args::fd(fd)?,
            offset(off, "offset")?,
            bytes(buf, len, "buf")?,
        );
        let req = match &m.fs {
            Target::Here(fs) => match buf.view() {
                // SAFETY: the caller keeps `buf` unchanged until the request completes
                // (the header's contract), and the token waits for the copy before it
                // goes.
                Cow::Borrowed(own) => here(unsafe { fs.submit_pwrite_borrowed(f, own, off)? }),
                // Shared memory: written, from a private copy, before this returns.
                Cow::Owned(copy) => InFlight::Finished(fs.pwrite(f, &copy, off)? as i64),
            },
            Target::Server(r) => match r.0.submit_staged_at(f.0, buf.ptr(), buf.len(), off) {
                Some(s) => {
                    let s = s.map_err(|e| fs::Error::Errno(e.errno()))?;
                    // SAFETY: the caller keeps `buf` unchanged until the request
                    // completes; the client lives in `m.fs`, which outlives every
                    // request (see `here`).
                    InFlight::Server(unsafe {
                        std::mem::transmute::<
                            easyio_serve::Submitted<'_, '_>,
                            easyio_serve::Submitted<'static, 'static>,
                        >(s)
                    })
                }
                // Not a staging buffer: written before this returns.
                None => InFlight::Finished(m.fs.write_from(f, buf, Some(off))? as i64),
            },
        };
        Ok(enqueue(&m, req))
    })
}

/// The completion of a finished (or now waited-for) request.
fn complete(id: u64, req: InFlight) -> easyio_completion {
    easyio_completion {
        id,
        res: req.result(),
    }
}

/// The request `id`, taken out of the mount's table if `done` says so.
fn take_if(m: &Mount, id: u64, done: impl FnOnce(&InFlight) -> bool) -> CResult<Option<InFlight>> {
    let mut reqs = m.requests.lock();
    let t = reqs
        .get(&id)
        .ok_or_else(|| Failure::new(libc::EINVAL, format!("no request {id} in flight")))?;
    Ok(if done(t) { reqs.remove(&id) } else { None })
}

/// Whether request `id` is complete (one load and a compare): 1 and its completion
/// in `out` (the request is then retired), 0 if its copy still runs, -1 with errno
/// (EINVAL: no such request in flight).
#[no_mangle]
pub extern "C" fn easyio_poll(fs: *mut easyio_fs, id: u64, out: *mut easyio_completion) -> c_int {
    call(-1, || {
        let m = mount_of(fs)?;
        let mut out = crate::args::out(out, "out")?;
        Ok(match take_if(&m, id, InFlight::is_done)? {
            Some(t) => {
                *out = complete(id, t);
                1
            }
            None => 0,
        })
    })
}

/// Waits for request `id` — inside a uthread by yielding to the others of its
/// worker, elsewhere on the calling thread — and puts its completion in `out`.
#[no_mangle]
pub extern "C" fn easyio_wait(fs: *mut easyio_fs, id: u64, out: *mut easyio_completion) -> c_int {
    call(-1, || {
        let m = mount_of(fs)?;
        let mut out = crate::args::out(out, "out")?;
        let t = take_if(&m, id, |_| true)?.expect("taken unconditionally");
        *out = complete(id, t);
        Ok(0)
    })
}

/// Completes at least `min` of the `n` requests `ids` (all of them when `min` is
/// larger than `n`): waits while fewer are done, then retires every one that is done
/// and writes their completions into `out` (room for `n`) as it finds them done.
/// Returns how many it wrote. An id not in flight is EINVAL before any wait; a
/// request must have one waiter at a time.
#[no_mangle]
pub extern "C" fn easyio_wait_many(
    fs: *mut easyio_fs,
    ids: *const u64,
    n: usize,
    min: usize,
    out: *mut easyio_completion,
) -> libc::ssize_t {
    call(-1, || {
        let m = mount_of(fs)?;
        let (ids, mut outs) = (slice(ids, n, "ids")?, slice_mut(out, n, "out")?);
        {
            let reqs = m.requests.lock();
            if let Some(bad) = ids.iter().find(|id| !reqs.contains_key(id)) {
                return Err(Failure::new(
                    libc::EINVAL,
                    format!("no request {bad} in flight"),
                ));
            }
        }
        let want = min.min(n);
        let mut done = vec![false; n];
        let mut written = 0;
        loop {
            for (i, &id) in ids.iter().enumerate() {
                if !done[i] {
                    if let Some(t) = take_if(&m, id, InFlight::is_done)? {
                        outs[written] = complete(id, t);
                        (done[i], written) = (true, written + 1);
                    }
                }
            }
            if written >= want {
                return Ok(written as libc::ssize_t);
            }
            let i = done.iter().position(|d| !d).expect("fewer than n done");
            let t = take_if(&m, ids[i], |_| true)?.expect("taken unconditionally");
            outs[written] = complete(ids[i], t);
            (done[i], written) = (true, written + 1);
        }
    })
}
