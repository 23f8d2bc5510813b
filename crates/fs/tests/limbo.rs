//! Retired blocks on writers pinned to different CPUs: each CPU slot keeps its own
//! limbo, and what waits there must stay a small share of the pool, so that a reader
//! that stays in flight — and holds back every block retired since it registered —
//! leaves the writers room to allocate.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use fs::{Error, ExternalReaders, FileSystem};
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// A reader outside the process (a client of a server) that registers in the epoch
/// last published when told to and then stays registered until told to stop.
#[derive(Default)]
struct SlowReader {
    reading: AtomicBool,
    since: AtomicU64,
    published: AtomicU64,
}

impl ExternalReaders for SlowReader {
    fn pinned_before(&self, e: u64) -> bool {
        self.reading.load(Ordering::SeqCst) && self.since.load(Ordering::SeqCst) < e
    }

    fn publish(&self, e: u64) {
        self.published.store(e, Ordering::SeqCst);
    }
}

impl SlowReader {
    fn start(&self) {
        let e = self.published.load(Ordering::SeqCst);
        self.since.store(e, Ordering::SeqCst);
        self.reading.store(true, Ordering::SeqCst);
    }

    fn stop(&self) {
        self.reading.store(false, Ordering::SeqCst);
    }
}

/// Two CPUs this process may run on, if it may run on two.
fn two_cpus() -> Option<[usize; 2]> {
    let set = sched_getaffinity(None).ok()?;
    let mut cpus = (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c));
    Some([cpus.next()?, cpus.next()?])
}

/// Overwrites `path` (of `data.len()` bytes) whole `times` times on `cpu`.
fn overwrite_on(fs: &FileSystem, cpu: usize, path: &str, data: &[u8], times: usize) {
    let mut one = CpuSet::new();
    one.set(cpu);
    sched_setaffinity(None, &one).expect("pin to a CPU this process may use");
    let fd = fs.open(path, rw_create(), 0o644).unwrap();
    for _ in 0..times {
        assert_eq!(fs.pwrite(fd, data, 0).unwrap(), data.len());
    }
    fs.close(fd).unwrap();
}

/// Two writers on two CPUs overwrite a file each, 1/50 of the pool, twenty times: far
/// fewer extents than a limbo collects at, but most of the pool. With limbos bounded by
/// extents only, all of it still waits — every block retired in the first epoch — when
/// a reader registers and stays, and a write of half the pool fails with no space
/// although nothing but the two files is in use.
#[test]
fn a_reader_in_flight_does_not_hold_back_the_pool() {
    let Some(cpus) = two_cpus() else {
        testkit::skip("this test needs two CPUs to pin its writers to");
        return;
    };
    let pm = fresh(64 * MIB);
    let fs = mount(&pm);
    let reader = Arc::new(SlowReader::default());
    fs.set_external_readers(reader.clone());
    let free = fs.usage().free_blocks;
    let file = vec![0x3Cu8; (free / 50 * 4096) as usize];
    std::thread::scope(|s| {
        for (cpu, path) in cpus.into_iter().zip(["/a", "/b"]) {
            let (fs, file) = (&fs, &file);
            s.spawn(move || overwrite_on(fs, cpu, path, file, 20));
        }
    });
    reader.start();
    let fd = fs.open("/half", rw_create(), 0o644).unwrap();
    let half = vec![0xC3u8; (free / 2 * 4096) as usize];
    let wrote = fs.pwrite(fd, &half, 0);
    reader.stop();
    assert!(
        !matches!(wrote, Err(Error::NoSpace)),
        "with one reader in flight, half the pool could not be allocated although \
         two files of 1/50 of it were all that was in use"
    );
    assert_eq!(wrote.unwrap(), half.len());
    fs.close(fd).unwrap();
    assert_eq!(read_file(&fs, "/a"), file);
    assert_eq!(read_file(&fs, "/half"), half);
    assert_eq!(fs.usage().reclaiming_blocks, 0, "the reader is gone");
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}
