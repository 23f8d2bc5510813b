//! Per-CPU undo journals that make operations touching several inodes atomic.
//!
//! Such an operation first appends its entries to every inode log involved without
//! committing them, then journals the old value of each 8-byte word it is about to
//! change (log tails, inode valid words, log heads), marks the journal active, stores
//! the new values, and marks the journal idle. After a crash, an active journal is
//! rolled back, so either every word changed or none did.
//!
//! Journal block:
//!
//! | offset | size | field                                            |
//! |--------|------|--------------------------------------------------|
//! | 0      | 8    | state: 0 idle, [`ACTIVE`] active                 |
//! | 8      | 4    | number of records                                |
//! | 12     | 4    | CRC-32C of the records                           |
//! | 16     | 16·n | records: (byte offset of the word, old value)    |

use pmem::Pmem;

use crate::error::{Error, Result};
use crate::layout::{get32, get64, put32, put64, Geometry, BLOCK_SIZE};

/// State word of a journal whose words may be half changed.
pub const ACTIVE: u64 = 0x4A52_4E4C_4143_5456; // "JRNLACTV"
const STATE_OFF: u64 = 0;
const COUNT_OFF: usize = 8;
const CSUM_OFF: usize = 12;
const RECORDS_OFF: usize = 16;
/// Most words one operation can change atomically.
pub const MAX_RECORDS: usize = (BLOCK_SIZE as usize - RECORDS_OFF) / 16;

/// Changes `words` — (byte offset, new value) — atomically through journal `j`. The
/// caller holds journal `j`'s lock.
pub fn commit(pm: &dyn Pmem, geo: &Geometry, j: u64, words: &[(u64, u64)]) {
    assert!(words.len() <= MAX_RECORDS, "journal overflow");
    let base = geo.journal_off(j);
    let mut rec = vec![0u8; RECORDS_OFF + 16 * words.len()];
    for (i, &(off, _)) in words.iter().enumerate() {
        put64(&mut rec, RECORDS_OFF + 16 * i, off);
        put64(&mut rec, RECORDS_OFF + 16 * i + 8, pm.load_u64(off));
    }
    put32(&mut rec, COUNT_OFF, words.len() as u32);
    let csum = crc32c::crc32c(&rec[RECORDS_OFF..]);
    put32(&mut rec, CSUM_OFF, csum);
    // Records first (the state word stays idle), then the state word on its own.
    pm.write(base + COUNT_OFF as u64, &rec[COUNT_OFF..]);
    pm.persist(base + COUNT_OFF as u64, (rec.len() - COUNT_OFF) as u64);
    pm.store_u64_persist(base + STATE_OFF, ACTIVE);
    for &(off, val) in words {
        pm.store_u64(off, val);
        pm.flush(off, 8);
    }
    pm.fence();
    pm.store_u64_persist(base + STATE_OFF, 0);
}

/// What recovery found in the journals.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Replay {
    pub rolled_back: u64,
    pub words_restored: u64,
}

/// Reads journal `j`: `None` if idle, else its records, validated against the layout.
pub fn pending(pm: &dyn Pmem, geo: &Geometry, j: u64) -> Result<Option<Vec<(u64, u64)>>> {
    let base = geo.journal_off(j);
    match pm.load_u64(base + STATE_OFF) {
        0 => return Ok(None),
        ACTIVE => {}
        other => {
            return Err(Error::Corrupt(format!(
                "journal {j}: unknown state word {other:#x}"
            )))
        }
    }
    let mut head = [0u8; RECORDS_OFF];
    pm.read(base, &mut head);
    let n = get32(&head, COUNT_OFF) as usize;
    if n > MAX_RECORDS {
        return Err(Error::Corrupt(format!("journal {j}: {n} records")));
    }
    let mut rec = vec![0u8; 16 * n];
    pm.read(base + RECORDS_OFF as u64, &mut rec);
    if crc32c::crc32c(&rec) != get32(&head, CSUM_OFF) {
        return Err(Error::Corrupt(format!("journal {j}: checksum mismatch")));
    }
    let inode_area = geo.inode_off(0)..geo.inode_off(0) + geo.inodes * crate::layout::INODE_SIZE;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (off, old) = (get64(&rec, 16 * i), get64(&rec, 16 * i + 8));
        if !off.is_multiple_of(8) || !inode_area.contains(&off) {
            return Err(Error::Corrupt(format!(
                "journal {j}: record for offset {off:#x} outside the inode table"
            )));
        }
        out.push((off, old));
    }
    Ok(Some(out))
}

/// Rolls back every active journal (mount after a crash).
pub fn replay(pm: &dyn Pmem, geo: &Geometry) -> Result<Replay> {
    let mut r = Replay::default();
    for j in 0..geo.journals {
        if let Some(records) = pending(pm, geo, j)? {
            for &(off, old) in &records {
                pm.store_u64(off, old);
                pm.flush(off, 8);
            }
            pm.fence();
            pm.store_u64_persist(geo.journal_off(j) + STATE_OFF, 0);
            r.rolled_back += 1;
            r.words_restored += records.len() as u64;
        }
    }
    Ok(r)
}
