//! Model checks of the software engine's idle hand-off with shuttle, which runs a test
//! under many thread interleavings and fails on a deadlock (every thread blocked).
//!
//! `src/wake.rs` (park, nap, hurry and the wake-ups) is compiled here against shuttle's
//! primitives (the `facade` below), so its code is what is checked. Around it the model
//! plays the rest of the protocol as `src/software.rs` does: the worker loop (`worker`,
//! `run_group`: take the ring, publish; when idle spin, nap or park), a submission
//! (`Software::try_submit`: push under the submit lock, then `wake`), a caller with
//! nothing else to do (`mover::wait_engine` -> `Software::hurry`: open the hurry window,
//! then `wake_now`) and shutdown (stop under the submit lock, then `wake_now`).
//!
//! The property: a submitted copy is never left un-run while its caller waits. Shuttle
//! never lets a `park_timeout` time out, so a nap counts as a sleep only a wake-up ends:
//! the check is that a caller who waits in place is never left to a nap's timeout nor to
//! a park nobody ends (the lost wake-up). The caller's polling is modelled as parking
//! until the worker publishes: a poll sees a publish at its next look.
//!
//! Time is a model clock that the worker advances by one tick per idle round; the hurry
//! window and the spin before parking are counted in those ticks.

mod facade {
    pub(crate) use shuttle::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
    pub(crate) use shuttle::sync::Mutex;
    pub(crate) use shuttle::thread::{self, Thread};
}

#[path = "../src/wake.rs"]
mod wake;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use shuttle::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use shuttle::sync::Mutex;
use shuttle::thread::{self, Thread};

use wake::Wake;

/// Iterations of the randomised checks of the real protocol.
const RANDOM_ITERATIONS: usize = 2_000;
/// Iterations the checker gets to fail a broken twin: it stops at the first failure, which
/// comes within a few hundred (the rarest, a hurry ringing before its window, needs two
/// preemptions at the right steps), so this bound only keeps a miss out of reach.
const TWIN_ITERATIONS: usize = 20_000;
/// Bound on the interleavings the depth-first check enumerates (a parked thread may wake
/// spuriously, so the full space is infinite; the first interleavings are the short ones).
const DFS_ITERATIONS: usize = 20_000;
/// `HURRY` in model ticks: the window outlasts the worker's step from its look at the
/// ring to its nap (on real time, a worker preempted longer than `HURRY` there naps once
/// more: a nap's latency, not a lost copy).
const HURRY_TICKS: u64 = 2;
/// `EngineConfig::spin` in model ticks: idle this long, the worker parks.
const SPIN_TICKS: u64 = 3;
/// Any nap: shuttle never lets it time out.
const NAP: Duration = Duration::from_micros(50);

/// How the caller asks for the worker: the real steps, or a broken twin that differs
/// from them by one step.
#[derive(Clone, Copy, PartialEq)]
enum Caller {
    /// `try_submit` pushes, then `wake`; a hurry opens its window, then `wake_now`.
    Real,
    /// A submission that rings before its descriptor is in the ring.
    RingsBeforePushing,
    /// A hurry that rings `wake`, which ends a park but not a nap already begun.
    HurryRingsOnlyAParkedWorker,
    /// A hurry that rings before it opens its window.
    HurryRingsBeforeItsWindow,
}

struct Channel {
    wake: Wake,
    /// The ring: counters of submitted copies.
    ring: Mutex<VecDeque<u64>>,
    /// The submit lock and the last counter handed out.
    next: Mutex<u64>,
    /// The completion counter.
    published: AtomicU64,
    stop: AtomicBool,
    /// Model time, in worker idle rounds.
    clock: AtomicU64,
    /// The waiting caller, whom a publish unparks (its next poll).
    caller: Mutex<Option<Thread>>,
}

/// The worker thread: `software::worker` without the copying.
fn worker(ch: &Channel, naps: bool) {
    let mut idle_since: Option<u64> = None;
    loop {
        let stopping = ch.stop.load(Ordering::SeqCst);
        // `run_group`: everything in the ring, then one publish.
        let mut last = None;
        while let Some(counter) = ch.ring.lock().unwrap().pop_front() {
            last = Some(counter);
        }
        if let Some(counter) = last {
            ch.published.store(counter, Ordering::SeqCst);
            if let Some(t) = ch.caller.lock().unwrap().as_ref() {
                t.unpark();
            }
            idle_since = None;
            continue;
        }
        if stopping {
            return;
        }
        let now = ch.clock.fetch_add(1, Ordering::SeqCst) + 1;
        if now - *idle_since.get_or_insert(now) >= SPIN_TICKS {
            ch.wake
                .park(|| !ch.ring.lock().unwrap().is_empty() || ch.stop.load(Ordering::SeqCst));
            idle_since = None;
            continue;
        }
        // Otherwise it spins: the next round (bounded by the ticks, so no yield needed).
        if naps && !ch.wake.hurried(now) {
            ch.wake.nap(
                NAP,
                || ch.clock.load(Ordering::SeqCst),
                || ch.stop.load(Ordering::SeqCst),
            );
        }
    }
}

