//! A one-shot wake-up for whoever blocks: a uthread (which parks and lets its worker run
//! others) or an ordinary thread (which parks its kernel thread). Every blocking operation
//! of this crate is built on it: register a `Waiter` where the waker will find it, with the
//! condition checked under the same lock, then `wait`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::Thread;

use crate::context;
use crate::task::{Switch, TaskRef};

/// Who is woken.
enum Target {
    Uthread(TaskRef),
    Thread(Thread),
}

/// A one-shot wake-up.
pub(crate) struct Waiter {
    notified: AtomicBool,
    target: Target,
}

impl Waiter {
    /// A wake-up for the calling uthread, or the calling thread outside a uthread.
    pub(crate) fn current() -> Arc<Waiter> {
        let target = match context::task_ref() {
            Some(task) => Target::Uthread(task),
            None => Target::Thread(std::thread::current()),
        };
        Arc::new(Waiter {
            notified: AtomicBool::new(false),
            target,
        })
    }

    /// Wakes the waiter (once; later calls do nothing but are harmless).
    pub(crate) fn notify(&self) {
        if self.notified.swap(true, Ordering::AcqRel) {
            return;
        }
        match &self.target {
            Target::Uthread(task) => {
                if task.park.unpark() {
                    crate::worker::wake(task.clone());
                }
            }
            Target::Thread(thread) => thread.unpark(),
        }
    }

    /// Whether `notify` has been called.
    pub(crate) fn is_notified(&self) -> bool {
        self.notified.load(Ordering::Acquire)
    }

    /// Blocks the caller (who must be the one `current` was called by) until notified.
    pub(crate) fn wait(&self) {
        while !self.is_notified() {
            match &self.target {
                Target::Uthread(_) => {
                    let task = context::task().expect("a uthread waiter waits on its uthread");
                    task.switch_out(Switch::Park);
                }
                Target::Thread(_) => std::thread::park(),
            }
        }
    }
}
