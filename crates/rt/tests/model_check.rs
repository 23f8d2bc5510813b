//! Model checks of the runtime's hand-off protocols with shuttle, which runs a test under
//! many (for `check_dfs`: all) thread interleavings and fails on a deadlock, i.e. on a
//! thread parked forever because its wake-up was lost.
//!
//! The protocol files of the crate are compiled here against shuttle's primitives (the
//! `facade` module below), so what is checked is the crate's own code:
//! - `park_state`: a uthread that registers a wake-up and parks, against wakers on other
//!   threads, with its worker sleeping through the `sleepers` protocol meanwhile;
//! - `sleepers`: workers going to sleep against producers publishing work;
//! - `park_state` and `sleepers::notify` together: a uthread woken by another thread goes to
//!   its home worker's inbox and wakes that worker, which alone may resume it, while another
//!   worker sleeps too;
//! - `idle`: a worker with uthreads in its wait set, whose conditions are completed without
//!   any notification, never sleeps for good.

mod facade {
    pub(crate) use shuttle::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
    pub(crate) use shuttle::sync::Mutex;
    pub(crate) use shuttle::thread::{self, Thread};
}

#[path = "../src/idle.rs"]
#[allow(dead_code)]
mod idle;
#[path = "../src/park_state.rs"]
mod park_state;
#[path = "../src/sleepers.rs"]
#[allow(dead_code)]
mod sleepers;

use std::collections::VecDeque;
use std::sync::Arc;

use shuttle::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use shuttle::sync::Mutex;
use shuttle::thread;

use idle::{idle_step, Idle};
use park_state::ParkState;
use sleepers::Sleepers;

/// Iterations of the randomised checks: enough to find the bugs of the broken variants
/// below every time, few enough to keep the suite fast.
const RANDOM_ITERATIONS: usize = 2_000;
/// Bound on the interleavings the depth-first check enumerates (a parked thread may wake
/// spuriously, so the full space is infinite; the first interleavings are the short ones).
const DFS_ITERATIONS: usize = 20_000;

/// One uthread that waits `rounds` times for a counter, its worker, and `wakers` threads
/// that each bump the counter once and wake the uthread the way `Waiter::notify` does.
/// `register_first`: the uthread checks its condition under the registration lock (the
/// crate's pattern); otherwise it checks before registering (a lost-wake-up bug).
fn park_unpark(wakers: usize, register_first: bool) {
    struct Shared {
        task: ParkState,
        counter: AtomicUsize,
        registered: Mutex<bool>,
        run_queue: Mutex<VecDeque<()>>,
        sleepers: Sleepers,
        resumed_while_queued: AtomicBool,
    }
    let s = Arc::new(Shared {
        task: ParkState::new(),
        counter: AtomicUsize::new(0),
        registered: Mutex::new(false),
        run_queue: Mutex::new(VecDeque::new()),
        sleepers: Sleepers::new(1),
        resumed_while_queued: AtomicBool::new(false),
    });

    let worker = {
        let s = s.clone();
        thread::spawn(move || {
            s.sleepers.register(0);
            for round in 1..=wakers {
                loop {
                    // The uthread: check, register, switch out asking to park.
                    if register_first {
                        let mut reg = s.registered.lock().unwrap();
                        if s.counter.load(Ordering::SeqCst) >= round {
                            break;
                        }
                        *reg = true;
                    } else {
                        if s.counter.load(Ordering::SeqCst) >= round {
                            break;
                        }
                        *s.registered.lock().unwrap() = true;
                    }
                    // The worker, after the switch.
                    if !s.task.commit_park() {
                        s.task.resume();
                        continue;
                    }
                    // Parked: the worker runs dry and sleeps until the uthread is queued.
                    loop {
                        if s.run_queue.lock().unwrap().pop_front().is_some() {
                            break;
                        }
                        s.sleepers.prepare(0);
                        if !s.run_queue.lock().unwrap().is_empty() {
                            s.sleepers.cancel(0);
                            continue;
                        }
                        thread::park();
                        s.sleepers.cancel(0);
                    }
                    if !s.run_queue.lock().unwrap().is_empty() {
                        s.resumed_while_queued.store(true, Ordering::SeqCst);
                    }
                    s.task.resume();
                }
            }
        })
    };
    let wakers: Vec<_> = (0..wakers)
        .map(|_| {
            let s = s.clone();
            thread::spawn(move || {
                s.counter.fetch_add(1, Ordering::SeqCst);
                let was = std::mem::take(&mut *s.registered.lock().unwrap());
                if was && s.task.unpark() {
                    s.run_queue.lock().unwrap().push_back(());
                    s.sleepers.notify_one();
                }
            })
        })
        .collect();
    for w in wakers {
        w.join().unwrap();
    }
    worker.join().unwrap();
    // Scheduled at most once per park: never queued twice.
    assert!(!s.resumed_while_queued.load(Ordering::SeqCst));
}

