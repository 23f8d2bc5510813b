//! The re-entrancy guard and the frame of every intercepted call.
//!
//! While a thread runs the shim's own code, every libc call it makes — std's `open`
//! of the region file, the allocator's, a message's `write` — goes straight to libc:
//! our exported symbols are libc's names, so without this guard easyio calling libc
//! would call itself. The flag is a constant-initialised thread-local without a
//! destructor, so reading it never allocates nor registers anything, even while the
//! thread is being torn down.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::real::{raw_stderr, set_errno};

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Set in a server the shim started (`autoserve`).
static DAEMON: AtomicBool = AtomicBool::new(false);

/// Whether this process is a server the shim started: it serves, it is served by no
/// one, and every call goes to libc.
pub(crate) fn is_daemon() -> bool {
    DAEMON.load(Ordering::Relaxed)
}

/// Makes this process a server the shim started: from here on every call goes to
/// libc.
pub(crate) fn become_daemon() {
    DAEMON.store(true, Ordering::Relaxed);
}

/// Held while the shim's code runs on this thread.
pub(crate) struct Guard(());

impl Guard {
    /// Enters the shim, or `None` when this thread is already inside it.
    pub fn enter() -> Option<Guard> {
        INSIDE.with(|i| {
            if i.get() {
                None
            } else {
                i.set(true);
                Some(Guard(()))
            }
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        INSIDE.with(|i| i.set(false));
    }
}

/// The value a C call returns on failure, with errno set.
pub(crate) trait Failed: Copy {
    /// -1 for numbers, NULL for pointers.
    const FAILED: Self;
}

impl Failed for i32 {
    const FAILED: i32 = -1;
}
impl Failed for i64 {
    const FAILED: i64 = -1;
}
impl Failed for isize {
    const FAILED: isize = -1;
}
impl<T> Failed for *mut T {
    const FAILED: *mut T = std::ptr::null_mut();
}

/// What the shim's side of a call answers: `None` when the call is not the shim's
/// (a kernel descriptor, a path outside the mount), else its value or an errno.
pub(crate) type Answer<R> = Option<Result<R, i32>>;

/// Runs an intercepted call: `ours` decides, inside the guard, whether the call is
/// the shim's; if not (or if this thread is already inside the shim) `pass` makes
/// libc's call. A panic in the shim is EIO with one line on stderr: nothing unwinds
/// into C.
pub(crate) fn intercept<R: Failed>(
    pass: impl FnOnce() -> R,
    ours: impl FnOnce() -> Answer<R>,
) -> R {
    if is_daemon() {
        return pass();
    }
    let Some(_guard) = Guard::enter() else {
        return pass();
    };
    match catch_unwind(AssertUnwindSafe(ours)) {
        Ok(None) => pass(),
        Ok(Some(Ok(v))) => v,
        Ok(Some(Err(e))) => {
            set_errno(e);
            R::FAILED
        }
        Err(_) => {
            raw_stderr(b"easyio preload: internal error (a panic in easyio): EIO\n");
            set_errno(libc::EIO);
            R::FAILED
        }
    }
}

/// The errno of an fs error.
pub(crate) fn errno_of(e: fs::Error) -> i32 {
    e.errno()
}

impl Failed for () {
    const FAILED: () = ();
}

/// Defines exported C functions: each passes its arguments on to libc's function of
/// the same name unless `$body` (an [`Answer`]) says the call is the
/// mount's.
macro_rules! export {
    ($(fn $name:ident($($a:ident: $t:ty),*) -> $r:ty $body:block)*) => {$(
        #[no_mangle]
        extern "C" fn $name($($a: $t),*) -> $r {
            $crate::guard::intercept(
                || $crate::real::libc_call!($name: fn($($t),*) -> $r, $($a),*),
                || $body,
            )
        }
    )*};
}
pub(crate) use export;
