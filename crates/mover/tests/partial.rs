//! A request that fails part-way through its submission completes as a whole: for every
//! mover that submits to an engine, in both directions, batch k of n is refused for
//! every k while the earlier batches sit queued on a suspended channel. Once the call
//! returns, the test poisons the caller's buffer and lets the engine drain: the data
//! must be whole and correct, and no engine copy may touch the buffer after the return
//! (a write's poison would reach the region; a read's destination would lose its
//! poison).

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use engine::{Engine, EngineConfig};
use mover::{
    AsyncMover, Class, Client, Config, DmaSyncMover, Mover, QosConfig, ReadPiece, WritePiece,
};
use pmem::{Pmem, Region};
use testkit::{pattern, POISON};

const REGION: u64 = 8 << 20;
const RECORDS: u64 = 0;
const DATA: u64 = 1 << 20;
/// Descriptors per batch (the engine's batches are capped to this).
const PER_BATCH: usize = 4;
/// Batches a whole request takes.
const BATCHES: usize = 4;
/// Bytes per piece: above every mover's CPU threshold once there are enough of them.
const PIECE: usize = 8192;
/// How long the suspended channels stay suspended: a mover that returns while its
/// batches are queued returns well within this, and the test poisons at once.
const HOLD: Duration = Duration::from_millis(200);

/// Which engine mover, and as which client.
#[derive(Clone, Copy, Debug)]
enum Kind {
    DmaSync,
    Async,
    /// `async` with a channel manager, as a B client (split, one descriptor per
    /// submission).
    AsyncQosBulk,
}

const KINDS: [Kind; 3] = [Kind::DmaSync, Kind::Async, Kind::AsyncQosBulk];

struct Setup {
    pm: Arc<dyn Pmem>,
    engine: Arc<Engine>,
    mover: Box<dyn Mover>,
    client: Client,
}

fn setup(kind: Kind) -> Setup {
    let pm: Arc<dyn Pmem> = Arc::new(Region::create_temp(REGION).unwrap());
    let cfg = Config {
        qos: matches!(kind, Kind::AsyncQosBulk).then(QosConfig::default),
        ..Config::default()
    };
    engine::format_records(&*pm, RECORDS, cfg.channels_needed()).unwrap();
    let ecfg = EngineConfig {
        area_off: RECORDS,
        channels: cfg.channels_needed(),
        ring_capacity: 64,
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::software(pm.clone(), &ecfg).unwrap());
    engine.testing().cap_batch(Some(PER_BATCH));
    let mover: Box<dyn Mover> = match kind {
        Kind::DmaSync => Box::new(DmaSyncMover::new(pm.clone(), engine.clone(), &cfg)),
        Kind::Async | Kind::AsyncQosBulk => {
            Box::new(AsyncMover::new(pm.clone(), engine.clone(), &cfg).unwrap())
        }
    };
    let client = match kind {
        Kind::AsyncQosBulk => mover.register(Class::Bandwidth),
        _ => Client::DEFAULT,
    };
    Setup {
        pm,
        engine,
        mover,
        client,
    }
}

/// Suspends every channel, refuses submissions after `accepted`, and returns a thread
/// that resumes them after [`HOLD`].
fn hold(engine: &Arc<Engine>, accepted: u64) -> thread::JoinHandle<()> {
    for c in 0..engine.channels() as u16 {
        engine.suspend(c).unwrap();
    }
    engine.testing().refuse_after(Some(accepted));
    let engine = engine.clone();
    thread::spawn(move || {
        thread::sleep(HOLD);
        for c in 0..engine.channels() as u16 {
            engine.resume(c).unwrap();
        }
    })
}

