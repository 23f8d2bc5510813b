//! The region as mount sees it after rolling back the pending journals, read-only: what
//! `fsck` and read-only mounts read the image through.

use std::collections::HashMap;

use pmem::{Durability, Pmem};

/// The region as mount sees it after rolling back the pending journals: the words they
/// restore read as their old values. Read-only: fsck, and read-only mounts, see the
/// image through it.
pub(crate) struct RolledBack<P> {
    pub pm: P,
    pub words: HashMap<u64, u64>,
}

impl<'a, P: std::ops::Deref<Target = dyn Pmem + 'a> + Send + Sync> Pmem for RolledBack<P> {
    fn len(&self) -> u64 {
        self.pm.len()
    }

    fn durability(&self) -> Durability {
        self.pm.durability()
    }

    fn write(&self, off: u64, _: &[u8]) {
        unreachable!("wrote at {off:#x} through the read-only view of a region")
    }

    fn store_u64(&self, off: u64, _: u64) {
        unreachable!("wrote at {off:#x} through the read-only view of a region")
    }

    fn load_u64(&self, off: u64) -> u64 {
        match self.words.get(&off) {
            Some(&old) => old,
            None => self.pm.load_u64(off),
        }
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        self.pm.read(off, dst);
        let end = off + dst.len() as u64;
        for (&w, &old) in &self.words {
            if w + 8 <= off || w >= end {
                continue;
            }
            for (i, b) in old.to_le_bytes().into_iter().enumerate() {
                let at = w + i as u64;
                if (off..end).contains(&at) {
                    dst[(at - off) as usize] = b;
                }
            }
        }
    }

    fn flush(&self, _: u64, _: u64) {}

    fn fence(&self) {}

    fn copy_nt(&self, off: u64, _: &[u8]) {
        unreachable!("wrote at {off:#x} through the read-only view of a region")
    }
}
