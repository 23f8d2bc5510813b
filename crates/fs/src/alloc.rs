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
    shards: Vec<ShardCell>,
    /// Whether anything was allocated or freed since [`BlockAlloc::mark_saved`]
    /// (0: the saved bitmap still describes this allocator). Written only when it
    /// changes, so that writers on different CPUs do not contend on its line.
    changes: AtomicU64,
}

/// A shard and its count of free blocks, on lines of their own: the counts of the
/// pool are per shard, so a thread allocating and freeing in its own shard touches
/// no line another CPU writes.
#[repr(align(64))]
struct ShardCell {
    shard: Mutex<Shard>,
    free: AtomicU64,
}

impl std::ops::Deref for ShardCell {
    type Target = Mutex<Shard>;
    fn deref(&self) -> &Mutex<Shard> {
        &self.shard
    }
}

/// One shard's free blocks: coalesced extents (start → length), a stack of single
/// blocks and a stack of short extents, all disjoint; and a bitmap of which of the
/// shard's blocks are in use, which catches a double free whatever holds the block.
/// (Set bits mark blocks in use, so that a mostly free pool leaves most of the bitmap
/// as untouched zero pages: building it costs what is in use, not the pool size.)
struct Shard {
    /// First block of the shard.
    base: u64,
    used_bits: Vec<u64>,
    extents: BTreeMap<u64, u64>,
    singles: Vec<u64>,
    recent: Vec<Extent>,
}

impl Shard {
    /// Marks `start..end`, free until now in a shard being built, as in use.
    fn mark_used(&mut self, start: u64, end: u64) {
        let (mut i, end) = (start - self.base, end - self.base);
        while i < end {
            let n = (64 - i % 64).min(end - i);
            self.used_bits[(i / 64) as usize] |= (u64::MAX >> (64 - n)) << (i % 64);
            i += n;
        }
    }

