//! How an idle software worker waits and how it is woken: it parks until a submitter
//! rings, or naps between looks at its ring unless a caller waits in place for it (a
//! hurry). Each side stores its flag, fences, then looks at the other's, so that either
//! the worker sees the news before it sleeps or the waker sees the sleeper and unparks
//! it.
//!
//! Time is the caller's: nanoseconds on the channel's own clock, passed in, so that
//! this file uses only `super::facade` and a model checker can compile it against its
//! own primitives (`tests/model_check.rs`).

use std::time::Duration;

use super::facade::{fence, thread, AtomicBool, AtomicU64, Mutex, Ordering, Thread};

/// The idle worker's side of the hand-off, one per channel.
pub(crate) struct Wake {
    /// Set by the worker just before it parks; submitters unpark it when set.
    parked: AtomicBool,
    /// Set by the worker just before it naps; only [`Wake::wake_now`] ends a nap.
    napping: AtomicBool,
    /// Until when (ns on the channel's clock) an idle worker spins instead of napping,
    /// because someone waits in place for it.
    hurry_until: AtomicU64,
    /// The worker thread, once spawned.
    thread: Mutex<Option<Thread>>,
}

impl Wake {
    pub(crate) fn new() -> Wake {
        Wake {
            parked: AtomicBool::new(false),
            napping: AtomicBool::new(false),
            hurry_until: AtomicU64::new(0),
            thread: Mutex::new(None),
        }
    }

    /// Names the worker thread that the wake-ups unpark.
    pub(crate) fn set_thread(&self, worker: Thread) {
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(worker);
    }

    /// After a submission: unparks a parked worker (a napping one looks soon anyway).
    pub(crate) fn wake(&self) {
        // Pairs with the fence in `park`: either the worker sees the new ring entries
        // (or flag) before it parks, or we see `parked` and unpark it.
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            self.unpark();
        }
    }

    /// Unparks the worker whether it parks or naps (flags changed, someone waits).
    pub(crate) fn wake_now(&self) {
        // Pairs with the fences in `park` and `nap`.
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) || self.napping.load(Ordering::SeqCst) {
            self.unpark();
        }
    }

    fn unpark(&self) {
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            t.unpark();
        }
    }

    /// Someone waits with nothing else to do: an idle worker spins instead of napping
    /// until `until`. Wakes nobody: the caller follows it with [`Wake::wake_now`].
    pub(crate) fn hurry(&self, until: u64) {
        self.hurry_until.fetch_max(until, Ordering::SeqCst);
    }

    /// Whether someone waits in place at `now`.
    pub(crate) fn hurried(&self, now: u64) -> bool {
        now < self.hurry_until.load(Ordering::SeqCst)
    }

    /// Parks until woken, unless `ready` already holds once `parked` is visible to
    /// submitters.
    pub(crate) fn park(&self, ready: impl Fn() -> bool) {
        self.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !ready() {
            thread::park();
        }
        self.parked.store(false, Ordering::SeqCst);
    }

    /// Sleeps for `nap` unless someone waits in place at `now()` (or `stopping()`) once
    /// `napping` is visible to them; only [`Wake::wake_now`] cuts it short.
    pub(crate) fn nap(&self, nap: Duration, now: impl Fn() -> u64, stopping: impl Fn() -> bool) {
        self.napping.store(true, Ordering::SeqCst);
        // Pairs with the fence in `wake_now`, which a hurry calls after `hurry`.
        fence(Ordering::SeqCst);
        if !self.hurried(now()) && !stopping() {
            thread::park_timeout(nap);
        }
        self.napping.store(false, Ordering::SeqCst);
    }
}
