//! The part of a worker that the uthreads running on it reach (through
//! `context::worker`): its queue of new uthreads, its run order, and its runtime. The
//! loop that drives it is `worker.rs`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam_deque::Worker;

use crate::shared::Shared;
use crate::task::TaskRef;

/// Every this many scheduling points the injection queue is looked at before the local
/// queue, so that work submitted from outside is not starved by uthreads that keep yielding
/// (a prime, as in other work-stealing schedulers, so it does not beat with loop periods).
pub const GLOBAL_QUEUE_INTERVAL: u32 = 61;

/// One entry of a worker's run order.
pub(crate) enum Next {
    /// Resume this started uthread of the worker.
    Resume(TaskRef),
    /// Start the oldest uthread of the worker's `queue`, if no other worker stole it.
    Start,
}

/// The part of a worker that uthreads running on it reach through `context::worker`.
pub(crate) struct Local {
    /// Index of the worker, `0..workers`.
    pub(crate) id: usize,
    /// Uthreads that have not started (FIFO; other workers steal from its front).
    pub(crate) queue: Worker<TaskRef>,
    /// The run order of this worker (see the module comment); this worker's alone. It holds
    /// at least as many `Next::Start` as `queue` holds uthreads (thieves take uthreads, not
    /// turns), so every uthread of `queue` gets its turn; a turn that finds `queue` empty is
    /// skipped.
    pub(crate) ready: RefCell<VecDeque<Next>>,
    /// The runtime.
    pub(crate) shared: Arc<Shared<TaskRef>>,
    /// Scheduling points so far (for `GLOBAL_QUEUE_INTERVAL`).
    pub(crate) tick: Cell<u32>,
    /// Uthreads in the wait set or the timer heap.
    pub(crate) pending: Cell<usize>,
}

impl Local {
    /// Called by a uthread of this worker about to yield: whether the scheduler would have
    /// nothing to poll and would pick this uthread again at once. Then the yield returns
    /// without switching (as Caladan's `thread_yield` does when the next thread is itself);
    /// the scheduling point still counts towards the injection queue's turn.
    #[inline]
    pub(crate) fn yield_is_a_no_op(&self) -> bool {
        let tick = self.tick.get().wrapping_add(1);
        if tick.is_multiple_of(GLOBAL_QUEUE_INTERVAL)
            || self.pending.get() != 0
            || !self.nothing_queued()
            || !self.shared.injector.is_empty()
        {
            return false;
        }
        self.tick.set(tick);
        true
    }

    /// Whether this worker has no uthread of its own to run or start: its run order, its
    /// queue of new uthreads and its inbox are empty. (Work other workers could give it, in
    /// the injection queue or their queues, is not counted.)
    #[inline]
    pub(crate) fn nothing_queued(&self) -> bool {
        self.ready.borrow().is_empty()
            && self.queue.is_empty()
            && self.shared.inboxes[self.id].is_empty()
    }

    /// Whether no uthread of this worker waits in its wait set or sleeps on a timer.
    #[inline]
    pub(crate) fn nothing_pending(&self) -> bool {
        self.pending.get() == 0
    }

    /// Queues a started uthread of this worker to run again, behind the others.
    pub(crate) fn resume_later(&self, task: TaskRef) {
        self.ready.borrow_mut().push_back(Next::Resume(task));
    }

    /// Puts a new uthread on the queue others steal from, and its turn in the run order.
    pub(crate) fn start_later(&self, task: TaskRef) {
        self.queue.push(task);
        self.ready.borrow_mut().push_back(Next::Start);
    }

    /// Gives every uthread now in `queue` a turn in the run order. Called after a batch was
    /// moved into an empty `queue`: `len` can only overstate what is there (thieves only
    /// take), which keeps the count of turns at or above the count of uthreads.
    pub(crate) fn turns_for_queue(&self) {
        let n = self.queue.len();
        self.ready
            .borrow_mut()
            .extend(std::iter::repeat_with(|| Next::Start).take(n));
    }

    /// The next uthread in the run order, if any.
    pub(crate) fn pop_ready(&self) -> Option<TaskRef> {
        loop {
            let next = self.ready.borrow_mut().pop_front()?;
            match next {
                Next::Resume(t) => return Some(t),
                Next::Start => {
                    if let Some(t) = self.queue.pop() {
                        return Some(t);
                    }
                }
            }
        }
    }
}
