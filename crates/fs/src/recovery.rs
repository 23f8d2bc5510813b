//! Recovery: reading the region back — every valid inode's log walked, every checksum
//! and pointer verified before it is followed, every block it references checked —
//! shared by mount (`mount.rs`) and `fsck`.
//!
//! The full scan (after a crash, or when the saved bitmap fails its checksum) drops
//! committed writes whose SN never completed, finds inodes no directory reaches
//! (unlinked while open, or created by an interrupted operation), checks the tree, and
//! marks every block the logs reference. A mount after a clean unmount instead reads
//! each inode the same way ([`load_inode`]) when a directory entry first names it.
//! `fsck` runs the full scan without changing anything.

use std::collections::{HashMap, VecDeque};

use pmem::seal::Finish;
use pmem::Pmem;
use serde::Serialize;

use crate::alloc::{Blocks, Extent};
use crate::error::{Error, Result};
use crate::inode::{FileKind, InodeRecord, InodeState, HEAD_OFF, TAIL_OFF, VALID, VALID_OFF};
use crate::layout::{unseal_log_word, Geometry, LogWord, BLOCK_SIZE, ROOT_INO};
use crate::log::{Entry, LogState, PAGE_MAGIC, SLOT, SLOTS_PER_PAGE, TRAILER_OFF};

/// What mount found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MountReport {
    /// The previous unmount was clean (allocators loaded from the saved bitmap).
    pub clean: bool,
    /// Why the primary superblock was skipped, if it was.
    pub superblock_replica_used: Option<String>,
    /// The format version this writable mount upgraded the image from (to
    /// [`crate::layout::FORMAT_VERSION`]), if it was older.
    pub format_upgraded_from: Option<u32>,
    /// Journals of interrupted operations rolled back.
    pub journals_rolled_back: u64,
    /// Words those journals restored.
    pub journal_words_restored: u64,
    /// Inodes in DRAM after the mount (all in use after a full scan, else the root).
    pub inodes: u64,
    /// Log entries replayed.
    pub log_entries: u64,
    /// Committed writes whose data copy never completed, dropped (old data kept).
    pub pending_writes_dropped: u64,
    /// Sealed writes past the committed tail whose data was not all durable (a write
    /// in flight at the crash, which never returned), dropped (old data kept).
    pub unsealed_writes_dropped: u64,
    /// Inodes no directory reaches, freed.
    pub orphans_freed: u64,
    /// Free pool blocks after the mount.
    pub free_blocks: u64,
    /// Time the mount took, in microseconds.
    pub mount_us: u64,
    /// Mounted read-only: asked for, or because of `damage`.
    pub read_only: bool,
    /// Damage recovery could not repair, which made the mount fall back to read-only
    /// ([`crate::MountOptions::read_only_on_damage`]): what `fsck` reports as problems.
    pub damage: Vec<String>,
}

/// Everything a scan of the region learned.
pub(crate) struct Scan {
    pub states: HashMap<u64, InodeState>,
    /// Per pool block: referenced by a log (page) or by a file (data).
    pub used: Vec<bool>,
    /// Inconsistencies; mount refuses to go on if there are any.
    pub problems: Vec<String>,
    /// Things a mount would repair (fsck reports them without failing).
    pub notes: Vec<String>,
    pub orphans: Vec<u64>,
    /// Problems of the tree `fsck --repair` fixes through the normal paths once the
    /// inodes they concern are readable; each is also in `problems`.
    pub fixes: Vec<Fix>,
    pub report: MountReport,
}

/// A tree problem `fsck --repair` fixes on a mounted file system.
#[derive(Clone, Debug)]
pub(crate) enum Fix {
    /// Directory `dir` has an entry `name` naming inode `ino`, which is not in use.
    Dangling { dir: u64, name: String, ino: u64 },
    /// Inode `ino`'s link count is not the `expect` references the tree holds.
    LinkCount { ino: u64, expect: u32 },
    /// Inode `ino` has links but no directory the tree reaches names it: what only a
    /// dropped directory reached. Kept, for `/lost+found`, with what it reaches.
    Lost { ino: u64 },
    /// Page `pgoff` of file `ino` lives in `block`, which a log page or an earlier
    /// file page (of a lower-numbered inode, or of this one) also claims: the page
    /// gets a copy of its own, so that both read what they read before.
    Shared { ino: u64, pgoff: u64, block: u64 },
}

