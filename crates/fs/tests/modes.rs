//! Every data-movement mode on real regions and real engine threads: contents survive
//! remounts, concurrent readers never see torn or stale data, uthreads sharing one
//! worker never deadlock on a file, the explicit asynchronous API, and recovery of a
//! write whose copy never completed.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use fs::{FileSystem, Mode, MountOptions, OpenFlags};
use pmem::Pmem;
use testkit::pattern;

fn mount_mode(pm: &Arc<dyn Pmem>, mode: Mode) -> FileSystem {
    FileSystem::mount(pm.clone(), MountOptions::with_mode(mode))
        .unwrap()
        .0
}

#[test]
fn every_mode_reads_back_what_it_wrote() {
    for mode in Mode::ALL {
        let pm = fresh(32 * MIB);
        {
            let fs = mount_mode(&pm, mode);
            assert_eq!(fs.mode(), mode);
            let fd = fs.open("/f", rw_create(), 0o644).unwrap();
            let mut model = Vec::new();
            for (i, (off, len)) in [
                (0, 100),
                (4096, 65536),
                (3, 200_000),
                (1 << 20, 4096),
                (70_000, 9),
            ]
            .into_iter()
            .enumerate()
            {
                let data = pattern(i as u64, len);
                fs.pwrite(fd, &data, off).unwrap();
                let end = off as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
                let mut back = vec![0u8; model.len()];
                assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), model.len());
                assert!(back == model, "{mode}: mismatch after write {i}");
            }
            fs.close(fd).unwrap();
            fs.unmount().unwrap();
        }
        assert_fsck_clean(&pm);
        let fs = mount_mode(&pm, mode);
        assert_eq!(read_file(&fs, "/f").len(), (1 << 20) + 4096, "{mode}");
    }
}

