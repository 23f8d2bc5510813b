//! The software and cpu engines against a real region: concurrent submitters, ordering
//! of durable data before the counter, freeze before publish, suspend/resume, busy
//! backpressure, shutdown with descriptors in flight, remount.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use common::{config, pattern, read, region, rng, AREA, DATA};
use engine::{record, record_is_done, Desc, Engine, EngineConfig, Error, Sn};
use pmem::{Durability, Pmem, Region};
use rand::Rng as _;

/// A region of 8 MiB per submitting thread.
const SPAN: u64 = 8 << 20;

struct Batch {
    sn: Sn,
    /// (region offset, source buffer, where the bytes start in it); the buffers are
    /// the ones the engine copies from, kept alive until the SN is done.
    writes: Vec<(u64, Vec<u8>, usize)>,
}

fn check_batch(region: &Region, b: &Batch) {
    for (off, buf, align) in &b.writes {
        let bytes = &buf[*align..];
        assert!(
            read(region, *off, bytes.len()) == bytes,
            "{} reported done but {} bytes at {off} are not in place",
            b.sn,
            bytes.len()
        );
    }
}

#[test]
fn concurrent_submitters_every_byte_arrives_in_fifo_order() {
    const THREADS: u64 = 6;
    const CHANNELS: usize = 3;
    const BATCHES: usize = 40;
    let region = region(THREADS * SPAN / (1 << 20) + 1, CHANNELS);
    let cfg = EngineConfig {
        ring_capacity: 16,
        ..config(CHANNELS)
    };
    let engine = Arc::new(Engine::software(region.clone(), &cfg).unwrap());
    let sns = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (engine, region, sns) = (&engine, &region, &sns);
            s.spawn(move || {
                let ch = (t % CHANNELS as u64) as u16;
                let mut rng = rng(t + 1);
                let mut cursor = DATA + t * SPAN;
                let mut pending: Vec<Batch> = Vec::new();
                let mut last_counter = 0;
                for i in 0..BATCHES {
                    let n = 1 + rng.random_range(0..4) as usize;
                    // Sources with random DRAM alignment: a slice at a random offset.
                    let mut backing = Vec::new();
                    let mut plan = Vec::new();
                    for k in 0..n {
                        let len = if rng.random_range(0..4) == 0 {
                            1 + rng.random_range(0..300)
                        } else {
                            1 + rng.random_range(0..40_000)
                        } as usize;
                        let align = rng.random_range(0..64) as usize;
                        let mut buf = vec![0u8; align + len];
                        buf[align..]
                            .copy_from_slice(&pattern((t << 32) | (i as u64) << 8 | k as u64, len));
                        cursor += rng.random_range(0..64);
                        plan.push((cursor, align, len));
                        cursor += len as u64;
                        backing.push(buf);
                    }
                    let descs: Vec<Desc> = plan
                        .iter()
                        .zip(&backing)
                        .map(|(&(off, align, len), buf)| {
                            Desc::to_region(buf[align..].as_ptr(), off, len)
                        })
                        .collect();
                    // SAFETY: `backing` is kept alive in `pending` until the SN is done.
                    let sn = unsafe { engine.submit(ch, &descs).unwrap() };
                    assert_eq!(sn.channel(), ch);
                    assert!(
                        sn.counter() > last_counter,
                        "SNs on a channel strictly increase"
                    );
                    last_counter = sn.counter();
                    sns.lock().unwrap().push(sn);
                    let writes = plan
                        .iter()
                        .zip(backing)
                        .map(|(&(off, align, _), buf)| (off, buf, align))
                        .collect();
                    pending.push(Batch { sn, writes });
                    // The moment an SN reads as done, its bytes must already be there.
                    pending.retain(|b| {
                        let done = engine.is_done(b.sn);
                        if done {
                            check_batch(region, b);
                        }
                        !done
                    });
                    if i % 8 == 7 {
                        // Read back a finished range through the engine too.
                        let b = pending.first().map(|b| b.sn);
                        if let Some(sn) = b {
                            engine.wait(sn).unwrap();
                        }
                        let (off, bytes) = (DATA + t * SPAN, read(region, DATA + t * SPAN, 5000));
                        let mut out = vec![0u8; 5000 + 7];
                        engine.read_sync(ch, off, &mut out[7..]).unwrap();
                        assert_eq!(out[7..], bytes[..]);
                    }
                }
                for b in &pending {
                    engine.wait(b.sn).unwrap();
                    check_batch(region, b);
                }
            });
        }
    });
    // Every SN handed out is distinct, and each channel's record covers all of them.
    let sns = sns.into_inner().unwrap();
    let mut per_channel: HashMap<u16, Vec<u64>> = HashMap::new();
    for sn in &sns {
        per_channel
            .entry(sn.channel())
            .or_default()
            .push(sn.counter());
        assert!(record_is_done(&*region, AREA, *sn));
    }
    for (ch, mut counters) in per_channel {
        let n = counters.len();
        counters.sort();
        counters.dedup();
        assert_eq!(counters.len(), n, "channel {ch} handed out an SN twice");
        let stats = engine.stats(ch).unwrap();
        assert_eq!(stats.queue_depth, 0);
        assert!(stats.descriptors >= n as u64 && stats.bytes > 0);
    }
}

