//! What the workers of one runtime share: the queues uthreads travel through (`T` is
//! the uthread, `task::TaskRef`), who sleeps, the counters, and when to stop.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam_deque::{Injector, Stealer};

use crate::sleepers::Sleepers;
use crate::stats::Counters;

/// What the workers of one runtime share.
pub(crate) struct Shared<T> {
    /// New uthreads submitted from outside the runtime; any worker starts them.
    pub(crate) injector: Injector<T>,
    /// The stealing ends of the workers' queues of new uthreads, by worker index.
    pub(crate) stealers: Vec<Stealer<T>>,
    /// Started uthreads woken by a thread other than their home worker, by home worker
    /// index; only the home worker takes from its inbox (see `worker`).
    pub(crate) inboxes: Box<[Injector<T>]>,
    /// Which workers sleep.
    pub(crate) sleepers: Sleepers,
    /// Per-worker counters, by worker index.
    pub(crate) counters: Box<[Counters]>,
    /// Usable bytes of each uthread stack.
    pub(crate) stack_size: usize,
    /// Uthreads spawned and not yet finished.
    pub(crate) live: AtomicUsize,
    /// Set once: stop when `live` reaches zero.
    pub(crate) shutdown: AtomicBool,
}

impl<T> Shared<T> {
    /// A uthread was spawned.
    pub(crate) fn spawned(&self) {
        self.live.fetch_add(1, Ordering::SeqCst);
    }

    /// Stop once every uthread has finished.
    pub(crate) fn shut_down(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
    }

    /// A uthread finished; the last one after shutdown wakes every worker so they exit.
    pub(crate) fn task_done(&self) {
        if self.live.fetch_sub(1, Ordering::SeqCst) == 1 && self.shutdown.load(Ordering::SeqCst) {
            self.sleepers.notify_all();
        }
    }

    /// Shutdown was asked for and every uthread has finished: workers may exit.
    pub(crate) fn finished(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst) && self.live.load(Ordering::SeqCst) == 0
    }

    /// Whether worker `id` could find work in a queue others fill: its inbox, the injection
    /// queue or another worker's queue of new uthreads.
    pub(crate) fn has_queued_work(&self, id: usize) -> bool {
        !self.inboxes[id].is_empty()
            || !self.injector.is_empty()
            || self.stealers.iter().any(|s| !s.is_empty())
    }
}
