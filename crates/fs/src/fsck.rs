//! `fsck`: a read-only check of a file system image.
//!
//! Checks the superblock and its replica, the journals, every inode record and log
//! entry checksum, every pointer, that every pool block is referenced at most once,
//! that (after a clean unmount) the saved allocator agrees with what is referenced,
//! link counts, and that every inode is reachable from the root.

use std::collections::HashMap;

use pmem::{Durability, Pmem};
use serde::Serialize;

use crate::error::Result;
use crate::journal;
use crate::layout::{Geometry, BLOCK_SIZE};
use crate::recovery::{load_bitmap, scan, CLEAN};

/// What fsck found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FsckReport {
    /// Inconsistencies: any makes the image bad.
    pub problems: Vec<String>,
    /// States a mount repairs by design (interrupted operations, orphans after a
    /// crash, writes whose copy never completed).
    pub notes: Vec<String>,
    pub clean_unmount: bool,
    pub inodes: u64,
    pub log_entries: u64,
    pub used_blocks: u64,
    pub pool_blocks: u64,
}

impl FsckReport {
    /// No problems.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks the image on `pm` without changing it. Whether a write's copy completed is
/// read from the persistent completion records.
pub fn check(pm: &dyn Pmem) -> Result<FsckReport> {
    let mut r = FsckReport::default();
    let geo = match Geometry::read(pm) {
        Ok((g, None)) => g,
        Ok((g, Some(why))) => {
            r.problems
                .push(format!("primary superblock bad ({why}); replica is good"));
            g
        }
        Err(e) => {
            r.problems.push(e.to_string());
            return Ok(r);
        }
    };
    let mut sb = vec![0u8; 128];
    let mut replica = vec![0u8; 128];
    pm.read(0, &mut sb);
    pm.read(BLOCK_SIZE, &mut replica);
    if sb != replica && r.problems.is_empty() {
        r.problems
            .push("superblock replica differs from the primary".into());
    }
    let mut pending_journals = 0;
    let mut rolled_back = HashMap::new();
    for j in 0..geo.journals {
        match journal::pending(pm, &geo, j) {
            Ok(Some(records)) => {
                pending_journals += 1;
                // In replay order: a later record of the same word wins.
                rolled_back.extend(records);
            }
            Ok(None) => {}
            Err(e) => r.problems.push(e.to_string()),
        }
    }
    if pending_journals > 0 {
        // A pending journal means an operation was interrupted half-way through its
        // word stores; the inodes are checked as mount will see them once it has
        // rolled the journal back, not as they are now.
        r.notes.push(format!(
            "{pending_journals} interrupted operation(s) in the journals; mount rolls them back"
        ));
    }
    let view = RolledBack {
        pm,
        words: rolled_back,
    };
    if let Err(e) = engine::read_counters(pm, geo.records_off(), geo.channels as usize) {
        r.problems.push(format!("completion records: {e}"));
    }
    let s = scan(&view, geo, false)?;
    r.problems.extend(s.problems);
    r.notes.extend(s.notes);
    r.inodes = s.states.len() as u64;
    r.log_entries = s.report.log_entries;
    r.used_blocks = s.used.iter().filter(|&&u| u).count() as u64;
    r.pool_blocks = geo.pool_blocks();
    r.clean_unmount = pm.load_u64(crate::layout::MOUNT_BLOCK * BLOCK_SIZE) == CLEAN;
    if r.clean_unmount {
        if !s.orphans.is_empty() {
            r.problems.push(format!(
                "{} orphan inode(s) after a clean unmount",
                s.orphans.len()
            ));
        }
        match load_bitmap(pm, &geo) {
            None => r
                .problems
                .push("saved allocator bitmap is corrupt although unmount was clean".into()),
            Some(free) => {
                let mut is_free = vec![false; geo.pool_blocks() as usize];
                for e in free {
                    for b in e.start..e.start + e.len {
                        is_free[(b - geo.pool_start) as usize] = true;
                    }
                }
                let mut both = 0u64;
                let mut leaked = 0u64;
                for (i, (&u, &f)) in s.used.iter().zip(&is_free).enumerate() {
                    if u && f {
                        both += 1;
                        if both <= 3 {
                            r.problems.push(format!(
                                "block {} is in use but the allocator has it free",
                                geo.pool_start + i as u64
                            ));
                        }
                    }
                    leaked += (!u && !f) as u64;
                }
                if both > 3 {
                    r.problems.push(format!("…{both} such blocks in all"));
                }
                if leaked > 0 {
                    r.problems.push(format!(
                        "{leaked} block(s) neither referenced nor free (leaked)"
                    ));
                }
            }
        }
    }
    Ok(r)
}

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
