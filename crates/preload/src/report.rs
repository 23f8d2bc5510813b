//! Lines on stderr, each kind once per process (written with libc's own `write`:
//! `real::raw_stderr`).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::real::raw_stderr;

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
