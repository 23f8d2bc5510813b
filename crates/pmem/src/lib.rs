//! `pmem`: the slow-memory region easyio lives in, and the only door to its memory.
//!
//! A [`Region`] maps slow memory — a devdax device, a file on a DAX file system, or a
//! plain file such as one in `/dev/shm` — and reports honestly which [`Durability`] it
//! offers. Every mutation of region memory by the layers above (file system, engines)
//! goes through the [`Pmem`] trait: small stores with explicit flush and fence, atomic
//! 8-byte stores, and bulk non-temporal copies. Because callers only ever see the
//! trait, a tracing implementation (the crash harness) can stand in for a real region
//! without any caller changing: `TracePmem` records every store, write-back and
//! fence, `CrashCursor` turns that trace into the images a power loss could leave,
//! and [`MemPmem`] holds such an image for a mount. The tracer and the crash states are
//! crash simulation, compiled only with the `crash-sim` feature (the crash harness and
//! tests turn it on).
//!
//! Offsets passed to [`Pmem`] are byte offsets into the usable part of the region
//! (after the region header), `0..len()`. An offset outside that range is a bug in the
//! caller and panics with a message naming the access; values read from the region
//! must be validated by the caller before being used as offsets.
//!
//! # Place in the layers
//!
//! Layers, bottom up: `threads`; `pmem` and `rt` over it; `engine`; `mover`; `fs`;
//! then the crash harness, the server, the doors, the benchmarks and the binary (the
//! whole graph is in docs/ARCHITECTURE.md). No crate imports one above it.
//! `pmem` is the bottom: it imports no
//! easyio crate but `threads` (for the role of a traced thread). It must not know about
//! files, inodes, logs, engines or modes, must not decide what is durable for its
//! callers (it reports [`Durability`] and offers the primitives), and must not let
//! region memory be written other than through [`Pmem`].

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

#[cfg(feature = "crash-sim")]
pub mod crash;
mod error;
mod flock;
#[cfg(feature = "crash-sim")]
pub mod hold;
pub mod mem;
#[cfg(feature = "peer")]
pub mod peer;
pub mod persist;
pub mod pkey;
mod region;
mod reserve;
pub mod seal;
pub mod slowmem;
#[cfg(feature = "crash-sim")]
pub mod trace;

#[cfg(feature = "crash-sim")]
pub use crash::{CrashChoice, CrashCursor};
pub use error::{Error, Result};
pub use mem::MemPmem;
pub use persist::{CopyKind, CpuFeatures, FlushKind, CACHE_LINE};
pub use region::{
    remove, Durability, Mapping, Region, RegionKind, HEADER_LEN, MIN_REGION, PAGE_SIZE,
};
#[cfg(feature = "crash-sim")]
pub use trace::{Trace, TracePmem};

/// The operations the file system and the engines may perform on region memory.
///
/// Stores are not durable until the lines they touched are flushed ([`Pmem::flush`])
/// and a fence ([`Pmem::fence`]) has followed the flush; non-temporal copies
/// ([`Pmem::copy_nt`]) are durable after the next fence. This is the x86 persistence
/// model, and a crash tracer reproduces exactly these rules.
pub trait Pmem: Send + Sync {
    /// Usable bytes, i.e. valid offsets are `0..len()`.
    fn len(&self) -> u64;

    /// True when the region has no usable bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What survives a power loss or a reboot.
    fn durability(&self) -> Durability;

    /// Copies `src` to `off` with ordinary (cached) stores. Not durable until flushed
    /// and fenced.
    fn write(&self, off: u64, src: &[u8]);

    /// Atomic 8-byte store with release ordering; `off` must be 8-byte aligned. The
    /// hardware makes an aligned 8-byte store failure-atomic, which is what commits
    /// (log tails, completion counters) rely on. Not durable until flushed and fenced.
    fn store_u64(&self, off: u64, val: u64);

    /// Atomic 8-byte load with acquire ordering; `off` must be 8-byte aligned.
    fn load_u64(&self, off: u64) -> u64;

    /// Copies `dst.len()` bytes starting at `off` out of the region.
    fn read(&self, off: u64, dst: &mut [u8]);

    /// Writes back every cache line overlapping `off..off + len` (clwb, clflushopt or
    /// clflush, whichever the CPU has best).
    fn flush(&self, off: u64, len: u64);

    /// Store fence: every flush and non-temporal store issued before it is durable
    /// once it returns.
    fn fence(&self);

    /// Copies `src` to `off` with non-temporal stores, bypassing the cache; the
    /// partial cache lines at either end are written normally and flushed. Durable
    /// after the next [`Pmem::fence`].
    fn copy_nt(&self, off: u64, src: &[u8]);

    /// [`Pmem::copy_nt`] of whole cache lines that also adds them to `seal` (see
    /// [`seal`]), in the order copied. `src.len()` must be a multiple of 64.
    fn copy_nt_sealed(&self, off: u64, src: &[u8], seal: &mut seal::Seal) {
        self.copy_nt(off, src);
        seal.update(src);
    }

    /// The first failure, since the last call, to make a fence durable: on a
    /// page-cache backing ([`Durability::PageCache`]) the write-back to disk a fence
    /// starts can fail (EIO, ENOSPC) after every store succeeded. Always `None` where
    /// a fence cannot fail.
    fn take_sync_error(&self) -> Option<Error> {
        None
    }

    /// Flush then fence.
    fn persist(&self, off: u64, len: u64) {
        self.flush(off, len);
        self.fence();
    }

    /// Ordinary stores, flush, fence: `src` is durable at `off` on return.
    fn write_persist(&self, off: u64, src: &[u8]) {
        self.write(off, src);
        self.persist(off, src.len() as u64);
    }

    /// 8-byte atomic store, flush, fence: the value is durable on return.
    fn store_u64_persist(&self, off: u64, val: u64) {
        self.store_u64(off, val);
        self.persist(off, 8);
    }

    /// The persistent copy: non-temporal copy then fence; durable on return.
    fn copy_persist(&self, off: u64, src: &[u8]) {
        self.copy_nt(off, src);
        self.fence();
    }

    /// The protection key the region's memory is tagged with ([`pkey`]), if it is
    /// protected: only its own operations reach it.
    fn protection_key(&self) -> Option<u32> {
        None
    }

    /// Where usable offset 0 lies in this process's address space, for a copy device
    /// that reads and writes the region by address (DSA): `Some` for a mapped
    /// [`Region`]; `None` (the default) for a region whose every store must pass
    /// through this trait — a tracer, an image in memory, emulated slow memory — which
    /// a device would bypass.
    fn device_base(&self) -> Option<*mut u8> {
        None
    }
}

/// Panics unless `off..off + len` lies inside a region of `region_len` usable bytes.
#[inline]
#[track_caller]
pub fn check_range(off: u64, len: u64, region_len: u64) {
    let end = off.checked_add(len);
    assert!(
        matches!(end, Some(end) if end <= region_len),
        "region access out of bounds: offset {off} + length {len} > region length {region_len}"
    );
}

/// Panics unless `off` names an 8-byte aligned word inside a region of `region_len` bytes.
#[inline]
#[track_caller]
pub fn check_word(off: u64, region_len: u64) {
    assert!(
        off.is_multiple_of(8),
        "region word access at offset {off} is not 8-byte aligned"
    );
    check_range(off, 8, region_len);
}
