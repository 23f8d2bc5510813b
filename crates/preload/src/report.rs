//! Lines on stderr: written with the real `write`, each kind once per process.

use std::sync::atomic::{AtomicBool, Ordering};

/// Writes `bytes` to descriptor 2 with libc's own `write` (never ours).
pub(crate) fn raw_stderr(bytes: &[u8]) {
    let write = crate::real::real!(write: fn(libc::c_int, *const libc::c_void, libc::size_t) -> libc::ssize_t);
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

/// A message printed at most once per process, whatever the number of callers.
pub(crate) struct Once(AtomicBool);

impl Once {
    pub const fn new() -> Once {
        Once(AtomicBool::new(false))
    }

    /// Prints `easyio preload: <msg>` on its own line, the first time only.
    pub fn say(&self, msg: impl FnOnce() -> String) {
        if !self.0.swap(true, Ordering::Relaxed) {
            raw_stderr(format!("easyio preload: {}\n", msg()).as_bytes());
        }
    }
}
