//! Per-worker scheduling counters: bumped by their worker alone with relaxed loads and
//! stores (no locked instructions), read by anyone at any time.

use std::sync::atomic::{AtomicU64, Ordering};

/// The counters of one worker, alone on their cache line so that workers do not share lines.
#[repr(align(64))]
#[derive(Default)]
pub(crate) struct Counters {
    /// Uthreads resumed.
    pub(crate) switches: AtomicU64,
    /// Successful steals from another worker's queue of new uthreads (each takes a batch).
    pub(crate) steals: AtomicU64,
    /// Times the worker went to sleep (parked its kernel thread).
    pub(crate) parks: AtomicU64,
    /// Scans of a non-empty wait set.
    pub(crate) wait_polls: AtomicU64,
    /// Uthreads the wait-set scans found ready.
    pub(crate) wait_ready: AtomicU64,
}

const _: () = assert!(std::mem::align_of::<Counters>() == 64);
const _: () = assert!(std::mem::size_of::<Counters>() == 64);

impl Counters {
    /// Adds one to a counter of this worker. Only its own worker calls this, so a load and a
    /// store are enough.
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// A snapshot, labelled with the worker's index.
    pub(crate) fn snapshot(&self, worker: usize) -> WorkerStats {
        WorkerStats {
            worker,
            switches: self.switches.load(Ordering::Relaxed),
            steals: self.steals.load(Ordering::Relaxed),
            parks: self.parks.load(Ordering::Relaxed),
            wait_polls: self.wait_polls.load(Ordering::Relaxed),
            wait_ready: self.wait_ready.load(Ordering::Relaxed),
        }
    }
}

/// What one worker has done since its runtime started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// The worker's index, `0..workers`.
    pub worker: usize,
    /// Switches into uthreads (each run of a uthread until it yields, blocks or ends).
    pub switches: u64,
    /// Successful steals of new uthreads from other workers' queues.
    pub steals: u64,
    /// Times the worker parked its kernel thread for lack of work.
    pub parks: u64,
    /// Scans of its wait set (uthreads waiting for a condition such as a copy completion).
    pub wait_polls: u64,
    /// Waiting uthreads those scans found ready and made runnable.
    pub wait_ready: u64,
}
