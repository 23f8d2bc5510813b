//! The uthread runtime for C: start a runtime of N workers, spawn C functions as
//! uthreads, join them, yield. Inside a uthread the blocking calls of this library
//! yield while their copy runs, so the worker runs other uthreads meanwhile.

use std::ffi::{c_int, c_void};

use parking_lot::Mutex;

use crate::error::{call, Failure};
use crate::handles::{into_sole, Registry};

/// A runtime of worker threads (opaque).
pub struct easyio_rt {
    _opaque: [u8; 0],
}

/// A spawned uthread, to join (opaque).
pub struct easyio_uthread {
    _opaque: [u8; 0],
}

/// The function a uthread runs: its argument in, its result out.
pub type easyio_uthread_fn = Option<extern "C" fn(arg: *mut c_void) -> *mut c_void>;

struct Runtime {
    rt: rt::Runtime,
}

/// A C pointer carried to or from a uthread.
struct CPtr(*mut c_void);

// SAFETY: the pointer is only carried, never dereferenced here; whoever spawns a
// uthread with it (or returns it from one) has agreed, by the header, that the other
// thread may use what it points to.
unsafe impl Send for CPtr {}

static RUNTIMES: Registry<Runtime> = Registry::new("easyio_rt");
static UTHREADS: Registry<Mutex<Option<rt::JoinHandle<CPtr>>>> = Registry::new("easyio_uthread");

/// Starts a runtime of `workers` worker threads (1 to the runtime's maximum; EINVAL
/// otherwise). Returns it, or NULL with errno.
#[no_mangle]
pub extern "C" fn easyio_rt_start(workers: u32) -> *mut easyio_rt {
    call(std::ptr::null_mut(), || {
        let n = workers as usize;
        if n == 0 || n > rt::MAX_WORKERS {
            return Err(Failure::new(
                libc::EINVAL,
                format!("workers must be 1 to {}", rt::MAX_WORKERS),
            ));
        }
        let rt = rt::Runtime::builder()
            .workers(n)
            .name("easyio-c")
            .build()
            .map_err(|e| Failure::new(libc::EAGAIN, e))?;
        Ok(RUNTIMES.insert(Runtime { rt }))
    })
}

/// Stops a runtime: lets its uthreads finish, then ends its workers. Call it from
/// outside the runtime (EDEADLK from one of its uthreads); the handle is dead
/// afterwards.
#[no_mangle]
pub extern "C" fn easyio_rt_stop(rt: *mut easyio_rt) -> c_int {
    call(-1, || {
        if rt::in_uthread() {
            return Err(Failure::new(
                libc::EDEADLK,
                "a runtime is stopped from outside it",
            ));
        }
        let r = into_sole(RUNTIMES.remove(rt)?);
        r.rt.shutdown();
        Ok(0)
    })
}

/// Starts a uthread running `f(arg)` on runtime `rt`, or with `rt` NULL on the
/// runtime of the calling uthread (EINVAL outside one). `arg` is handed to another
/// thread as it is. Returns a handle to join (each uthread once), or NULL with errno.
#[no_mangle]
pub extern "C" fn easyio_spawn(
    rt: *mut easyio_rt,
    f: easyio_uthread_fn,
    arg: *mut c_void,
) -> *mut easyio_uthread {
    call(std::ptr::null_mut(), || {
        let f = f.ok_or_else(|| Failure::null("f"))?;
        let arg = CPtr(arg);
        let body = move || {
            let arg = arg;
            CPtr(f(arg.0))
        };
        let handle = if rt.is_null() {
            rt::Handle::current()
                .ok_or_else(|| Failure::new(libc::EINVAL, "rt is NULL outside a uthread"))?
                .spawn(body)
        } else {
            RUNTIMES.get(rt)?.rt.spawn(body)
        };
        Ok(UTHREADS.insert(Mutex::new(Some(handle))))
    })
}

/// Waits for a uthread to finish (yielding, from a uthread) and puts what its
/// function returned in `*ret` (unless `ret` is NULL). The handle is dead afterwards.
#[no_mangle]
pub extern "C" fn easyio_join(t: *mut easyio_uthread, ret: *mut *mut c_void) -> c_int {
    call(-1, || {
        let h = UTHREADS.remove(t)?;
        let handle = h
            .lock()
            .take()
            .ok_or_else(|| Failure::bad_handle("easyio_uthread"))?;
        drop(into_sole(h));
        let v = handle
            .join()
            .map_err(|e| Failure::new(if e.errno() == 0 { libc::EIO } else { e.errno() }, e))?;
        if !ret.is_null() {
            *crate::args::out(ret, "ret")? = v.0;
        }
        Ok(0)
    })
}

/// Lets the other uthreads of the worker run (inside a uthread), or the other
/// threads of the process (outside one).
#[no_mangle]
pub extern "C" fn easyio_yield() -> c_int {
    call(-1, || {
        if rt::in_uthread() {
            rt::yield_now();
        } else {
            std::thread::yield_now();
        }
        Ok(0)
    })
}

/// 1 inside a uthread of an easyio runtime, 0 outside.
#[no_mangle]
pub extern "C" fn easyio_in_uthread() -> c_int {
    c_int::from(rt::in_uthread())
}
