//! A watchdog: what ends a test that hangs on a mount or a server, so that the calls
//! blocked on it fail and the test ends instead of the suite.

use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Runs its action on a thread of its own when still armed after its limit (a lazy
/// unmount, killing a server). Disarmed by [`Watchdog::disarm`] or when dropped.
pub struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    /// Arms a watchdog that, after `limit`, says `what` on stderr and runs `fire`.
    pub fn arm(
        limit: Duration,
        what: impl Display,
        fire: impl FnOnce() + Send + 'static,
    ) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, what) = (stop.clone(), what.to_string());
        thread::spawn(move || {
            let t0 = Instant::now();
            while !seen.load(Ordering::SeqCst) {
                if t0.elapsed() > limit {
                    eprintln!("watchdog: {what} after {limit:?}");
                    fire();
                    return;
                }
                thread::sleep(Duration::from_millis(100));
            }
        });
        Watchdog(stop)
    }

    /// Stops the watchdog: its action never runs.
    pub fn disarm(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.disarm();
    }
}
