//! `rt`: the user-level thread runtime of easyio.
//!
//! A [`Runtime`] runs N worker kernel threads (optionally pinned to cores). Each runs
//! *uthreads*: stackful user-level threads with stacks from a pool, a guard page below each,
//! and a fatal "uthread stack overflow" message if one is hit. New uthreads spawned on a
//! worker wait in that worker's queue, and new uthreads submitted from outside in a global
//! injection queue; a worker that runs dry takes from the injection queue or steals half of
//! another's new uthreads. A worker with nothing to do parks its kernel thread until new
//! work arrives.
//!
//! The EASYIO hook is [`wait_until`] (or [`wait`] with a [`Completion`]): a uthread waiting
//! for a copy to complete goes into its worker's *wait set*, which the worker polls at every
//! scheduling point; no thread is dedicated to polling. The same call works on an ordinary
//! thread, where it spins, then backs off.
//!
//! [`sync`] has a mutex, a condition variable and channels whose blocking operations yield
//! the uthread instead of blocking its worker (and block normally on ordinary threads).
//!
//! # A uthread stays on the worker that started it
//!
//! A uthread may start on any worker: until it first runs it is only its closure, which
//! work stealing may move to another worker. From its first run to its end it runs on that
//! worker's kernel thread alone: whatever makes it runnable again after a yield (`yield_now`,
//! `sleep`, `wait_until`, `JoinHandle::join`, locking [`sync::Mutex`], channel
//! send/receive, ...), and whichever thread wakes it, it is resumed by the worker that
//! started it. So values that must stay on one thread may live on its stack across yields:
//! an `Rc`, a `RefCell` borrow, a reference from `LocalKey::with`, a thread id, a
//! `std::sync::MutexGuard`.
//!
//! ```
//! use std::cell::RefCell;
//! use std::rc::Rc;
//!
//! let rt = rt::Runtime::new(2).unwrap();
//! let n = rt.block_on(|| {
//!     let shared = Rc::new(RefCell::new(0));
//!     let borrowed = shared.borrow_mut();
//!     let here = std::thread::current().id();
//!     rt::yield_now();
//!     rt::sleep(std::time::Duration::from_micros(10));
//!     assert_eq!(std::thread::current().id(), here);
//!     drop(borrowed);
//!     *shared.borrow_mut() += 1;
//!     let n = *shared.borrow();
//!     n
//! });
//! assert_eq!(n, 1);
//! ```
//!
//! What does cross threads is checked by the type system: the closure given to `spawn` (it
//! may be stolen before it starts) and the value it returns (the joiner may be anywhere)
//! must be `Send`. This does not compile:
//!
//! ```compile_fail,E0277
//! let rt = rt::Runtime::new(2).unwrap();
//! let shared = std::rc::Rc::new(1);
//! // The closure owns an `Rc`: it could start on another worker than the one that made it.
//! rt.spawn(move || *shared + 1);
//! ```
//!
//! nor does this:
//!
//! ```compile_fail,E0277
//! let rt = rt::Runtime::new(2).unwrap();
//! // The result is an `Rc`: it would be dropped or used by the joiner's thread.
//! let handle = rt.spawn(|| std::rc::Rc::new(1));
//! ```
//!
//! The price: a started uthread does not move to an idle worker even when its own worker is
//! busy; only new uthreads balance the load. And two uthreads on different workers that wake
//! each other in turn (a request and its reply over a channel) stay apart: every wake-up
//! crosses to the other worker and wakes its thread if it slept, which costs far more than
//! a switch between two uthreads of one worker (`easyio bench rt`: ping-pong vs
//! ping-pong-2-workers).
//!
//! # What still must not be held across a yield
//!
//! Staying on one thread makes these sound, not free of deadlocks:
//!
//! - a standard-library lock guard (`std::sync::MutexGuard`, `RwLock` guards) held across a
//!   yield deadlocks the worker if another uthread of the same worker then takes the same
//!   lock, and blocks the other worker's kernel thread if one of its uthreads does. Use
//!   [`sync::Mutex`];
//! - a `RefCell` (or thread-local) borrowed across a yield is still borrowed when the other
//!   uthreads of the worker run: their borrows panic;
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
//!
//! # Place in the layers
//!
//! Layers, bottom up: `threads`; `pmem` and `rt` over it; `engine`; `mover`; `fs`;
//! then the crash harness, the server, the doors, the benchmarks and the binary (the
//! whole graph is in docs/ARCHITECTURE.md). No crate imports one above it.
//! `rt` imports no easyio crate but
//! `threads` (its wait policies and worker registration): it knows nothing of regions,
//! engines or files — a completion is only a condition it polls ([`Completion`]). It must
//! not block a worker's kernel thread on behalf of a uthread, nor preempt one.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

mod context;
mod error;
mod facade;
mod idle;
mod join;
mod local;
mod overflow;
mod park_state;
mod runtime;
mod sched;
mod shared;
mod sleepers;
mod stack;
mod stats;
pub mod sync;
mod task;
mod waiter;
mod worker;

pub use error::{panic_message, Error, JoinError};
pub use idle::{IDLE_ALONE, IDLE_SPINS, IDLE_WITH_WAITERS, WAIT_NAP, WAIT_YIELDS};
pub use join::JoinHandle;
pub use local::GLOBAL_QUEUE_INTERVAL;
pub use runtime::{Builder, Handle, Runtime};
pub use sched::{
    alone, current_worker, in_uthread, sleep, spawn, wait, wait_until, would_idle, yield_now,
    Completion, OUTSIDE_NAP_MAX, OUTSIDE_NAP_MIN, OUTSIDE_SPINS, OUTSIDE_WAIT, OUTSIDE_YIELDS,
};
pub use sleepers::MAX_WORKERS;
pub use stack::{DEFAULT_STACK_SIZE, MAX_STACK_SIZE, MIN_STACK_SIZE, STACK_POOL_PER_WORKER};
pub use stats::WorkerStats;
