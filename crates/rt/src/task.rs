//! A uthread as the scheduler sees it: its body until it first runs, then its coroutine
//! (stack and saved registers), its park state, its home worker, and the runtime it belongs
//! to.
//!
//! Ownership: at any instant a task is in exactly one place: a run queue, a worker's inbox,
//! a worker's wait set, a worker's timer heap, running on one worker, or parked (given up by
//! its worker and owned by the next `unpark`). Only the holder of that place touches `body`,
//! `coroutine` and `guard`; only the uthread itself touches `yielder`.
//!
//! Home: a task that has not run yet may be taken by any worker (work stealing). The worker
//! that first runs it becomes its *home*, and from then on only the home worker resumes it:
//! every place a started task can be queued belongs to its home worker (see `worker`), and
//! `run` checks it. So the coroutine's stack, which may hold values that are not `Send`
//! (`Rc`, `RefCell` borrows, thread-local references, lock guards), is only ever touched on
//! the OS thread that created those values. This is what makes the `UnsafeCell`s and the
//! `Send`/`Sync` impls below sound.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, Yielder};

use crate::error::JoinError;
use crate::park_state::ParkState;
use crate::shared::Shared;

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

/// `Task::home` of a task that has not run yet.
const NO_HOME: usize = usize::MAX;

/// A uthread.
pub(crate) struct Task {
    /// Park/unpark hand-off.
    pub(crate) park: ParkState,
    /// The worker that first ran it (`NO_HOME` until then); the only one that resumes it.
    home: AtomicUsize,
    /// The runtime this uthread belongs to.
    pub(crate) shared: Arc<Shared<TaskRef>>,
    /// The closure, until the uthread first runs.
    body: UnsafeCell<Option<Box<dyn Body>>>,
    /// The coroutine, from the first run until it finishes.
    coroutine: UnsafeCell<Option<Uthread>>,
    /// The guard page of its stack, for the overflow handler.
    guard: Cell<(usize, usize)>,
    /// The yielder of its coroutine, valid while the coroutine runs.
    yielder: Cell<*const Yielder<(), Switch>>,
}

// SAFETY: a `Task` crosses threads in two ways. (1) Before it first runs, whole, through
// the injection queue and the stealable queues of new uthreads; then it holds only its
// body, which is `Send` (`spawn` requires the closure and its result to be). (2) After, as
// a `TaskRef` held by a waker on any thread, which touches only `park`, `shared` and `home`
// (atomics and an `Arc` of `Sync` parts), and through its home worker's inbox, from which
// only the home worker takes it. The coroutine, whose stack may hold values that are not
// `Send`, is resumed only on its home worker (`run` asserts it), finishes there, and is
// never force-unwound (`Drop` leaks a suspended one), so none of those values is touched
// off the OS thread that made them. The cells are only touched by the single owner
// described in the module comment; ownership moves between threads through queues that
// synchronise (release/acquire).
unsafe impl Send for Task {}
// SAFETY: shared references reach other threads only as described above: they touch `park`,
// `shared` and `home`, which are `Sync`; everything else is touched by the owner alone.
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
    pub(crate) fn new(shared: Arc<Shared<TaskRef>>, body: Box<dyn Body>) -> TaskRef {
        Arc::new(Task {
            park: ParkState::new(),
            home: AtomicUsize::new(NO_HOME),
            shared,
            body: UnsafeCell::new(Some(body)),
            coroutine: UnsafeCell::new(None),
            guard: Cell::new((0, 0)),
            yielder: Cell::new(std::ptr::null()),
        })
    }

    /// The worker that first ran this task, `None` if it has not run yet. Read by a waker
    /// after `park.unpark` gave it the task, which orders it after the first run.
    pub(crate) fn home(&self) -> Option<usize> {
        match self.home.load(Ordering::Relaxed) {
            NO_HOME => None,
            w => Some(w),
        }
    }

    /// Runs the uthread on worker `worker` until it switches out or finishes. `stack`
    /// supplies a stack if this is its first run, which makes `worker` its home. The caller
    /// must own the task (see the module comment).
    ///
    /// # Panics
    /// If the uthread has started on another worker: its stack may hold values bound to that
    /// worker's OS thread, so resuming it here would be unsound.
    pub(crate) fn run(
        self: &TaskRef,
        worker: usize,
        stack: impl FnOnce() -> std::io::Result<DefaultStack>,
    ) -> Ran {
        self.park.resume();
        // SAFETY: the caller owns the task, so nobody else touches `coroutine` or `body`;
        // the uthread itself never touches them.
        let coroutine = unsafe { &mut *self.coroutine.get() };
        if coroutine.is_some() {
            assert_eq!(
                self.home.load(Ordering::Relaxed),
                worker,
                "rt: a started uthread was given to a worker other than its own"
            );
        } else {
            self.home.store(worker, Ordering::Relaxed);
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
    /// on its own stack. Returns when its worker resumes it (always the same worker).
    pub(crate) fn switch_out(&self, why: Switch) {
        let y = self.yielder.get();
        debug_assert!(!y.is_null());
        // SAFETY: the uthread is running (we are on its stack), so its coroutine and the
        // yielder it was given are alive; only the uthread itself reads `yielder`.
        unsafe { (*y).suspend(why) };
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // A task dropped between its first run and its end was suspended with nobody left to
        // wake it. Dropping its coroutine would unwind its stack here, on whatever thread let
        // go of the last reference, running destructors of values that may belong to its home
        // worker's thread; leak the stack instead.
        if let Some(co) = self.coroutine.get_mut().take() {
            std::mem::forget(co);
        }
    }
}