/// One call on the region, as the tracing harness would record it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    CopyNt { off: u64, len: u64 },
    Write { off: u64, len: u64 },
    Flush { off: u64, len: u64 },
    Store { off: u64, val: u64 },
    Fence,
}

/// A `Pmem` that logs every mutating call with the calling thread.
struct Recorder {
    inner: Region,
    log: Mutex<Vec<(ThreadId, Op)>>,
}

impl Recorder {
    fn note(&self, op: Op) {
        self.log
            .lock()
            .unwrap()
            .push((std::thread::current().id(), op));
    }
}

impl Pmem for Recorder {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn durability(&self) -> Durability {
        self.inner.durability()
    }
    fn write(&self, off: u64, src: &[u8]) {
        self.inner.write(off, src);
        self.note(Op::Write {
            off,
            len: src.len() as u64,
        });
    }
    fn store_u64(&self, off: u64, val: u64) {
        self.inner.store_u64(off, val);
        self.note(Op::Store { off, val });
    }
    fn load_u64(&self, off: u64) -> u64 {
        self.inner.load_u64(off)
    }
    fn read(&self, off: u64, dst: &mut [u8]) {
        self.inner.read(off, dst)
    }
    fn flush(&self, off: u64, len: u64) {
        self.inner.flush(off, len);
        self.note(Op::Flush { off, len });
    }
    fn fence(&self) {
        self.inner.fence();
        self.note(Op::Fence);
    }
    fn copy_nt(&self, off: u64, src: &[u8]) {
        self.inner.copy_nt(off, src);
        self.note(Op::CopyNt {
            off,
            len: src.len() as u64,
        });
    }
}

#[test]
fn counter_is_stored_only_after_its_copies_are_fenced() {
    const CHANNELS: usize = 2;
    let inner = Region::create_temp((16 << 20) + pmem::HEADER_LEN).unwrap();
    engine::format_records(&inner, AREA, CHANNELS).unwrap();
    let rec = Arc::new(Recorder {
        inner,
        log: Mutex::new(Vec::new()),
    });
    let engine = Engine::software(rec.clone(), &config(CHANNELS)).unwrap();
    // (channel, counter) -> region offset of the copy that counter completes.
    let mut copies: HashMap<(u16, u64), u64> = HashMap::new();
    let src = pattern(5, 1 << 20);
    let mut rng = rng(11);
    let mut off = DATA;
    let mut sns = Vec::new();
    for i in 0..120 {
        let ch = (i % CHANNELS) as u16;
        let n = 1 + rng.random_range(0..3) as usize;
        let mut descs = Vec::new();
        for _ in 0..n {
            let len = 1 + rng.random_range(0..20_000) as usize;
            descs.push(Desc::write(&src[..len], off));
            off += len as u64;
        }
        // SAFETY: `src` outlives the engine's use (waited below).
        let sn = unsafe { engine.submit(ch, &descs).unwrap() };
        for (k, d) in descs.iter().enumerate() {
            copies.insert((ch, sn.counter() - (n - 1 - k) as u64), d.region_off());
        }
        sns.push(sn);
    }
    for sn in &sns {
        engine.wait(*sn).unwrap();
    }
    drop(engine);
    let log = rec.log.lock().unwrap().clone();
    let counter_offs: Vec<u64> = (0..CHANNELS as u16)
        .map(|c| record::counter_off(AREA, c))
        .collect();
    let durable_offs: Vec<u64> = (0..CHANNELS as u16)
        .map(|c| record::durable_off(AREA, c))
        .collect();
    let mut threads: Vec<ThreadId> = Vec::new();
    for (t, _) in &log {
        if !threads.contains(t) {
            threads.push(*t);
        }
    }
    let mut published = [0u64; CHANNELS];
    for t in threads {
        let ops: Vec<Op> = log
            .iter()
            .filter(|(id, _)| *id == t)
            .map(|(_, op)| *op)
            .collect();
        let (mut unfenced, mut fenced) = (Vec::new(), std::collections::HashSet::new());
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::CopyNt { off, .. } => unfenced.push(off),
                Op::Fence => fenced.extend(unfenced.drain(..)),
                Op::Store { off, val } if durable_offs.contains(&off) => {
                    // The durable word: the counter just published, after its
                    // write-back and fence.
                    let ch = durable_offs.iter().position(|&o| o == off).unwrap();
                    assert_eq!(val, published[ch], "durable word of channel {ch}");
                    assert!(
                        i >= 3 && ops[i - 1] == Op::Fence,
                        "durable word of channel {ch} stored before the counter was fenced"
                    );
                }
                Op::Store { off, val } => {
                    let ch = counter_offs
                        .iter()
                        .position(|&o| o == off)
                        .expect("store outside the records") as u16;
                    assert!(
                        val > published[ch as usize],
                        "counter of channel {ch} went backwards"
                    );
                    for c in published[ch as usize] + 1..=val {
                        let data = copies[&(ch, c)];
                        assert!(
                            fenced.contains(&data),
                            "counter {val} of channel {ch} stored before copy {c} was fenced"
                        );
                    }
                    published[ch as usize] = val;
                    assert_eq!(
                        ops.get(i + 1),
                        Some(&Op::Flush { off, len: 8 }),
                        "counter not written back"
                    );
                    assert_eq!(
                        ops.get(i + 2),
                        Some(&Op::Fence),
                        "counter write-back not fenced"
                    );
                }
                Op::Write { .. } | Op::Flush { .. } => {}
            }
        }
    }
    for sn in sns {
        assert!(published[sn.channel() as usize] >= sn.counter());
    }
}

