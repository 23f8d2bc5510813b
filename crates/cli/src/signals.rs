//! SIGINT, SIGTERM and SIGPIPE end a command by unwinding, not by dying mid-write.
//!
//! A signal only records itself. Long loops (copies in and out of the image, benchmark
//! runs, calibration points) call [`check`] and return [`Interrupted`]; the error unwinds
//! through the normal drops — the file system unmounts cleanly, temporary files and
//! regions are removed — and `main` then ends the process with the same signal, so a
//! shell sees what it would have seen (`130` for Ctrl-C, a quiet end under `| head`).
//! A second SIGINT exits at once; the next mount recovers, as after a crash.
//! SIGPIPE recorded this way also makes writes to a closed pipe fail with EPIPE instead
//! of killing the process.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGINT, SIGPIPE, SIGTERM};

/// The first stopping signal received (0: none).
static STOP: OnceLock<Arc<AtomicUsize>> = OnceLock::new();

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

/// Installs the handlers. Call once, first thing in `main`, before any thread starts.
pub fn install() -> std::io::Result<()> {
    let stop = STOP.get_or_init(|| Arc::new(AtomicUsize::new(0))).clone();
    // The second SIGINT: the conditional default runs first and kills the process
    // once the flag registered after it was set by the first.
    let second = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register_conditional_default(SIGINT, second.clone())?;
    signal_hook::flag::register(SIGINT, second)?;
    for sig in [SIGINT, SIGTERM, SIGPIPE] {
        // Only the first signal is kept: a SIGPIPE while unwinding from Ctrl-C must
        // not turn it into a quiet exit.
        let stop = stop.clone();
        let record = move || {
            let _ = stop.compare_exchange(0, sig as usize, Ordering::SeqCst, Ordering::SeqCst);
        };
        // SAFETY: the action is async-signal-safe: one atomic compare-exchange, no
        // allocation or locking.
        unsafe { signal_hook::low_level::register(sig, record) }?;
    }
    Ok(())
}

/// The stopping signal received so far, if any.
pub fn received() -> Option<i32> {
    STOP.get()
        .map(|s| s.load(Ordering::SeqCst))
        .filter(|&s| s != 0)
        .map(|s| s as i32)
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

/// Ends the process with `sig`'s default action, after the command has unwound.
pub fn die_by(sig: i32) -> ! {
    let _ = signal_hook::low_level::emulate_default_handler(sig);
    // Not reached for the terminating signals handled here; 128 + N is what a shell
    // shows for a death by signal N.
    std::process::exit(128 + sig)
}