/// Reads inode `ino`, named by directory `parent`, for a mount that did not read them
/// all: checked as the full scan checks it, and every block it references must be
/// allocated (a damaged log that points into free space is refused, not followed).
pub(crate) fn load_inode(
    pm: &dyn Pmem,
    geo: &Geometry,
    ino: u64,
    parent: u64,
    blocks: &Blocks,
) -> Result<InodeState> {
    match pm.load_u64(geo.inode_off(ino) + VALID_OFF) {
        VALID => {}
        0 if ino == ROOT_INO => return Err(Error::Corrupt("root directory missing".into())),
        0 => {
            return Err(Error::Corrupt(format!(
                "directory {parent}: an entry names inode {ino}, which is not in use"
            )))
        }
        w => {
            return Err(Error::Corrupt(format!(
                "inode {ino}: invalid valid word {w:#x}"
            )))
        }
    }
    let mut report = MountReport::default();
    let mut notes = Vec::new();
    let mut referenced = Vec::new();
    let mut mark = |b: u64, _: Option<u64>| {
        crate::inode::push_block(&mut referenced, b);
        Ok(())
    };
    let mut found = Found {
        report: &mut report,
        notes: &mut notes,
    };
    let mut st = scan_inode(pm, geo, ino, false, &mut mark, &mut found)?;
    blocks.claim(&referenced).map_err(|b| {
        Error::Corrupt(format!(
            "inode {ino}: references block {b}, which the allocator has free"
        ))
    })?;
    if st.kind == FileKind::Dir {
        st.parent = parent;
    }
    Ok(st)
}

/// The free blocks when the saved bitmap fails its checksum: those no inode that
/// reads without error references (an inode too damaged to read is refused when used,
/// so its blocks are not missed).
pub(crate) fn referenced_free(pm: &dyn Pmem, geo: &Geometry) -> Vec<Extent> {
    let mut used = vec![false; geo.pool_blocks() as usize];
    let mut report = MountReport::default();
    let mut notes = Vec::new();
    for ino in ROOT_INO..geo.inodes {
        if pm.load_u64(geo.inode_off(ino) + VALID_OFF) != VALID {
            continue;
        }
        let mut mark = |b: u64, _: Option<u64>| {
            used[(b - geo.pool_start) as usize] = true;
            Ok(())
        };
        let mut found = Found {
            report: &mut report,
            notes: &mut notes,
        };
        let _ = scan_inode(pm, geo, ino, false, &mut mark, &mut found);
    }
    free_extents(&used, geo.pool_start)
}

/// The free extents of the pool, from one flag per block (`true`: used).
pub(crate) fn free_extents(used: &[bool], pool_start: u64) -> Vec<Extent> {
    let mut out = Vec::new();
    for (i, &u) in used.iter().enumerate() {
        if !u {
            crate::inode::push_block(&mut out, pool_start + i as u64);
        }
    }
    out
}

