//! Synchronisation for uthreads: blocking operations yield the uthread and let its worker
//! run others; on ordinary threads they block the thread. Uthreads and threads can share
//! them (a thread can receive what a uthread sends).
//!
//! Each is a small state behind a standard-library lock that is held only for a few
//! instructions and never across a yield, plus a queue of waiters (one-shot wake-ups): a
//! blocked caller registers itself with the condition checked under that lock, so a wake-up
//! cannot fall between the check and the registration.

mod channel;
mod condvar;
mod mutex;

pub use channel::{
    bounded, unbounded, Receiver, RecvError, SendError, Sender, TryRecvError, TrySendError,
};
pub use condvar::Condvar;
pub use mutex::{Mutex, MutexGuard};

/// Locks a standard-library mutex that guards only a few plain-data updates. A panic cannot
/// happen while it is held, so poisoning carries no information here.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
