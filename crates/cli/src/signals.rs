//! SIGINT, SIGTERM and SIGPIPE end a command by unwinding, not by dying mid-write.
//!
//! A signal only records itself ([`bench::signals::record`]); long loops check the
//! record and return an error that unwinds through the normal drops, and `main` then
//! ends the process with the same signal, so a shell sees what it would have seen
//! (`130` for Ctrl-C, a quiet end under `| head`). A second SIGINT exits at once; the
//! next mount recovers, as after a crash. SIGPIPE recorded this way also makes writes
//! to a closed pipe fail with EPIPE instead of killing the process.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use bench::signals::{received, Interrupted};
use signal_hook::consts::{SIGINT, SIGPIPE, SIGTERM};

/// Installs the handlers. Call once, first thing in `main`, before any thread starts.
pub fn install() -> std::io::Result<()> {
    // The second SIGINT: the conditional default runs first and kills the process
    // once the flag registered after it was set by the first.
    let second = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register_conditional_default(SIGINT, second.clone())?;
    signal_hook::flag::register(SIGINT, second)?;
    for sig in [SIGINT, SIGTERM, SIGPIPE] {
        // SAFETY: the action is async-signal-safe: one atomic compare-exchange, no
        // allocation or locking.
        unsafe { signal_hook::low_level::register(sig, move || bench::signals::record(sig)) }?;
    }
    Ok(())
}

/// Ends the process with `sig`'s default action, after the command has unwound.
pub fn die_by(sig: i32) -> ! {
    let _ = signal_hook::low_level::emulate_default_handler(sig);
    // Not reached for the terminating signals handled here; 128 + N is what a shell
    // shows for a death by signal N.
    std::process::exit(128 + sig)
}