/// Walks the whole region. With `repair`, voids committed writes whose SN is not done
/// (so they can never come back); without, only notes them.
pub(crate) fn scan(pm: &dyn Pmem, geo: Geometry, repair: bool) -> Result<Scan> {
    let logs = log_page_blocks(pm, &geo);
    let mut s = Scan {
        states: HashMap::new(),
        used: vec![false; geo.pool_blocks() as usize],
        problems: Vec::new(),
        notes: Vec::new(),
        orphans: Vec::new(),
        fixes: Vec::new(),
        report: MountReport::default(),
    };
    for ino in ROOT_INO..geo.inodes {
        let off = geo.inode_off(ino);
        match pm.load_u64(off + VALID_OFF) {
            0 => continue,
            VALID => {}
            w => {
                s.problems
                    .push(format!("inode {ino}: invalid valid word {w:#x}"));
                continue;
            }
        }
        let mut found = Found {
            report: &mut s.report,
            notes: &mut s.notes,
        };
        let (used, pool_start) = (&mut s.used, geo.pool_start);
        let mut shared = Vec::new();
        let mut mark = |block: u64, pgoff: Option<u64>| match pgoff {
            // A file page in a block already claimed, or in a log page (whose trailer
            // names its owner): repair gives the file page a copy.
            Some(pgoff) if used[(block - pool_start) as usize] || logs.contains(&block) => {
                shared.push((pgoff, block));
                Ok(())
            }
            _ => mark_used(used, pool_start, block),
        };
        match scan_inode(pm, &geo, ino, repair, &mut mark, &mut found) {
            Ok(st) => {
                s.states.insert(ino, st);
                for (pgoff, block) in shared {
                    s.problems.push(format!(
                        "inode {ino}: page {pgoff} is in block {block}, which another \
                         reference also claims"
                    ));
                    s.fixes.push(Fix::Shared { ino, pgoff, block });
                }
            }
            Err(e) => s.problems.push(e.to_string()),
        }
    }
    check_tree(&mut s);
    Ok(s)
}

/// The blocks of every log page chain that reads, each page's trailer naming the
/// inode whose chain reaches it.
fn log_page_blocks(pm: &dyn Pmem, geo: &Geometry) -> std::collections::HashSet<u64> {
    let mut out = std::collections::HashSet::new();
    for ino in ROOT_INO..geo.inodes {
        let off = geo.inode_off(ino);
        if pm.load_u64(off + VALID_OFF) != VALID {
            continue;
        }
        let Ok(head) = unseal_log_word(ino, LogWord::Head, pm.load_u64(off + HEAD_OFF)) else {
            continue;
        };
        let mut none = |_: u64, _: Option<u64>| Ok(());
        if let Ok((pages, _)) = walk_log_pages(pm, geo, ino, head, &mut none) {
            out.extend(pages.iter().map(|p| p / BLOCK_SIZE));
        }
    }
    out
}

/// The inodes in use that cannot be kept: a valid word that is neither valid nor free,
/// or a record or log that fails its checks, or a log page or extended-attribute block
/// also referenced by an inode of a lower number that reads (which keeps it). Each
/// with why. A file page in a block another reference claims does not make its inode
/// unreadable: repair gives the page a copy ([`Fix::Shared`]).
pub(crate) fn unreadable_inodes(pm: &dyn Pmem, geo: &Geometry) -> Vec<(u64, String)> {
    // Log pages and attribute blocks; file pages.
    let mut used = vec![false; geo.pool_blocks() as usize];
    let mut data = vec![false; geo.pool_blocks() as usize];
    let mut out = Vec::new();
    let mut report = MountReport::default();
    let mut notes = Vec::new();
    for ino in ROOT_INO..geo.inodes {
        match pm.load_u64(geo.inode_off(ino) + VALID_OFF) {
            0 => continue,
            VALID => {}
            w => {
                out.push((ino, format!("inode {ino}: invalid valid word {w:#x}")));
                continue;
            }
        }
        let mut blocks = Vec::new();
        let mut pages = Vec::new();
        let mut mine = std::collections::HashSet::new();
        let mut mark = |b: u64, pgoff: Option<u64>| {
            if pgoff.is_some() {
                pages.push(b);
                return Ok(());
            }
            if !mine.insert(b) {
                return Err(format!("block {b} referenced twice"));
            }
            blocks.push(b);
            Ok(())
        };
        let mut found = Found {
            report: &mut report,
            notes: &mut notes,
        };
        let logs = match scan_inode(pm, geo, ino, false, &mut mark, &mut found) {
            Ok(st) => st.log.pages.len(),
            Err(e) => {
                out.push((ino, e.to_string()));
                continue;
            }
        };
        let index = |b: u64| (b - geo.pool_start) as usize;
        // A log page clashes with an earlier log page or attribute block (a file page
        // on it gets a copy); an attribute block with any earlier block.
        let clash = |(i, b): (usize, &u64)| {
            used[index(*b)] || (i >= logs && (data[index(*b)] || pages.contains(b)))
        };
        if let Some((_, b)) = blocks.iter().enumerate().find(|&x| clash(x)) {
            out.push((
                ino,
                format!("inode {ino}: block {b} is also referenced by a lower-numbered inode"),
            ));
            continue;
        }
        for b in blocks {
            used[index(b)] = true;
        }
        for b in pages {
            data[index(b)] = true;
        }
    }
    out
}

