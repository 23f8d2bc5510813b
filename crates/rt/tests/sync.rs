//! The uthread-aware mutex, condition variable and channels under contention, between
//! uthreads on several workers and ordinary threads.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use rt::sync::{bounded, unbounded, Condvar, Mutex, RecvError, SendError};
use rt::Runtime;

#[test]
fn the_mutex_excludes_under_contention_even_across_yields() {
    const UTHREADS: usize = 64;
    const ROUNDS: usize = 500;
    let rt = Runtime::new(2).unwrap();
    let m = Arc::new(Mutex::new(0usize));
    let inside = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..UTHREADS)
        .map(|i| {
            let (m, inside) = (m.clone(), inside.clone());
            rt.spawn(move || {
                for r in 0..ROUNDS {
                    let mut g = m.lock();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    let v = *g;
                    // Held across a yield: others run meanwhile and must wait for it.
                    if (i + r) % 7 == 0 {
                        rt::yield_now();
                    }
                    *g = v + 1;
                    inside.store(false, Ordering::SeqCst);
                }
            })
        })
        .collect();
    // An ordinary thread contends too.
    let outside = {
        let (m, inside) = (m.clone(), inside.clone());
        std::thread::spawn(move || {
            for _ in 0..ROUNDS {
                let mut g = m.lock();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                *g += 1;
                inside.store(false, Ordering::SeqCst);
            }
        })
    };
    for h in handles {
        h.join().unwrap();
    }
    outside.join().unwrap();
    assert_eq!(*m.lock(), (UTHREADS + 1) * ROUNDS);
}

#[test]
fn the_condvar_wakes_one_or_all_waiters() {
    let rt = Runtime::new(2).unwrap();
    let state = Arc::new((Mutex::new((0u32, false)), Condvar::new()));
    let woke = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..20)
        .map(|_| {
            let (state, woke) = (state.clone(), woke.clone());
            rt.spawn(move || {
                let (m, cv) = &*state;
                let mut g = cv.wait_while(m.lock(), |(tokens, all)| *tokens == 0 && !*all);
                if !g.1 {
                    g.0 -= 1;
                }
                drop(g);
                woke.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    let (m, cv) = &*state;
    // One token at a time: exactly one waiter gets through per token.
    for _ in 0..5 {
        m.lock().0 += 1;
        cv.notify_one();
    }
    while woke.load(Ordering::SeqCst) < 5 {
        std::thread::yield_now();
    }
    assert_eq!(m.lock().0, 0);
    m.lock().1 = true;
    cv.notify_all();
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(woke.load(Ordering::SeqCst), 20);
}

#[test]
fn a_bounded_channel_delivers_everything_once_in_order_per_producer() {
    const PRODUCERS: u64 = 4;
    const CONSUMERS: usize = 4;
    const EACH: u64 = 5_000;
    let rt = Runtime::new(2).unwrap();
    let (tx, rx) = bounded::<(u64, u64)>(8);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let tx = tx.clone();
            rt.spawn(move || {
                for i in 0..EACH {
                    tx.send((p, i)).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let rx = rx.clone();
            rt.spawn(move || {
                let mut last = vec![None::<u64>; PRODUCERS as usize];
                let mut got = Vec::new();
                while let Ok((p, i)) = rx.recv() {
                    let prev = last[p as usize].replace(i);
                    assert!(prev.is_none_or(|prev| prev < i), "out of order");
                    got.push((p, i));
                }
                got
            })
        })
        .collect();
    drop(rx);
    for p in producers {
        p.join().unwrap();
    }
    let mut all: Vec<(u64, u64)> = consumers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    all.sort_unstable();
    let expected: Vec<(u64, u64)> = (0..PRODUCERS)
        .flat_map(|p| (0..EACH).map(move |i| (p, i)))
        .collect();
    assert_eq!(all, expected);
}

#[test]
fn channels_connect_uthreads_and_ordinary_threads() {
    let rt = Runtime::new(1).unwrap();
    let (to_rt, from_outside) = unbounded::<u32>();
    let (to_outside, from_rt) = bounded::<u32>(1);
    let echo = rt.spawn(move || {
        while let Ok(v) = from_outside.recv() {
            to_outside.send(v * 2).unwrap();
        }
    });
    for v in 0..1000 {
        to_rt.send(v).unwrap();
        assert_eq!(from_rt.recv(), Ok(v * 2));
    }
    drop(to_rt);
    echo.join().unwrap();
    assert_eq!(from_rt.recv(), Err(RecvError));
}

#[test]
fn ping_pong_between_two_uthreads() {
    const ROUNDS: u32 = 10_000;
    let rt = Runtime::new(2).unwrap();
    let (ping_tx, ping_rx) = bounded::<u32>(1);
    let (pong_tx, pong_rx) = bounded::<u32>(1);
    let ponger = rt.spawn(move || {
        let mut n = 0;
        while let Ok(v) = ping_rx.recv() {
            pong_tx.send(v + 1).unwrap();
            n += 1;
        }
        n
    });
    let last = rt.block_on(move || {
        let mut v = 0;
        for _ in 0..ROUNDS {
            ping_tx.send(v).unwrap();
            v = pong_rx.recv().unwrap();
        }
        v
    });
    assert_eq!(last, ROUNDS);
    assert_eq!(ponger.join().unwrap(), ROUNDS);
}

#[test]
fn dropping_one_side_wakes_the_blocked_other_side() {
    let rt = Runtime::new(2).unwrap();
    // Receivers blocked on an empty channel get an error when the last sender goes.
    let (tx, rx) = unbounded::<u8>();
    let receivers: Vec<_> = (0..4)
        .map(|_| {
            let rx = rx.clone();
            rt.spawn(move || rx.recv())
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(5));
    drop(tx);
    for r in receivers {
        assert_eq!(r.join().unwrap(), Err(RecvError));
    }
    // A sender blocked on a full channel gets its message back when the receivers go.
    let (tx, rx) = bounded::<u8>(1);
    tx.send(1).unwrap();
    let sender = rt.spawn(move || tx.send(2));
    std::thread::sleep(std::time::Duration::from_millis(5));
    drop(rx);
    assert_eq!(sender.join().unwrap(), Err(SendError(2)));
}
