//! Test-only fault injection: a completion ordering deliberately broken, so that the
//! crash harness can show it catches an engine that reports a copy done before its
//! data is durable. Off unless a test turns it on.
//!
//! The mechanism is shared: [`crate::faults!`] declares a crate's own faults and the
//! switch that arms them, and the file system and the movers declare theirs with it.
//! Public only with the `testing` feature. Without it, `active` is a constant `false`
//! (and `take` a constant `Fault::None`) the compiler folds away and the submission faults are
//! no-ops: the product carries no hook and no check.

#[cfg(feature = "testing")]
use std::sync::atomic::{AtomicU8, Ordering};

/// The fault armed in one crate of a process, by its code (0: none). A test arms it;
/// the crate's hooks ask it. [`crate::faults!`] declares one per crate.
#[cfg(feature = "testing")]
#[derive(Debug, Default)]
pub struct Switch(AtomicU8);

#[cfg(feature = "testing")]
impl Switch {
    /// A switch with nothing armed.
    pub const fn new() -> Switch {
        Switch(AtomicU8::new(0))
    }

    /// Arms the fault of code `code` (0 disarms).
    pub fn arm(&self, code: u8) {
        self.0.store(code, Ordering::SeqCst);
    }

    /// Whether the fault of code `code` is armed.
    pub fn is(&self, code: u8) -> bool {
        self.0.load(Ordering::Relaxed) == code
    }

    /// Disarms and returns the armed fault if `wanted` says it is one to trip, so that it
    /// trips once.
    pub fn take(&self, wanted: impl Fn(u8) -> bool) -> Option<u8> {
        let armed = self.0.load(Ordering::Relaxed);
        (armed != 0 && wanted(armed))
            .then(|| {
                self.0
                    .compare_exchange(armed, 0, Ordering::SeqCst, Ordering::SeqCst)
                    .ok()
            })
            .flatten()
    }
}

/// Declares a crate's test faults: the enum (whose first variant, `None = 0`, is no
/// fault) and, in its module, `inject` (public, `testing` feature only: arms a fault for
/// the whole process; tests that use it run in a process of their own), `active`
/// (whether a fault is armed) and `take` (disarms and returns the armed fault if it is
/// one of those given: a fault that trips once). Without the calling crate's `testing`
/// feature `active` is a constant `false` and `take` a constant `None`.
#[macro_export]
macro_rules! faults {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $(#[$none_meta:meta])*
            None = 0,
            $($(#[$vmeta:meta])* $variant:ident = $code:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        #[cfg_attr(not(feature = "testing"), allow(dead_code))]
        pub enum $name {
            $(#[$none_meta])*
            None = 0,
            $($(#[$vmeta])* $variant = $code,)+
        }

        #[cfg(feature = "testing")]
        static ARMED: $crate::fault::Switch = $crate::fault::Switch::new();

        /// Arms `fault` for the whole process (`None` disarms). Tests that use this must
        /// run in a process of their own.
        #[cfg(feature = "testing")]
        pub fn inject(fault: $name) {
            ARMED.arm(fault as u8);
        }

        /// Whether `fault` is armed.
        #[cfg(feature = "testing")]
        #[allow(dead_code)]
        pub(crate) fn active(fault: $name) -> bool {
            ARMED.is(fault as u8)
        }

        /// Whether `fault` is armed: never, without the `testing` feature.
        #[cfg(not(feature = "testing"))]
        #[allow(dead_code)]
        #[inline(always)]
        pub(crate) fn active(_fault: $name) -> bool {
            false
        }

        /// Disarms and returns the armed fault, if it is one of `of` (it trips once);
        /// else `None`.
        #[cfg(feature = "testing")]
        #[allow(dead_code)]
        pub(crate) fn take(of: &[$name]) -> $name {
            ARMED
                .take(|armed| of.iter().any(|f| *f as u8 == armed))
                .and_then(|armed| of.iter().copied().find(|f| *f as u8 == armed))
                .unwrap_or($name::None)
        }

        /// No fault is ever armed without the `testing` feature.
        #[cfg(not(feature = "testing"))]
        #[allow(dead_code)]
        #[inline(always)]
        pub(crate) fn take(_of: &[$name]) -> $name {
            $name::None
        }
    };
}

crate::faults! {
    /// A deliberately broken ordering.
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
