//! The software engine on emulated slow memory: its worker copies at DRAM speed and the
//! persistent record says so at once, but a copy counts as done no earlier than its
//! modelled completion, and in channel order; callers that only poll (no in-place
//! wait, so the worker naps or parks) still see every copy complete, and a caller that
//! waits in place wakes a napping worker.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{config, pattern, region, AREA, DATA};
use engine::{record_is_done, Desc, Engine, EngineConfig};
use pmem::slowmem::{Model, SlowMem};
use pmem::Pmem;

/// 1 GB/s each way, no added latency: a copy of `n` bytes takes `n` ns of the model.
fn slow(region: Arc<pmem::Region>) -> Arc<dyn Pmem> {
    Arc::new(SlowMem::new(
        region,
        Model {
            name: "test",
            read_bw: 1e9,
            write_bw: 1e9,
            read_latency: Duration::ZERO,
            write_latency: Duration::ZERO,
            cpu_read_bw: None,
            cpu_write_bw: None,
            engine_bw: None,
            source: "test",
        },
    ))
}

fn spin_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: timed out"
        );
        std::hint::spin_loop();
    }
}

#[test]
fn a_copy_is_done_no_earlier_than_modelled_and_in_channel_order() {
    let pm = slow(region(8, 1));
    let engine = Engine::software(pm.clone(), &config(1)).unwrap();
    // 2 MiB at 1 GB/s: 2.097 ms of the model; then a copy of 64 bytes (64 ns of it).
    let big = pattern(1, 2 << 20);
    let small = pattern(2, 64);
    let modelled = Duration::from_nanos(big.len() as u64 + small.len() as u64);
    let t0 = Instant::now();
    // SAFETY: both buffers outlive the waits below.
    let sn_big = unsafe { engine.submit(0, &[Desc::write(&big, DATA)]) }.unwrap();
    let small_at = DATA + (4 << 20);
    // SAFETY: as above.
    let sn_small = unsafe { engine.submit(0, &[Desc::write(&small, small_at)]) }.unwrap();

    spin_until("the record", || record_is_done(&*pm, AREA, sn_small));
    let durable = t0.elapsed();
    let mut copy = vec![0u8; small.len()];
    pm.read(small_at, &mut copy);
    assert_eq!(
        copy, small,
        "the record said done before the data was there"
    );
    if durable + Duration::from_micros(200) < modelled {
        // The worker ran ahead of the model (the usual case): durable, not yet done,
        // and still queued as far as read admission and channel choice can tell.
        assert!(!engine.is_done(sn_small) && !engine.is_done(sn_big));
        assert_eq!(engine.queue_depth(0), 2);
    }

    // Polled without waiting in place, as a uthread does.
    spin_until("the small copy", || engine.is_done(sn_small));
    let done = t0.elapsed();
    assert!(
        done >= modelled,
        "the 64-byte copy was reported done after {done:?}, before the {modelled:?} \
         the model gives the copy ahead of it and itself"
    );
    assert!(engine.is_done(sn_big));
    assert_eq!(engine.queue_depth(0), 0);
    let mut back = vec![0u8; big.len()];
    pm.read(DATA, &mut back);
    assert!(back == big);
}

#[test]
fn polling_callers_see_completions_after_the_worker_parked() {
    for nap in [None, Some(engine::DEFAULT_NAP)] {
        polled_after_idle(nap);
    }
}

fn polled_after_idle(nap: Option<Duration>) {
    let pm = slow(region(8, 1));
    let cfg = EngineConfig { nap, ..config(1) };
    let engine = Engine::software(pm.clone(), &cfg).unwrap();
    for round in 0..20u64 {
        // Long enough idle for the worker to have napped and parked.
        std::thread::sleep(Duration::from_micros(200 + 50 * round));
        let data = pattern(round, 4096 * (1 + round as usize % 5));
        let at = DATA + round * (64 << 10);
        // SAFETY: `data` outlives the poll below.
        let sn = unsafe { engine.submit(0, &[Desc::write(&data, at)]) }.unwrap();
        spin_until("a polled copy", || engine.is_done(sn));
        let mut back = vec![0u8; data.len()];
        pm.read(at, &mut back);
        assert!(back == data, "round {round}, nap {nap:?}");
    }
}

#[test]
fn a_napping_worker_serves_a_poller_within_a_nap_and_a_waiter_at_once() {
    let pm = slow(region(8, 1));
    // Naps far longer than any copy here, and no parking within the test.
    let nap = Duration::from_millis(300);
    let cfg = EngineConfig {
        nap: Some(nap),
        spin: Duration::from_secs(60),
        ..config(1)
    };
    let engine = Engine::software(pm.clone(), &cfg).unwrap();
    let data = pattern(3, 4096);
    // Let the worker fall into its naps first.
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    // SAFETY: `data` outlives the poll below.
    let sn = unsafe { engine.submit(0, &[Desc::write(&data, DATA)]) }.unwrap();
    spin_until("a polled copy", || engine.is_done(sn));
    assert!(t0.elapsed() <= nap + Duration::from_secs(5));
    // A caller that waits with nothing else to do wakes the napping worker.
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    engine.write_sync(0, &data, DATA + 8192).unwrap();
    let took = t0.elapsed();
    assert!(
        took < nap / 2,
        "a waiting caller took {took:?}, as if the worker finished its {nap:?} nap"
    );
}

#[test]
fn queue_depth_counts_copies_until_they_are_visible() {
    let pm = slow(region(8, 1));
    let engine = Engine::software(pm.clone(), &config(1)).unwrap();
    // Forty copies of 64 KiB: 2.6 ms of the model, copied far faster.
    let data = pattern(5, 64 << 10);
    let mut sns = Vec::new();
    for i in 0..40u64 {
        // SAFETY: `data` outlives the waits below.
        sns.push(
            unsafe { engine.submit(0, &[Desc::write(&data, DATA + i * (64 << 10))]) }.unwrap(),
        );
    }
    let last = *sns.last().unwrap();
    let mut depth = engine.queue_depth(0);
    assert!(depth <= 40);
    spin_until("the last copy", || {
        let d = engine.queue_depth(0);
        assert!(d <= depth, "queue depth rose from {depth} to {d}");
        depth = d;
        // What queue depth says done is done.
        let visible = 40 - d as usize;
        assert!(visible == 0 || engine.is_done(sns[visible - 1]));
        engine.is_done(last)
    });
    assert_eq!(engine.queue_depth(0), 0);
}

#[test]
fn reads_are_stamped_like_writes() {
    let pm = slow(region(8, 1));
    let engine = Engine::software(pm.clone(), &config(1)).unwrap();
    let data = pattern(9, 1 << 20);
    pm.write_persist(DATA, &data);
    let mut out = vec![0u8; data.len()];
    let t0 = Instant::now();
    engine.read_sync(0, DATA, &mut out).unwrap();
    assert!(t0.elapsed() >= Duration::from_nanos(data.len() as u64));
    assert!(out == data);
}
