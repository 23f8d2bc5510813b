//! Model checks of epoch-based reclamation with shuttle, which runs a test under many
//! thread interleavings and fails on a failed assertion or a deadlock.
//!
//! `src/epoch.rs` is compiled here against shuttle's primitives (the `facade` below), so
//! its code is what is checked. Around it the model plays the file system's use of it:
//! - a reader (`Fs::start_read_inode`) looks the file's block up under the inode's read
//!   lock, pins the epoch before it releases the lock, then copies from the block and
//!   drops its guard when the copy is done;
//! - a writer (`Fs::alloc_blocks`, the commit, `Fs::retire`) takes a free block,
//!   collecting retired ones when there is none, writes the new data there (copy on
//!   write), swaps the file's block under the inode's write lock, then retires the old
//!   one;
//! - a collector plays the other writers whose allocations and retirements collect.
//!
//! The property: a block is never handed out again while a reader that looked it up may
//! still copy from it. A reader checks that the block still holds the data the file
//! mapped when it looked, for as long as it copies; a writer checks that the block it is
//! given is not the one the file maps.

mod facade {
    pub(crate) use shuttle::sync::atomic::{AtomicU64, Ordering};

    /// parking_lot's lock (no poisoning) over shuttle's.
    pub(crate) struct Mutex<T>(shuttle::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(shuttle::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> shuttle::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }
    }

    /// The unit tests of `epoch`, each as one execution.
    pub(crate) fn check(test: impl Fn() + Send + Sync + 'static) {
        shuttle::check_dfs(test, None);
    }
}

/// What `epoch` takes from the block allocator.
#[allow(dead_code)]
mod alloc {
    /// Two shards (the allocator has 16): readers on different shards, and few counters
    /// for a collection to look at.
    pub const SHARDS: usize = 2;

    /// The shard of the calling model thread.
    pub fn cpu_slot() -> usize {
        usize::from(shuttle::current::me()) % SHARDS
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Extent {
        pub start: u64,
        pub len: u64,
    }
}

#[path = "../src/epoch.rs"]
#[allow(dead_code)]
mod epoch;

use std::sync::Arc;

use shuttle::sync::atomic::{AtomicU64, Ordering};
use shuttle::sync::{Mutex, RwLock};
use shuttle::thread;

use alloc::Extent;
use epoch::Epoch;

/// Iterations of the randomised checks of the real protocol.
const RANDOM_ITERATIONS: usize = 2_000;
/// Bound on the interleavings the depth-first check enumerates.
const DFS_ITERATIONS: usize = 20_000;
/// Iterations the checker gets to fail a broken twin: it stops at the first failure, so
/// this bound only keeps a miss out of reach.
const TWIN_ITERATIONS: usize = 20_000;
/// Blocks of the model: one mapped by the file, one free, so that the second write must
/// reuse a retired block.
const BLOCKS: u64 = 2;

/// How the file system uses the epoch: as it does, or a broken twin that differs from it
/// by one step.
#[derive(Clone, Copy, PartialEq)]
enum Use {
    /// Readers pin under the inode lock; writers retire after the swap.
    Real,
    /// A reader that pins after releasing the inode lock.
    PinAfterUnlock,
    /// A writer that retires the old block before the file stops mapping it.
    RetireBeforeSwap,
}

struct Fs {
    epoch: Epoch,
    /// The inode's lock and its one page: (block, version of the data in it).
    inode: RwLock<(u64, u64)>,
    /// What each block holds: the version last written into it.
    data: Vec<AtomicU64>,
    /// The block allocator's free blocks.
    free: Mutex<Vec<u64>>,
}

impl Fs {
    fn new() -> Fs {
        let fs = Fs {
            epoch: Epoch::new(),
            inode: RwLock::new((0, 1)),
            data: (0..BLOCKS).map(|_| AtomicU64::new(0)).collect(),
            free: Mutex::new((1..BLOCKS).collect()),
        };
        fs.data[0].store(1, Ordering::SeqCst);
        fs
    }

    fn free_block(&self, ext: Extent) {
        self.free.lock().unwrap().push(ext.start);
    }

