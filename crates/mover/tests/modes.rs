//! Every mover on a real region with real engine and delegation threads: random
//! requests of many discontiguous pieces land exactly (and nothing else changes), reads
//! come back exactly — including Fastmove's bulk reads split between engine and CPU —
//! and the policies route copies the way the papers say.

use std::sync::Arc;

use mover::{build, Config, Mode, Mover, Pending, ReadPiece, WritePiece};
use pmem::{Pmem, Region};
use rand::{Rng, SeedableRng};

const REGION: u64 = 16 << 20;
/// The engine's completion records live at the start of the region in these tests.
const RECORDS: u64 = 0;
const DATA: u64 = 1 << 20;

fn region() -> Arc<dyn Pmem> {
    let r: Arc<dyn Pmem> = Arc::new(Region::create_temp(REGION).unwrap());
    engine::format_records(&*r, RECORDS, 4).unwrap();
    r
}

/// Every mover, each on a region of its own: two engines must not share completion
/// records, or one's counter would answer for the other's copies.
fn movers() -> Vec<(Arc<dyn Pmem>, Box<dyn Mover>)> {
    Mode::ALL
        .into_iter()
        .map(|m| {
            let pm = region();
            let mover = build(m, pm.clone(), RECORDS, &Config::default()).unwrap();
            (pm, mover)
        })
        .collect()
}

/// Random non-overlapping (offset, length) pieces inside the data area.
fn pieces(rng: &mut rand_pcg::Pcg64Mcg) -> Vec<(u64, usize)> {
    let mut at = DATA + rng.random_range(0..4096);
    let mut out = Vec::new();
    for _ in 0..rng.random_range(1..6) {
        let len = match rng.random_range(0..3) {
            0 => rng.random_range(1..4096),
            1 => rng.random_range(4096..70_000),
            _ => rng.random_range(70_000..400_000),
        };
        out.push((at, len));
        at += len as u64 + rng.random_range(0..10_000);
    }
    out
}

#[test]
fn writes_and_reads_land_exactly_in_every_mode() {
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(7);
    for (pm, m) in movers() {
        for round in 0..12 {
            let ps = pieces(&mut rng);
            let end = ps.last().map(|&(o, l)| o + l as u64).unwrap() + 16;
            // Background pattern, so a copy spilling outside its piece is caught.
            let background = vec![0xEEu8; (end - DATA) as usize];
            pm.copy_persist(DATA, &background);
            let datas: Vec<Vec<u8>> = ps
                .iter()
                .map(|&(_, l)| (0..l).map(|_| rng.random()).collect())
                .collect();
            let wp: Vec<WritePiece<'_>> = ps
                .iter()
                .zip(&datas)
                .map(|(&(dst, _), d)| WritePiece { dst, src: d })
                .collect();
            m.write(&wp).unwrap();
            let mut image = vec![0u8; (end - DATA) as usize];
            pm.read(DATA, &mut image);
            let mut expect = background.clone();
            for (&(o, _), d) in ps.iter().zip(&datas) {
                let s = (o - DATA) as usize;
                expect[s..s + d.len()].copy_from_slice(d);
            }
            assert!(image == expect, "{}: write round {round} wrong", m.mode());
            // Read the same pieces back through the mover.
            let mut outs: Vec<Vec<u8>> = ps.iter().map(|&(_, l)| vec![0u8; l]).collect();
            {
                let mut rp: Vec<ReadPiece<'_>> = ps
                    .iter()
                    .zip(outs.iter_mut())
                    .map(|(&(src, _), d)| ReadPiece { src, dst: d })
                    .collect();
                m.read(&mut rp).unwrap();
            }
            assert!(outs == datas, "{}: read round {round} wrong", m.mode());
        }
    }
}

#[test]
fn async_mode_offloads_bulk_writes_and_copies_small_ones_itself() {
    let pm = region();
    let m = build(Mode::Async, pm.clone(), RECORDS, &Config::default()).unwrap();
    let small = vec![1u8; 4096];
    // SAFETY: `small` outlives the copy (it is done on return for a CPU copy).
    let p = unsafe {
        m.start_write(&[WritePiece {
            dst: DATA,
            src: &small,
        }])
    };
    assert_eq!(p, Pending::Done, "a 4 KiB copy must go by CPU");
    let big = vec![2u8; 256 * 1024];
    // SAFETY: we wait below before `big` is dropped.
    let p = unsafe {
        m.start_write(&[WritePiece {
            dst: DATA,
            src: &big,
        }])
    };
    assert!(
        matches!(p, Pending::Sn(_)),
        "a 256 KiB copy must go to the engine"
    );
    m.wait(p).unwrap();
    assert!(m.is_done(p));
    let engine = m.engine().unwrap();
    let copied: u64 = (0..engine.channels() as u16)
        .map(|c| engine.stats(c).unwrap().bytes)
        .sum();
    assert_eq!(
        copied,
        256 * 1024,
        "only the bulk copy went through the engine"
    );
}

