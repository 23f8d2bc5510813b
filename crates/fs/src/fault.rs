//! Test-only fault injection: persistence orderings deliberately broken, so that the
//! crash harness can show it catches a missing write-back or fence. Off unless a test
//! turns it on.
//!
//! Public only with the `testing` feature. Without it, `active` is a constant `false`
//! the compiler folds away: the product carries no hook and no check.

#[cfg(feature = "testing")]
use std::sync::atomic::{AtomicU8, Ordering};

/// A deliberately broken ordering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub enum Fault {
    /// Everything as designed.
    None = 0,
    /// A single-inode commit stores the log tail and fences without writing the
    /// tail's line back: a returned operation can be lost.
    CommitWithoutFlush = 1,
    /// Staging writes entries back but issues no fence before the tail is committed:
    /// the tail can reach the region before the entries it covers, and before the data
    /// the writer copied for them (that fence covers both).
    StageWithoutFence = 2,
    /// An orderless write commits its entries with SN 0 ("copy done") while the
    /// engine's copy may still be running: recovery keeps an entry whose data never
    /// fully arrived.
    AsyncEntryWithoutSn = 3,
    /// A change of extended attributes stores the new encoded set with cached stores,
    /// never written back, before committing the entry that names it: after a crash
    /// the entry may name blocks that never received the set.
    XattrSetWithoutWriteBack = 4,
}

#[cfg(feature = "testing")]
static ACTIVE: AtomicU8 = AtomicU8::new(Fault::None as u8);

/// Turns `fault` on for every file system in the process (`Fault::None` turns faults
/// off). Tests that use this must run in a process of their own.
#[cfg(feature = "testing")]
pub fn inject(fault: Fault) {
    ACTIVE.store(fault as u8, Ordering::SeqCst);
}

/// Whether `fault` is on.
#[cfg(feature = "testing")]
pub(crate) fn active(fault: Fault) -> bool {
    ACTIVE.load(Ordering::Relaxed) == fault as u8
}

/// Whether `fault` is on: never, without the `testing` feature.
#[cfg(not(feature = "testing"))]
#[inline(always)]
pub(crate) fn active(_fault: Fault) -> bool {
    false
}
