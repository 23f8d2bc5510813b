//! A uthread as the scheduler sees it: its body until it first runs, then its coroutine
//! (stack and saved registers), its park state, and the runtime it belongs to.
//!
//! Ownership: at any instant a task is in exactly one place: a run queue, a worker's wait
//! set, a worker's timer heap, running on one worker, or parked (given up by its worker and
//! owned by the next `unpark`). Only the holder of that place touches `body`, `coroutine` and
//! `guard`; only the uthread itself touches `yielder`. This is what makes the `UnsafeCell`s
//! and the `Send`/`Sync` impls below sound.

use std::cell::{Cell, UnsafeCell};
use std::sync::Arc;
use std::time::Instant;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, Yielder};

use crate::join::JoinError;
use crate::park_state::ParkState;
use crate::runtime::Shared;

/// Why a uthread switched back to its worker.
pub(crate) enum Switch {
    /// Run me again after the others that are ready.
    Yield,
    /// I registered a wake-up somewhere; park me (see `park_state`).
    Park,
    /// Run me again once this condition holds; it lives on my stack, which stays put while
    /// I wait.
    Wait(*const (dyn Fn() -> bool + 'static)),
    /// Run me again at this instant.
    Sleep(Instant),
}

/// The coroutine type of a uthread.
pub(crate) type Uthread = Coroutine<(), Switch, (), DefaultStack>;

/// What a uthread runs: the spawned closure and where its result goes.
pub(crate) trait Body: Send {
    /// Runs the closure on the uthread's stack and delivers its result (or panic).
    fn run(self: Box<Self>);
    /// The uthread could not start; delivers the error to its joiner.
    fn fail(self: Box<Self>, err: JoinError);
}

/// A uthread.
pub(crate) struct Task {
    /// Park/unpark hand-off.
    pub(crate) park: ParkState,
    /// The runtime this uthread belongs to.
    pub(crate) shared: Arc<Shared>,
    /// The closure, until the uthread first runs.
    body: UnsafeCell<Option<Box<dyn Body>>>,
    /// The coroutine, from the first run until it finishes.
    coroutine: UnsafeCell<Option<Uthread>>,
    /// The guard page of its stack, for the overflow handler.
    guard: Cell<(usize, usize)>,
    /// The yielder of its coroutine, valid while the coroutine runs.
    yielder: Cell<*const Yielder<(), Switch>>,
}

// SAFETY: the cells are only touched by the single owner described in the module comment;
// ownership moves between threads through queues that synchronise (release/acquire).
// The coroutine's stack may hold values that are not `Send`; the crate documentation says
// what must not be held across a yield for that reason.
unsafe impl Send for Task {}
// SAFETY: as above; the shared parts (`park`, `shared`) are themselves `Sync`.
unsafe impl Sync for Task {}

/// A reference to a uthread, as queues and wake-up registrations hold it.
pub(crate) type TaskRef = Arc<Task>;

/// What happened when a worker ran a uthread until it switched out.
pub(crate) enum Ran {
    /// It switched out for this reason.
    Switched(Switch),
    /// It finished; its stack is free again.
    Finished(DefaultStack),
    /// It could not start: no stack could be mapped. Its joiner has been told.
    NoStack,
}

impl Task {
    /// A new uthread of runtime `shared` that will run `body`.
    pub(crate) fn new(shared: Arc<Shared>, body: Box<dyn Body>) -> TaskRef {
        Arc::new(Task {
            park: ParkState::new(),
            shared,
            body: UnsafeCell::new(Some(body)),
            coroutine: UnsafeCell::new(None),
            guard: Cell::new((0, 0)),
            yielder: Cell::new(std::ptr::null()),
        })
    }

    /// Runs the uthread until it switches out or finishes. `stack` supplies a stack if this
    /// is its first run. The caller must own the task (see the module comment).
    pub(crate) fn run(
        self: &TaskRef,
        stack: impl FnOnce() -> std::io::Result<DefaultStack>,
    ) -> Ran {
        self.park.resume();
        // SAFETY: the caller owns the task, so nobody else touches `coroutine` or `body`;
        // the uthread itself never touches them.
        let coroutine = unsafe { &mut *self.coroutine.get() };
        if coroutine.is_none() {
            // SAFETY: as above.
            let body = unsafe { (*self.body.get()).take() }.expect("a task runs once");
            let stack = match stack() {
                Ok(s) => s,
                Err(e) => {
                    body.fail(JoinError::NoStack(e));
                    return Ran::NoStack;
                }
            };
            self.guard.set(crate::stack::guard_range(&stack));
            let me: *const Task = Arc::as_ptr(self);
            *coroutine = Some(Coroutine::with_stack(
                stack,
                move |y: &Yielder<(), Switch>, ()| {
                    // SAFETY: the task outlives its coroutine, which it owns; only the uthread
                    // touches `yielder`.
                    unsafe { (*me).yielder.set(y) };
                    body.run();
                },
            ));
        }
        let co = coroutine.as_mut().expect("coroutine present");
        let result = co.resume(());
        match result {
            corosensei::CoroutineResult::Yield(why) => Ran::Switched(why),
            corosensei::CoroutineResult::Return(()) => {
                let co = coroutine.take().expect("coroutine present");
                Ran::Finished(co.into_stack())
            }
        }
    }

    /// The guard page `[lo, hi)` of the uthread's stack; `(0, 0)` before it first runs.
    /// Read by the stack-overflow handler for the uthread running on the faulting thread.
    pub(crate) fn guard(&self) -> (usize, usize) {
        self.guard.get()
    }

    /// Switches from this uthread back to its worker. Must be called by the uthread itself,
    /// on its own stack. Returns when a worker resumes it (maybe another worker).
    pub(crate) fn switch_out(&self, why: Switch) {
        let y = self.yielder.get();
        debug_assert!(!y.is_null());
        // SAFETY: the uthread is running (we are on its stack), so its coroutine and the
        // yielder it was given are alive; only the uthread itself reads `yielder`.
        unsafe { (*y).suspend(why) };
    }
}
