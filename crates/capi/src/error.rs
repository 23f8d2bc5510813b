//! Failures at the boundary: errno, the last error's message, and panics caught.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Why a call failed: the errno it sets and a message for [`easyio_last_error`].
#[derive(Debug)]
pub(crate) struct Failure {
    pub errno: i32,
    pub msg: String,
}

impl Failure {
    pub fn new(errno: i32, msg: impl Display) -> Failure {
        Failure {
            errno,
            msg: msg.to_string(),
        }
    }

    /// EINVAL naming the argument that was NULL.
    pub fn null(what: &str) -> Failure {
        Failure::new(libc::EINVAL, format!("{what} is NULL"))
    }

    /// EBADF naming the kind of handle that is not live.
    pub fn bad_handle(what: &str) -> Failure {
        Failure::new(libc::EBADF, format!("not a live {what} handle"))
    }
}

impl From<fs::Error> for Failure {
    fn from(e: fs::Error) -> Failure {
        Failure::new(e.errno(), e)
    }
}

/// What the calls do inside: a value or a failure.
pub(crate) type CResult<T> = Result<T, Failure>;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn remember(f: &Failure) {
    let text = CString::new(f.msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = text);
    errno::set_errno(errno::Errno(f.errno));
}

/// Runs the body of an exported call: its value, or `failed` with `errno` set and the
/// message kept, when it fails or panics. Nothing unwinds into C.
pub(crate) fn call<T>(failed: T, body: impl FnOnce() -> CResult<T>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            remember(&f);
            failed
        }
        Err(payload) => {
            let what = rt::panic_message(payload.as_ref()).unwrap_or("(no message)");
            remember(&Failure::new(
                libc::EIO,
                format!("internal error (a panic in easyio): {what}"),
            ));
            failed
        }
    }
}

/// The message of the last call that failed on this thread ("" if none did). The
/// text stays valid until the next failing call on the same thread; a uthread reads
/// it before it yields.
#[no_mangle]
pub extern "C" fn easyio_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_eio_with_its_message() {
        let r = call(-1, || -> CResult<i32> { panic!("boom at the boundary") });
        assert_eq!(r, -1);
        assert_eq!(errno::errno().0, libc::EIO);
        // SAFETY: a NUL-terminated string of this thread.
        let msg = unsafe { std::ffi::CStr::from_ptr(easyio_last_error()) };
        assert!(
            msg.to_str().unwrap().contains("boom at the boundary"),
            "{msg:?}"
        );
    }

    #[test]
    fn a_failure_sets_errno_and_the_message() {
        let r = call(std::ptr::null_mut::<u8>(), || {
            Err(Failure::new(libc::ENOENT, "gone"))
        });
        assert!(r.is_null());
        assert_eq!(errno::errno().0, libc::ENOENT);
        // SAFETY: a NUL-terminated string of this thread.
        let msg = unsafe { std::ffi::CStr::from_ptr(easyio_last_error()) };
        assert_eq!(msg.to_str().unwrap(), "gone");
    }
}
