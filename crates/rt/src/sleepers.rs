//! Which workers are asleep, and how a producer of work wakes one without losing the wake-up.
//!
//! The protocol is the store-then-load pair on both sides (a Dekker handshake):
//!
//! - a worker that found nothing to do calls `prepare` (sets its bit), then looks at every
//!   queue again, then either `cancel`s (work appeared) or parks, and `cancel`s when it wakes;
//! - a producer publishes its work, then calls `notify_one`, which clears one set bit and
//!   unparks that worker; or, for work only one worker may run (a started uthread woken on
//!   its home worker), `notify`, which does the same for that worker's bit alone.
//!
//! Both the bit and the fence are sequentially consistent, so either the worker's second look
//! sees the work or the producer sees the bit. Thread park tokens make an unpark that comes
//! before the park harmless.
//!
//! This file uses only `super::facade`, so a model checker can compile it against its own
//! primitives (see `tests/model_check.rs`).

use super::facade::{fence, thread, AtomicU64, Mutex, Ordering, Thread};

/// The most workers one runtime can have: one bit each in the sleeper mask.
pub const MAX_WORKERS: usize = 64;

/// The sleeping workers of one runtime.
pub(crate) struct Sleepers {
    /// Bit `i` set: worker `i` has announced that it is going to sleep.
    mask: AtomicU64,
    /// Worker `i`'s thread, registered when it starts.
    threads: Vec<Mutex<Option<Thread>>>,
}

impl Sleepers {
    /// Room for `workers` workers (at most `MAX_WORKERS`).
    pub(crate) fn new(workers: usize) -> Sleepers {
        assert!(workers <= MAX_WORKERS);
        Sleepers {
            mask: AtomicU64::new(0),
            threads: (0..workers).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// Called once by worker `id` on its own thread before it first sleeps.
    pub(crate) fn register(&self, id: usize) {
        *self.threads[id].lock().unwrap() = Some(thread::current());
    }

    /// Worker `id` is about to sleep. It must look for work once more after this, then park
    /// or `cancel`.
    pub(crate) fn prepare(&self, id: usize) {
        self.mask.fetch_or(1 << id, Ordering::SeqCst);
    }

    /// Worker `id` is not (or no longer) asleep.
    pub(crate) fn cancel(&self, id: usize) {
        self.mask.fetch_and(!(1 << id), Ordering::SeqCst);
    }

    /// Called after publishing work: wakes one sleeping worker, if there is one. Returns
    /// whether it woke one.
    pub(crate) fn notify_one(&self) -> bool {
        fence(Ordering::SeqCst);
        let mut mask = self.mask.load(Ordering::SeqCst);
        while mask != 0 {
            let id = mask.trailing_zeros() as usize;
            let bit = 1u64 << id;
            let prev = self.mask.fetch_and(!bit, Ordering::SeqCst);
            if prev & bit != 0 {
                self.unpark(id);
                return true;
            }
            mask = prev & !bit;
        }
        false
    }

    /// Called after publishing work that only worker `id` may run: wakes it if it sleeps.
    /// Returns whether it woke it.
    pub(crate) fn notify(&self, id: usize) -> bool {
        fence(Ordering::SeqCst);
        let bit = 1u64 << id;
        if self.mask.load(Ordering::SeqCst) & bit == 0 {
            return false;
        }
        if self.mask.fetch_and(!bit, Ordering::SeqCst) & bit == 0 {
            return false;
        }
        self.unpark(id);
        true
    }

    /// Wakes every worker that sleeps (shutdown, or the last uthread finished).
    pub(crate) fn notify_all(&self) {
        fence(Ordering::SeqCst);
        let mask = self.mask.swap(0, Ordering::SeqCst);
        for id in 0..self.threads.len() {
            if mask & (1 << id) != 0 {
                self.unpark(id);
            }
        }
    }

    fn unpark(&self, id: usize) {
        if let Some(t) = self.threads[id].lock().unwrap().as_ref() {
            t.unpark();
        }
    }
}
