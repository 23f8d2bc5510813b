//! An in-memory region: a byte vector behind the [`Pmem`] trait, for crash images,
//! fuzzing and tests that need no mapping.
//!
//! Nothing here is ever durable ([`Durability::Dram`]); flushes and fences do nothing.
//! Accesses are bounds-checked exactly as a [`crate::Region`] checks them, so a caller
//! that follows an unchecked offset read from an image panics here too.

use std::sync::Mutex;

use crate::{check_range, check_word, Durability, Pmem};

/// A region held in a `Vec<u8>`: the image a crash left, or a scratch region.
#[derive(Debug)]
pub struct MemPmem {
    image: Mutex<Vec<u8>>,
}

impl MemPmem {
    /// A zeroed region of `len` usable bytes.
    pub fn new(len: usize) -> MemPmem {
        MemPmem::from_image(vec![0; len])
    }

    /// A region whose contents are `image`.
    pub fn from_image(image: Vec<u8>) -> MemPmem {
        MemPmem {
            image: Mutex::new(image),
        }
    }

    /// A copy of the current contents.
    pub fn image(&self) -> Vec<u8> {
        self.lock().clone()
    }

    /// The contents, consuming the region.
    pub fn into_image(self) -> Vec<u8> {
        self.image.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // A panic while holding the lock cannot leave the bytes half-updated in a way
        // that matters to a test region: keep going with what is there.
        self.image.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Pmem for MemPmem {
    fn len(&self) -> u64 {
        self.lock().len() as u64
    }

    fn durability(&self) -> Durability {
        Durability::Dram
    }

    fn write(&self, off: u64, src: &[u8]) {
        let mut img = self.lock();
        check_range(off, src.len() as u64, img.len() as u64);
        img[off as usize..off as usize + src.len()].copy_from_slice(src);
    }

    fn store_u64(&self, off: u64, val: u64) {
        let mut img = self.lock();
        check_word(off, img.len() as u64);
        img[off as usize..off as usize + 8].copy_from_slice(&val.to_le_bytes());
    }

    fn load_u64(&self, off: u64) -> u64 {
        let img = self.lock();
        check_word(off, img.len() as u64);
        u64::from_le_bytes(img[off as usize..off as usize + 8].try_into().unwrap())
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        let img = self.lock();
        check_range(off, dst.len() as u64, img.len() as u64);
        dst.copy_from_slice(&img[off as usize..off as usize + dst.len()]);
    }

    fn flush(&self, off: u64, len: u64) {
        check_range(off, len, self.len());
    }

    fn fence(&self) {}

    fn copy_nt(&self, off: u64, src: &[u8]) {
        self.write(off, src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_loads_round_trip() {
        let m = MemPmem::new(4096);
        m.write_persist(3, b"hello");
        m.store_u64_persist(64, 0xDEAD_BEEF);
        m.copy_persist(128, &[7; 300]);
        let mut b = [0u8; 5];
        m.read(3, &mut b);
        assert_eq!(&b, b"hello");
        assert_eq!(m.load_u64(64), 0xDEAD_BEEF);
        assert_eq!(m.image()[427], 7);
        assert_eq!(m.into_image().len(), 4096);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn out_of_bounds_panics() {
        MemPmem::new(64).write(60, &[0; 8]);
    }
}
