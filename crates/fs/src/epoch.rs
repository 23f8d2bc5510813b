//! Epoch-based reclamation of freed data blocks: a block displaced by a copy-on-write
//! is not reused while a reader that looked it up earlier may still be copying from it.
//!
//! Readers register in the current epoch (a counter per parity per shard) for as long
//! as they copy; the epoch advances only when no reader of the epoch before remains.
//! Blocks retired in epoch `e` are handed back once the epoch reaches `e + 2`, and at
//! once when no reader is registered at all (see [`Epoch::retire`]). A guard
//! is a plain value that may move between threads, so a uthread that migrates while its
//! copy is in flight keeps its registration.
//!
//! This file uses only `super::facade` for synchronisation, so a model checker can compile
//! it against its own primitives (`tests/model_check.rs`).

use super::facade::{AtomicU64, Mutex, Ordering};
use crate::alloc::{cpu_slot, Extent, SHARDS};

/// Retired extents a CPU slot keeps before a collection is attempted on its
/// retiring path.
const COLLECT_EVERY: usize = 64;
/// Share of the pool one CPU slot may keep retired before a collection is attempted
/// on its retiring path, whatever the number of extents: `1 / RETIRED_SHARE` of the
/// pool divided among the slots, so that at most that share of the pool waits in
/// every limbo together without a collection having tried to free it (on a pool of
/// at least 8,192 blocks: on a smaller one a slot keeps up to [`COLLECT_EVERY`]
/// blocks).
pub const RETIRED_SHARE: u64 = 8;

#[repr(align(64))]
#[derive(Default)]
struct Counters([AtomicU64; 2]);

/// Extents retired on one CPU slot, with the epoch of their retirement: a line of
/// its own, so writers on different CPUs do not contend on one lock.
#[repr(align(64))]
struct Limbo(Mutex<Retired>);

/// The extents of one limbo and how many blocks they hold.
#[derive(Default)]
struct Retired {
    extents: Vec<(u64, Extent)>,
    blocks: u64,
}

/// Readers outside this process — clients of a server that copy file data straight
/// from a read-only mapping of the region — taking part in reclamation: each
/// registers in the epoch last published, then looks blocks up.
pub trait ExternalReaders: Send + Sync {
    /// Whether one of them registered in an epoch before `e` and still reads.
    fn pinned_before(&self, e: u64) -> bool;
    /// The epoch reached `e`: readers may register in it from now on.
    fn publish(&self, e: u64);
}

/// The reclamation domain of one mounted file system.
pub struct Epoch {
    global: AtomicU64,
    active: Vec<Counters>,
    limbo: Vec<Limbo>,
    /// Blocks a limbo may hold before its retiring path collects (see
    /// [`RETIRED_SHARE`]).
    slot_blocks: u64,
    external: Mutex<Option<std::sync::Arc<dyn ExternalReaders>>>,
    /// 1 once external readers take part: every retirement then waits in a limbo.
    has_external: AtomicU64,
}

/// A reader's registration; the blocks it looked up stay allocated until it drops.
#[must_use]
pub struct ReadGuard<'a> {
    epoch: &'a Epoch,
    shard: usize,
    parity: usize,
}

impl Epoch {
    /// A domain whose limbos are bounded by extents only.
    pub fn new() -> Epoch {
        Epoch::for_pool(u64::MAX)
    }

    /// A domain for a pool of `pool_blocks` blocks: each CPU slot's limbo collects
    /// on its retiring path once it holds [`COLLECT_EVERY`] extents or its share of
    /// `1 / RETIRED_SHARE` of the pool in blocks — but never fewer than
    /// [`COLLECT_EVERY`] blocks, so that single blocks are collected as often as
    /// before on a small pool, and only larger extents are collected sooner.
    pub fn for_pool(pool_blocks: u64) -> Epoch {
        Epoch {
            global: AtomicU64::new(2),
            active: (0..SHARDS).map(|_| Counters::default()).collect(),
            limbo: (0..SHARDS)
                .map(|_| Limbo(Mutex::new(Retired::default())))
                .collect(),
            slot_blocks: (pool_blocks / RETIRED_SHARE / SHARDS as u64).max(COLLECT_EVERY as u64),
            external: Mutex::new(None),
            has_external: AtomicU64::new(0),
        }
    }

    /// Makes `readers` take part: the epoch does not advance past one of them, and
    /// each advance is published to them.
    pub fn set_external(&self, readers: std::sync::Arc<dyn ExternalReaders>) {
        readers.publish(self.global.load(Ordering::SeqCst));
        *self.external.lock() = Some(readers);
        self.has_external.store(1, Ordering::SeqCst);
    }

