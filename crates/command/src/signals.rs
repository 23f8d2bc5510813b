//! The stop flag: a signal the process received (SIGINT, SIGTERM, SIGPIPE) ends a run by
//! unwinding, not by dying mid-write.
//!
//! The handlers ([`install`], by the binary only) only [`record`] the signal. Long loops
//! (copies, benchmark runs, calibration points) call [`check`] and return
//! [`Interrupted`]; the error unwinds through the normal drops — the file system
//! unmounts cleanly, temporary files and regions are removed — and the binary then ends
//! the process with the same signal ([`die_by`]), so a shell sees what it would have
//! seen (`130` for Ctrl-C, a quiet end under `| head`). A second SIGINT exits at once;
//! the next mount recovers, as after a crash. SIGPIPE recorded this way also makes
//! writes to a closed pipe fail with EPIPE instead of killing the process.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGINT, SIGPIPE, SIGTERM};

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
        unsafe { signal_hook::low_level::register(sig, move || record(sig)) }?;
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

/// Runs the binary's `command` to its end as the module says. A panic of `println!` on
/// a pipe closed early is the SIGPIPE already recorded, not a bug: it is not reported.
/// Once everything `command` held is dropped (the mounted image, temporary files), a
/// recorded signal, or a failed write to a closed pipe, ends the process by that
/// signal, after saying an error of the command's own (a signal must not hide that the
/// command failed on the way out, e.g. the image not saved) and, but for SIGPIPE,
/// which signal stopped it. Otherwise returns what `command` returned.
pub fn run_to_end(command: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if received() != Some(SIGPIPE) {
            report_panic(info);
        }
    }));
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(command)) {
        Ok(result) => result,
        Err(panic) if received() == Some(SIGPIPE) => {
            drop(panic);
            die_by(SIGPIPE)
        }
        Err(panic) => std::panic::resume_unwind(panic),
    };
    let Some(sig) = received().or_else(|| result.as_ref().err().and_then(pipe)) else {
        return result;
    };
    if let Some(err) = result.as_ref().err() {
        if !err.chain().any(|e| e.is::<Interrupted>()) && pipe(err).is_none() {
            eprintln!("easyio: {}", crate::report::one_line(err));
        }
    }
    if sig != SIGPIPE {
        eprintln!("easyio: {}", Interrupted(sig));
    }
    die_by(sig)
}

/// SIGPIPE, if `err` is a failed write to a closed pipe.
fn pipe(err: &anyhow::Error) -> Option<i32> {
    err.chain()
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
        .then_some(SIGPIPE)
}
