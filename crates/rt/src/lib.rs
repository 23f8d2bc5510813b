//! `rt`: the user-level thread runtime of easyio.
//!
//! A [`Runtime`] runs N worker kernel threads (optionally pinned to cores). Each runs
//! *uthreads*: stackful user-level threads with stacks from a pool, a guard page below each,
//! and a fatal "uthread stack overflow" message if one is hit. Each worker has a local run
//! queue; work submitted from outside goes through a global injection queue, and a worker
//! that runs dry steals half of another's queue. A worker with nothing to do parks its
//! kernel thread until new work arrives.
//!
//! The EASYIO hook is [`wait_until`] (or [`wait`] with a [`Completion`]): a uthread waiting
//! for a copy to complete goes into its worker's *wait set*, which the worker polls at every
//! scheduling point; no thread is dedicated to polling. The same call works on an ordinary
//! thread, where it spins, then backs off.
//!
//! [`sync`] has a mutex, a condition variable and channels whose blocking operations yield
//! the uthread instead of blocking its worker (and block normally on ordinary threads).
//!
//! # What must not be held across a yield
//!
//! Every blocking call of this crate is a *yield*: the uthread switches out and may be
//! resumed on **another worker thread**. So, across any yield (`yield_now`, `sleep`,
//! `wait_until`, `JoinHandle::join`, locking [`sync::Mutex`], channel send/receive, ...):
//!
//! - do not hold a standard-library lock guard (`std::sync::MutexGuard`, `RwLock` guards):
//!   another uthread on the same worker that takes the same lock deadlocks the worker, and
//!   the guard may be released from a different thread than took it. Use [`sync::Mutex`];
//! - do not hold references into thread-locals (`LocalKey::with` closures) or anything that
//!   assumes it stays on one kernel thread (thread ids, per-thread caches): after the yield
//!   it may be another thread's;
//! - do not block the kernel thread (std channels, `std::thread::sleep`, blocking syscalls
//!   for long): that stops every uthread of the worker.
//!
//! Uthreads are not preempted: one that computes for a long time without a yield delays the
//! others of its worker, and the wait set of its worker is not polled meanwhile.
//!
//! # Example
//!
//! ```
//! let rt = rt::Runtime::new(2).unwrap();
//! let sum = rt.block_on(|| {
//!     let handles: Vec<_> = (0..10u64).map(|i| rt::spawn(move || i * i)).collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
//! });
//! assert_eq!(sum, 285);
//! ```

mod context;
mod error;
mod facade;
mod idle;
mod join;
mod overflow;
mod park_state;
mod runtime;
mod sched;
mod sleepers;
mod stack;
mod stats;
pub mod sync;
mod task;
mod waiter;
mod worker;

pub use error::Error;
pub use idle::{IDLE_SPINS, WAIT_NAP, WAIT_YIELDS};
pub use join::{panic_message, JoinError, JoinHandle};
pub use runtime::{Builder, Handle, Runtime};
pub use sched::{
    current_worker, in_uthread, sleep, spawn, wait, wait_until, would_idle, yield_now, Completion,
    OUTSIDE_NAP_MAX, OUTSIDE_NAP_MIN, OUTSIDE_SPINS, OUTSIDE_YIELDS,
};
pub use sleepers::MAX_WORKERS;
pub use stack::{DEFAULT_STACK_SIZE, MAX_STACK_SIZE, MIN_STACK_SIZE, STACK_POOL_PER_WORKER};
pub use stats::WorkerStats;
pub use worker::GLOBAL_QUEUE_INTERVAL;
