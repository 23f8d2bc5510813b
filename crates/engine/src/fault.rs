//! Test-only fault injection: a completion ordering deliberately broken, so that the
//! crash harness can show it catches an engine that reports a copy done before its
//! data is durable. Off unless a test turns it on; never used by the product.

use std::sync::atomic::{AtomicU8, Ordering};

/// A deliberately broken ordering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Fault {
    /// Everything as designed.
    None = 0,
    /// A software worker publishes (stores, writes back and fences) a descriptor's
    /// completion counter before copying its data, so the persistent record can say
    /// "done" for a copy that never reached the region.
    PublishBeforeData = 1,
}

static ACTIVE: AtomicU8 = AtomicU8::new(Fault::None as u8);

/// Turns `fault` on for every engine in the process (`Fault::None` turns faults off).
/// Tests that use this must run in a process of their own.
pub fn inject(fault: Fault) {
    ACTIVE.store(fault as u8, Ordering::SeqCst);
}

/// Whether `fault` is on.
pub(crate) fn active(fault: Fault) -> bool {
    ACTIVE.load(Ordering::Relaxed) == fault as u8
}