fn mark_used(used: &mut [bool], pool_start: u64, block: u64) -> std::result::Result<(), String> {
    let i = (block - pool_start) as usize;
    if used[i] {
        return Err(format!("block {block} referenced twice"));
    }
    used[i] = true;
    Ok(())
}

/// Where [`scan_inode`] counts what it found.
struct Found<'a> {
    report: &'a mut MountReport,
    notes: &'a mut Vec<String>,
}

/// Reads inode `ino` from its record and log, checking every checksum and pointer
/// before it is followed; `mark(block, pgoff)` is told every pool block the inode
/// references (log pages, then file pages with their page offset, then extended
/// attributes) and may refuse one.
fn scan_inode(
    pm: &dyn Pmem,
    geo: &Geometry,
    ino: u64,
    repair: bool,
    mark: &mut dyn FnMut(u64, Option<u64>) -> std::result::Result<(), String>,
    s: &mut Found<'_>,
) -> Result<InodeState> {
    let geo = *geo;
    let off = geo.inode_off(ino);
    let rec = InodeRecord::read(pm, off, ino)?;
    let mut st = InodeState::new(&rec);
    let bad = |why: String| Error::Corrupt(format!("inode {ino}: {why}"));
    let head = unseal_log_word(ino, LogWord::Head, pm.load_u64(off + HEAD_OFF)).map_err(bad)?;
    let tail = unseal_log_word(ino, LogWord::Tail, pm.load_u64(off + TAIL_OFF)).map_err(bad)?;
    let (pages, used_in) = walk_log_pages(pm, &geo, ino, head, mark)?;
    if tail != 0 {
        let page = tail - tail % BLOCK_SIZE;
        let in_page = tail % BLOCK_SIZE;
        if !pages.contains(&page) || !in_page.is_multiple_of(SLOT) || in_page > TRAILER_OFF {
            return Err(bad(format!("log tail {tail:#x} is not inside its log")));
        }
        let log = ScannedLog {
            pages: &pages,
            used_in: &used_in,
            tail,
        };
        replay_log(pm, &geo, ino, &log, repair, &mut st, s)?;
    }
    let log = ScannedLog {
        pages: &pages,
        used_in: &used_in,
        tail,
    };
    let tail = replay_sealed(pm, &geo, ino, &log, repair, &mut st, s)?;
    st.log = LogState {
        head,
        tail,
        pages,
        entries: st.log.entries,
    };
    for (pgoff, b) in st.pages.iter() {
        mark(b, Some(pgoff)).map_err(|why| bad(format!("data: {why}")))?;
    }
    for e in st.xattr.iter().flat_map(|x| &x.extents) {
        for b in e.start..e.start + e.len {
            mark(b, None).map_err(|why| bad(format!("data: {why}")))?;
        }
    }
    if let Some(x) = &st.xattr {
        x.load(pm).map_err(bad)?;
    }
    if st.kind == FileKind::Dir && st.size != 0 {
        return Err(bad("directory with data".into()));
    }
    Ok(st)
}