/// A caller that submits `copies` copies one after the other, waiting in place for each;
/// the engine's worker naps when idle if `naps` (else it spins, then parks).
fn submit_and_wait(copies: u64, naps: bool, caller: Caller) {
    let ch = Arc::new(Channel {
        wake: Wake::new(),
        ring: Mutex::new(VecDeque::new()),
        next: Mutex::new(0),
        published: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        clock: AtomicU64::new(0),
        caller: Mutex::new(Some(thread::current())),
    });
    let handle = {
        let ch = ch.clone();
        thread::spawn(move || worker(&ch, naps))
    };
    ch.wake.set_thread(handle.thread().clone());

    for copy in 1..=copies {
        // `Software::try_submit`.
        if caller == Caller::RingsBeforePushing {
            ch.wake.wake();
        }
        {
            let mut next = ch.next.lock().unwrap();
            *next += 1;
            ch.ring.lock().unwrap().push_back(*next);
        }
        if caller != Caller::RingsBeforePushing {
            ch.wake.wake();
        }
        // `Software::hurry`, for a caller that would idle; a no-op without naps.
        if naps {
            let until = ch.clock.load(Ordering::SeqCst) + HURRY_TICKS;
            match caller {
                Caller::Real | Caller::RingsBeforePushing => {
                    ch.wake.hurry(until);
                    ch.wake.wake_now();
                }
                Caller::HurryRingsOnlyAParkedWorker => {
                    ch.wake.hurry(until);
                    ch.wake.wake();
                }
                Caller::HurryRingsBeforeItsWindow => {
                    ch.wake.wake_now();
                    ch.wake.hurry(until);
                }
            }
        }
        // Waiting in place until the copy is published.
        while ch.published.load(Ordering::SeqCst) < copy {
            thread::park();
        }
    }

    // `Software::shutdown`.
    {
        let _next = ch.next.lock().unwrap();
        ch.stop.store(true, Ordering::SeqCst);
        ch.wake.wake_now();
    }
    handle.join().unwrap();
    assert_eq!(ch.published.load(Ordering::SeqCst), copies);
}

/// Runs `f` under the randomised and the PCT scheduler.
fn check(f: impl Fn() + Send + Sync + Clone + 'static) {
    shuttle::check_random(f.clone(), RANDOM_ITERATIONS);
    shuttle::check_pct(f, RANDOM_ITERATIONS, 3);
}

/// Whether the checker fails `f` under the randomised or the PCT scheduler (which finds
/// the bugs that a few preemptions at the right points expose).
fn caught(f: impl Fn() + Send + Sync + Clone + 'static) -> bool {
    let fails =
        |run: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).is_err();
    fails(&|| shuttle::check_random(f.clone(), TWIN_ITERATIONS))
        || fails(&|| shuttle::check_pct(f.clone(), TWIN_ITERATIONS, 3))
}

#[test]
fn a_parking_worker_runs_every_submitted_copy() {
    shuttle::check_dfs(
        || submit_and_wait(1, false, Caller::Real),
        Some(DFS_ITERATIONS),
    );
    check(|| submit_and_wait(3, false, Caller::Real));
}

#[test]
fn a_napping_worker_never_leaves_a_hurried_caller_to_its_nap() {
    shuttle::check_dfs(
        || submit_and_wait(1, true, Caller::Real),
        Some(DFS_ITERATIONS),
    );
    check(|| submit_and_wait(3, true, Caller::Real));
}

#[test]
fn the_checker_finds_a_submission_that_rings_before_pushing() {
    assert!(
        caught(|| submit_and_wait(2, false, Caller::RingsBeforePushing)),
        "the broken twin passed the model check"
    );
}

#[test]
fn the_checker_finds_a_hurry_that_does_not_end_a_nap() {
    assert!(
        caught(|| submit_and_wait(2, true, Caller::HurryRingsOnlyAParkedWorker)),
        "the broken twin passed the model check"
    );
}

#[test]
fn the_checker_finds_a_hurry_that_rings_before_its_window() {
    assert!(
        caught(|| submit_and_wait(2, true, Caller::HurryRingsBeforeItsWindow)),
        "the broken twin passed the model check"
    );
}
