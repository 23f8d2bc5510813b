//! The runtime end to end: many uthreads, work stealing, panics, yield/sleep/wait, idle
//! parking, shutdown, and the builder's checks.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rt::{JoinError, Runtime};

/// Waits (bounded) for `cond` on this thread; fails the test if it never holds.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn hundred_thousand_uthreads_on_two_workers_complete_with_right_results() {
    const N: u64 = 100_000;
    let rt = Runtime::new(2).unwrap();
    let results = rt.block_on(|| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                rt::spawn(move || {
                    // Every hundredth one switches out once mid-way, so stacks of unfinished
                    // uthreads coexist and migrate.
                    if i % 100 == 0 {
                        rt::yield_now();
                    }
                    i.wrapping_mul(i) ^ 0x5555
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<u64>>()
    });
    assert_eq!(results.len(), N as usize);
    for (i, r) in results.into_iter().enumerate() {
        let i = i as u64;
        assert_eq!(r, i.wrapping_mul(i) ^ 0x5555);
    }
    let switches: u64 = rt.stats().iter().map(|s| s.switches).sum();
    assert!(switches > N, "each uthread runs at least once: {switches}");
}

#[test]
fn work_stealing_moves_work_off_the_spawning_worker() {
    const N: usize = 1000;
    let rt = Runtime::new(2).unwrap();
    let (spawner, ran_on) = rt.block_on(|| {
        let spawner = rt::current_worker().unwrap();
        let handles: Vec<_> = (0..N)
            .map(|_| {
                rt::spawn(|| {
                    // Enough work that the spawning worker cannot drain its queue before the
                    // other one wakes up.
                    let until = Instant::now() + Duration::from_micros(50);
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                    rt::current_worker().unwrap()
                })
            })
            .collect();
        let ran_on: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (spawner, ran_on)
    });
    let elsewhere = ran_on.iter().filter(|&&w| w != spawner).count();
    assert!(elsewhere > 0, "every uthread ran on the spawning worker");
    let stats = rt.stats();
    assert!(
        stats[1 - spawner].steals > 0,
        "the other worker never stole: {stats:?}"
    );
}

#[test]
fn a_panic_reaches_the_joiner_not_the_worker() {
    let rt = Runtime::new(1).unwrap();
    let err = rt
        .spawn(|| -> u32 { panic!("boom in a uthread") })
        .join()
        .unwrap_err();
    match &err {
        JoinError::Panicked(p) => {
            assert_eq!(rt::panic_message(p.as_ref()), Some("boom in a uthread"))
        }
        other => panic!("expected a panic, got {other:?}"),
    }
    assert_eq!(err.errno(), 0);
    // The worker survived and runs the next uthread; a joiner inside a uthread sees it too.
    let inner = rt.block_on(|| rt::spawn(|| panic!("nested")).join().is_err());
    assert!(inner);
    assert_eq!(rt.block_on(|| 7), 7);
    // block_on resumes the panic on its caller.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(|| -> u32 { panic!("to the caller") })
    }))
    .unwrap_err();
    assert_eq!(rt::panic_message(caught.as_ref()), Some("to the caller"));
}