/// The page chain of inode `ino`'s log from `head`, every pointer checked before it is
/// followed and every page told to `mark`: the pages and, for each, the slots its
/// trailer says are used.
fn walk_log_pages(
    pm: &dyn Pmem,
    geo: &Geometry,
    ino: u64,
    head: u64,
    mark: &mut dyn FnMut(u64, Option<u64>) -> std::result::Result<(), String>,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let bad = |why: String| Error::Corrupt(format!("inode {ino}: {why}"));
    let mut pages = Vec::new();
    let mut visited = std::collections::HashSet::new();
    let mut used_in = Vec::new();
    let mut next = head;
    while next != 0 {
        if !geo.is_pool_block_off(next) {
            return Err(bad(format!("log page pointer {next:#x} outside the pool")));
        }
        if !visited.insert(next) || pages.len() as u64 > geo.pool_blocks() {
            return Err(bad("log page chain does not end".into()));
        }
        mark(next / BLOCK_SIZE, None).map_err(|why| bad(format!("log page {next:#x}: {why}")))?;
        let mut t = [0u8; 32];
        pm.read(next + TRAILER_OFF, &mut t);
        let field = |i: usize| u64::from_le_bytes(t[i * 8..i * 8 + 8].try_into().unwrap());
        if field(2) != PAGE_MAGIC || field(1) != ino {
            return Err(bad(format!("log page {next:#x} has a bad trailer")));
        }
        pages.push(next);
        used_in.push(field(3));
        next = field(0);
    }
    Ok((pages, used_in))
}

/// A log's page chain as [`walk_log_pages`] found it, and its committed tail.
struct ScannedLog<'a> {
    pages: &'a [u64],
    used_in: &'a [u64],
    tail: u64,
}

/// Applies the entries from the head to the tail to `st`, dropping (and with
/// `repair`, voiding) committed writes whose SN never completed.
fn replay_log(
    pm: &dyn Pmem,
    geo: &Geometry,
    ino: u64,
    log: &ScannedLog<'_>,
    repair: bool,
    st: &mut InodeState,
    s: &mut Found<'_>,
) -> Result<()> {
    let bad = |why: String| Error::Corrupt(format!("inode {ino}: {why}"));
    let tail = log.tail;
    let mut displaced = Vec::new();
    for (i, &page) in log.pages.iter().enumerate() {
        let is_tail_page = page == tail - tail % BLOCK_SIZE;
        let end_slot = if is_tail_page {
            (tail % BLOCK_SIZE) / SLOT
        } else {
            log.used_in[i]
        };
        if end_slot > SLOTS_PER_PAGE {
            return Err(bad(format!(
                "log page {page:#x} claims {end_slot} used slots"
            )));
        }
        let mut slot = 0;
        while slot < end_slot {
            let at = page + slot * SLOT;
            let mut first = [0u8; SLOT as usize];
            pm.read(at, &mut first);
            let k = Entry::slots_of(&first).map_err(|e| bad(format!("at {at:#x}: {e}")))?;
            if slot + k > end_slot {
                return Err(bad(format!("log entry at {at:#x} runs past the log end")));
            }
            let mut bytes = vec![0u8; (k * SLOT) as usize];
            pm.read(at, &mut bytes);
            let e = Entry::decode(&bytes).map_err(|e| bad(format!("at {at:#x}: {e}")))?;
            validate_entry(geo, st, &e).map_err(|why| bad(format!("entry at {at:#x}: {why}")))?;
            slot += k;
            if let Entry::Write { sn, .. } = e {
                if sn != 0 && !geo.sn_done(pm, sn) {
                    s.report.pending_writes_dropped += 1;
                    if repair {
                        pm.store_u64_persist(at, Entry::void_word(&first));
                    } else {
                        s.notes.push(format!(
                            "inode {ino}: write entry at {at:#x} waits on SN {sn:#x} that \
                             never completed; mount will drop it"
                        ));
                    }
                    st.log.entries += 1;
                    continue;
                }
            }
            st.apply(&e, &mut displaced);
            s.report.log_entries += 1;
        }
        if is_tail_page {
            break;
        }
    }
    Ok(())
}

