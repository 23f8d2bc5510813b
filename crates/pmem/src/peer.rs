//! Reference loops that benchmarks measure easyio's primitives against, kept here so
//! that region memory is still written only from inside `pmem`.

use crate::{check_range, Pmem, Region, CACHE_LINE};

extern "C" {
    fn easyio_peer_nt_copy(dst: *mut u8, src: *const u8, len: usize);
}

/// Copies `src` to `off` with a plain C loop of 64-byte non-temporal stores and one
/// sfence (`c/nt_peer.c`): the physical-limit peer of [`Pmem::copy_persist`].
///
/// # Panics
/// If the destination is not 64-byte aligned or the length not a multiple of 64 (the
/// loop handles the aligned case only), or if the range is out of bounds.
pub fn c_nt_copy_persist(region: &Region, off: u64, src: &[u8]) {
    let len = src.len() as u64;
    check_range(off, len, region.len());
    let dst = region.device_addr(off, len);
    assert!(
        (dst as usize).is_multiple_of(CACHE_LINE) && src.len().is_multiple_of(CACHE_LINE),
        "the C peer loop needs a 64-byte aligned destination and length"
    );
    // A protected region is written here too, as by its own operations.
    let _open = region.open_key();
    // SAFETY: the range is inside the mapping (checked above), `src` is ordinary memory
    // outside it, and the C loop writes exactly `len` bytes from `dst`.
    unsafe { easyio_peer_nt_copy(dst, src.as_ptr(), src.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_peer_copies_exactly() {
        let r = Region::create_temp(1 << 20).unwrap();
        let src: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        c_nt_copy_persist(&r, 4096, &src);
        let mut back = vec![0u8; src.len()];
        r.read(4096, &mut back);
        assert_eq!(back, src);
    }
}
