//! What code does to the uthread it runs on: spawn, yield, sleep, wait until a condition
//! holds. Each call also works on an ordinary thread, where it falls back to what a kernel
//! thread would do.

use std::time::{Duration, Instant};

use crate::context;
use crate::join::JoinHandle;
use crate::runtime::Handle;
use crate::task::Switch;

/// Outside a runtime, `wait_until` first checks this many times with a spin hint between...
pub const OUTSIDE_SPINS: u32 = 128;
/// ...then this many times with `std::thread::yield_now` between...
pub const OUTSIDE_YIELDS: u32 = 16;
/// ...then sleeps between checks, starting at this...
pub const OUTSIDE_NAP_MIN: Duration = Duration::from_micros(1);
/// ...and doubling up to this.
pub const OUTSIDE_NAP_MAX: Duration = Duration::from_micros(200);

/// How `wait_until` waits on an ordinary thread (`OUTSIDE_*`).
pub const OUTSIDE_WAIT: threads::WaitPolicy = threads::WaitPolicy {
    spin: threads::Limit::Rounds(OUTSIDE_SPINS),
    spins: threads::Spins::Each(1),
    yields: threads::Limit::Rounds(OUTSIDE_YIELDS),
    rest: threads::Rest::Sleep {
        first: OUTSIDE_NAP_MIN,
        max: OUTSIDE_NAP_MAX,
    },
    clock_every: 1,
};

/// Whether the caller runs in a uthread (so blocking calls of this crate yield instead of
/// blocking a kernel thread).
pub fn in_uthread() -> bool {
    context::task().is_some()
}

/// The index of the worker the caller runs on, if it runs on one. In a uthread it is the
/// same from the uthread's start to its end: a started uthread never changes worker.
pub fn current_worker() -> Option<usize> {
    context::worker().map(|w| w.id)
}

/// Starts a uthread on the caller's runtime (see `Handle::spawn`).
///
/// # Panics
/// If the caller does not run on a worker; use `Runtime::spawn` or `Handle::spawn` there.
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Handle::current()
        .expect("rt::spawn called outside a runtime; use Runtime::spawn or Handle::spawn")
        .spawn(f)
}

/// Lets the other ready uthreads of this worker run; this one goes to the back of the run
/// queue. Every yield is a scheduling point: the worker polls its wait set and timers. When
/// the worker has nothing else at all (nothing queued, waiting, sleeping or injected), the
/// scheduler would resume this uthread at once, so the yield returns without switching. On
/// an ordinary thread: `std::thread::yield_now`.
pub fn yield_now() {
    match context::task() {
        Some(task) => {
            if context::worker().is_some_and(|w| w.yield_is_a_no_op()) {
                return;
            }
            task.switch_out(Switch::Yield)
        }
        None => std::thread::yield_now(),
    }
}

/// Suspends the uthread for at least `duration` while its worker runs others. On an
/// ordinary thread: `std::thread::sleep`.
pub fn sleep(duration: Duration) {
    match context::task() {
        Some(task) if duration.is_zero() => task.switch_out(Switch::Yield),
        Some(task) => task.switch_out(Switch::Sleep(Instant::now() + duration)),
        None => std::thread::sleep(duration),
    }
}

/// Whether waiting now would leave the caller's core with nothing to do: true on an
/// ordinary thread (it waits in place), and in a uthread whose worker has no other
/// uthread queued to run. A caller about to wait on a device uses it to ask the device to
/// poll rather than nap, since nothing else would use the time meanwhile.
pub fn would_idle() -> bool {
    match (context::task(), context::worker()) {
        (Some(_), Some(local)) => local.nothing_queued() && local.shared.injector.is_empty(),
        _ => true,
    }
}

/// Whether the caller is all the work its core has: true on an ordinary thread, and in a
/// uthread whose worker has no other uthread queued, waiting or sleeping (and nothing in
/// the injection queue). Unlike [`would_idle`], which says only that nothing could run
/// *now*, this says that nothing of this worker's can become runnable while the caller
/// does some work itself instead of waiting for a device to do it.
pub fn alone() -> bool {
    match (context::task(), context::worker()) {
        (Some(_), Some(local)) => {
            local.nothing_queued() && local.nothing_pending() && local.shared.injector.is_empty()
        }
        _ => true,
    }
}

/// Something that finishes without telling anyone: a copy whose completion is a counter in
/// memory. `is_done` must be cheap (it is polled at scheduling points), must not block, and
/// once true stays true.
pub trait Completion {
    /// Whether it has finished.
    fn is_done(&self) -> bool;
}

impl<F: Fn() -> bool> Completion for F {
    fn is_done(&self) -> bool {
        self()
    }
}

/// Waits until `done.is_done()`; see `wait_until`.
pub fn wait(done: &impl Completion) {
    wait_until(|| done.is_done());
}

/// Waits until `cond()` is true: the EASYIO hook for waiting on a copy completion.
///
/// In a uthread: if the condition does not hold yet, the uthread goes into its worker's wait
/// set and the worker runs others; the worker evaluates `cond` at every scheduling point
/// (after each switch, and while idle) and makes the uthread runnable once it holds. No
/// thread is dedicated to polling. On an ordinary thread: spins briefly, then yields, then
/// sleeps with a growing nap between checks (`OUTSIDE_*`).
///
/// `cond` may be called many times, from the worker loop (on the same kernel thread), and
/// must not block or yield. Once it has returned true it must keep doing so.
pub fn wait_until(cond: impl Fn() -> bool) {
    if cond() {
        return;
    }
    match context::task() {
        Some(task) => {
            let cond: &dyn Fn() -> bool = &cond;
            // SAFETY: only the lifetime is erased. The worker calls the condition only while
            // this uthread is suspended in the wait set below, before `switch_out` returns,
            // so the closure on this stack frame outlives every call.
            let cond: *const (dyn Fn() -> bool + 'static) = unsafe { std::mem::transmute(cond) };
            // A worker may also resume us because the condition panicked there; check again
            // here so the panic happens on this uthread.
            loop {
                task.switch_out(Switch::Wait(cond));
                // SAFETY: `cond` points at the closure of this frame, alive here.
                if unsafe { (*cond)() } {
                    return;
                }
            }
        }
        None => wait_outside(&cond),
    }
}

/// `wait_until` on an ordinary thread.
fn wait_outside(cond: &dyn Fn() -> bool) {
    OUTSIDE_WAIT.wait_until(cond);
}