#[test]
fn async_reads_fall_back_to_cpu_when_every_channel_is_busy() {
    let pm = region();
    let cfg = Config {
        engine_channels: 1,
        ..Config::default()
    };
    let m = build(Mode::Async, pm.clone(), RECORDS, &cfg).unwrap();
    let engine = m.engine().unwrap().clone();
    // Fill the only channel: suspended, it keeps what is queued.
    engine.suspend(0).unwrap();
    let filler = vec![3u8; 64 * 1024];
    let mut pend = Vec::new();
    for i in 0..3u64 {
        // SAFETY: `filler` outlives these copies: we resume and wait below.
        pend.push(unsafe {
            m.start_write(&[WritePiece {
                dst: DATA + i * 65536,
                src: &filler,
            }])
        });
    }
    assert!(engine.queue_depth(0) >= 2);
    let mut out = vec![0u8; 64 * 1024];
    // SAFETY: a CPU read completes before returning.
    let p = unsafe {
        m.start_read(&mut [ReadPiece {
            src: DATA + 3 * 65536,
            dst: &mut out,
        }])
    };
    assert_eq!(
        p,
        Pending::Done,
        "EASYIO Listing 2: queue depth >= 2 means read by CPU"
    );
    engine.resume(0).unwrap();
    for p in pend {
        m.wait(p).unwrap();
    }
}

/// A bulk read from a uthread, on a one-worker runtime: with another uthread ready to
/// run, or sleeping (it becomes runnable during the copy), it goes to the engine (the
/// worker overlaps the copy with that uthread); alone, its worker would only wait, so
/// the reader copies it itself. Returns the pending copy each read got (another ready,
/// another sleeping, alone) and checks the bytes.
fn read_in_uthread(cfg: Config) -> (Pending, Pending, Pending) {
    let pm = region();
    let m: Arc<dyn Mover> = Arc::from(build(Mode::Async, pm.clone(), RECORDS, &cfg).unwrap());
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 + 3) as u8).collect();
    pm.copy_persist(DATA, &data);
    let runtime = rt::Runtime::new(1).unwrap();
    runtime.block_on(move || {
        let read = |m: &dyn Mover| {
            let mut out = vec![0u8; data.len()];
            // SAFETY: `out` outlives the copy, which is waited for right after.
            let p = unsafe {
                m.start_read(&mut [ReadPiece {
                    src: DATA,
                    dst: &mut out,
                }])
            };
            m.wait(p).unwrap();
            assert_eq!(out, data);
            p
        };
        // Queued on this worker, not yet run: the worker has something to overlap.
        let other = rt::spawn(|| ());
        let with_other = read(&*m);
        other.join().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = rt::spawn(move || {
            tx.send(()).unwrap();
            rt::sleep(std::time::Duration::from_millis(50));
        });
        // Let it start and go to sleep: it is then pending, not queued.
        while rx.try_recv().is_err() {
            rt::yield_now();
        }
        let with_sleeper = read(&*m);
        sleeper.join().unwrap();
        let alone = read(&*m);
        (with_other, with_sleeper, alone)
    })
}

#[test]
fn a_uthread_alone_on_its_worker_reads_by_cpu_and_one_with_company_by_engine() {
    let (with_other, with_sleeper, alone) = read_in_uthread(Config::default());
    assert!(
        matches!(with_other, Pending::Sn(_)),
        "another uthread was ready: the read should overlap it on the engine, got {with_other:?}"
    );
    assert!(
        matches!(with_sleeper, Pending::Sn(_)),
        "another uthread sleeps and wakes during the copy: the read should go to the \
         engine, got {with_sleeper:?}"
    );
    assert_eq!(
        alone,
        Pending::Done,
        "nothing else to run: the reader should copy itself"
    );
}

#[test]
fn an_engine_sharing_the_cores_gets_no_reads() {
    let cfg = Config {
        engine_shares_cores: true,
        ..Config::default()
    };
    let got = read_in_uthread(cfg);
    assert_eq!(got, (Pending::Done, Pending::Done, Pending::Done));
}

/// A bulk write through an `async` mover of `cfg`; returns what it got.
fn bulk_write(cfg: &Config) -> Pending {
    let pm = region();
    let m = build(Mode::Async, pm.clone(), RECORDS, cfg).unwrap();
    let big = vec![5u8; 256 * 1024];
    // SAFETY: we wait below before `big` is dropped.
    let p = unsafe {
        m.start_write(&[WritePiece {
            dst: DATA,
            src: &big,
        }])
    };
    m.wait(p).unwrap();
    let mut back = vec![0u8; big.len()];
    pm.read(DATA, &mut back);
    assert!(back == big, "the write landed wrong");
    p
}

#[test]
fn a_napping_software_engine_on_dram_gets_no_copies() {
    let cfg = Config {
        engine_nap: Some(engine::DEFAULT_NAP),
        ..Config::default()
    };
    let got = read_in_uthread(cfg.clone());
    assert_eq!(got, (Pending::Done, Pending::Done, Pending::Done));
    assert_eq!(bulk_write(&cfg), Pending::Done, "a bulk write goes by CPU");
}

#[test]
fn a_napping_software_engine_on_a_slow_medium_gets_bulk_copies() {
    let cfg = Config {
        engine_nap: Some(engine::DEFAULT_NAP),
        medium: Some(pmem::slowmem::Model::OPTANE),
        ..Config::default()
    };
    let (with_other, _, alone) = read_in_uthread(cfg.clone());
    assert!(matches!(with_other, Pending::Sn(_)), "got {with_other:?}");
    assert!(matches!(alone, Pending::Sn(_)), "got {alone:?}");
    assert!(matches!(bulk_write(&cfg), Pending::Sn(_)));
}
