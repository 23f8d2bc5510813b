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

/// Single blocks a shard keeps on a stack beside its extent map: a 4 KiB overwrite
/// frees one block and allocates one, and the stack serves both without reshaping the
/// map. Bounded, so at most this many free blocks per shard sit uncoalesced.
pub const SINGLES_MAX: usize = 64;

/// Free pool blocks, sharded.
pub struct BlockAlloc {
    first: u64,
    end: u64,
    shard_len: u64,
    shards: Vec<Mutex<Shard>>,
    free: AtomicU64,
}

/// One shard's free blocks: coalesced extents (start → length) and a stack of single
/// blocks, disjoint.
#[derive(Default)]
struct Shard {
    extents: BTreeMap<u64, u64>,
    singles: Vec<u64>,
}

impl Shard {
    fn free(&mut self, start: u64, len: u64) {
        if len == 1 && self.singles.len() < SINGLES_MAX {
            let in_map = self
                .extents
                .range(..=start)
                .next_back()
                .is_some_and(|(&s, &l)| s + l > start);
            assert!(
                !in_map && !self.singles.contains(&start),
                "double free of block {start}"
            );
            self.singles.push(start);
        } else {
            assert!(
                !self
                    .singles
                    .iter()
                    .any(|&b| (start..start + len).contains(&b)),
                "double free of blocks {start}..{}",
                start + len
            );
            insert_coalesced(&mut self.extents, start, len);
        }
    }

    /// Moves the single blocks into the extent map, where they coalesce.
    fn spill(&mut self) {
        for b in std::mem::take(&mut self.singles) {
            insert_coalesced(&mut self.extents, b, 1);
        }
    }

    /// One extent of at most `want` blocks: a single for one block, else the first
    /// extent that fits whole, else the largest piece there is.
    fn take(&mut self, want: u64) -> Option<Extent> {
        if want == 1 {
            if let Some(b) = self.singles.pop() {
                return Some(Extent { start: b, len: 1 });
            }
        } else if !self.singles.is_empty() && !self.extents.values().any(|&l| l >= want) {
            self.spill();
        }
        let pick = self
            .extents
            .iter()
            .find(|(_, &len)| len >= want)
            .or_else(|| self.extents.iter().max_by_key(|(_, &len)| len))
            .map(|(&s, &l)| (s, l));
        let (start, len) = match pick {
            Some(p) => p,
            None => return self.singles.pop().map(|b| Extent { start: b, len: 1 }),
        };
        self.extents.remove(&start);
        let got = len.min(want);
        if len > got {
            self.extents.insert(start + got, len - got);
        }
        Some(Extent { start, len: got })
    }
}

impl BlockAlloc {
    /// An allocator over blocks `first..end` with nothing free.
    pub fn empty(first: u64, end: u64) -> BlockAlloc {
        let shard_len = (end - first).div_ceil(SHARDS as u64).max(1);
        BlockAlloc {
            first,
            end,
            shard_len,
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
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
            self.shards[shard].lock().free(start, shard_end - start);
            start = shard_end;
        }
        self.free.fetch_add(ext.len, Ordering::Relaxed);
    }

    /// Takes one extent of at most `want` blocks, preferring the caller's CPU shard.
    fn take(&self, want: u64) -> Option<Extent> {
        let home = cpu_slot();
        for i in 0..SHARDS {
            if let Some(e) = self.shards[(home + i) % SHARDS].lock().take(want) {
                self.free.fetch_sub(e.len, Ordering::Relaxed);
                return Some(e);
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

    /// Every free extent, sorted, adjacent ones merged: for saving at unmount and
    /// for fsck.
    pub fn snapshot(&self) -> Vec<Extent> {
        let mut all: Vec<Extent> = Vec::new();
        for s in &self.shards {
            let s = s.lock();
            all.extend(s.extents.iter().map(|(&start, &len)| Extent { start, len }));
            all.extend(s.singles.iter().map(|&start| Extent { start, len: 1 }));
        }
        all.sort_by_key(|e| e.start);
        let mut merged: Vec<Extent> = Vec::with_capacity(all.len());
        for e in all {
            match merged.last_mut() {
                Some(m) if m.start + m.len == e.start => m.len += e.len,
                _ => merged.push(e),
            }
        }
        merged
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
    #[should_panic(expected = "double free")]
    fn double_free_of_a_single_block_is_caught() {
        let a = BlockAlloc::empty(0, 64);
        a.free(Extent { start: 9, len: 1 });
        a.free(Extent { start: 9, len: 1 });
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn extent_over_a_single_block_is_caught() {
        let a = BlockAlloc::empty(0, 64);
        a.free(Extent { start: 9, len: 1 });
        a.free(Extent { start: 8, len: 3 });
    }

    #[test]
    fn single_blocks_serve_small_requests_and_coalesce_for_large_ones() {
        // One shard's worth of blocks, freed one at a time: they sit on the stack.
        let a = BlockAlloc::empty(0, SHARDS as u64 * 8);
        for b in (0..8).rev() {
            a.free(Extent { start: b, len: 1 });
        }
        assert_eq!(a.free_blocks(), 8);
        assert_eq!(a.snapshot(), vec![Extent { start: 0, len: 8 }]);
        let one = a.alloc(1).unwrap();
        assert_eq!(
            one,
            vec![Extent { start: 0, len: 1 }],
            "last freed goes first"
        );
        a.free(one[0]);
        // A request for all eight spills the stack into the map: one extent.
        assert_eq!(a.alloc(8).unwrap(), vec![Extent { start: 0, len: 8 }]);
        assert_eq!(a.free_blocks(), 0);
        assert!(matches!(a.alloc(1), Err(Error::NoSpace)));
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
