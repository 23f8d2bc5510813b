//! Where the calling code is running: which uthread and which worker, kept in thread-locals
//! that the worker sets around every switch.
//!
//! A started uthread never changes OS thread (see `task`), so a thread-local address
//! computed before a switch is still this thread's after it.

use std::cell::Cell;

use crate::local::Local;
use crate::task::{Task, TaskRef};

thread_local! {
    /// The uthread running on this thread, or null.
    static TASK: Cell<*const Task> = const { Cell::new(std::ptr::null()) };
    /// The worker this thread is, or null.
    static WORKER: Cell<*const Local> = const { Cell::new(std::ptr::null()) };
}

/// Sets the uthread running on this thread (null: none).
#[inline]
pub(crate) fn set_task(task: *const Task) {
    TASK.with(|t| t.set(task));
}

/// Sets the worker this thread is (null: none).
pub(crate) fn set_worker(worker: *const Local) {
    WORKER.with(|w| w.set(worker));
}

/// The uthread running on this thread, if any.
#[inline(never)]
pub(crate) fn task() -> Option<&'static Task> {
    let p = TASK.with(|t| t.get());
    // SAFETY: the worker sets the pointer to the task it runs, holding a counted reference
    // for as long as the uthread runs, and clears it when the uthread switches out. Code
    // that reads it runs on that uthread, and that code runs only while a worker holds a
    // counted reference to the task to resume it (a task dropped while suspended is never
    // resumed, see `Task`'s `Drop`), so the borrow stays valid for the code of that uthread.
    unsafe { p.as_ref() }
}

/// The guard page of the uthread running on this thread, `(0, 0)` if none. Safe to call
/// from a signal handler: one TLS load (a const-initialised cell without destructor) and
/// one read of the running task.
pub(crate) fn running_guard() -> (usize, usize) {
    let p = TASK.with(|t| t.get());
    // SAFETY: a non-null pointer is the task running on this thread (see `task`), alive
    // while it runs; a fault on its stack interrupts it mid-run.
    unsafe { p.as_ref() }.map_or((0, 0), Task::guard)
}

/// A counted reference to the uthread running on this thread, if any.
#[inline(never)]
pub(crate) fn task_ref() -> Option<TaskRef> {
    let p = TASK.with(|t| t.get());
    if p.is_null() {
        return None;
    }
    // SAFETY: the pointer came from `Arc::as_ptr` of the `TaskRef` the worker holds while
    // the uthread runs (see `set_task`), so the allocation is alive and counted; taking one
    // more count and building an `Arc` from it is the documented pairing.
    unsafe {
        std::sync::Arc::increment_strong_count(p);
        Some(std::sync::Arc::from_raw(p))
    }
}

/// The worker this thread is, if it is one.
#[inline(never)]
pub(crate) fn worker() -> Option<&'static Local> {
    let p = WORKER.with(|w| w.get());
    // SAFETY: a worker sets the pointer to its `Local` on entry to its loop and clears it
    // before that `Local` is dropped; only code running on that thread reads it.
    unsafe { p.as_ref() }
}
