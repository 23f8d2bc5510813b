//! A condition variable for [`Mutex`](super::Mutex): `wait` releases the mutex and yields
//! until notified, then locks it again.

use std::collections::VecDeque;
use std::sync::Arc;

use super::lock;
use super::mutex::MutexGuard;
use crate::waiter::Waiter;

/// A uthread-aware condition variable. Wake-ups may be spurious: wait in a loop, or use
/// `wait_while`.
#[derive(Default)]
pub struct Condvar {
    waiters: std::sync::Mutex<VecDeque<Arc<Waiter>>>,
}

impl Condvar {
    /// A condition variable nobody waits on.
    pub fn new() -> Condvar {
        Condvar::default()
    }

    /// Releases `guard`'s mutex, waits for a notification, and locks the mutex again.
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        let mutex = guard.mutex();
        let waiter = Waiter::current();
        // Registered while the mutex is still held: a notifier, which changes the state under
        // the mutex first, cannot miss us.
        lock(&self.waiters).push_back(waiter.clone());
        drop(guard);
        waiter.wait();
        mutex.lock()
    }

    /// Waits while `cond` holds of the protected value.
    pub fn wait_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut cond: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        while cond(&mut *guard) {
            guard = self.wait(guard);
        }
        guard
    }

    /// Wakes one waiter, if any.
    pub fn notify_one(&self) {
        let w = lock(&self.waiters).pop_front();
        if let Some(w) = w {
            w.notify();
        }
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        let all = std::mem::take(&mut *lock(&self.waiters));
        for w in all {
            w.notify();
        }
    }
}
