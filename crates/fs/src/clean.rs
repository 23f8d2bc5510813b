//! The clean-unmount format: the mount state block ([`MOUNT_BLOCK`]) that says whether
//! the last unmount was clean, and the free-block bitmap that unmount saves so that the
//! next mount need not scan every log.
//!
//! Mount state block:
//!
//! | offset | size | field                                                   |
//! |--------|------|---------------------------------------------------------|
//! | 0      | 8    | clean word: [`CLEAN`] after a clean unmount, else 0     |
//! | 8      | 4    | CRC-32C of the saved bitmap                             |
//! | 16     | 8    | free blocks recorded in the bitmap                      |
//!
//! The saved bitmap has one bit per block of the region (1 = free), from block 0.

use pmem::Pmem;

use crate::alloc::{BlockAlloc, Extent};
use crate::layout::{Geometry, BLOCK_SIZE, MOUNT_BLOCK};

/// Clean word of a cleanly unmounted file system.
pub const CLEAN: u64 = 0x4E41_454C_434F_4945; // "EIOCLEAN"
pub(crate) const CLEAN_OFF: u64 = MOUNT_BLOCK * BLOCK_SIZE;
const BITMAP_CSUM_OFF: u64 = CLEAN_OFF + 8;
pub(crate) const BITMAP_FREE_OFF: u64 = CLEAN_OFF + 16;

/// Saves the free-block bitmap and marks the file system clean. The bitmap is
/// rewritten only if the allocator changed since it was loaded from it (or was never
/// built, `None`): an unmount after reading alone writes one word.
pub(crate) fn save_clean(pm: &dyn Pmem, geo: &Geometry, blocks: Option<&BlockAlloc>) {
    if let Some(blocks) = blocks.filter(|b| b.changed_since_saved()) {
        let mut bitmap = vec![0u64; geo.total_blocks.div_ceil(64) as usize];
        let mut free = 0;
        for e in blocks.snapshot() {
            set_bits(&mut bitmap, e.start, e.start + e.len);
            free += e.len;
        }
        let bytes: Vec<u8> = bitmap.iter().flat_map(|w| w.to_le_bytes()).collect();
        let bytes = &bytes[..geo.total_blocks.div_ceil(8) as usize];
        pm.write(geo.bitmap_off(), bytes);
        pm.flush(geo.bitmap_off(), bytes.len() as u64);
        pm.store_u64(BITMAP_CSUM_OFF, crc32c::crc32c(bytes) as u64);
        pm.store_u64(BITMAP_FREE_OFF, free);
        pm.persist(BITMAP_CSUM_OFF, 16);
        blocks.mark_saved();
    }
    pm.store_u64_persist(CLEAN_OFF, CLEAN);
}

/// Sets bits `start..end` of a bitmap of little-endian words, a word at a time.
fn set_bits(bitmap: &mut [u64], start: u64, end: u64) {
    let mut i = start;
    while i < end {
        let n = (64 - i % 64).min(end - i);
        bitmap[(i / 64) as usize] |= (u64::MAX >> (64 - n)) << (i % 64);
        i += n;
    }
}

/// Bytes of the saved bitmap read at a time.
const BITMAP_CHUNK: usize = 64 * 1024;

/// The free extents of a saved bitmap, sorted, if its checksum holds and it frees only
/// pool blocks. Read a chunk at a time: no copy of the whole bitmap is made.
pub(crate) fn load_bitmap(pm: &dyn Pmem, geo: &Geometry) -> Option<Vec<Extent>> {
    let len = geo.total_blocks.div_ceil(8);
    let mut chunk = vec![0u8; BITMAP_CHUNK];
    let mut crc = 0u32;
    let mut free: Vec<Extent> = Vec::new();
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(BITMAP_CHUNK as u64) as usize;
        let bytes = &mut chunk[..n.next_multiple_of(8)];
        bytes.fill(0);
        pm.read(geo.bitmap_off() + at, &mut bytes[..n]);
        crc = crc32c::crc32c_append(crc, &bytes[..n]);
        for (w, word) in bytes.chunks_exact(8).enumerate() {
            let mut word = u64::from_le_bytes(word.try_into().unwrap());
            let base = (at / 8 + w as u64) * 64;
            // Runs of set bits, each at most a word long, merged with the run before.
            while word != 0 {
                let lo = word.trailing_zeros() as u64;
                let run = (!(word >> lo)).trailing_zeros() as u64;
                let start = base + lo;
                if start < geo.pool_start || start + run > geo.total_blocks {
                    return None;
                }
                match free.last_mut() {
                    Some(last) if last.start + last.len == start => last.len += run,
                    _ => free.push(Extent { start, len: run }),
                }
                word = if lo + run >= 64 {
                    0
                } else {
                    word & !(((1u64 << run) - 1) << lo)
                };
            }
        }
        at += n as u64;
    }
    (crc as u64 == pm.load_u64(BITMAP_CSUM_OFF)).then_some(free)
}
