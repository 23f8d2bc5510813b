//! Copy descriptors: one contiguous copy between DRAM and the region.

/// Which way a descriptor moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// DRAM to the region; the bytes are durable once the batch's SN is done.
    ToRegion,
    /// The region to DRAM.
    FromRegion,
}

/// One copy: `len` bytes between a DRAM address and a region offset.
///
/// A descriptor holds a raw DRAM pointer and is only a description; submitting it is
/// `unsafe` (see [`crate::Engine::try_submit`]) because the engine uses the memory
/// after the submit call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    dir: Direction,
    dram: *mut u8,
    off: u64,
    len: usize,
}

// SAFETY: a descriptor is plain data (an address and a length); whoever submits it
// promises, under the submit contract, that the memory stays valid until completion,
// whichever thread performs the copy.
unsafe impl Send for Desc {}
// SAFETY: as above; a shared descriptor is never written through.
unsafe impl Sync for Desc {}

impl Desc {
    /// Copy `len` bytes from `src` in DRAM to region offset `off`, durably.
    pub fn to_region(src: *const u8, off: u64, len: usize) -> Desc {
        Desc {
            dir: Direction::ToRegion,
            dram: src as *mut u8,
            off,
            len,
        }
    }

    /// Copy `len` bytes from region offset `off` to `dst` in DRAM.
    pub fn from_region(off: u64, dst: *mut u8, len: usize) -> Desc {
        Desc {
            dir: Direction::FromRegion,
            dram: dst,
            off,
            len,
        }
    }

    /// [`Desc::to_region`] of a whole slice.
    pub fn write(src: &[u8], off: u64) -> Desc {
        Desc::to_region(src.as_ptr(), off, src.len())
    }

    /// [`Desc::from_region`] into a whole slice.
    pub fn read(off: u64, dst: &mut [u8]) -> Desc {
        Desc::from_region(off, dst.as_mut_ptr(), dst.len())
    }

    /// Which way the bytes go.
    pub fn direction(&self) -> Direction {
        self.dir
    }

    /// The DRAM side: source of a write, destination of a read.
    pub fn dram(&self) -> *mut u8 {
        self.dram
    }

    /// The region offset.
    pub fn region_off(&self) -> u64 {
        self.off
    }

    /// Bytes to copy.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length descriptor (which submission rejects).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Performs `d` on the calling CPU: a non-temporal copy into the region (durable after
/// the caller's next fence) or a plain copy out of it.
///
/// # Safety
/// The descriptor's DRAM range must be valid for the access (readable for a write to
/// the region, writable and not aliased for a read) for the duration of the call; its
/// region range must have been bounds-checked.
pub(crate) unsafe fn perform_on_cpu(pmem: &dyn pmem::Pmem, d: &Desc) {
    match d.dir {
        Direction::ToRegion => {
            // SAFETY: the caller guarantees `dram..dram + len` is readable.
            let src = unsafe { std::slice::from_raw_parts(d.dram as *const u8, d.len) };
            pmem.copy_nt(d.off, src);
        }
        Direction::FromRegion => {
            // SAFETY: the caller guarantees `dram..dram + len` is writable and unaliased.
            let dst = unsafe { std::slice::from_raw_parts_mut(d.dram, d.len) };
            pmem.read(d.off, dst);
        }
    }
}