#[test]
fn a_write_refused_part_way_leaves_no_copy_running() {
    let mut failures = Vec::new();
    for kind in KINDS {
        for k in 1..=BATCHES as u64 {
            let s = setup(kind);
            let n = PER_BATCH * BATCHES;
            let mut srcs: Vec<Vec<u8>> = (0..n).map(|i| pattern(i as u64, PIECE)).collect();
            let expect = srcs.clone();
            let releaser = hold(&s.engine, k - 1);
            let result = {
                let pieces: Vec<WritePiece<'_>> = srcs
                    .iter()
                    .enumerate()
                    .map(|(i, src)| WritePiece {
                        dst: DATA + (i * PIECE) as u64,
                        src,
                    })
                    .collect();
                // SAFETY: the buffers outlive the call, and the copy is waited for.
                let p = unsafe { s.mover.start_write_for(s.client, &pieces) };
                s.mover.wait(p)
            };
            for src in &mut srcs {
                src.fill(POISON);
            }
            releaser.join().unwrap();
            s.engine.testing().refuse_after(None);
            s.engine.shutdown();
            let mut image = vec![0u8; n * PIECE];
            s.pm.read(DATA, &mut image);
            if result.is_ok() && image != expect.concat() {
                failures.push(format!(
                    "{kind:?}, batch {k} of {BATCHES} refused: the region does not hold the \
                     data written (poison written after the call returned: {})",
                    image.contains(&POISON)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_read_refused_part_way_leaves_no_copy_running() {
    let mut failures = Vec::new();
    for kind in KINDS {
        for k in 1..=BATCHES as u64 {
            let s = setup(kind);
            let n = PER_BATCH * BATCHES;
            let expect = pattern(7, n * PIECE);
            s.pm.copy_persist(DATA, &expect);
            let mut dsts: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; PIECE]).collect();
            let releaser = hold(&s.engine, k - 1);
            let result = {
                let mut pieces: Vec<ReadPiece<'_>> = dsts
                    .iter_mut()
                    .enumerate()
                    .map(|(i, dst)| ReadPiece {
                        src: DATA + (i * PIECE) as u64,
                        dst,
                    })
                    .collect();
                // SAFETY: the buffers outlive the call, and the copy is waited for.
                let p = unsafe { s.mover.start_read_for(s.client, &mut pieces) };
                s.mover.wait(p)
            };
            let got = dsts.concat();
            for dst in &mut dsts {
                dst.fill(POISON);
            }
            releaser.join().unwrap();
            s.engine.testing().refuse_after(None);
            s.engine.shutdown();
            if !dsts.iter().all(|d| d.iter().all(|&b| b == POISON)) {
                failures.push(format!(
                    "{kind:?}, batch {k} of {BATCHES} refused: an engine copy wrote into the \
                     buffer after the read returned"
                ));
            }
            if result.is_ok() && got != expect {
                failures.push(format!(
                    "{kind:?}, batch {k} of {BATCHES} refused: the read returned wrong data"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Waiting out the accepted batches of a request refused part-way never switches to
/// another uthread: the caller may hold its inode's level-1 lock (a write submits under
/// it), and a uthread run meanwhile on the same worker could block the worker's thread
/// on that lock for good. A second uthread, ready on the same one-worker runtime, must
/// not run while the first is inside the refused submission, although the accepted
/// batch stays queued on a suspended channel for [`HOLD`].
#[test]
fn a_request_refused_part_way_is_waited_out_without_switching_uthreads() {
    let runtime = rt::Runtime::new(1).unwrap();
    let s = setup(Kind::Async);
    let ran_during = runtime.block_on(move || {
        let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = other_ran.clone();
        let other = rt::spawn(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
        let n = PER_BATCH * BATCHES;
        let srcs: Vec<Vec<u8>> = (0..n).map(|i| pattern(i as u64, PIECE)).collect();
        let releaser = hold(&s.engine, 1);
        let ran_during = {
            let pieces: Vec<WritePiece<'_>> = srcs
                .iter()
                .enumerate()
                .map(|(i, src)| WritePiece {
                    dst: DATA + (i * PIECE) as u64,
                    src,
                })
                .collect();
            // SAFETY: the buffers outlive the call, and the copy is waited for.
            let p = unsafe { s.mover.start_write_for(s.client, &pieces) };
            let ran = other_ran.load(std::sync::atomic::Ordering::SeqCst);
            let _ = s.mover.wait(p);
            ran
        };
        releaser.join().unwrap();
        other.join().unwrap();
        s.engine.testing().refuse_after(None);
        s.engine.shutdown();
        ran_during
    });
    assert!(
        !ran_during,
        "another uthread ran while a refused request waited out its accepted batch"
    );
}
