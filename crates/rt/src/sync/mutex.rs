//! A mutual-exclusion lock whose `lock` yields the uthread while another holds it. It may
//! be held across yields (that is its purpose); ownership passes to the next waiter in FIFO
//! order on unlock, so a waiter is never overtaken.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::lock;
use crate::waiter::Waiter;

/// A uthread-aware mutex. Not poisoned by a panic: the guard's drop during unwinding
/// releases it.
pub struct Mutex<T: ?Sized> {
    state: std::sync::Mutex<State>,
    value: UnsafeCell<T>,
}

struct State {
    locked: bool,
    waiters: VecDeque<Arc<Waiter>>,
}

// SAFETY: the value is only reached through a guard, and at most one guard exists at a time
// (the `locked` flag under `state`); the value moves between threads with the lock.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above; sharing the mutex only gives exclusive access to the value in turn.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

/// Exclusive access to the value of a [`Mutex`]; unlocks on drop.
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
}

// SAFETY: a guard gives `&T` to whoever shares it, which is sound when `T: Sync`.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<T> Mutex<T> {
    /// An unlocked mutex holding `value`.
    pub fn new(value: T) -> Mutex<T> {
        Mutex {
            state: std::sync::Mutex::new(State {
                locked: false,
                waiters: VecDeque::new(),
            }),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, consuming the mutex.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, yielding (in a uthread) or blocking (on a thread) while another holds it.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let waiter = {
            let mut s = lock(&self.state);
            if !s.locked {
                s.locked = true;
                return MutexGuard { mutex: self };
            }
            let w = Waiter::current();
            s.waiters.push_back(w.clone());
            w
        };
        // The unlocker hands the lock to us before notifying: `locked` stays true.
        waiter.wait();
        MutexGuard { mutex: self }
    }

    /// Locks if nobody holds it.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let mut s = lock(&self.state);
        if s.locked {
            return None;
        }
        s.locked = true;
        Some(MutexGuard { mutex: self })
    }

    /// The value, through exclusive access to the mutex (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    fn unlock(&self) {
        let next = {
            let mut s = lock(&self.state);
            let next = s.waiters.pop_front();
            if next.is_none() {
                s.locked = false;
            }
            next
        };
        if let Some(w) = next {
            w.notify();
        }
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held, so no other reference to the value is
        // live.
        unsafe { &*self.mutex.value.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only access through the guard.
        unsafe { &mut *self.mutex.value.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.unlock();
    }
}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    /// The mutex this guard locks (for `Condvar`).
    pub(crate) fn mutex(&self) -> &'a Mutex<T> {
        self.mutex
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_lock_fails_while_held_and_succeeds_after() {
        let m = Mutex::new(5);
        let g = m.lock();
        assert!(m.try_lock().is_none());
        drop(g);
        *m.try_lock().unwrap() += 1;
        assert_eq!(m.into_inner(), 6);
    }

    #[test]
    fn threads_outside_a_runtime_exclude_each_other() {
        let m = Arc::new(Mutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let mut g = m.lock();
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), 8000);
    }
}