/// Applies the sealed writes past the committed tail (format version 4, and 5's second
/// kind: see `crate::log`), in log order, up to the first slot that is not a valid one;
/// the last is kept only if the seal of its durable data, finished as its kind says,
/// matches. With `repair`, voids a sealed
/// write left just past the end. Returns the log's end: where the next entry goes.
fn replay_sealed(
    pm: &dyn Pmem,
    geo: &Geometry,
    ino: u64,
    log: &ScannedLog<'_>,
    repair: bool,
    st: &mut InodeState,
    s: &mut Found<'_>,
) -> Result<u64> {
    let Some(mut pos) = sealed_start(log) else {
        return Ok(log.tail);
    };
    let mut last: Option<(u64, Entry, (u64, Finish))> = None;
    let mut displaced = Vec::new();
    while let Some((at, e, seal)) = next_sealed(pm, geo, st, log, &mut pos) {
        if let Some((_, prev, _)) = last.replace((at, e, seal)) {
            st.apply(&prev, &mut displaced);
            st.log.entries += 1;
            s.report.log_entries += 1;
        }
    }
    let mut end = log.pages[pos.0] + pos.1 * SLOT;
    if let Some(why) = damaged_page_end(pm, log, pos) {
        return Err(Error::Corrupt(format!("inode {ino}: {why}")));
    }
    if sealed_follows(pm, log, pos) {
        // Only a write in flight can leave a slot that is not a valid entry past the
        // committed ones, and nothing is written after it.
        return Err(Error::Corrupt(format!(
            "inode {ino}: log entry at {end:#x} fails its checks, with a sealed write \
             entry after it"
        )));
    }
    if let Some((at, e, seal)) = last {
        let unchecked = crate::fault::active(crate::fault::Fault::SealNotChecked);
        if unchecked || durable_seal(pm, &e, seal.1) == seal.0 {
            st.apply(&e, &mut displaced);
            st.log.entries += 1;
            s.report.log_entries += 1;
        } else {
            // Its data was not all durable: the write never returned.
            s.report.unsealed_writes_dropped += 1;
            if !repair {
                s.notes.push(format!(
                    "inode {ino}: sealed write entry at {at:#x} names data that is not \
                     all durable; mount will drop it"
                ));
            }
            end = at;
            pos = (
                log.pages
                    .iter()
                    .position(|&p| p == at - at % BLOCK_SIZE)
                    .unwrap(),
                (at % BLOCK_SIZE) / SLOT,
            );
        }
    }
    if repair {
        void_sealed_past(pm, log, pos);
    }
    // An empty log stays "no tail".
    Ok(
        if end == log.pages.first().copied().unwrap_or(0) && log.tail == 0 {
            0
        } else {
            end
        },
    )
}

/// Where sealed writes past the committed tail would start: (page index, slot).
fn sealed_start(log: &ScannedLog<'_>) -> Option<(usize, u64)> {
    if log.tail == 0 {
        return (!log.pages.is_empty()).then_some((0, 0));
    }
    let page = log.tail - log.tail % BLOCK_SIZE;
    let i = log.pages.iter().position(|&p| p == page)?;
    Some((i, (log.tail % BLOCK_SIZE) / SLOT))
}

/// The sealed write at `pos`, if a valid one is there, with `pos` moved past it; at
/// the end of a page the log moved on from, looks in the next page.
fn next_sealed(
    pm: &dyn Pmem,
    geo: &Geometry,
    st: &InodeState,
    log: &ScannedLog<'_>,
    pos: &mut (usize, u64),
) -> Option<(u64, Entry, (u64, Finish))> {
    for _ in 0..2 {
        let (i, slot) = *pos;
        if slot < SLOTS_PER_PAGE {
            let at = log.pages[i] + slot * SLOT;
            let mut first = [0u8; SLOT as usize];
            pm.read(at, &mut first);
            if let Some(seal) = Entry::seal_of(&first) {
                let e = Entry::decode(&first).ok()?;
                validate_entry(geo, st, &e).ok()?;
                *pos = (i, slot + 1);
                return Some((at, e, seal));
            }
        }
        // The writer records the slots used in a page as it moves on from it.
        if slot == 0 || log.used_in[i] != slot || i + 1 >= log.pages.len() {
            return None;
        }
        *pos = (i + 1, 0);
    }
    None
}

/// Whether the slot after the log's end `pos`, in the same page, holds a sealed write
/// entry whose checksum holds.
fn sealed_follows(pm: &dyn Pmem, log: &ScannedLog<'_>, (i, slot): (usize, u64)) -> bool {
    if slot + 1 >= SLOTS_PER_PAGE {
        return false;
    }
    let mut next = [0u8; SLOT as usize];
    pm.read(log.pages[i] + (slot + 1) * SLOT, &mut next);
    Entry::seal_of(&next).is_some() && Entry::decode(&next).is_ok()
}