#[test]
fn yield_now_lets_the_other_uthreads_of_the_worker_run() {
    let rt = Runtime::new(1).unwrap();
    let log = rt.block_on(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        // Spawned from a uthread, both go on this worker's run queue, in order.
        let handles: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|name| {
                let log = log.clone();
                rt::spawn(move || {
                    for _ in 0..3 {
                        log.lock().unwrap().push(name);
                        rt::yield_now();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let log = log.lock().unwrap().clone();
        log
    });
    assert_eq!(log, ["a", "b", "a", "b", "a", "b"]);
}

#[test]
fn a_lone_uthread_yields_without_switching_yet_lets_injected_work_in() {
    let rt = Runtime::new(1).unwrap();
    let switches = |rt: &Runtime| rt.stats()[0].switches;
    let before = switches(&rt);
    rt.block_on(|| {
        for _ in 0..1000 {
            rt::yield_now();
        }
    });
    let used = switches(&rt) - before;
    assert!(
        used < 1000 / 2,
        "a lone uthread switched on every yield: {used}"
    );
    // A uthread that yields in a loop waiting for work injected from outside lets it in.
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    let spinner = rt.spawn(move || {
        let mut yields = 0u64;
        while !f.load(Ordering::Acquire) {
            rt::yield_now();
            yields += 1;
        }
        yields
    });
    let f = flag.clone();
    rt.spawn(move || f.store(true, Ordering::Release))
        .join()
        .unwrap();
    spinner.join().unwrap();
}

#[test]
fn sleep_suspends_one_uthread_while_others_run() {
    let rt = Runtime::new(1).unwrap();
    let other_done = Arc::new(AtomicBool::new(false));
    let seen = other_done.clone();
    let sleeper = rt.spawn(move || {
        let t = Instant::now();
        rt::sleep(Duration::from_millis(20));
        (t.elapsed(), seen.load(Ordering::Acquire))
    });
    let flag = other_done.clone();
    rt.spawn(move || flag.store(true, Ordering::Release))
        .join()
        .unwrap();
    let (slept, saw_other) = sleeper.join().unwrap();
    assert!(slept >= Duration::from_millis(20), "woke early: {slept:?}");
    assert!(saw_other, "the other uthread did not run during the sleep");
}

#[test]
fn wait_until_parks_in_the_wait_set_and_the_worker_polls_it() {
    let rt = Runtime::new(1).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let waiter = rt.spawn(move || {
        rt::wait_until(|| d.load(Ordering::Acquire));
        rt::current_worker()
    });
    // The only worker must be free to run this while the other waits: it completes the
    // "copy" the waiter waits for.
    let d = done.clone();
    rt.spawn(move || d.store(true, Ordering::Release))
        .join()
        .unwrap();
    assert_eq!(waiter.join().unwrap(), Some(0));
    let s = rt.stats()[0];
    assert!(s.wait_polls > 0 && s.wait_ready == 1, "{s:?}");
}

#[test]
fn wait_until_is_completed_by_an_ordinary_thread() {
    let rt = Runtime::new(2).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..50)
        .map(|i| {
            let d = done.clone();
            rt.spawn(move || rt::wait(&|| d.load(Ordering::Acquire) > i))
        })
        .collect();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_micros(200));
        done.fetch_add(1, Ordering::Release);
    }
    for w in waiters {
        w.join().unwrap();
    }
    let ready: u64 = rt.stats().iter().map(|s| s.wait_ready).sum();
    assert!(ready > 0);
}

#[test]
fn wait_until_outside_a_runtime_waits_on_the_calling_thread() {
    assert!(!rt::in_uthread());
    assert_eq!(rt::current_worker(), None);
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(5));
        f.store(true, Ordering::Release);
    });
    rt::wait_until(|| flag.load(Ordering::Acquire));
    assert!(flag.load(Ordering::Acquire));
    setter.join().unwrap();
}

#[test]
fn in_uthread_and_handle_current_know_where_they_run() {
    let rt = Runtime::new(1).unwrap();
    assert!(rt::Handle::current().is_none());
    let (inside, handle_works) = rt.block_on(|| {
        let h = rt::Handle::current().unwrap();
        (rt::in_uthread(), h.spawn(|| 3).join().unwrap() == 3)
    });
    assert!(inside && handle_works);
}

#[test]
fn an_idle_worker_parks_and_new_work_wakes_it() {
    let rt = Runtime::new(2).unwrap();
    eventually("both workers park", || {
        rt.stats().iter().all(|s| s.parks > 0)
    });
    let before: Vec<u64> = rt.stats().iter().map(|s| s.parks).collect();
    // Parked workers do not spin: their park counts stay put while nothing happens.
    std::thread::sleep(Duration::from_millis(20));
    let after: Vec<u64> = rt.stats().iter().map(|s| s.parks).collect();
    assert_eq!(before, after, "idle workers keep waking up");
    for i in 0..100 {
        assert_eq!(rt.spawn(move || i * 2).join().unwrap(), i * 2);
    }
}

