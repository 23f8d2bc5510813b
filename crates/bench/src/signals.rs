//! The stop flag: a signal the process received (SIGINT, SIGTERM, SIGPIPE) ends a run by
//! unwinding, not by dying mid-write.
//!
//! The binary's signal handlers only [`record`] the signal. Long loops (copies, benchmark
//! runs, calibration points) call [`check`] and return [`Interrupted`]; the error unwinds
//! through the normal drops — the file system unmounts cleanly, temporary files and
//! regions are removed — and the binary then ends the process with the same signal.

use std::sync::atomic::{AtomicI32, Ordering};

/// The first stopping signal received (0: none).
static STOP: AtomicI32 = AtomicI32::new(0);

/// A command stopped because the process received this signal.
#[derive(Debug, Clone, Copy)]
pub struct Interrupted(pub i32);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped by {}", name(self.0))
    }
}

impl std::error::Error for Interrupted {}

/// The signal's name, e.g. `SIGINT`.
pub fn name(sig: i32) -> &'static str {
    signal_hook::low_level::signal_name(sig).unwrap_or("a signal")
}

/// Records `sig` as the stopping signal unless one was recorded before: a SIGPIPE while
/// unwinding from Ctrl-C must not turn it into a quiet exit. Async-signal-safe (one
/// atomic compare-exchange), so a signal handler may call it.
pub fn record(sig: i32) {
    let _ = STOP.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
}

/// The stopping signal received so far, if any.
pub fn received() -> Option<i32> {
    Some(STOP.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// `Err(Interrupted)` once a stopping signal arrived: long loops call this and return.
pub fn check() -> Result<(), Interrupted> {
    match received() {
        Some(sig) => Err(Interrupted(sig)),
        None => Ok(()),
    }
}

/// Whether a stopping signal arrived (for loops that end early rather than fail).
pub fn stopping() -> bool {
    received().is_some()
}