/// Damage that ends the sealed writes at the end `(i, slot)` of a full log page
/// with a page after it: the page's count of used slots is neither 0 (the writer
/// had not yet durably moved on: the first slot of the next page may be a write in
/// flight) nor full; or it is 0 while the next page holds a sealed write past its
/// first slot, which only a write after a returned one can have put there.
fn damaged_page_end(
    pm: &dyn Pmem,
    log: &ScannedLog<'_>,
    (i, slot): (usize, u64),
) -> Option<String> {
    let next = *log.pages.get(i + 1)?;
    if slot != SLOTS_PER_PAGE {
        return None;
    }
    let (page, used) = (log.pages[i], log.used_in[i]);
    if used != 0 && used != slot {
        return Some(format!(
            "log page {page:#x} is full but claims {used} used slots"
        ));
    }
    let mut second = [0u8; SLOT as usize];
    pm.read(next + SLOT, &mut second);
    let written = used == 0 && Entry::seal_of(&second).is_some() && Entry::decode(&second).is_ok();
    written.then(|| {
        format!("log page {next:#x} holds sealed writes, but the full page {page:#x} before it does not record that the log moved on")
    })
}

/// The seal of what is durable in the blocks a sealed write names, finished as its
/// kind says.
fn durable_seal(pm: &dyn Pmem, e: &Entry, how: Finish) -> u64 {
    let Entry::Write { block, npages, .. } = *e else {
        unreachable!("only writes are sealed")
    };
    let mut seal = pmem::seal::Seal::new();
    let mut buf = vec![0u8; BLOCK_SIZE as usize];
    for b in block..block + npages as u64 {
        pm.read(b * BLOCK_SIZE, &mut buf);
        seal.update(&buf);
    }
    seal.finish_as(how)
}

/// Voids a sealed write in the slot at the end of the log (`pos`) or in the first slot
/// of the page after: the only places a write in flight at the crash can have left
/// one, which a later entry could otherwise bring back to life by filling the slots
/// before it.
fn void_sealed_past(pm: &dyn Pmem, log: &ScannedLog<'_>, (i, slot): (usize, u64)) {
    let mut at = Vec::with_capacity(2);
    if slot < SLOTS_PER_PAGE {
        at.push(log.pages[i] + slot * SLOT);
    }
    if let Some(&next) = log.pages.get(i + 1) {
        at.push(next);
    }
    for at in at {
        let mut first = [0u8; SLOT as usize];
        pm.read(at, &mut first);
        if Entry::seal_of(&first).is_some() {
            pm.store_u64_persist(at, Entry::void_word(&first));
        }
    }
}