    fn new(base: u64, len: u64) -> Shard {
        Shard {
            base,
            used_bits: vec![0; len.div_ceil(64) as usize],
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
            let word = &mut self.used_bits[(i / 64) as usize];
            if free {
                assert!(
                    *word & mask == mask,
                    "double free of block {}",
                    self.base + i / 64 * 64 + (!*word & mask).trailing_zeros() as u64
                );
            } else {
                debug_assert!(*word & mask == 0, "allocating blocks that are not free");
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
    /// An allocator over blocks `first..end` with nothing free, in [`SHARDS`] shards.
    #[cfg(test)]
    pub fn empty(first: u64, end: u64) -> BlockAlloc {
        BlockAlloc::sharded(first, end, [], SHARDS)
    }

    /// Shards of the pool for this machine: one per CPU (rounded up to a power of
    /// two), at most [`SHARDS`]. A shard is the home of the CPUs whose slot maps to
    /// it; with more shards than CPUs, a file larger than its CPU's shard spills into
    /// the home of another CPU, and the writers of two such files then take and
    /// free blocks in each other's shards.
    fn machine_shards() -> usize {
        std::thread::available_parallelism()
            .map_or(SHARDS, |n| n.get().next_power_of_two())
            .min(SHARDS)
    }

    /// An allocator over blocks `first..end` whose free blocks are `free`: disjoint
    /// extents inside the range, sorted by start. Costs the number of extents and of
    /// blocks in use, not the size of the pool.
    pub fn with_free(first: u64, end: u64, free: impl IntoIterator<Item = Extent>) -> BlockAlloc {
        BlockAlloc::sharded(first, end, free, BlockAlloc::machine_shards())
    }

    /// [`BlockAlloc::with_free`] in `shards` shards.
    fn sharded(
        first: u64,
        end: u64,
        free: impl IntoIterator<Item = Extent>,
        shards: usize,
    ) -> BlockAlloc {
        let shard_len = (end - first).div_ceil(shards as u64).max(1);
        let a = BlockAlloc {
            first,
            end,
            shard_len,
            shards: (0..shards as u64)
                .map(|i| ShardCell {
                    shard: Mutex::new(Shard::new(first + i * shard_len, shard_len)),
                    free: AtomicU64::new(0),
                })
                .collect(),
            // No saved bitmap is known to describe it until `mark_saved`.
            changes: AtomicU64::new(1),
        };
        let mut at = first;
        for e in free.into_iter().chain([Extent { start: end, len: 0 }]) {
            assert!(
                e.start >= at && e.start + e.len <= end,
                "free extents {e:?} unsorted or outside {first}..{end}"
            );
            a.for_each_shard_piece(at, e.start, |s, start, end| s.mark_used(start, end));
            a.for_each_shard_piece(e.start, e.start + e.len, |s, start, end| {
                insert_coalesced(&mut s.extents, start, end - start)
            });
            at = e.start + e.len;
        }
        for c in &a.shards {
            let n = c.lock().extents.values().sum();
            c.free.store(n, Ordering::Relaxed);
        }
        a
    }

    /// Calls `f(shard, start, end)` for the part of `start..end` in each shard.
    fn for_each_shard_piece(
        &self,
        mut start: u64,
        end: u64,
        mut f: impl FnMut(&mut Shard, u64, u64),
    ) {
        while start < end {
            let shard = self.shard_of(start);
            let shard_end = (self.first + (shard as u64 + 1) * self.shard_len).min(end);
            f(&mut self.shards[shard].lock(), start, shard_end);
            start = shard_end;
        }
    }

    /// Records that the saved bitmap describes the allocator as it is now.
    pub fn mark_saved(&self) {
        self.changes.store(0, Ordering::Relaxed);
    }

    /// Whether anything was allocated or freed since [`BlockAlloc::mark_saved`].
    pub fn changed_since_saved(&self) -> bool {
        self.changes.load(Ordering::Relaxed) != 0
    }

    /// Whether pool block `block` is free.
    pub fn is_free(&self, block: u64) -> bool {
        let shard = self.shards[self.shard_of(block)].lock();
        let i = block - shard.base;
        shard.used_bits[(i / 64) as usize] & (1 << (i % 64)) == 0
    }

    /// Free blocks now.
    pub fn free_blocks(&self) -> u64 {
        self.shards
            .iter()
            .map(|c| c.free.load(Ordering::Relaxed))
            .sum()
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
            let cell = &self.shards[shard];
            cell.lock().free(start, shard_end - start);
            cell.free.fetch_add(shard_end - start, Ordering::Relaxed);
            start = shard_end;
        }
        self.changed();
    }

    /// Notes an allocation or a free (see `changes`).
    fn changed(&self) {
        if self.changes.load(Ordering::Relaxed) == 0 {
            self.changes.store(1, Ordering::Relaxed);
        }
    }

    /// Takes one extent of at most `want` blocks, preferring the caller's CPU shard.
    fn take(&self, want: u64) -> Option<Extent> {
        let n = self.shards.len();
        let home = cpu_slot() % n;
        for i in 0..n {
            let cell = &self.shards[(home + i) % n];
            if let Some(e) = cell.lock().take(want) {
                cell.free.fetch_sub(e.len, Ordering::Relaxed);
                self.changed();
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

/// Reads the free extents (sorted) a lazily built allocator starts from.
pub type LoadFree = Box<dyn FnOnce() -> Vec<Extent> + Send>;

/// The block allocator of a mount, built when first used: a mount after a clean
/// unmount does not read the saved bitmap (one bit per block of the image) until
/// something allocates, frees or asks for the free count, so opening an image to read
/// it costs the same whatever its size. Dereferences to the [`BlockAlloc`], building it.
pub struct Blocks {
    ready: std::sync::OnceLock<BlockAlloc>,
    pending: Mutex<Pending>,
    first: u64,
    end: u64,
    /// Free blocks as recorded at the last save, reported until the allocator is built.
    saved_free: u64,
}

struct Pending {
    load: Option<LoadFree>,
    /// Blocks that inodes read before the allocator was built reference: never free.
    claims: Vec<Extent>,
}

impl Blocks {
    /// An allocator that is already built.
    pub fn built(a: BlockAlloc) -> Blocks {
        let (first, end, saved_free) = (a.first, a.end, a.free_blocks());
        Blocks {
            ready: std::sync::OnceLock::from(a),
            pending: Mutex::new(Pending {
                load: None,
                claims: Vec::new(),
            }),
            first,
            end,
            saved_free,
        }
    }

    /// An allocator over blocks `first..end` built from `load()` on first use.
    pub fn lazy(first: u64, end: u64, saved_free: u64, load: LoadFree) -> Blocks {
        Blocks {
            ready: std::sync::OnceLock::new(),
            pending: Mutex::new(Pending {
                load: Some(load),
                claims: Vec::new(),
            }),
            first,
            end,
            saved_free,
        }
    }

    /// The allocator, if it has been built.
    pub fn built_alloc(&self) -> Option<&BlockAlloc> {
        self.ready.get()
    }

    /// Free blocks: the allocator's count once built, the saved count before.
    pub fn free_blocks(&self) -> u64 {
        self.ready
            .get()
            .map_or(self.saved_free, BlockAlloc::free_blocks)
    }

    /// Records that an inode just read references `blocks`. Before the allocator is
    /// built they are kept out of its free space; after, every one must be in use:
    /// returns the first that is free (a damaged log pointing into free space).
    pub fn claim(&self, blocks: &[Extent]) -> std::result::Result<(), u64> {
        {
            let mut p = self.pending.lock();
            if self.ready.get().is_none() {
                p.claims.extend_from_slice(blocks);
                return Ok(());
            }
        }
        let a = self.ready.get().expect("built");
        for e in blocks {
            if let Some(b) = (e.start..e.start + e.len).find(|&b| a.is_free(b)) {
                return Err(b);
            }
        }
        Ok(())
    }

    #[cold]
    fn build(&self) -> &BlockAlloc {
        let mut p = self.pending.lock();
        if let Some(a) = self.ready.get() {
            return a;
        }
        let load = p.load.take().expect("an unbuilt allocator has its loader");
        let free = load();
        let mut claims = std::mem::take(&mut p.claims);
        claims.sort_by_key(|e| e.start);
        let kept = subtract(&free, &claims);
        let a = BlockAlloc::with_free(self.first, self.end, kept.iter().copied());
        if kept == free {
            a.mark_saved();
        }
        let _ = self.ready.set(a);
        self.ready.get().expect("just set")
    }
}

impl std::ops::Deref for Blocks {
    type Target = BlockAlloc;

    fn deref(&self) -> &BlockAlloc {
        match self.ready.get() {
            Some(a) => a,
            None => self.build(),
        }
    }
}

/// `free` (sorted, disjoint) without the blocks of `taken` (sorted by start).
fn subtract(free: &[Extent], taken: &[Extent]) -> Vec<Extent> {
    let mut out = Vec::with_capacity(free.len());
    let mut t = 0;
    for e in free {
        let (mut start, end) = (e.start, e.start + e.len);
        while t < taken.len() && taken[t].start + taken[t].len <= start {
            t += 1;
        }
        let mut k = t;
        while start < end && k < taken.len() && taken[k].start < end {
            let (ts, te) = (taken[k].start, taken[k].start + taken[k].len);
            if ts > start {
                out.push(Extent {
                    start,
                    len: ts - start,
                });
            }
            start = start.max(te);
            k += 1;
        }
        if start < end {
            out.push(Extent {
                start,
                len: end - start,
            });
        }
    }
    out
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

/// Inode numbers examined at a time when the free lists run dry.
pub const INO_CHUNK: u64 = 1024;

/// Free inode numbers, sharded, found a chunk of the inode table at a time: mount reads
/// none of the table for this, so its cost does not grow with the number of inodes.
pub struct InoAlloc {
    shards: Vec<Mutex<Vec<u64>>>,
    /// Numbers not examined yet. A number below `start` is free exactly when it is on a
    /// shard's list; one at or above it is free when its valid word says so.
    unscanned: Mutex<std::ops::Range<u64>>,
}

impl InoAlloc {
    /// An allocator over the numbers in `range`, none examined yet.
    pub fn new(range: std::ops::Range<u64>) -> InoAlloc {
        InoAlloc {
            shards: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
            unscanned: Mutex::new(range),
        }
    }

    /// Takes a free inode number; `is_free(ino)` reads whether an inode not examined
    /// yet is free (its valid word).
    pub fn alloc(&self, is_free: impl Fn(u64) -> bool) -> Result<u64> {
        if let Some(ino) = self.pop() {
            return Ok(ino);
        }
        let mut range = self.unscanned.lock();
        while !range.is_empty() {
            let end = range.end.min(range.start + INO_CHUNK);
            // Highest first on the list, so that the lowest number is handed out
            // first: listings stay readable.
            let mut found: Vec<u64> = (range.start..end).rev().filter(|&i| is_free(i)).collect();
            range.start = end;
            if let Some(ino) = found.pop() {
                self.shards[cpu_slot()].lock().append(&mut found);
                return Ok(ino);
            }
        }
        drop(range);
        self.pop().ok_or(Error::NoInodes)
    }

    fn pop(&self) -> Option<u64> {
        let home = cpu_slot();
        (0..SHARDS).find_map(|i| self.shards[(home + i) % SHARDS].lock().pop())
    }

    /// Returns an inode number, whose valid word is already 0.
    pub fn free(&self, ino: u64) {
        let range = self.unscanned.lock();
        // Not examined yet: the scan will find it free.
        if ino < range.start {
            self.shards[cpu_slot()].lock().push(ino);
        }
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
        assert_eq!(
            a.alloc(8).unwrap().to_vec(),
            vec![Extent { start: 0, len: 8 }]
        );
        assert_eq!(a.free_blocks(), 0);
        assert!(matches!(a.alloc(1), Err(Error::NoSpace)));
        // Short extents come back whole, newest first.
        a.free(Extent { start: 0, len: 4 });
        a.free(Extent { start: 4, len: 4 });
        assert_eq!(
            a.alloc(4).unwrap().to_vec(),
            vec![Extent { start: 4, len: 4 }]
        );
        assert_eq!(
            a.alloc(4).unwrap().to_vec(),
            vec![Extent { start: 0, len: 4 }]
        );
        // A request no stacked extent matches spills the stacks and coalesces.
        a.free(Extent { start: 0, len: 2 });
        a.free(Extent { start: 2, len: 2 });
        a.free(Extent { start: 4, len: 1 });
        assert_eq!(
            a.alloc(5).unwrap().to_vec(),
            vec![Extent { start: 0, len: 5 }]
        );
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
    fn built_from_free_extents_across_shards() {
        let free = [
            Extent { start: 10, len: 5 },
            Extent {
                start: 60,
                len: 200,
            },
            Extent {
                start: 900,
                len: 124,
            },
        ];
        let a = BlockAlloc::with_free(10, 1024, free);
        assert_eq!(a.free_blocks(), 329);
        assert_eq!(a.snapshot(), free.to_vec());
        assert!(a.is_free(14) && !a.is_free(15) && a.is_free(259) && !a.is_free(260));
        assert!(a.changed_since_saved());
        a.mark_saved();
        assert!(!a.changed_since_saved());
        // Blocks in use can be freed once; free ones cannot.
        a.free(Extent { start: 15, len: 45 });
        assert_eq!(
            a.snapshot()[0],
            Extent {
                start: 10,
                len: 250
            }
        );
        assert!(a.changed_since_saved());
        assert!(matches!(a.alloc(375), Err(Error::NoSpace)));
        let got = a.alloc(374).unwrap();
        assert_eq!(got.iter().map(|e| e.len).sum::<u64>(), 374);
        assert_eq!(a.free_blocks(), 0);
    }

    #[test]
    #[should_panic(expected = "double free of block 62")]
    fn double_free_of_a_block_free_from_the_start_is_caught() {
        let a = BlockAlloc::with_free(0, 1024, [Extent { start: 62, len: 4 }]);
        a.free(Extent { start: 60, len: 4 });
    }

    #[test]
    fn lazy_allocator_is_built_on_first_use_without_claimed_blocks() {
        let loads = std::sync::Arc::new(AtomicU64::new(0));
        let l = loads.clone();
        let b = Blocks::lazy(
            0,
            1024,
            1000,
            Box::new(move || {
                l.fetch_add(1, Ordering::Relaxed);
                vec![Extent {
                    start: 24,
                    len: 1000,
                }]
            }),
        );
        assert_eq!(b.free_blocks(), 1000, "the saved count, nothing read");
        assert!(b.claim(&[Extent { start: 0, len: 4 }]).is_ok());
        // A damaged inode claims blocks the saved bitmap has free: kept out.
        assert!(b
            .claim(&[Extent { start: 30, len: 2 }, Extent { start: 100, len: 1 }])
            .is_ok());
        assert!(b.built_alloc().is_none());
        assert_eq!(loads.load(Ordering::Relaxed), 0);
        let got = b.alloc(997).unwrap();
        assert_eq!(loads.load(Ordering::Relaxed), 1);
        assert_eq!(b.free_blocks(), 0);
        assert!(
            b.changed_since_saved(),
            "claims changed what the bitmap says"
        );
        let mut blocks: Vec<u64> = got.iter().flat_map(|e| e.start..e.start + e.len).collect();
        blocks.sort();
        assert!(!blocks.contains(&30) && !blocks.contains(&31) && !blocks.contains(&100));
        // Once built, a claim of a free block is refused.
        b.free(Extent { start: 40, len: 1 });
        assert_eq!(b.claim(&[Extent { start: 39, len: 3 }]), Err(40));
        assert_eq!(b.claim(&[Extent { start: 30, len: 2 }]), Ok(()));
    }

    #[test]
    fn subtract_removes_exactly_the_taken_blocks() {
        let e = |start, len| Extent { start, len };
        let free = [e(0, 10), e(20, 10), e(40, 5)];
        let taken = [e(5, 2), e(9, 13), e(28, 20)];
        assert_eq!(subtract(&free, &taken), vec![e(0, 5), e(7, 2), e(22, 6)]);
        assert_eq!(subtract(&free, &[]), free.to_vec());
    }

    #[test]
    fn inode_numbers_are_unique() {
        let a = InoAlloc::new(2..50);
        let mut got: Vec<u64> = (0..48).map(|_| a.alloc(|_| true).unwrap()).collect();
        assert!(matches!(a.alloc(|_| true), Err(Error::NoInodes)));
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 48);
    }

    #[test]
    fn inode_table_is_read_a_chunk_at_a_time_and_only_free_numbers_come_out() {
        use std::sync::atomic::AtomicBool;
        // Numbers 2..3000; the multiples of 3 are in use.
        let valid: Vec<AtomicBool> = (0..3000).map(|i| AtomicBool::new(i % 3 == 0)).collect();
        let probes = AtomicU64::new(0);
        let is_free = |i: u64| {
            probes.fetch_add(1, Ordering::Relaxed);
            !valid[i as usize].load(Ordering::Relaxed)
        };
        let a = InoAlloc::new(2..3000);
        let first = a.alloc(is_free).unwrap();
        assert_eq!(first, 2, "lowest free number first");
        assert_eq!(
            probes.load(Ordering::Relaxed),
            INO_CHUNK,
            "one chunk examined"
        );
        // A number freed beyond the examined part is found by the scan, once.
        valid[2500].store(true, Ordering::Relaxed);
        valid[2500].store(false, Ordering::Relaxed);
        a.free(2500);
        let mut got = vec![first];
        while let Ok(i) = a.alloc(is_free) {
            valid[i as usize].store(true, Ordering::Relaxed);
            got.push(i);
        }
        let mut want: Vec<u64> = (2..3000).filter(|i| i % 3 != 0).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "every free number exactly once");
        // Freed below the examined part: back on the list.
        a.free(4);
        assert_eq!(a.alloc(|_| panic!("nothing left to examine")).unwrap(), 4);
    }
}