#[test]
fn frozen_channel_leaves_data_durable_and_counter_unpublished() {
    let region = region(8, 2);
    let engine = Engine::software(region.clone(), &config(2)).unwrap();
    let a = pattern(1, 10_000);
    engine.write_sync(0, &a, DATA).unwrap();
    engine.testing().freeze_before_publish(0).unwrap();
    let b = pattern(2, 70_000);
    // SAFETY: `b` outlives the engine, dropped explicitly below.
    let sn = unsafe { engine.submit(0, &[Desc::write(&b, DATA + 65536)]).unwrap() };
    assert_eq!(engine.testing().wait_frozen(0).unwrap(), sn.counter());
    assert_eq!(
        read(&region, DATA + 65536, b.len()),
        b,
        "data durable before the counter"
    );
    assert!(!engine.is_done(sn));
    assert!(!engine.poll(sn).unwrap());
    assert_eq!(engine.queue_depth(0), 1);
    // Channel 1 is unaffected, and a thawed channel goes on.
    engine.testing().freeze_before_publish(1).unwrap();
    // SAFETY: `a` outlives the engine.
    let sn1 = unsafe {
        engine
            .submit(1, &[Desc::write(&a, DATA + 200_000)])
            .unwrap()
    };
    engine.testing().wait_frozen(1).unwrap();
    engine.testing().thaw(1).unwrap();
    engine.wait(sn1).unwrap();
    // "Crash" with channel 0 frozen: shutdown does not publish its group.
    drop(engine);
    assert!(!record_is_done(&*region, AREA, sn));
    assert_eq!(
        region.load_u64(record::counter_off(AREA, 0)),
        sn.counter() - 1
    );
    // Remount: counting continues from the persisted counter.
    let engine = Engine::software(region.clone(), &config(2)).unwrap();
    // SAFETY: `a` outlives the engine.
    let next = unsafe { engine.submit(0, &[Desc::write(&a, DATA)]).unwrap() };
    assert_eq!(
        next.counter(),
        sn.counter(),
        "the unpublished counter is handed out again"
    );
    engine.wait(next).unwrap();
    let Err(Error::Unsupported { .. }) = Engine::cpu(region.clone(), &config(2))
        .unwrap()
        .testing()
        .freeze_before_publish(0)
    else {
        panic!("freeze is a software-engine hook");
    };
}