/// Writers overwrite whole 64 KiB records with a uniform byte; readers must see each
/// record uniform (old or new, never torn), and after a writer is told its write
/// completed, never anything older.
#[test]
fn concurrent_readers_see_old_or_new_never_torn() {
    const REC: usize = 64 * 1024;
    const RECS: u64 = 4;
    for mode in Mode::ALL {
        let pm = fresh(64 * MIB);
        let fs = Arc::new(mount_mode(&pm, mode));
        let fd = fs.open("/shared", rw_create(), 0o644).unwrap();
        for r in 0..RECS {
            fs.pwrite(fd, &vec![0u8; REC], r * REC as u64).unwrap();
        }
        // completed[r] = highest value whose write of record r has returned.
        let completed: Arc<Vec<std::sync::atomic::AtomicU8>> =
            Arc::new((0..RECS).map(|_| Default::default()).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (fs, completed) = (fs.clone(), completed.clone());
            std::thread::spawn(move || {
                for v in 1..=60u8 {
                    for r in 0..RECS {
                        fs.pwrite(fd, &vec![v; REC], r * REC as u64).unwrap();
                        completed[r as usize].store(v, Ordering::SeqCst);
                    }
                }
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (fs, completed, stop) = (fs.clone(), completed.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; REC];
                    while !stop.load(Ordering::SeqCst) {
                        for r in 0..RECS {
                            let floor = completed[r as usize].load(Ordering::SeqCst);
                            fs.pread(fd, &mut buf, r * REC as u64).unwrap();
                            let v = buf[0];
                            assert!(buf.iter().all(|&b| b == v), "{mode}: torn record {r}");
                            assert!(v >= floor, "{mode}: stale record {r}: {v} < {floor}");
                        }
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        stop.store(true, Ordering::SeqCst);
        for r in readers {
            r.join().unwrap();
        }
        fs.close(fd).unwrap();
        Arc::into_inner(fs).unwrap().unmount().unwrap();
        assert_fsck_clean(&pm);
    }
}

/// EASYIO's deadlock scenario: many uthreads on ONE worker write and read the same
/// file in async mode. The level-1 lock is never held across a yield, so it completes.
#[test]
fn uthreads_on_one_worker_share_a_file_without_deadlock() {
    let pm = fresh(64 * MIB);
    let fs = Arc::new(mount_mode(&pm, Mode::Async));
    let fd = fs.open("/hot", rw_create(), 0o644).unwrap();
    fs.pwrite(fd, &vec![0u8; 8 * 65536], 0).unwrap();
    let rt = rt::Runtime::new(1).unwrap();
    let fs2 = fs.clone();
    let total = rt.block_on(move || {
        let handles: Vec<_> = (0..32u64)
            .map(|i| {
                let fs = fs2.clone();
                rt::spawn(move || {
                    let mut sum = 0u64;
                    let mut buf = vec![0u8; 65536];
                    for k in 0..20u64 {
                        let off = ((i + k) % 8) * 65536;
                        if (i + k) % 3 == 0 {
                            fs.pwrite(fd, &vec![(i as u8) | 1; 65536], off).unwrap();
                        } else {
                            fs.pread(fd, &mut buf, off).unwrap();
                            let v = buf[0];
                            assert!(buf.iter().all(|&b| b == v), "torn read");
                            sum += 1;
                        }
                    }
                    sum
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert!(total > 0);
    let stats = rt.stats();
    assert!(
        stats.iter().map(|s| s.wait_polls).sum::<u64>() > 0,
        "async copies never went through the wait set: {stats:?}"
    );
    fs.close(fd).unwrap();
}

#[test]
fn explicit_async_api_overlaps_and_returns_buffers() {
    let pm = fresh(32 * MIB);
    let fs = mount_mode(&pm, Mode::Async);
    let fd = fs.open("/f", rw_create(), 0o644).unwrap();
    let tokens: Vec<_> = (0..8u64)
        .map(|i| fs.submit_pwrite(fd, pattern(i, 65536), i * 65536).unwrap())
        .collect();
    for (i, t) in tokens.into_iter().enumerate() {
        let (n, buf) = t.wait().unwrap();
        assert_eq!(n, 65536);
        assert_eq!(buf, pattern(i as u64, 65536));
    }
    let t = fs.submit_pread(fd, vec![0u8; 3 * 65536], 65536).unwrap();
    let got = t.wait().unwrap();
    assert_eq!(got.len(), 3 * 65536);
    for i in 0..3 {
        assert_eq!(
            got[i * 65536..(i + 1) * 65536],
            pattern(i as u64 + 1, 65536)[..]
        );
    }
    // Reading past the end gives a short buffer; a write-only descriptor cannot read.
    let t = fs
        .submit_pread(fd, vec![0u8; 65536], 8 * 65536 - 100)
        .unwrap();
    assert_eq!(t.wait().unwrap().len(), 100);
    let wo = fs.open("/f", OpenFlags::WRONLY, 0).unwrap();
    assert!(matches!(
        fs.submit_pread(wo, vec![0u8; 10], 0),
        Err(fs::Error::BadFd)
    ));
    // A dropped token waits for its copy.
    drop(fs.submit_pwrite(fd, vec![9u8; 65536], 0).unwrap());
    let mut b = vec![0u8; 65536];
    fs.pread(fd, &mut b, 0).unwrap();
    assert!(b.iter().all(|&x| x == 9));
}

/// A write whose entry is committed but whose copy never completed (the engine is
/// stopped between the data and its completion counter): after remount the file shows
/// its previous contents, and fsck is clean.
#[test]
fn crash_with_pending_copy_keeps_previous_contents() {
    let pm = fresh(32 * MIB);
    let old = pattern(1, 65536);
    {
        let fs = mount_mode(&pm, Mode::Async);
        let fd = fs.open("/f", rw_create(), 0o644).unwrap();
        fs.pwrite(fd, &old, 0).unwrap();
        let engine = fs.engine().unwrap().clone();
        if engine.kind() != engine::BackendKind::Software {
            // A DSA device publishes the counter itself, in the batch that copies the
            // data; the crash harness crashes between the two on that engine.
            eprintln!(
                "skipped on the {} engine: stopping a channel between its data and its \
                 counter is a software-engine hook",
                engine.kind().name()
            );
            return;
        }
        for ch in 0..engine.channels() as u16 {
            engine.testing().freeze_before_publish(ch).unwrap();
        }
        let token = fs.submit_pwrite(fd, pattern(2, 65536), 0).unwrap();
        let t0 = std::time::Instant::now();
        let frozen = || {
            (0..engine.channels() as u16).any(|c| engine.testing().frozen_at(c).unwrap().is_some())
        };
        while !frozen() {
            assert!(
                t0.elapsed().as_secs() < 10,
                "the engine never reached the freeze"
            );
            std::thread::yield_now();
        }
        assert!(!token.is_done());
        // Space is allocated meanwhile, as much as the write displaced (so the
        // allocator would hand back exactly those blocks if they were free), and
        // zeroed: they must not be among it, for the file maps them again once the
        // crash drops the write whose copy never finished.
        let g = fs.open("/g", rw_create(), 0o644).unwrap();
        fs.fallocate(g, 0, 0, 65536).unwrap();
        // Power fails here: the token's buffer is leaked, not freed under the copy.
        std::mem::forget(token);
        fs.abandon();
    }
    let report = FileSystem::mount(pm.clone(), MountOptions::default())
        .unwrap()
        .1;
    assert_eq!(report.pending_writes_dropped, 1, "{report:?}");
    let fs = mount(&pm);
    assert_eq!(read_file(&fs, "/f"), old);
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

/// The experiment variant that holds a per-inode lock across the copy still reads and
/// writes correctly, from uthreads and from ordinary threads.
#[test]
fn lock_across_wait_variant_reads_and_writes() {
    let pm = fresh(16 * MIB);
    let opts = MountOptions {
        lock_across_wait: true,
        ..MountOptions::with_mode(Mode::Async)
    };
    let fs = Arc::new(FileSystem::mount(pm.clone(), opts).unwrap().0);
    let fd = fs.open("/f", rw_create(), 0o644).unwrap();
    fs.pwrite(fd, &pattern(3, 65536), 0).unwrap();
    let mut b = vec![0u8; 65536];
    fs.pread(fd, &mut b, 0).unwrap();
    assert_eq!(b, pattern(3, 65536));
    let rt = rt::Runtime::new(1).unwrap();
    let fs2 = fs.clone();
    rt.block_on(move || {
        let hs: Vec<_> = (0..4u8)
            .map(|i| {
                let fs = fs2.clone();
                rt::spawn(move || {
                    let mut b = vec![0u8; 4096];
                    for _ in 0..50 {
                        fs.pwrite(fd, &[i; 4096], 4096 * i as u64).unwrap();
                        fs.pread(fd, &mut b, 4096 * i as u64).unwrap();
                        assert!(b.iter().all(|&x| x == i));
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
    });
}

/// The engine modes run on the engine the test run asked for: the software engine, or
/// with `EASYIO_TEST_ENGINE=dsa-model` the DSA backend on device models, so that a run
/// of this suite on the DSA path really is one.
#[test]
fn engine_modes_use_the_engine_the_run_asked_for() {
    let want = match std::env::var(mover::testing::ENGINE_ENV).as_deref() {
        Ok("dsa-model") => engine::BackendKind::Dsa,
        _ => engine::BackendKind::Software,
    };
    let pm = fresh(16 * MIB);
    for mode in [Mode::DmaSync, Mode::Async] {
        let fs = mount_mode(&pm, mode);
        assert_eq!(fs.engine().unwrap().kind(), want, "{mode}");
        let fd = fs.open("/f", rw_create(), 0o644).unwrap();
        let data = pattern(7, 256 * 1024);
        fs.pwrite(fd, &data, 0).unwrap();
        let mut back = vec![0u8; data.len()];
        fs.pread(fd, &mut back, 0).unwrap();
        assert_eq!(back, data, "{mode}");
        fs.close(fd).unwrap();
        fs.unmount().unwrap();
    }
    assert_fsck_clean(&pm);
}