#[test]
fn park_unpark_loses_no_wake_up_in_any_interleaving() {
    shuttle::check_dfs(|| park_unpark(1, true), Some(DFS_ITERATIONS));
}

#[test]
fn park_unpark_with_two_wakers_loses_no_wake_up() {
    shuttle::check_random(|| park_unpark(2, true), RANDOM_ITERATIONS);
    shuttle::check_pct(|| park_unpark(2, true), RANDOM_ITERATIONS, 3);
}

#[test]
fn the_checker_finds_a_wake_up_lost_by_checking_before_registering() {
    let found = std::panic::catch_unwind(|| {
        shuttle::check_random(|| park_unpark(1, false), RANDOM_ITERATIONS);
    });
    assert!(found.is_err(), "the broken variant passed the model check");
}

/// Two workers, each sleeping through `sleepers` and looking only at its own inbox (a
/// started uthread's home worker alone may resume it). A uthread of worker `home` waits for
/// a flag: it registers a wake-up and parks as in `park_unpark`; a waker thread sets the flag
/// and, if it gets the uthread from `unpark`, puts it in worker `home`'s inbox and wakes that
/// worker with `notify(home)`. `wake_home: false` wakes any sleeping worker instead
/// (`notify_one`, right when any worker could run any uthread): the wake-up can go to the
/// worker that may not run it while the home worker sleeps on.
fn wake_on_home_worker(home: usize, wake_home: bool) {
    struct Shared {
        task: ParkState,
        flag: AtomicBool,
        registered: Mutex<bool>,
        inboxes: [Mutex<VecDeque<()>>; 2],
        sleepers: Sleepers,
        started: AtomicUsize,
        stop: AtomicBool,
    }
    let s = Arc::new(Shared {
        task: ParkState::new(),
        flag: AtomicBool::new(false),
        registered: Mutex::new(false),
        inboxes: [Mutex::new(VecDeque::new()), Mutex::new(VecDeque::new())],
        sleepers: Sleepers::new(2),
        started: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    });
    // Sleeps through the `sleepers` protocol until worker `id`'s inbox has something (then
    // takes it and returns true) or, if `stoppable`, until told to stop (false).
    fn next_from_inbox(s: &Shared, id: usize, stoppable: bool) -> bool {
        loop {
            if s.inboxes[id].lock().unwrap().pop_front().is_some() {
                return true;
            }
            if stoppable && s.stop.load(Ordering::SeqCst) {
                return false;
            }
            s.sleepers.prepare(id);
            if !s.inboxes[id].lock().unwrap().is_empty()
                || (stoppable && s.stop.load(Ordering::SeqCst))
            {
                s.sleepers.cancel(id);
                continue;
            }
            thread::park();
            s.sleepers.cancel(id);
        }
    }
    let workers: Vec<_> = (0..2)
        .map(|id| {
            let s = s.clone();
            thread::spawn(move || {
                s.sleepers.register(id);
                s.started.fetch_add(1, Ordering::SeqCst);
                if id != home {
                    // Nothing of its own ever arrives: a uthread in its inbox would be
                    // another worker's.
                    assert!(!next_from_inbox(&s, id, true), "woken on the wrong worker");
                    return;
                }
                loop {
                    // The uthread: check and register under the lock, switch out to park.
                    {
                        let mut reg = s.registered.lock().unwrap();
                        if s.flag.load(Ordering::SeqCst) {
                            return;
                        }
                        *reg = true;
                    }
                    // The worker, after the switch.
                    if s.task.commit_park() {
                        next_from_inbox(&s, id, false);
                    }
                    s.task.resume();
                }
            })
        })
        .collect();
    while s.started.load(Ordering::SeqCst) < 2 {
        thread::yield_now();
    }
    let waker = {
        let s = s.clone();
        thread::spawn(move || {
            s.flag.store(true, Ordering::SeqCst);
            let was = std::mem::take(&mut *s.registered.lock().unwrap());
            if was && s.task.unpark() {
                s.inboxes[home].lock().unwrap().push_back(());
                if wake_home {
                    s.sleepers.notify(home);
                } else {
                    s.sleepers.notify_one();
                }
            }
        })
    };
    waker.join().unwrap();
    let mut workers = workers.into_iter();
    let (first, second) = (workers.next().unwrap(), workers.next().unwrap());
    let (home_worker, other) = if home == 0 {
        (first, second)
    } else {
        (second, first)
    };
    home_worker.join().unwrap();
    s.stop.store(true, Ordering::SeqCst);
    s.sleepers.notify_all();
    other.join().unwrap();
}