fn validate_entry(geo: &Geometry, st: &InodeState, e: &Entry) -> std::result::Result<(), String> {
    // A symbolic link's target is read whole into memory: its size is bounded.
    if st.kind == FileKind::Symlink {
        if let Entry::Write { size, .. } | Entry::Attr { size, .. } = e {
            if *size >= crate::MAX_PATH as u64 {
                return Err(format!("symbolic link of {size} bytes"));
            }
        }
    }
    match e {
        Entry::Write {
            pgoff,
            block,
            npages,
            size,
            ..
        } => {
            if st.kind == FileKind::Dir {
                return Err("write entry in a directory".into());
            }
            let end = block.checked_add(*npages as u64);
            if *npages == 0
                || *block < geo.pool_start
                || end.is_none_or(|end| end > geo.total_blocks)
            {
                return Err(format!("data blocks {block}+{npages} outside the pool"));
            }
            if pgoff.checked_add(*npages as u64).is_none() || *size > crate::MAX_FILE_SIZE {
                return Err("impossible file range".into());
            }
        }
        Entry::Attr { size, .. } if *size > crate::MAX_FILE_SIZE => {
            return Err("impossible file size".into())
        }
        Entry::Xattr { .. } => validate_xattr_entry(geo, e)?,
        Entry::Punch { pgoff, npages, .. } => {
            if st.kind != FileKind::File {
                return Err("punch entry in a non-file".into());
            }
            if pgoff.checked_add(*npages).is_none() {
                return Err("impossible punched range".into());
            }
        }
        Entry::DentryAdd { ino, name, .. } | Entry::DentryDel { ino, name, .. } => {
            if st.kind != FileKind::Dir {
                return Err("directory entry in a non-directory".into());
            }
            if *ino <= ROOT_INO || *ino >= geo.inodes {
                return Err(format!("directory entry {name:?} names inode {ino}"));
            }
            if name == "." || name == ".." || name.contains('/') {
                return Err(format!("directory entry with illegal name {name:?}"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// An xattr entry names extents inside the pool that can hold its bytes, or nothing.
fn validate_xattr_entry(geo: &Geometry, e: &Entry) -> std::result::Result<(), String> {
    let Entry::Xattr { extents, bytes, .. } = e else {
        return Ok(());
    };
    let mut blocks = 0u64;
    for &(start, len) in extents {
        let end = start.checked_add(len as u64);
        if len == 0 || start < geo.pool_start || end.is_none_or(|end| end > geo.total_blocks) {
            return Err(format!(
                "extended attribute blocks {start}+{len} outside the pool"
            ));
        }
        blocks += len as u64;
    }
    let fits = *bytes as u64 <= blocks * BLOCK_SIZE
        && *bytes as usize <= crate::xattr::MAX_XATTR_SET_BYTES
        && (*bytes == 0) == extents.is_empty();
    if !fits {
        return Err(format!(
            "extended attribute set of {bytes} bytes in {blocks} blocks"
        ));
    }
    Ok(())
}

/// Walks the tree from the root: every directory entry names a live inode, every
/// directory is reached once, link counts match, and unreachable inodes are orphans.
fn check_tree(s: &mut Scan) {
    let Some(root) = s.states.get(&ROOT_INO) else {
        s.problems.push("root directory missing".into());
        return;
    };
    if root.kind != FileKind::Dir {
        s.problems.push("root is not a directory".into());
        return;
    }
    let mut refs: HashMap<u64, u32> = HashMap::new();
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    let mut parents: Vec<(u64, u64)> = vec![(ROOT_INO, ROOT_INO)];
    let mut queue = VecDeque::from([ROOT_INO]);
    let mut seen_dirs = std::collections::HashSet::from([ROOT_INO]);
    while let Some(dir) = queue.pop_front() {
        let mut children: Vec<(String, u64)> = s.states[&dir]
            .children
            .iter()
            .map(|(n, &i)| (n.clone(), i))
            .collect();
        children.sort();
        for (name, child) in children {
            let Some(cst) = s.states.get(&child) else {
                s.problems.push(format!(
                    "directory {dir}: entry {name:?} names inode {child}, which is not in use"
                ));
                s.fixes.push(Fix::Dangling {
                    dir,
                    name,
                    ino: child,
                });
                continue;
            };
            *refs.entry(child).or_default() += 1;
            if cst.kind == FileKind::Dir {
                *subdirs.entry(dir).or_default() += 1;
                if !seen_dirs.insert(child) {
                    s.problems
                        .push(format!("directory {child} is linked more than once"));
                    continue;
                }
                parents.push((child, dir));
                queue.push_back(child);
            }
        }
    }
    for (child, parent) in parents {
        s.states.get_mut(&child).unwrap().parent = parent;
    }
    let mut inos: Vec<u64> = s.states.keys().copied().collect();
    inos.sort_unstable();
    for ino in inos {
        let st = &s.states[&ino];
        let reached = ino == ROOT_INO || refs.contains_key(&ino);
        if !reached {
            s.orphans.push(ino);
            s.notes
                .push(format!("inode {ino} is not in any directory (orphan)"));
            continue;
        }
        let expect = match st.kind {
            FileKind::Dir => 2 + subdirs.get(&ino).copied().unwrap_or(0),
            _ => refs[&ino],
        };
        if st.nlink != expect {
            s.problems.push(format!(
                "inode {ino}: link count {} but {expect} references",
                st.nlink
            ));
            s.fixes.push(Fix::LinkCount { ino, expect });
        }
    }
    s.report.orphans_freed = s.orphans.len() as u64;
}
