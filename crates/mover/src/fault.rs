//! Test-only fault injection: a delegation thread made to die under a request, so that
//! tests can show a caller gets an error, not a panic or a hang, and only once nothing
//! touches its buffers any more. Off unless a test turns it on; never used by the
//! product.

use std::sync::atomic::{AtomicU8, Ordering};

/// A deliberate failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Fault {
    /// Everything as designed.
    None = 0,
    /// The delegation thread that takes the next stripe panics before copying it.
    DelegatePanic = 1,
    /// The delegation thread that takes the next stripe returns without copying it,
    /// dropping its end of its queue.
    DelegateExit = 2,
}

static ACTIVE: AtomicU8 = AtomicU8::new(Fault::None as u8);

/// Arms `fault` for every mover in the process; it trips once (`Fault::None` disarms
/// it). Tests that use this must run in a process of their own.
pub fn inject(fault: Fault) {
    ACTIVE.store(fault as u8, Ordering::SeqCst);
}

/// Disarms and returns the armed fault, if it is one of `of`.
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
