//! Test-only fault injection: a delegation thread made to die under a request, so that
//! tests can show a caller gets an error, not a panic or a hang, and only once nothing
//! touches its buffers any more. Off unless a test turns it on.
//!
//! Public only with the `testing` feature. Without it, `take` is a constant
//! `Fault::None` the compiler folds away: the product carries no hook and no check.

#[cfg(feature = "testing")]
use std::sync::atomic::{AtomicU8, Ordering};

/// A deliberate failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub enum Fault {
    /// Everything as designed.
    None = 0,
    /// The delegation thread that takes the next stripe panics before copying it.
    DelegatePanic = 1,
    /// The delegation thread that takes the next stripe returns without copying it,
    /// dropping its end of its queue.
    DelegateExit = 2,
}

#[cfg(feature = "testing")]
static ACTIVE: AtomicU8 = AtomicU8::new(Fault::None as u8);

/// Arms `fault` for every mover in the process; it trips once (`Fault::None` disarms
/// it). Tests that use this must run in a process of their own.
#[cfg(feature = "testing")]
pub fn inject(fault: Fault) {
    ACTIVE.store(fault as u8, Ordering::SeqCst);
}

/// Disarms and returns the armed fault, if it is one of `of`.
#[cfg(feature = "testing")]
pub(crate) fn take(of: &[Fault]) -> Fault {
    let armed = ACTIVE.load(Ordering::Relaxed);
    if armed == Fault::None as u8 {
        return Fault::None;
    }
    match of.iter().find(|f| **f as u8 == armed) {
        Some(&f)
            if ACTIVE
                .compare_exchange(armed, Fault::None as u8, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok() =>
        {
            f
        }
        _ => Fault::None,
    }
}

/// No fault is ever armed without the `testing` feature.
#[cfg(not(feature = "testing"))]
#[inline(always)]
pub(crate) fn take(_of: &[Fault]) -> Fault {
    Fault::None
}
