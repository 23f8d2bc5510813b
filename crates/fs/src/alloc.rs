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
/// Likewise for extents of 2 to [`RECENT_MAX_LEN`] blocks (writes of up to 256 KiB): a
/// recently freed one serves the next request of exactly its size.
pub const RECENT_MAX: usize = 64;
/// Longest extent kept on the recent stack.
pub const RECENT_MAX_LEN: u64 = 64;

/// Free pool blocks, sharded.
pub struct BlockAlloc {
    first: u64,
    end: u64,
    shard_len: u64,
    shards: Vec<Mutex<Shard>>,
    free: AtomicU64,
}

/// One shard's free blocks: coalesced extents (start → length), a stack of single
/// blocks and a stack of short extents, all disjoint; and a bitmap of which of the
/// shard's blocks are free, which catches a double free whatever holds the block.
struct Shard {
    /// First block of the shard.
    base: u64,
    free_bits: Vec<u64>,
    extents: BTreeMap<u64, u64>,
    singles: Vec<u64>,
    recent: Vec<Extent>,
}

impl Shard {
    fn new(base: u64, len: u64) -> Shard {
        Shard {
            base,
            free_bits: vec![0; len.div_ceil(64) as usize],
            extents: BTreeMap::new(),
            singles: Vec::new(),
            recent: Vec::new(),
        }
    }

    /// Flips the free bits of `start..start + len` to `free`, asserting they were not
    /// already (a double free panics; allocating a block not free is a bug checked in
    /// debug builds). Works a word at a time.
    fn mark(&mut self, start: u64, len: u64, free: bool) {
        let (mut i, end) = (start - self.base, start - self.base + len);
        while i < end {
            let n = (64 - i % 64).min(end - i);
            let mask = (u64::MAX >> (64 - n)) << (i % 64);
            let word = &mut self.free_bits[(i / 64) as usize];
            if free {
                assert!(
                    *word & mask == 0,
                    "double free of block {}",
                    self.base + i / 64 * 64 + (*word & mask).trailing_zeros() as u64
                );
            } else {
                debug_assert!(*word & mask == mask, "allocating blocks that are not free");
            }
            *word ^= mask;
            i += n;
        }
    }

    fn free(&mut self, start: u64, len: u64) {
        self.mark(start, len, true);
        if len == 1 && self.singles.len() < SINGLES_MAX {
            self.singles.push(start);
        } else if len <= RECENT_MAX_LEN && self.recent.len() < RECENT_MAX {
            self.recent.push(Extent { start, len });
        } else {
            insert_coalesced(&mut self.extents, start, len);
        }
    }

    /// Moves the stacked blocks into the extent map, where they coalesce.
    fn spill(&mut self) {
        for b in std::mem::take(&mut self.singles) {
            insert_coalesced(&mut self.extents, b, 1);
        }
        for e in std::mem::take(&mut self.recent) {
            insert_coalesced(&mut self.extents, e.start, e.len);
        }
    }

    /// One extent of at most `want` blocks: a stacked one of exactly that size, else
    /// the first extent of the map that fits whole, else the largest piece there is.
    fn take(&mut self, want: u64) -> Option<Extent> {
        let stacked = if want == 1 {
            self.singles.pop().map(|b| Extent { start: b, len: 1 })
        } else {
            let i = self.recent.iter().rposition(|e| e.len == want);
            i.map(|i| self.recent.swap_remove(i))
        };
        let got = stacked.or_else(|| {
            let stacks_empty = self.singles.is_empty() && self.recent.is_empty();
            if !stacks_empty && !self.extents.values().any(|&l| l >= want) {
                self.spill();
            }
            let pick = self
                .extents
                .iter()
                .find(|(_, &len)| len >= want)
                .or_else(|| self.extents.iter().max_by_key(|(_, &len)| len))
                .map(|(&s, &l)| (s, l));
            let (start, len) = pick?;
            self.extents.remove(&start);
            let got = len.min(want);
            if len > got {
                self.extents.insert(start + got, len - got);
            }
            Some(Extent { start, len: got })
        })?;
        self.mark(got.start, got.len, false);
        Some(got)
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
            shards: (0..SHARDS as u64)
                .map(|i| Mutex::new(Shard::new(first + i * shard_len, shard_len)))
                .collect(),
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
            all.extend(s.recent.iter().copied());
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
        // Short extents come back whole, newest first.
        a.free(Extent { start: 0, len: 4 });
        a.free(Extent { start: 4, len: 4 });
        assert_eq!(a.alloc(4).unwrap(), vec![Extent { start: 4, len: 4 }]);
        assert_eq!(a.alloc(4).unwrap(), vec![Extent { start: 0, len: 4 }]);
        // A request no stacked extent matches spills the stacks and coalesces.
        a.free(Extent { start: 0, len: 2 });
        a.free(Extent { start: 2, len: 2 });
        a.free(Extent { start: 4, len: 1 });
        assert_eq!(a.alloc(5).unwrap(), vec![Extent { start: 0, len: 5 }]);
    }

    #[test]
    #[should_panic(expected = "double free of block 40")]
    fn double_free_inside_a_coalesced_extent_is_caught() {
        let a = BlockAlloc::empty(0, 1024);
        a.free(Extent {
            start: 0,
            len: 1024,
        });
        a.free(Extent { start: 40, len: 1 });
    }

    proptest::proptest! {
        /// Whatever the order of allocations and frees, what is handed out is disjoint,
        /// never free at the same time, and everything is accounted for.
        #[test]
        fn allocations_are_disjoint_and_accounted(
            ops in proptest::collection::vec((1u64..80, proptest::bool::ANY), 1..300)
        ) {
            const TOTAL: u64 = 2048;
            let a = BlockAlloc::empty(16, 16 + TOTAL);
            a.free(Extent { start: 16, len: TOTAL });
            let mut held: Vec<Extent> = Vec::new();
            for (n, free_one) in ops {
                if free_one && !held.is_empty() {
                    a.free(held.swap_remove(n as usize % held.len()));
                } else if let Ok(got) = a.alloc(n) {
                    proptest::prop_assert_eq!(got.iter().map(|e| e.len).sum::<u64>(), n);
                    held.extend(got);
                }
                let mut used = vec![false; TOTAL as usize];
                for e in held.iter().chain(a.snapshot().iter()) {
                    for b in e.start..e.start + e.len {
                        let i = (b - 16) as usize;
                        proptest::prop_assert!(!used[i], "block {} handed out twice", b);
                        used[i] = true;
                    }
                }
                proptest::prop_assert!(used.iter().all(|&u| u), "a block went missing");
                let held_n: u64 = held.iter().map(|e| e.len).sum();
                proptest::prop_assert_eq!(a.free_blocks() + held_n, TOTAL);
            }
        }
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
