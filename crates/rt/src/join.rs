//! Join handles: where a uthread's result (or panic) waits for whoever joins it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use crate::error::JoinError;
use crate::task::Body;
use crate::waiter::Waiter;

/// The result slot shared by a uthread and its join handle.
struct Slot<T> {
    state: Mutex<SlotState<T>>,
}

struct SlotState<T> {
    result: Option<Result<T, JoinError>>,
    joiner: Option<Arc<Waiter>>,
}

impl<T> Slot<T> {
    fn complete(&self, result: Result<T, JoinError>) {
        let joiner = {
            let mut s = self.state.lock().unwrap();
            s.result = Some(result);
            s.joiner.take()
        };
        if let Some(w) = joiner {
            w.notify();
        }
    }
}

/// Owns the right to join a uthread. Dropping it detaches the uthread (its result is
/// dropped when it finishes).
pub struct JoinHandle<T> {
    slot: Arc<Slot<T>>,
}

impl<T> JoinHandle<T> {
    /// Waits for the uthread to finish and returns its result. Inside a uthread this parks
    /// the caller and lets its worker run others; on an ordinary thread it parks the thread.
    /// A panic in the uthread comes back as `JoinError::Panicked`.
    pub fn join(self) -> Result<T, JoinError> {
        loop {
            let waiter = {
                let mut s = self.slot.state.lock().unwrap();
                if let Some(r) = s.result.take() {
                    return r;
                }
                let w = Waiter::current();
                s.joiner = Some(w.clone());
                w
            };
            waiter.wait();
        }
    }

    /// Whether the uthread has finished (its result is ready).
    pub fn is_finished(&self) -> bool {
        self.slot.state.lock().unwrap().result.is_some()
    }
}

/// A spawned closure with the slot its result goes to.
struct Spawned<F, T> {
    f: F,
    slot: Arc<Slot<T>>,
}

impl<F, T> Body for Spawned<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    fn run(self: Box<Self>) {
        let Spawned { f, slot } = *self;
        let result = catch_unwind(AssertUnwindSafe(f)).map_err(JoinError::Panicked);
        slot.complete(result);
    }

    fn fail(self: Box<Self>, err: JoinError) {
        self.slot.complete(Err(err));
    }
}

/// The body of a uthread running `f`, and the handle that joins it.
pub(crate) fn pair<F, T>(f: F) -> (Box<dyn Body>, JoinHandle<T>)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let slot = Arc::new(Slot {
        state: Mutex::new(SlotState {
            result: None,
            joiner: None,
        }),
    });
    let body = Box::new(Spawned {
        f,
        slot: slot.clone(),
    });
    (body, JoinHandle { slot })
}
