//! The park/unpark hand-off of one uthread: a word of state that makes a wake-up arriving
//! while the uthread is still switching out impossible to lose.
//!
//! A uthread that blocks first registers itself where its waker will find it, then switches
//! to its worker asking to park. The waker may run on another worker at any point of that
//! sequence, including before the switch has finished, so it must not schedule the uthread
//! itself unless the scheduler has already given it up. The word decides who owns the
//! uthread:
//!
//! ```text
//!   RUNNING --commit_park--> PARKED --unpark (waker owns it, schedules it)--> NOTIFIED
//!   RUNNING --unpark-------> NOTIFIED --commit_park fails (scheduler requeues it)--> RUNNING
//!   any     --resume-------> RUNNING
//! ```
//!
//! Wake-ups coalesce like `std::thread::park` tokens: every blocking operation rechecks its
//! condition after it is resumed, so two wake-ups before one resume are one.
//!
//! This file uses only `super::facade`, so a model checker can compile it against its own
//! primitives (see `tests/model_check.rs`).

use super::facade::{AtomicU8, Ordering};

/// Running on a worker, or queued to run (nobody else may schedule it).
const RUNNING: u8 = 0;
/// Switched out and given up by its scheduler; the next `unpark` owns it.
const PARKED: u8 = 1;
/// Woken; owned by whoever received `true` from `unpark`, or by the scheduler if the wake-up
/// beat `commit_park`.
const NOTIFIED: u8 = 2;

/// The park state of one uthread.
pub(crate) struct ParkState(AtomicU8);

impl ParkState {
    /// A uthread that is about to run.
    pub(crate) fn new() -> ParkState {
        ParkState(AtomicU8::new(RUNNING))
    }

    /// Called by the scheduler after the uthread has switched out asking to park. `true`: it
    /// is parked and the scheduler must forget it (the next `unpark` schedules it). `false`:
    /// a wake-up came first; the scheduler must run it again.
    pub(crate) fn commit_park(&self) -> bool {
        match self
            .0
            .compare_exchange(RUNNING, PARKED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(_) => {
                // The wake-up is consumed by running the uthread again.
                self.0.store(RUNNING, Ordering::Release);
                false
            }
        }
    }

    /// Called by a waker after publishing what the uthread waits for. `true`: the uthread
    /// was parked and the caller now owns it and must schedule it exactly once.
    pub(crate) fn unpark(&self) -> bool {
        self.0.swap(NOTIFIED, Ordering::AcqRel) == PARKED
    }

    /// Called by the scheduler just before it resumes the uthread.
    pub(crate) fn resume(&self) {
        self.0.store(RUNNING, Ordering::Release);
    }
}
