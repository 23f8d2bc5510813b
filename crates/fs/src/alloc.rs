//! Per-CPU allocators of pool blocks and inode numbers, rebuilt at mount.
//!
//! The pool is split into one shard per CPU slot; a thread allocates from the shard of
//! the CPU it runs on and falls back to the others when that shard runs dry. Freed
//! blocks go back to the shard that owns their range, so extents coalesce.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Allocator shards (CPU slots).
pub const SHARDS: usize = 16;

/// Index of the shard for the CPU this thread is running on.
pub fn cpu_slot() -> usize {
    // SAFETY: sched_getcpu has no preconditions; it reads the vDSO.
    let cpu = unsafe { libc::sched_getcpu() };
    cpu.max(0) as usize % SHARDS
}

/// A run of `len` blocks starting at block `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub start: u64,
    pub len: u64,
}

/// Free pool blocks, sharded.
pub struct BlockAlloc {
    first: u64,
    end: u64,
    shard_len: u64,
    shards: Vec<Mutex<BTreeMap<u64, u64>>>,
    free: AtomicU64,
}

impl BlockAlloc {
    /// An allocator over blocks `first..end` with nothing free.
    pub fn empty(first: u64, end: u64) -> BlockAlloc {
        let shard_len = (end - first).div_ceil(SHARDS as u64).max(1);
        BlockAlloc {
            first,
            end,
            shard_len,
            shards: (0..SHARDS).map(|_| Mutex::new(BTreeMap::new())).collect(),
            free: AtomicU64::new(0),
        }
    }

    /// Free blocks now.
    pub fn free_blocks(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    fn shard_of(&self, block: u64) -> usize {
        ((block - self.first) / self.shard_len) as usize
    }

    /// Returns blocks to the allocator (splitting across shard boundaries).
    pub fn free(&self, ext: Extent) {
        assert!(
            ext.start >= self.first && ext.start + ext.len <= self.end,
            "freeing blocks {ext:?} outside the pool"
        );
        let (mut start, end) = (ext.start, ext.start + ext.len);
        while start < end {
            let shard = self.shard_of(start);
            let shard_end = (self.first + (shard as u64 + 1) * self.shard_len).min(end);
            insert_coalesced(&mut self.shards[shard].lock(), start, shard_end - start);
            start = shard_end;
        }
        self.free.fetch_add(ext.len, Ordering::Relaxed);
    }

    /// Takes one extent of at most `want` blocks, preferring the caller's CPU shard.
    fn take(&self, want: u64) -> Option<Extent> {
        let home = cpu_slot();
        for i in 0..SHARDS {
            let mut shard = self.shards[(home + i) % SHARDS].lock();
            // First fit for the whole request, else the first extent there is.
            let pick = shard
                .iter()
                .find(|(_, &len)| len >= want)
                .or_else(|| shard.iter().next())
                .map(|(&s, &l)| (s, l));
            if let Some((start, len)) = pick {
                shard.remove(&start);
                let got = len.min(want);
                if len > got {
                    shard.insert(start + got, len - got);
                }
                self.free.fetch_sub(got, Ordering::Relaxed);
                return Some(Extent { start, len: got });
            }
        }
        None
    }

    /// Allocates `n` blocks as few extents as the free space allows; all or nothing.
    pub fn alloc(&self, n: u64) -> Result<Vec<Extent>> {
        let mut got = Vec::new();
        let mut have = 0;
        while have < n {
            match self.take(n - have) {
                Some(e) => {
                    have += e.len;
                    got.push(e);
                }
                None => {
                    for e in got {
                        self.free(e);
                    }
                    return Err(Error::NoSpace);
                }
            }
        }
        Ok(got)
    }

    /// Every free extent, for saving at unmount and for fsck.
    pub fn snapshot(&self) -> Vec<Extent> {
        let mut all: Vec<Extent> = self
            .shards
            .iter()
            .flat_map(|s| {
                s.lock()
                    .iter()
                    .map(|(&start, &len)| Extent { start, len })
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by_key(|e| e.start);
        all
    }
}

fn insert_coalesced(map: &mut BTreeMap<u64, u64>, mut start: u64, mut len: u64) {
    if let Some((&ps, &pl)) = map.range(..start).next_back() {
        assert!(ps + pl <= start, "double free of block {start}");
        if ps + pl == start {
            map.remove(&ps);
            start = ps;
            len += pl;
        }
    }
    if let Some((&ns, &nl)) = map.range(start..).next() {
        assert!(start + len <= ns, "double free of block {ns}");
        if start + len == ns {
            map.remove(&ns);
            len += nl;
        }
    }
    map.insert(start, len);
}

/// Free inode numbers, sharded.
pub struct InoAlloc {
    shards: Vec<Mutex<Vec<u64>>>,
}

impl InoAlloc {
    /// An allocator holding the given free numbers.
    pub fn new(free: impl IntoIterator<Item = u64>) -> InoAlloc {
        let shards: Vec<Mutex<Vec<u64>>> = (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect();
        for (i, ino) in free.into_iter().enumerate() {
            shards[i % SHARDS].lock().push(ino);
        }
        // Pop from the end: keep low numbers first for readable listings.
        for s in &shards {
            s.lock().reverse();
        }
        InoAlloc { shards }
    }

    /// Takes a free inode number.
    pub fn alloc(&self) -> Result<u64> {
        let home = cpu_slot();
        for i in 0..SHARDS {
            if let Some(ino) = self.shards[(home + i) % SHARDS].lock().pop() {
                return Ok(ino);
            }
        }
        Err(Error::NoInodes)
    }

    /// Returns an inode number.
    pub fn free(&self, ino: u64) {
        self.shards[cpu_slot()].lock().push(ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_coalesces_and_runs_out_cleanly() {
        let a = BlockAlloc::empty(100, 1100);
        a.free(Extent {
            start: 100,
            len: 1000,
        });
        assert_eq!(a.free_blocks(), 1000);
        let x = a.alloc(700).unwrap();
        assert_eq!(x.iter().map(|e| e.len).sum::<u64>(), 700);
        assert!(matches!(a.alloc(301), Err(Error::NoSpace)));
        assert_eq!(
            a.free_blocks(),
            300,
            "failed alloc must give back what it took"
        );
        for e in x {
            a.free(e);
        }
        assert_eq!(a.free_blocks(), 1000);
        let total: u64 = a.snapshot().iter().map(|e| e.len).sum();
        assert_eq!(total, 1000);
        // Coalesced back to one extent per shard at most.
        assert!(a.snapshot().len() <= SHARDS);
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_caught() {
        let a = BlockAlloc::empty(0, 64);
        a.free(Extent { start: 0, len: 4 });
        a.free(Extent { start: 2, len: 1 });
    }

    #[test]
    fn inode_numbers_are_unique() {
        let a = InoAlloc::new(2..50);
        let mut got: Vec<u64> = (0..48).map(|_| a.alloc().unwrap()).collect();
        assert!(matches!(a.alloc(), Err(Error::NoInodes)));
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 48);
    }
}
