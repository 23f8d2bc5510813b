//! A started uthread never changes OS thread. Whatever makes it runnable again (a yield, its
//! condition in the wait set, a timer, a wake-up from another worker or from an ordinary
//! thread, the end of a uthread it joins), it resumes on the worker that first ran it, while
//! work stealing keeps spreading uthreads that have not started yet.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use rt::sync::{bounded, Mutex};
use rt::Runtime;

/// More workers than this machine may have cores, so that workers run dry, steal and are
/// woken at odd moments.
const WORKERS: usize = 3;
/// Uthreads in all: half spawned from outside the runtime, half from a uthread.
const UTHREADS: usize = 240;
/// Blocking operations per uthread.
const ROUNDS: usize = 24;
/// Kinds of blocking operation, taken in turn.
const KINDS: usize = 6;

/// What every uthread shares with the others and with the ordinary threads that wake it.
struct World {
    /// Bumped by an ordinary thread; uthreads wait in their worker's wait set for it to move.
    tick: AtomicU64,
    /// Taken by uthreads on every worker, held across a yield so that others park on it.
    mutex: Mutex<u64>,
    /// Tells the ordinary threads to stop.
    stop: AtomicBool,
}

/// The body of uthread `i`: the OS thread it ran on at its start and after every resume.
/// It counts its start in `started`.
fn body(
    i: usize,
    world: Arc<World>,
    tokens: rt::sync::Receiver<()>,
    started: Arc<AtomicUsize>,
) -> Vec<ThreadId> {
    let here = || std::thread::current().id();
    let mut seen = vec![here()];
    started.fetch_add(1, Ordering::SeqCst);
    // Not `Send`, held across every yield below: sound only because the uthread stays put.
    let resumes = Rc::new(Cell::new(0usize));
    for round in 0..ROUNDS {
        match (i + round) % KINDS {
            0 => rt::yield_now(),
            1 => {
                let t = world.tick.load(Ordering::Acquire);
                rt::wait_until(|| world.tick.load(Ordering::Acquire) > t);
            }
            2 => rt::sleep(Duration::from_micros(20 + (i % 7) as u64 * 10)),
            // Parks until an ordinary thread's send wakes it (or takes a token at once).
            3 => tokens.recv().expect("the feeder sends until told to stop"),
            4 => {
                // Parks while another uthread holds it; woken by the unlock, maybe from
                // another worker.
                let mut g = world.mutex.lock();
                *g += 1;
                rt::yield_now();
            }
            _ => {
                // Parks until the child ends, wherever the child was stolen to.
                let child = rt::spawn(move || {
                    rt::yield_now();
                    i
                });
                assert_eq!(child.join().unwrap(), i);
            }
        }
        resumes.set(resumes.get() + 1);
        seen.push(here());
    }
    assert_eq!(resumes.get(), ROUNDS);
    seen
}

#[test]
fn a_started_uthread_resumes_only_on_the_thread_that_started_it() {
    let rt = Runtime::new(WORKERS).unwrap();
    let world = Arc::new(World {
        tick: AtomicU64::new(0),
        mutex: Mutex::new(0),
        stop: AtomicBool::new(false),
    });
    let (tx, rx) = bounded::<()>(1);
    // An ordinary thread that moves the tick the wait sets poll.
    let ticker = {
        let world = world.clone();
        std::thread::spawn(move || {
            while !world.stop.load(Ordering::Acquire) {
                world.tick.fetch_add(1, Ordering::Release);
                std::thread::sleep(Duration::from_micros(30));
            }
        })
    };
    // An ordinary thread whose sends wake uthreads parked in `recv`; it stops when every
    // receiver is gone.
    let feeder = std::thread::spawn(move || while tx.send(()).is_ok() {});

    let outside: Vec<_> = (0..UTHREADS / 2)
        .map(|i| {
            let (world, rx) = (world.clone(), rx.clone());
            let started = Arc::new(AtomicUsize::new(0));
            rt.spawn(move || body(i, world, rx, started))
        })
        .collect();
    let inside = {
        let (world, rx) = (world.clone(), rx.clone());
        rt.spawn(move || {
            let spawner = std::thread::current().id();
            let started = Arc::new(AtomicUsize::new(0));
            // Spawned onto this worker's queue of new uthreads in one go...
            let handles: Vec<_> = (UTHREADS / 2..UTHREADS)
                .map(|i| {
                    let (world, rx, started) = (world.clone(), rx.clone(), started.clone());
                    rt::spawn(move || body(i, world, rx, started))
                })
                .collect();
            // ...and this worker kept busy, without a switch, until one has started: another
            // worker stole it.
            let deadline = Instant::now() + Duration::from_secs(60);
            while started.load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline, "no worker stole a new uthread");
                std::hint::spin_loop();
            }
            let runs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            (spawner, runs)
        })
    };
    drop(rx);
    let mut runs: Vec<Vec<ThreadId>> = outside.into_iter().map(|h| h.join().unwrap()).collect();
    let (spawner, inside_runs) = inside.join().unwrap();
    // New uthreads are still stolen: some of the spawner's started elsewhere.
    assert!(inside_runs.iter().any(|seen| seen[0] != spawner));
    runs.extend(inside_runs);
    world.stop.store(true, Ordering::Release);
    ticker.join().unwrap();
    feeder.join().unwrap();

    assert_eq!(runs.len(), UTHREADS);
    let mut moved = Vec::new();
    for (i, seen) in runs.iter().enumerate() {
        assert_eq!(seen.len(), ROUNDS + 1);
        if let Some(k) = seen.iter().position(|t| *t != seen[0]) {
            moved.push(format!(
                "uthread {i}: started on {:?}, resume {k} on {:?}",
                seen[0], seen[k]
            ));
        }
    }
    assert!(
        moved.is_empty(),
        "{} of {UTHREADS} uthreads changed OS thread, e.g. {:?}",
        moved.len(),
        &moved[..moved.len().min(3)]
    );
    assert_eq!(*world.mutex.lock(), mutex_rounds());
}

/// How many rounds of all uthreads took the mutex.
fn mutex_rounds() -> u64 {
    (0..UTHREADS)
        .map(|i| (0..ROUNDS).filter(|r| (i + r) % KINDS == 4).count() as u64)
        .sum()
}