#[test]
fn suspend_finishes_the_descriptor_in_hand_and_starts_no_other() {
    let region = region(40, 1);
    let cfg = EngineConfig {
        ring_capacity: 4,
        ..config(1)
    };
    let engine = Engine::software(region.clone(), &cfg).unwrap();
    let big = pattern(3, 16 << 20);
    let small = pattern(4, 4096);
    let descs = [
        Desc::write(&big, DATA),
        Desc::write(&small, DATA + (16 << 20)),
        Desc::write(&small, DATA + (16 << 20) + 4096),
        Desc::write(&small, DATA + (16 << 20) + 8192),
    ];
    // SAFETY: every SN is waited for below, while the buffers live.
    let sns: Vec<Sn> = descs
        .iter()
        .map(|d| unsafe { engine.submit(0, &[*d]).unwrap() })
        .collect();
    engine.suspend(0).unwrap();
    let counter = region.load_u64(record::counter_off(AREA, 0));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        region.load_u64(record::counter_off(AREA, 0)),
        counter,
        "a suspended channel started another descriptor"
    );
    let stats = engine.stats(0).unwrap();
    assert!(stats.suspended);
    assert_eq!(stats.queue_depth, 4 - counter);
    engine.resume(0).unwrap();
    for sn in &sns {
        engine.wait(*sn).unwrap();
    }
    assert_eq!(engine.queue_depth(0), 0);
    assert!(!engine.stats(0).unwrap().suspended);
}

#[test]
fn a_full_ring_answers_busy_and_blocking_submit_waits() {
    let region = region(4, 1);
    let cfg = EngineConfig {
        ring_capacity: 4,
        ..config(1)
    };
    let engine = Arc::new(Engine::software(region.clone(), &cfg).unwrap());
    let src = pattern(6, 4096);
    engine.suspend(0).unwrap();
    let mut sns = Vec::new();
    for i in 0..3 {
        // SAFETY: `src` outlives the engine's use (waited below).
        sns.push(unsafe {
            engine
                .try_submit(0, &[Desc::write(&src, DATA + i * 4096)])
                .unwrap()
        });
    }
    let pair = [Desc::write(&src, DATA), Desc::write(&src, DATA + 4096)];
    // SAFETY: as above; refused anyway.
    let err = unsafe { engine.try_submit(0, &pair) }.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Busy {
                channel: 0,
                free: 1,
                needed: 2
            }
        ),
        "{err}"
    );
    assert_eq!(err.errno(), libc::EAGAIN);
    // SAFETY: as above.
    sns.push(unsafe {
        engine
            .try_submit(0, &[Desc::write(&src, DATA + 3 * 4096)])
            .unwrap()
    });
    // SAFETY: as above.
    let full = unsafe { engine.try_submit(0, &[pair[0]]) };
    assert!(matches!(full, Err(Error::Busy { .. })));
    assert_eq!(engine.queue_depth(0), 4);
    // A blocking submitter waits until the channel makes room.
    let waiter = {
        let (engine, src) = (engine.clone(), src.clone());
        std::thread::spawn(move || {
            // SAFETY: the thread keeps `src` alive until the SN is done.
            let sn = unsafe {
                engine
                    .submit(0, &[Desc::write(&src, DATA + 8 * 4096)])
                    .unwrap()
            };
            engine.wait(sn).unwrap();
            sn
        })
    };
    std::thread::sleep(Duration::from_millis(10));
    engine.resume(0).unwrap();
    let last = waiter.join().unwrap();
    assert_eq!(last.counter(), 5);
    for sn in sns {
        assert!(engine.is_done(sn));
    }
    let stats = engine.stats(0).unwrap();
    assert_eq!(
        (stats.descriptors, stats.bytes, stats.queue_depth),
        (5, 5 * 4096, 0)
    );
}

#[test]
fn shutdown_completes_everything_in_flight() {
    let region = region(24, 2);
    let engine = Engine::software(region.clone(), &config(2)).unwrap();
    let src = pattern(7, 64 << 10);
    let mut sns = Vec::new();
    for i in 0..160u64 {
        // SAFETY: `src` outlives the engine's use of it: the shutdown below completes
        // every copy.
        sns.push(unsafe {
            engine
                .submit((i % 2) as u16, &[Desc::write(&src, DATA + i * (64 << 10))])
                .unwrap()
        });
    }
    engine.shutdown();
    for (i, sn) in sns.iter().enumerate() {
        assert!(record_is_done(&*region, AREA, *sn), "{sn} lost at shutdown");
        assert_eq!(read(&region, DATA + i as u64 * (64 << 10), src.len()), src);
    }
    // SAFETY: refused.
    let err = unsafe { engine.try_submit(0, &[Desc::write(&src, DATA)]) }.unwrap_err();
    assert!(matches!(err, Error::ShutDown { channel: 0 }), "{err}");
    assert_eq!(err.errno(), libc::ESHUTDOWN);
    engine.shutdown();
}

