//! Test-only fault injection: a completion ordering deliberately broken, so that the
//! crash harness can show it catches an engine that reports a copy done before its
//! data is durable. Off unless a test turns it on.
//!
//! Public only with the `testing` feature. Without it, `active` is a constant `false`
//! the compiler folds away and the submission faults are no-ops: the product carries
//! no hook and no check.

#[cfg(feature = "testing")]
use std::sync::atomic::{AtomicU8, Ordering};

/// A deliberately broken ordering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub enum Fault {
    /// Everything as designed.
    None = 0,
    /// A software worker publishes (stores, writes back and fences) a descriptor's
    /// completion counter before copying its data, and the DSA backend puts a batch's
    /// counter write before its copies, so the persistent record can say "done" for a
    /// copy that never reached the region. Copies into the region only: a copy out of
    /// it, reported done early, would write a buffer its owner already took back.
    PublishBeforeData = 1,
}

#[cfg(feature = "testing")]
static ACTIVE: AtomicU8 = AtomicU8::new(Fault::None as u8);

/// Turns `fault` on for every engine in the process (`Fault::None` turns faults off).
/// Tests that use this must run in a process of their own.
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

/// Test-only, per engine: submissions refused after a count, and batches capped
/// smaller than the backend takes, so that a test can make a request that spans
/// several batches fail at the batch it chooses ([`crate::Testing::refuse_after`],
/// [`crate::Testing::cap_batch`]). Off unless a test turns it on.
#[cfg(feature = "testing")]
#[derive(Debug)]
pub(crate) struct SubmitFaults {
    /// Submissions still accepted; `u64::MAX`: no limit.
    accept_left: std::sync::atomic::AtomicU64,
    /// Most descriptors per batch; 0: as the backend says.
    batch_cap: std::sync::atomic::AtomicUsize,
}

#[cfg(feature = "testing")]
impl Default for SubmitFaults {
    fn default() -> SubmitFaults {
        SubmitFaults {
            accept_left: std::sync::atomic::AtomicU64::new(u64::MAX),
            batch_cap: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

#[cfg(feature = "testing")]
impl SubmitFaults {
    pub(crate) fn refuse_after(&self, accepted: Option<u64>) {
        self.accept_left
            .store(accepted.unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// Whether the next submission is refused.
    pub(crate) fn refuses(&self) -> bool {
        self.accept_left.load(Ordering::SeqCst) == 0
    }

    /// Counts an accepted submission.
    pub(crate) fn accepted(&self) {
        let _ = self
            .accept_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n != u64::MAX && n > 0).then(|| n - 1)
            });
    }

    pub(crate) fn cap_batch(&self, max: Option<usize>) {
        self.batch_cap.store(max.unwrap_or(0), Ordering::SeqCst);
    }

    /// `max` capped by [`SubmitFaults::cap_batch`].
    pub(crate) fn capped(&self, max: usize) -> usize {
        match self.batch_cap.load(Ordering::Relaxed) {
            0 => max,
            cap => max.min(cap),
        }
    }
}

/// Without the `testing` feature: no fault, nothing stored, nothing checked.
#[cfg(not(feature = "testing"))]
#[derive(Debug, Default)]
pub(crate) struct SubmitFaults;

#[cfg(not(feature = "testing"))]
impl SubmitFaults {
    /// Never.
    #[inline(always)]
    pub(crate) fn refuses(&self) -> bool {
        false
    }

    #[inline(always)]
    pub(crate) fn accepted(&self) {}

    /// `max`.
    #[inline(always)]
    pub(crate) fn capped(&self, max: usize) -> usize {
        max
    }
}
