//! The image as a client sees it: mapped read-only, so that any store into it
//! faults; the server changes it at any time, so it is read only by volatile loads
//! and byte copies, never through a reference.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use rustix::mm::{MapFlags, ProtFlags};

use crate::error::{Error, Result};

/// The image as this client sees it: mapped `PROT_READ`, so any store into it faults.
pub struct RegionView {
    map: *mut u8,
    map_len: usize,
    region_offset: usize,
}

// SAFETY: the mapping is read-only shared memory; reads go through volatile loads of
// bytes, which may run from any thread.
unsafe impl Send for RegionView {}
// SAFETY: as above: nothing is written through the view.
unsafe impl Sync for RegionView {}

impl RegionView {
    /// Maps `len` bytes of the region at `offset` in the image `fd`, read-only.
    pub(super) fn map(fd: &OwnedFd, offset: u64, len: u64) -> Result<RegionView> {
        let map_len = usize::try_from(offset + len)
            .map_err(|_| Error::Protocol("a region larger than memory".into()))?;
        // SAFETY: a fresh shared read-only mapping of a file; no Rust object aliases
        // it, and it is unmapped only by Drop.
        let map = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                map_len,
                ProtFlags::READ,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| Error::os("mapping the image read-only", e.into()))?;
        Ok(RegionView {
            map: map.cast(),
            map_len,
            region_offset: offset as usize,
        })
    }

    /// Bytes of the region.
    pub fn len(&self) -> usize {
        self.map_len - self.region_offset
    }

    /// Whether the region is empty (never, for a mounted image).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the mapping of the whole image starts (the region starts at
    /// [`RegionView::region_offset`] in it). Read-only: a store through it faults.
    pub fn as_ptr(&self) -> *const u8 {
        self.map
    }

    /// Where the region starts in the mapping, bytes.
    pub fn region_offset(&self) -> usize {
        self.region_offset
    }

    /// The 8-byte word at region offset `off`, read with one load (`None` if it is
    /// past the end or not aligned).
    pub fn load_u64(&self, off: u64) -> Option<u64> {
        let at = usize::try_from(off)
            .ok()?
            .checked_add(self.region_offset)
            .filter(|&a| {
                a.is_multiple_of(8) && a.checked_add(8).is_some_and(|e| e <= self.map_len)
            })?;
        // SAFETY: `at` is 8-byte aligned and its 8 bytes lie inside the live mapping
        // (checked above). A volatile aligned 8-byte load is one instruction on
        // x86-64, so it sees the server's 8-byte store whole.
        let v = unsafe { self.map.add(at).cast::<u64>().read_volatile() };
        std::sync::atomic::fence(Ordering::Acquire);
        Some(v)
    }

    /// Copies image bytes `[off, off + buf.len())` (image offsets, header included)
    /// into `buf`; false, and nothing copied, if that is past the end.
    pub fn read_image(&self, off: usize, buf: &mut [u8]) -> bool {
        if off
            .checked_add(buf.len())
            .is_none_or(|end| end > self.map_len)
        {
            return false;
        }
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: off + i < map_len, inside the live read-only mapping; a volatile
            // load because the server may store there at any time.
            *b = unsafe { self.map.add(off + i).read_volatile() };
        }
        true
    }
}

impl RegionView {
    /// Hints that region byte `off` is about to be read (nothing if it is past the
    /// end).
    pub fn prefetch(&self, off: u64) {
        let Some(at) = usize::try_from(off)
            .ok()
            .and_then(|o| o.checked_add(self.region_offset))
            .filter(|&a| a < self.map_len)
        else {
            return;
        };
        // SAFETY: `at` lies inside the live mapping (checked above); a prefetch reads
        // nothing into the program and cannot fault.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                self.map.add(at).cast::<i8>(),
            )
        };
    }

    /// Copies region bytes `[off, off + buf.len())` (offsets in the file system's
    /// region) into `buf`; false, and nothing copied, if that is past the end.
    pub fn read_region(&self, off: u64, buf: &mut [u8]) -> bool {
        let Some(start) = usize::try_from(off)
            .ok()
            .and_then(|o| o.checked_add(self.region_offset))
        else {
            return false;
        };
        if start
            .checked_add(buf.len())
            .is_none_or(|end| end > self.map_len)
        {
            return false;
        }
        // SAFETY: [start, start + len) lies inside the live read-only mapping (checked
        // above) and `buf` is a distinct, writable buffer. The server never stores into
        // a block a registered direct read copies from (writes go to new blocks, and
        // freed blocks wait for the epoch); elsewhere it may, and a byte copy of
        // memory another process changes is still just bytes, possibly stale.
        unsafe { std::ptr::copy_nonoverlapping(self.map.add(start), buf.as_mut_ptr(), buf.len()) };
        true
    }
}

impl Drop for RegionView {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; nothing borrows it past
        // `self`.
        let _ = unsafe { rustix::mm::munmap(self.map.cast(), self.map_len) };
    }
}