#[test]
fn a_woken_uthread_reaches_its_home_worker() {
    for home in [0, 1] {
        shuttle::check_random(move || wake_on_home_worker(home, true), RANDOM_ITERATIONS);
        shuttle::check_pct(
            move || wake_on_home_worker(home, true),
            RANDOM_ITERATIONS,
            3,
        );
    }
}

#[test]
fn the_checker_finds_a_wake_up_sent_to_a_worker_that_may_not_run_it() {
    let found = std::panic::catch_unwind(|| {
        shuttle::check_pct(|| wake_on_home_worker(1, false), RANDOM_ITERATIONS, 3);
    });
    assert!(found.is_err(), "the broken variant passed the model check");
}

/// `workers` workers take items from a shared queue and sleep with `sleepers` when it is
/// empty; a producer publishes `items` items one by one, each followed by `notify_one`,
/// then asks them to stop.
fn sleepers_protocol(workers: usize, items: usize) {
    let queue = Arc::new(Mutex::new(VecDeque::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicUsize::new(0));
    let sleepers = Arc::new(Sleepers::new(workers));
    let registered = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..workers)
        .map(|id| {
            let (queue, stop, taken, sleepers, registered) = (
                queue.clone(),
                stop.clone(),
                taken.clone(),
                sleepers.clone(),
                registered.clone(),
            );
            thread::spawn(move || {
                sleepers.register(id);
                registered.fetch_add(1, Ordering::SeqCst);
                loop {
                    if queue.lock().unwrap().pop_front().is_some() {
                        taken.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    sleepers.prepare(id);
                    if !queue.lock().unwrap().is_empty() || stop.load(Ordering::SeqCst) {
                        sleepers.cancel(id);
                        continue;
                    }
                    thread::park();
                    sleepers.cancel(id);
                }
            })
        })
        .collect();
    // Workers register their threads at start-up, before the runtime hands out work.
    while registered.load(Ordering::SeqCst) < workers {
        thread::yield_now();
    }
    for i in 0..items {
        queue.lock().unwrap().push_back(i);
        sleepers.notify_one();
    }
    // Wait until every item is taken, then stop.
    while taken.load(Ordering::SeqCst) < items {
        thread::yield_now();
    }
    stop.store(true, Ordering::SeqCst);
    sleepers.notify_all();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(taken.load(Ordering::SeqCst), items);
}

#[test]
fn sleeping_workers_are_woken_for_every_item() {
    shuttle::check_random(|| sleepers_protocol(2, 2), RANDOM_ITERATIONS);
    shuttle::check_pct(|| sleepers_protocol(2, 3), RANDOM_ITERATIONS, 3);
}

/// A worker with `waiters` uthreads in its wait set, following `idle_step` when idle (a nap
/// is modelled as a yield: its timeout fires; a sleep without timeout parks until woken).
/// New work arrives through the injection queue first; the waiters' conditions are completed
/// later, once the worker has spun through `IDLE_SPINS` idle rounds (a copy slower than the
/// spinning), by a thread that notifies nobody, like a copy engine bumping its completion
/// counter. `tell_idle_about_waiters: false` hides the waiters from `idle_step` (the bug
/// the rule is there to prevent).
fn wait_set_polling(waiters: usize, tell_idle_about_waiters: bool) {
    let done: Arc<Vec<AtomicBool>> =
        Arc::new((0..waiters).map(|_| AtomicBool::new(false)).collect());
    let injected = Arc::new(Mutex::new(VecDeque::new()));
    let sleepers = Arc::new(Sleepers::new(1));
    // Idle rounds since the worker last ran something; usize::MAX until it ran the new work.
    let idle_rounds = Arc::new(AtomicUsize::new(usize::MAX));
    let worker = {
        let (done, injected, sleepers, idle_rounds) = (
            done.clone(),
            injected.clone(),
            sleepers.clone(),
            idle_rounds.clone(),
        );
        thread::spawn(move || {
            sleepers.register(0);
            let mut wait_set: Vec<usize> = (0..waiters).collect();
            let mut ran_injected = false;
            let mut round = 0;
            while !wait_set.is_empty() || !ran_injected {
                // A scheduling point: poll the wait set (the ready ones are run), then look
                // for work.
                let before = wait_set.len();
                wait_set.retain(|&i| !done[i].load(Ordering::SeqCst));
                if wait_set.len() < before {
                    round = 0;
                    continue;
                }
                if injected.lock().unwrap().pop_front().is_some() {
                    ran_injected = true;
                    round = 0;
                    continue;
                }
                round += 1;
                if ran_injected {
                    idle_rounds.store(round as usize, Ordering::SeqCst);
                }
                let has_waiters = tell_idle_about_waiters && !wait_set.is_empty();
                match idle_step(round, has_waiters, None) {
                    Idle::Spin | Idle::Yield | Idle::Sleep(Some(_)) => thread::yield_now(),
                    Idle::Sleep(None) => {
                        sleepers.prepare(0);
                        if !injected.lock().unwrap().is_empty() {
                            sleepers.cancel(0);
                            continue;
                        }
                        thread::park();
                        sleepers.cancel(0);
                    }
                }
            }
        })
    };
    injected.lock().unwrap().push_back(());
    sleepers.notify_one();
    let completer = {
        let (done, idle_rounds) = (done.clone(), idle_rounds.clone());
        thread::spawn(move || {
            loop {
                let r = idle_rounds.load(Ordering::SeqCst);
                if r != usize::MAX && r > idle::IDLE_SPINS as usize {
                    break;
                }
                thread::yield_now();
            }
            for d in done.iter() {
                d.store(true, Ordering::SeqCst);
            }
        })
    };
    completer.join().unwrap();
    worker.join().unwrap();
}

#[test]
fn a_worker_with_waiters_keeps_polling_until_they_complete() {
    shuttle::check_random(|| wait_set_polling(2, true), 200);
}

#[test]
fn the_checker_finds_a_worker_that_sleeps_on_its_waiters() {
    let found = std::panic::catch_unwind(|| {
        shuttle::check_random(|| wait_set_polling(2, false), 200);
    });
    assert!(found.is_err(), "the broken variant passed the model check");
}