#[test]
fn cpu_engine_completes_at_submit_and_counting_survives_remount() {
    let region = region(4, 2);
    let src = pattern(8, 100_000);
    {
        let engine = Engine::cpu(region.clone(), &config(2)).unwrap();
        for i in 0..3 {
            // SAFETY: the copy is done when submit returns.
            let sn = unsafe {
                engine
                    .try_submit(1, &[Desc::write(&src, DATA + i * 100_000)])
                    .unwrap()
            };
            assert!(engine.is_done(sn));
            assert_eq!(sn.counter(), i + 1);
        }
        let mut back = vec![0u8; src.len()];
        engine.read_sync(1, DATA + 200_000, &mut back).unwrap();
        assert_eq!(back, src);
        assert!(engine.suspend(0).is_err());
    }
    let engine = Engine::software(region.clone(), &config(2)).unwrap();
    // SAFETY: waited below.
    let sn = unsafe { engine.submit(1, &[Desc::write(&src, DATA)]).unwrap() };
    assert_eq!(
        sn.counter(),
        5,
        "counting continues from the persisted counter"
    );
    engine.wait(sn).unwrap();
    assert!(
        Engine::software(region.clone(), &config(3)).is_err(),
        "channel 2 was never formatted"
    );
}

#[test]
fn bad_submissions_are_typed_errors() {
    let region = region(2, 2);
    let engine = Engine::software(
        region.clone(),
        &EngineConfig {
            ring_capacity: 8,
            ..config(2)
        },
    )
    .unwrap();
    let src = [1u8; 64];
    let try_one = |ch: u16, d: Desc| {
        // SAFETY: every call here is refused before anything is copied.
        unsafe { engine.try_submit(ch, &[d]) }.unwrap_err()
    };
    let e = try_one(2, Desc::write(&src, DATA));
    assert!(
        matches!(
            e,
            Error::NoChannel {
                channel: 2,
                channels: 2
            }
        ) && e.errno() == libc::EINVAL
    );
    let e = try_one(0, Desc::write(&src, region.len() - 10));
    assert!(
        matches!(e, Error::OutOfRange { .. }) && e.errno() == libc::ERANGE,
        "{e}"
    );
    let e = try_one(0, Desc::write(&src, AREA + 100));
    assert!(
        matches!(e, Error::OutOfRange { .. }),
        "writing over the records: {e}"
    );
    let e = try_one(0, Desc::write(&src[..0], DATA));
    assert!(matches!(e, Error::BadBatch(_)), "{e}");
    // SAFETY: refused.
    let e = unsafe { engine.try_submit(0, &[]) }.unwrap_err();
    assert!(matches!(e, Error::BadBatch(_)));
    let nine = vec![Desc::write(&src, DATA); 9];
    // SAFETY: refused.
    let e = unsafe { engine.try_submit(0, &nine) }.unwrap_err();
    assert!(matches!(e, Error::BadBatch(_)), "{e}");
    // Reading the records themselves is allowed.
    let mut rec = [0u8; 8];
    engine.read_sync(0, AREA, &mut rec).unwrap();
    assert!(Engine::software(
        region.clone(),
        &EngineConfig {
            area_off: 8,
            ..config(1)
        }
    )
    .is_err());
    assert_eq!(
        "dsa".parse::<engine::BackendKind>().unwrap(),
        engine::BackendKind::Dsa
    );
    assert!("gpu".parse::<engine::BackendKind>().is_err());
}

/// The workers' copying time is counted under their role, including after the engine
/// (and its workers) are gone; the time of the submitting thread is not.
#[test]
fn worker_cpu_time_is_counted_by_role() {
    use threads::{cpu_time, Role};
    let region = region(9, 1);
    let before = cpu_time(Role::CopyEngine);
    let engine = Engine::software(region.clone(), &config(1)).unwrap();
    let src = pattern(7, 1 << 20);
    for i in 0..64u64 {
        engine
            .write_sync(0, &src, DATA + (i % 8) * (1 << 20))
            .unwrap();
    }
    drop(engine);
    // 64 MiB copied by the worker: more than a millisecond of its CPU on any machine.
    let used = cpu_time(Role::CopyEngine) - before;
    assert!(used >= Duration::from_millis(1), "{used:?}");
}
