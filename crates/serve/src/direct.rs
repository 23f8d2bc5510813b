//! The server's half of direct reads: clients copy file data straight from their
//! read-only mapping of the image, with no request, as long as
//!
//! 1. the blocks they copy from are not reused under them — each client registers in
//!    the file system's epoch through a slot of shared memory before it looks blocks
//!    up ([`fs::ExternalReaders`]), and a client that goes has its slot dropped;
//! 2. the map of a file they cached is still the file's — every change of a file's
//!    data or size made for a client is bracketed by two bumps of the file's version
//!    word (odd while under way; changes of one file are serialised here), and a
//!    truncation named by path or by `O_TRUNC`, whose file is not known in advance,
//!    by two bumps of one word for all files.
//!
//! A client whose cached versions are unchanged (and even) after it registered may
//! use its map: any change that could free a block of it starts later, so frees that
//! block in a later epoch than the client's registration.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::shm::{Words, EPOCH, INODE0, TRUNCATES};

/// Locks serialising the changes of files (by inode number).
const STRIPES: usize = 256;

/// The version table and the clients' epoch slots.
pub(crate) struct Direct {
    table: Words,
    stripes: Vec<Mutex<()>>,
    truncates: Mutex<()>,
    slots: Mutex<Vec<Arc<Words>>>,
}

impl Direct {
    /// A table for inode numbers below `inodes`.
    pub fn new(inodes: u64) -> io::Result<Direct> {
        Ok(Direct {
            table: Words::create("easyio-versions", INODE0 + inodes as usize)?,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            truncates: Mutex::new(()),
            slots: Mutex::new(Vec::new()),
        })
    }

    /// The table, to send to clients.
    pub fn table(&self) -> &Words {
        &self.table
    }

    /// Runs `f`, a change of inode `ino`'s data or size, between two bumps of its
    /// version. An inode number past the table (never handed out) bumps nothing.
    pub fn changing<R>(&self, ino: u64, f: impl FnOnce() -> R) -> R {
        let Some(word) = usize::try_from(ino)
            .ok()
            .and_then(|i| self.table.get(INODE0 + i))
        else {
            return f();
        };
        let _one_at_a_time = self.stripes[ino as usize % STRIPES].lock();
        word.fetch_add(1, Ordering::SeqCst);
        let r = f();
        word.fetch_add(1, Ordering::SeqCst);
        r
    }

    /// Runs `f`, which may truncate a file not known in advance, between two bumps of
    /// the word all cached maps depend on.
    pub fn truncating<R>(&self, f: impl FnOnce() -> R) -> R {
        let _one_at_a_time = self.truncates.lock();
        let word = self.table.at(TRUNCATES);
        word.fetch_add(1, Ordering::SeqCst);
        let r = f();
        word.fetch_add(1, Ordering::SeqCst);
        r
    }

    /// The versions a map of inode `ino` computed from now on depends on.
    pub fn versions(&self, ino: u64) -> (u64, u64) {
        let truncates = self.table.at(TRUNCATES).load(Ordering::SeqCst);
        let own = usize::try_from(ino)
            .ok()
            .and_then(|i| self.table.get(INODE0 + i))
            .map_or(1, |w| w.load(Ordering::SeqCst));
        (own, truncates)
    }

    /// A new client's epoch slot.
    pub fn add_slot(&self) -> io::Result<Arc<Words>> {
        let slot = Arc::new(Words::create("easyio-epoch-slot", 8)?);
        self.slots.lock().push(slot.clone());
        Ok(slot)
    }

    /// Drops a client's slot: it no longer holds reclamation back.
    pub fn remove_slot(&self, slot: &Arc<Words>) {
        slot.at(0).store(0, Ordering::SeqCst);
        self.slots.lock().retain(|s| !Arc::ptr_eq(s, slot));
    }
}

impl fs::ExternalReaders for Direct {
    fn pinned_before(&self, e: u64) -> bool {
        self.slots.lock().iter().any(|s| {
            let v = s.at(0).load(Ordering::SeqCst);
            v != 0 && v < e
        })
    }

    fn publish(&self, e: u64) {
        self.table.at(EPOCH).fetch_max(e, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use fs::{FileSystem, FormatOptions, MountOptions, OpenFlags};
    use pmem::{MemPmem, Pmem};

    use super::*;

    #[test]
    fn a_registered_client_holds_back_the_reuse_of_blocks_it_may_read() {
        let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
        let direct = Arc::new(Direct::new(fs.geometry().inodes).unwrap());
        fs.set_external_readers(direct.clone());
        let slot = direct.add_slot().unwrap();
        let fd = fs
            .open("/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644)
            .unwrap();
        fs.pwrite(fd, &[1; 4096], 0).unwrap();
        // A client registers, then looks the block up, as a direct read does.
        slot.at(0).store(
            direct.table().at(EPOCH).load(Ordering::SeqCst),
            Ordering::SeqCst,
        );
        let (_, segs) = fs.read_map(fd, 0, 4096).unwrap();
        let block = segs[0].1.unwrap();
        let ino = fs.fstat(fd).unwrap().ino;
        for i in 0..1000u32 {
            direct.changing(ino, || {
                fs.pwrite(fd, &[(i % 200) as u8 + 2; 4096], 0).unwrap()
            });
        }
        let held = fs.usage().reclaiming_blocks;
        assert!(
            held >= 990,
            "only {held} blocks held back for the registered client"
        );
        let mut data = [0u8; 4096];
        pm.read(block, &mut data);
        assert_eq!(data, [1; 4096], "the block the client may read was reused");
        direct.remove_slot(&slot);
        let after = fs.usage().reclaiming_blocks;
        assert!(after < 64, "{after} blocks still held once the client went");
        fs.close(fd).unwrap();
        fs.unmount().unwrap();
    }
}