    /// Registers a reader in the current epoch.
    pub fn pin(&self) -> ReadGuard<'_> {
        let shard = cpu_slot();
        loop {
            let e = self.global.load(Ordering::SeqCst);
            let parity = (e & 1) as usize;
            self.active[shard].0[parity].fetch_add(1, Ordering::SeqCst);
            if self.global.load(Ordering::SeqCst) == e {
                return ReadGuard {
                    epoch: self,
                    shard,
                    parity,
                };
            }
            self.active[shard].0[parity].fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Hands `ext` to `free` once no reader can still be using it. Must be called after
    /// the blocks were removed from every index a reader could look them up in.
    /// The extent waits in the limbo of the caller's CPU slot, whose blocks a
    /// collection there hands back; the slot collects once it holds
    /// [`COLLECT_EVERY`] extents or its share of the pool in blocks (large extents
    /// retired on a few CPUs would otherwise leave most of the pool waiting, all of
    /// it in the newest epochs, where one reader in flight holds it all back).
    ///
    /// With no reader registered anywhere, `ext` goes to `free` at once: a reader
    /// registers before it stops holding what kept the index from changing under its
    /// lookup (the inode's lock), and the caller removed `ext` from the index before,
    /// so a reader that looked `ext` up is still registered, and one that registers
    /// from now on finds it no more. Readers outside the process register otherwise,
    /// so with them every retirement waits.
    pub fn retire(&self, ext: Extent, mut free: impl FnMut(Extent)) {
        if self.unread() {
            free(ext);
            return;
        }
        let e = self.global.load(Ordering::SeqCst);
        let shard = cpu_slot();
        let full = {
            let mut limbo = self.limbo[shard].0.lock();
            limbo.extents.push((e, ext));
            limbo.blocks += ext.len;
            limbo.extents.len() >= COLLECT_EVERY || limbo.blocks >= self.slot_blocks
        };
        if full {
            self.advance();
            self.free_ready(shard, free);
        }
    }

    /// Advances the epoch as far as readers allow and frees what became safe. Returns
    /// the number of extents freed.
    pub fn collect(&self, mut free: impl FnMut(Extent)) -> usize {
        self.advance();
        (0..self.limbo.len())
            .map(|shard| self.free_ready(shard, &mut free))
            .sum()
    }

    /// Whether no reader of this process is registered and none outside it takes part.
    fn unread(&self) -> bool {
        self.has_external.load(Ordering::SeqCst) == 0
            && self
                .active
                .iter()
                .all(|c| c.0[0].load(Ordering::SeqCst) == 0 && c.0[1].load(Ordering::SeqCst) == 0)
    }

    /// Advances the epoch by up to two steps, as far as readers allow.
    fn advance(&self) {
        let external = self.external.lock().clone();
        for _ in 0..2 {
            let e = self.global.load(Ordering::SeqCst);
            let old = ((e + 1) & 1) as usize;
            let busy = self
                .active
                .iter()
                .any(|c| c.0[old].load(Ordering::SeqCst) != 0)
                || external.as_ref().is_some_and(|x| x.pinned_before(e));
            if busy {
                break;
            }
            let advanced =
                self.global
                    .compare_exchange(e, e + 1, Ordering::SeqCst, Ordering::SeqCst);
            if let (Ok(_), Some(x)) = (advanced, &external) {
                x.publish(e + 1);
            }
        }
    }

    /// Hands the extents of limbo `shard` retired two epochs ago or more to `free`
    /// (under the limbo's lock: nothing that frees blocks takes a limbo lock).
    /// Returns how many.
    fn free_ready(&self, shard: usize, mut free: impl FnMut(Extent)) -> usize {
        let now = self.global.load(Ordering::SeqCst);
        let mut limbo = self.limbo[shard].0.lock();
        let Retired { extents, blocks } = &mut *limbo;
        let before = extents.len();
        extents.retain(|&(e, x)| {
            let ready = e + 2 <= now;
            if ready {
                *blocks -= x.len;
                free(x);
            }
            !ready
        });
        before - extents.len()
    }

    /// Blocks retired and not yet handed back.
    pub fn waiting_blocks(&self) -> u64 {
        let limbo = self.limbo.iter();
        limbo.map(|l| l.0.lock().blocks).sum()
    }

    /// Everything still waiting, handed back regardless of readers (unmount).
    pub fn drain(&self) -> Vec<Extent> {
        let limbo = self.limbo.iter();
        limbo
            .flat_map(|l| std::mem::take(&mut *l.0.lock()).extents)
            .map(|(_, x)| x)
            .collect()
    }
}

impl Default for Epoch {
    fn default() -> Self {
        Epoch::new()
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.epoch.active[self.shard].0[self.parity].fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retired_blocks_wait_for_readers() {
        crate::facade::check(|| {
            let ep = Epoch::new();
            let x = Extent { start: 7, len: 1 };
            let reader = ep.pin();
            ep.retire(x, |_| panic!("freed early"));
            let mut freed = Vec::new();
            for _ in 0..4 {
                ep.collect(|e| freed.push(e));
            }
            assert!(freed.is_empty(), "freed while a reader was pinned");
            drop(reader);
            ep.collect(|e| freed.push(e));
            assert_eq!(freed, vec![x]);
        });
    }

    #[test]
    fn with_no_reader_a_retired_block_is_freed_at_once() {
        crate::facade::check(|| {
            let ep = Epoch::new();
            let x = Extent { start: 5, len: 3 };
            let mut freed = Vec::new();
            ep.retire(x, |e| freed.push(e));
            assert_eq!(freed, vec![x]);
            assert_eq!(ep.waiting_blocks(), 0);
            let reader = ep.pin();
            drop(reader);
            ep.retire(x, |e| freed.push(e));
            assert_eq!(freed, vec![x, x], "a reader that went holds nothing back");
        });
    }

    #[test]
    fn readers_after_retire_do_not_hold_it_back() {
        crate::facade::check(|| {
            let ep = Epoch::new();
            let x = Extent { start: 9, len: 2 };
            let early = ep.pin();
            ep.retire(x, |_| panic!("freed while a reader was pinned"));
            drop(early);
            let mut freed = Vec::new();
            ep.collect(|e| freed.push(e));
            assert_eq!(freed, vec![x]);
            let _late = ep.pin();
            ep.retire(Extent { start: 20, len: 1 }, |_| panic!("freed early"));
            // A reader pinned before this retire blocks it, and only it.
            assert_eq!(ep.collect(|_| {}), 0);
        });
    }
}