#[test]
fn shutdown_waits_for_every_uthread_then_stops_the_workers() {
    let rt = Runtime::builder()
        .workers(2)
        .name("rt-shutdown-test")
        .build()
        .unwrap();
    let finished = Arc::new(AtomicUsize::new(0));
    for i in 0..200 {
        let f = finished.clone();
        // Detached: nobody joins them.
        drop(rt.spawn(move || {
            rt::sleep(Duration::from_millis(1 + i % 5));
            rt::yield_now();
            f.fetch_add(1, Ordering::SeqCst);
        }));
    }
    rt.shutdown();
    assert_eq!(finished.load(Ordering::SeqCst), 200);
    // Dropping an idle runtime returns too.
    drop(Runtime::new(3).unwrap());
}

#[test]
fn pinned_workers_run_uthreads() {
    let rt = Runtime::builder()
        .workers(2)
        .pin_workers(true)
        .build()
        .unwrap();
    let sum: u32 = rt.block_on(|| {
        (0..64)
            .map(|i| rt::spawn(move || i))
            .map(|h| h.join().unwrap())
            .sum()
    });
    assert_eq!(sum, (0..64).sum());
}

#[test]
fn the_builder_rejects_bad_settings() {
    for n in [0, rt::MAX_WORKERS + 1] {
        let err = Runtime::new(n).err().unwrap();
        assert!(matches!(err, rt::Error::Workers(m) if m == n));
        assert_eq!(err.errno(), libc::EINVAL);
    }
    let err = Runtime::builder()
        .stack_size(rt::MIN_STACK_SIZE - 1)
        .build()
        .err()
        .unwrap();
    assert!(matches!(err, rt::Error::StackSize(_)));
}

#[test]
fn uthreads_use_their_whole_stack() {
    // A stack-hungry uthread on small stacks works as long as it fits.
    let rt = Runtime::builder()
        .workers(1)
        .stack_size(64 << 10)
        .build()
        .unwrap();
    let v = rt.block_on(|| {
        let buf = std::hint::black_box([7u8; 32 << 10]);
        buf.iter().map(|&b| b as u32).sum::<u32>()
    });
    assert_eq!(v, 7 * (32 << 10));
}

#[test]
fn would_idle_says_whether_the_worker_has_another_uthread_to_run() {
    assert!(rt::would_idle(), "an ordinary thread waits in place");
    let rt = Runtime::new(1).unwrap();
    let (alone, with_other) = rt.block_on(|| {
        let alone = rt::would_idle();
        // A spawned uthread waits in this worker's queue until we switch away.
        let other = rt::spawn(|| ());
        let with_other = rt::would_idle();
        other.join().unwrap();
        (alone, with_other)
    });
    assert!(alone, "the only uthread of its worker");
    assert!(!with_other, "another uthread was ready to run");
}

/// Workers are registered as runtime workers: their CPU time is asked for by role, and
/// a pinned worker runs on its CPU.
#[test]
fn workers_count_their_cpu_time_under_their_role_and_run_where_pinned() {
    use threads::{allowed_cpus, cpu_time, current_role, thread_cpu_time, Role};
    let before = cpu_time(Role::RuntimeWorker);
    let rt = Runtime::builder()
        .workers(1)
        .pin_workers(true)
        .build()
        .unwrap();
    let (role, cpus) = rt.block_on(|| {
        let start = thread_cpu_time();
        while thread_cpu_time() - start < Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        (current_role(), allowed_cpus())
    });
    assert_eq!(role, Some(Role::RuntimeWorker));
    assert_eq!(cpus.len(), 1, "a pinned worker may run on {cpus:?}");
    drop(rt);
    // Exited workers keep their time (other tests' workers may add to it).
    let used = cpu_time(Role::RuntimeWorker) - before;
    assert!(used >= Duration::from_millis(30), "{used:?}");
}