    /// `Fs::alloc_blocks`: a free block, collecting retired ones while there is none (the
    /// file system gives up after three collections; the model waits for its readers).
    fn alloc(&self) -> u64 {
        loop {
            if let Some(b) = self.free.lock().unwrap().pop() {
                return b;
            }
            self.epoch.collect(|e| self.free_block(e));
            thread::yield_now();
        }
    }

    /// A write of the file's page with `version`.
    fn write(&self, version: u64, how: Use) {
        let new = self.alloc();
        let mapped = self.inode.read().unwrap().0;
        assert_ne!(new, mapped, "block {new} handed out while the file maps it");
        // The data copy into the fresh block (copy on write).
        self.data[new as usize].store(version, Ordering::SeqCst);
        if how == Use::RetireBeforeSwap {
            let ext = Extent {
                start: mapped,
                len: 1,
            };
            self.epoch.retire(ext, |e| self.free_block(e));
        }
        // The commit: the log entry applied under the inode's write lock.
        let old = std::mem::replace(&mut *self.inode.write().unwrap(), (new, version)).0;
        // `Fs::retire` after the commit.
        if how != Use::RetireBeforeSwap {
            let ext = Extent { start: old, len: 1 };
            self.epoch.retire(ext, |e| self.free_block(e));
        }
    }

    /// A read of the file's page.
    fn read(&self, how: Use) {
        // `Fs::start_read_inode`: the lookup and the pin under the inode's read lock.
        let (block, version, guard) = {
            let st = self.inode.read().unwrap();
            let (block, version) = *st;
            if how == Use::PinAfterUnlock {
                drop(st);
            }
            (block, version, self.epoch.pin())
        };
        // The copy, by the engine or the CPU, after the lock is released: it reads the
        // block from its start to its end.
        for _ in 0..2 {
            assert_eq!(
                self.data[block as usize].load(Ordering::SeqCst),
                version,
                "block {block} reused while a reader copied from it"
            );
        }
        // The copy is done: the guard goes (`ReadToken`, or the read's end).
        drop(guard);
    }
}

/// `readers` readers, a writer of `writes` versions and a collector, on one file.
fn reclaim(readers: usize, writes: u64, how: Use) {
    let fs = Arc::new(Fs::new());
    let mut threads = Vec::new();
    for _ in 0..readers {
        let fs = fs.clone();
        threads.push(thread::spawn(move || fs.read(how)));
    }
    {
        let fs = fs.clone();
        threads.push(thread::spawn(move || {
            for version in 2..2 + writes {
                fs.write(version, how);
            }
        }));
    }
    {
        let fs = fs.clone();
        threads.push(thread::spawn(move || {
            for _ in 0..2 {
                fs.epoch.collect(|e| fs.free_block(e));
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
}

/// Whether the checker fails `f` under the randomised or the PCT scheduler.
fn caught(f: impl Fn() + Send + Sync + Clone + 'static) -> bool {
    let fails =
        |run: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).is_err();
    fails(&|| shuttle::check_random(f.clone(), TWIN_ITERATIONS))
        || fails(&|| shuttle::check_pct(f.clone(), TWIN_ITERATIONS, 3))
}

#[test]
fn a_block_is_not_reused_while_a_reader_may_copy_from_it() {
    shuttle::check_dfs(|| reclaim(1, 2, Use::Real), Some(DFS_ITERATIONS));
    shuttle::check_random(|| reclaim(2, 3, Use::Real), RANDOM_ITERATIONS);
    shuttle::check_pct(|| reclaim(2, 3, Use::Real), RANDOM_ITERATIONS, 3);
}

#[test]
fn the_checker_finds_a_reader_that_pins_after_the_lookup_lock() {
    assert!(
        caught(|| reclaim(1, 2, Use::PinAfterUnlock)),
        "the broken twin passed the model check"
    );
}

#[test]
fn the_checker_finds_a_writer_that_retires_before_the_swap() {
    assert!(
        caught(|| reclaim(1, 2, Use::RetireBeforeSwap)),
        "the broken twin passed the model check"
    );
}
