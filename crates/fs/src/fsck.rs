//! `fsck`: a read-only check of a file system image, and its repair.
//!
//! [`check`] checks the superblock and its replica, the journals, every inode record
//! and log entry checksum, every pointer, that every pool block is referenced at most
//! once, that (after a clean unmount) the saved allocator agrees with what is
//! referenced, link counts, and that every inode is reachable from the root.
//!
//! [`repair`] (`easyio fsck --repair`) makes an image with damaged inodes mount
//! read-write again. What it does, per kind of damage [`check`] reports:
//!
//! | damage | repair |
//! |--------|--------|
//! | an inode that cannot be read: valid word neither valid nor free, record checksum, log head/tail seal, a log page or entry that fails its checks, a pointer out of range | the inode is dropped: its valid word cleared, every directory entry naming it removed, the link count of those directories fixed, the blocks it referenced freed |
//! | a file page in a block another reference claims (a log page, a page of a lower-numbered inode, or an earlier page of the same file) | the page gets a copy of the block, so that both read what they read before; the block stays with the other |
//! | a log page or extended-attribute block referenced by two inodes | the lower-numbered inode keeps it; the other is dropped as above |
//! | a directory entry naming an inode not in use | the entry is removed |
//! | a link count that is not the references the tree holds | set to those references |
//! | after a clean unmount: orphan inodes, a saved allocator that is corrupt or disagrees with the references | orphans are freed and the allocator rebuilt, as recovery after a crash does |
//! | a primary superblock that fails its checks, or a replica that differs | both rewritten from the one that reads |
//! | interrupted operations in the journals | rolled back, as mount does |
//! | a completion record whose header (magic, channel, version) does not read | the headers rewritten, every counter kept |
//!
//! What only a dropped directory reached — inodes that read, with links, that no
//! directory of the tree names — is kept: each one no other kept directory names gets
//! an entry `#INO` in `/lost+found` (created if absent, mode 0700), a file its link
//! count set to 1; a kept directory keeps what it names. (Inodes with no links that no
//! directory names were unlinked while open before a crash: freed, as recovery does.)
//! A kept directory's own entries are checked from the next pass on: repair runs up to
//! [`REPAIR_PASSES`] passes while one changes something and problems remain.
//!
//! Refused, with nothing written: no superblock that reads (primary and replica both
//! damaged); a journal that fails its checks; a root directory that cannot be read or
//! is not a directory; a directory linked from two places; any problem not in the
//! table. The report says which, and `easyio fsck --repair` exits 4.
//!
//! Every change goes through the paths a mount uses: journal rollback, a durable
//! clear of the clean word (so that a crash part-way leaves an image whose next mount
//! does a full recovery), durable clears of valid words, then a read-write mount whose
//! full scan rebuilds the allocator, and entries appended to directory and inode logs
//! (each committed by its tail store). A crash at any point leaves an image that
//! `repair` takes up again.

use std::collections::HashMap;

use std::sync::Arc;

use pmem::Pmem;
use serde::Serialize;

use crate::clean::{load_bitmap, CLEAN, CLEAN_OFF};
use crate::error::Result;
use crate::inode::VALID_OFF;
use crate::journal;
use crate::layout::{Geometry, BLOCK_SIZE, ROOT_INO};
use crate::log::Entry;
use crate::recovery::{scan, Fix};
use crate::rolled_back::RolledBack;
use crate::FileKind;

/// What fsck found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FsckReport {
    /// Inconsistencies: any makes the image bad.
    pub problems: Vec<String>,
    /// States a mount repairs by design (interrupted operations, orphans after a
    /// crash, writes whose copy never completed).
    pub notes: Vec<String>,
    /// The image was cleanly unmounted (its saved allocator was checked too).
    pub clean_unmount: bool,
    /// Inodes in use.
    pub inodes: u64,
    /// Log entries replayed.
    pub log_entries: u64,
    /// Pool blocks the inodes reference (log pages, data, extended attributes).
    pub used_blocks: u64,
    /// Blocks in the pool.
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
    let Some(geo) = check_superblocks(pm, &mut r) else {
        return Ok(r);
    };
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
        check_clean_image(pm, &geo, s.orphans.len(), &s.used, &mut r);
    }
    Ok(r)
}

/// The geometry, from the primary superblock or its replica, noting in `r` what is
/// wrong with either; `None` if neither reads.
fn check_superblocks(pm: &dyn Pmem, r: &mut FsckReport) -> Option<Geometry> {
    let mut sb = vec![0u8; 128];
    let mut replica = vec![0u8; 128];
    pm.read(0, &mut sb);
    pm.read(BLOCK_SIZE, &mut replica);
    let upgrading = crate::layout::differ_in_version_only(&sb, &replica);
    let geo = match Geometry::read(pm) {
        Ok((g, None)) => g,
        Ok((g, Some(_))) if upgrading => {
            r.notes.push(
                "primary superblock torn by an interrupted format upgrade; the next \
                 writable mount completes it from the replica"
                    .into(),
            );
            g
        }
        Ok((g, Some(why))) => {
            r.problems
                .push(format!("primary superblock bad ({why}); replica is good"));
            g
        }
        Err(e) => {
            r.problems.push(e.to_string());
            return None;
        }
    };
    if sb != replica && r.problems.is_empty() && r.notes.is_empty() {
        if upgrading {
            r.notes.push(
                "superblock replica is of a newer format version than the primary (an \
                 interrupted upgrade); the next writable mount completes it"
                    .into(),
            );
        } else {
            r.problems
                .push("superblock replica differs from the primary".into());
        }
    }
    Some(geo)
}

/// What a cleanly unmounted image must also be: free of orphans, its saved bitmap
/// readable and in agreement with what the inodes reference (nothing in use counted
/// free, nothing leaked).
fn check_clean_image(
    pm: &dyn Pmem,
    geo: &Geometry,
    orphans: usize,
    used: &[bool],
    r: &mut FsckReport,
) {
    if orphans > 0 {
        r.problems
            .push(format!("{orphans} orphan inode(s) after a clean unmount"));
    }
    match load_bitmap(pm, geo) {
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
            for (i, (&u, &f)) in used.iter().zip(&is_free).enumerate() {
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

/// What [`repair`] found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepairReport {
    /// The check before repair.
    pub before: FsckReport,
    /// What was changed, one line per step.
    pub actions: Vec<String>,
    /// Why nothing was changed, when repair refused the image.
    pub refused: Vec<String>,
    /// The check after repair (the one before, if nothing was changed).
    pub after: FsckReport,
}

impl RepairReport {
    /// The image is clean now.
    pub fn ok(&self) -> bool {
        self.after.ok()
    }
}

/// Passes of [`repair`] at most: a directory kept in lost+found is checked as part of
/// the tree only from the pass after the one that linked it (one more pass fixes what
/// it names), and a pass that changes nothing ends the repair.
pub const REPAIR_PASSES: usize = 3;

/// Repairs the image on `pm` as the module documentation says: damaged inodes are
/// dropped with the directory entries naming them and the blocks only they
/// referenced, what only a dropped directory reached is kept in `/lost+found`, link
/// counts fixed, the allocator rebuilt. An image whose damage repair does not handle
/// is left unchanged, with why in [`RepairReport::refused`].
pub fn repair(pm: Arc<dyn Pmem>) -> Result<RepairReport> {
    let mut r = repair_pass(pm.clone())?;
    for _ in 1..REPAIR_PASSES {
        if r.ok() || r.actions.is_empty() || !r.refused.is_empty() {
            break;
        }
        let next = repair_pass(pm.clone())?;
        if next.actions.is_empty() {
            break;
        }
        r.actions.extend(next.actions);
        r.refused = next.refused;
        r.after = next.after;
    }
    Ok(r)
}

/// One pass of [`repair`].
fn repair_pass(pm: Arc<dyn Pmem>) -> Result<RepairReport> {
    let before = check(&*pm)?;
    let mut r = RepairReport {
        before: before.clone(),
        after: before,
        ..RepairReport::default()
    };
    if r.before.ok() {
        return Ok(r);
    }
    let geo = match Geometry::read(&*pm) {
        Ok((g, _)) => g,
        Err(e) => {
            r.refused.push(format!("no superblock reads: {e}"));
            return Ok(r);
        }
    };
    // What mount will see once the journals are rolled back and the unreadable
    // inodes dropped: every problem left must be one a mounted file system fixes.
    let mut words = std::collections::HashMap::new();
    for j in 0..geo.journals {
        match journal::pending(&*pm, &geo, j) {
            Ok(Some(records)) => words.extend(records),
            Ok(None) => {}
            Err(e) => r.refused.push(format!("{e} (journals are not repaired)")),
        }
    }
    let records_bad =
        engine::read_counters(&*pm, geo.records_off(), geo.channels as usize).is_err();
    if !r.refused.is_empty() {
        return Ok(r);
    }
    let rolled = RolledBack {
        pm: &*pm,
        words: words.clone(),
    };
    let drop = crate::recovery::unreadable_inodes(&rolled, &geo);
    if let Some((_, why)) = drop.iter().find(|(ino, _)| *ino == ROOT_INO) {
        r.refused
            .push(format!("the root directory cannot be read: {why}"));
        return Ok(r);
    }
    for (ino, _) in &drop {
        words.insert(geo.inode_off(*ino) + VALID_OFF, 0);
    }
    let after_drop = RolledBack { pm: &*pm, words };
    let s = scan(&after_drop, geo, false)?;
    if s.problems.len() != s.fixes.len() {
        refuse_unfixable(&s, &mut r.refused);
        return Ok(r);
    }
    if !s
        .states
        .get(&ROOT_INO)
        .is_some_and(|st| st.kind == FileKind::Dir)
    {
        r.refused.push("the root is not a directory".into());
        return Ok(r);
    }

    // From here on the image changes, each step durable before the next.
    repair_region(&*pm, &geo, records_bad, &drop, &mut r)?;
    let (fs, fixes) = crate::mount::mount_for_repair(pm.clone())?;
    let result = apply_fixes(&fs, &fixes, &mut r.actions);
    fs.unmount()?;
    result?;
    r.actions.push(
        "rebuilt the block allocator from what the inodes reference (freed what only \
         dropped inodes referenced)"
            .into(),
    );
    r.after = check(&*pm)?;
    Ok(r)
}

/// Fixes the tree problems a repair mount accepted: per inode, its dangling entries
/// removed and its link count set, committed together by one tail store.
/// Says why repair refuses: each problem no [`Fix`] covers.
fn refuse_unfixable(s: &crate::recovery::Scan, refused: &mut Vec<String>) {
    let mut fixable: Vec<String> = Vec::new();
    for f in &s.fixes {
        fixable.push(match f {
            Fix::Dangling { dir, name, ino } => {
                format!("directory {dir}: entry {name:?} names inode {ino}, which is not in use")
            }
            Fix::LinkCount { ino, .. } => format!("inode {ino}: link count"),
            Fix::Lost { ino } => format!("inode {ino} is not in any directory"),
            Fix::Shared { ino, pgoff, .. } => format!("inode {ino}: page {pgoff} is in block"),
        });
    }
    for p in &s.problems {
        if !fixable.iter().any(|f| p.starts_with(f.as_str())) {
            refused.push(format!("{p} (not repaired)"));
        }
    }
    if refused.is_empty() {
        refused.push("problems remain that repair does not handle".into());
    }
}

/// Repair's writes before the mount that fixes the tree: completion-record headers,
/// journals rolled back, superblocks, the clean word cleared, unreadable inodes
/// dropped — each durable before the next.
fn repair_region(
    pm: &dyn Pmem,
    geo: &Geometry,
    records_bad: bool,
    drop: &[(u64, String)],
    r: &mut RepairReport,
) -> Result<()> {
    if records_bad {
        engine::rewrite_record_headers(pm, geo.records_off(), geo.channels as usize)
            .map_err(|e| crate::Error::Corrupt(format!("completion records: {e}")))?;
        r.actions
            .push("rewrote the headers of the completion records (counters kept)".into());
    }
    let replay = journal::replay(pm, geo)?;
    if replay.rolled_back > 0 {
        r.actions.push(format!(
            "rolled back {} interrupted operation(s)",
            replay.rolled_back
        ));
    }
    if r.before.problems.iter().any(|p| p.contains("superblock")) {
        geo.write(pm);
        r.actions
            .push("rewrote the superblock and its replica".into());
    }
    // A crash from here on recovers with a full scan; the saved allocator is stale.
    pm.store_u64_persist(CLEAN_OFF, 0);
    for (ino, why) in drop {
        pm.store_u64_persist(geo.inode_off(*ino) + VALID_OFF, 0);
        r.actions.push(format!("dropped inode {ino} ({why})"));
    }
    Ok(())
}

fn apply_fixes(fs: &crate::FileSystem, fixes: &[Fix], actions: &mut Vec<String>) -> Result<()> {
    // Per inode: its dangling entries (name, inode named) and its link count to set.
    type InodeFixes = (Vec<(String, u64)>, Option<u32>);
    let mut per_inode: std::collections::BTreeMap<u64, InodeFixes> = Default::default();
    let mut lost = Vec::new();
    let mut shared: std::collections::BTreeMap<u64, Vec<(u64, u64)>> = Default::default();
    for f in fixes {
        match f {
            Fix::Lost { ino } => lost.push(*ino),
            Fix::Shared { ino, pgoff, block } => {
                shared.entry(*ino).or_default().push((*pgoff, *block));
            }
            Fix::Dangling { dir, name, ino } => per_inode
                .entry(*dir)
                .or_default()
                .0
                .push((name.clone(), *ino)),
            Fix::LinkCount { ino, expect } => per_inode.entry(*ino).or_default().1 = Some(*expect),
        }
    }
    for (ino, pages) in shared {
        copy_shared(fs, ino, &pages, actions)?;
    }
    for (ino, (dangling, nlink)) in per_inode {
        let inode = fs.inode(ino)?;
        let mut st = fs.write_state(&inode);
        let now = crate::now_ns();
        let mut entries: Vec<Entry> = dangling
            .iter()
            .map(|(name, child)| Entry::DentryDel {
                ino: *child,
                ctime: now,
                name: name.clone(),
            })
            .collect();
        if let Some(nlink) = nlink {
            entries.push(Entry::Link { nlink, ctime: now });
        }
        let staged = fs.stage(ino, &mut st, entries)?;
        let displaced = fs.commit_one(&mut st, staged);
        debug_assert!(displaced.is_empty());
        for (name, child) in &dangling {
            actions.push(format!(
                "removed entry {name:?} (inode {child}) from directory {ino}"
            ));
        }
        if let Some(nlink) = nlink {
            actions.push(format!("set the link count of inode {ino} to {nlink}"));
        }
    }
    if !lost.is_empty() {
        keep_lost(fs, &lost, actions)?;
    }
    Ok(())
}

/// Gives each page `(pgoff, block)` of file `ino` a copy of `block` of its own,
/// committed by one tail store; `block` stays with the reference that claimed it
/// first (it is not freed).
fn copy_shared(
    fs: &crate::FileSystem,
    ino: u64,
    pages: &[(u64, u64)],
    actions: &mut Vec<String>,
) -> Result<()> {
    let inode = fs.inode(ino)?;
    let mut st = fs.write_state(&inode);
    let fresh = fs.alloc_blocks(pages.len() as u64)?;
    let blocks = fresh.iter().flat_map(|e| e.start..e.start + e.len);
    let mut buf = vec![0u8; BLOCK_SIZE as usize];
    let mut entries = Vec::new();
    for (&(pgoff, block), new) in pages.iter().zip(blocks) {
        fs.pm.read(block * BLOCK_SIZE, &mut buf);
        fs.pm.copy_nt(new * BLOCK_SIZE, &buf);
        entries.push(Entry::Write {
            pgoff,
            block: new,
            npages: 1,
            size: st.size,
            mtime: st.mtime,
            sn: 0,
        });
        actions.push(format!(
            "copied block {block}, which page {pgoff} of inode {ino} shared, to block {new}"
        ));
    }
    let staged = match fs.stage(ino, &mut st, entries) {
        Ok(s) => s,
        Err(e) => {
            fresh.into_iter().for_each(|x| fs.blocks.free(x));
            return Err(e);
        }
    };
    // What the copies displace is the shared blocks: kept, not freed.
    fs.commit_one(&mut st, staged);
    Ok(())
}

/// Where [`repair`] keeps what only a dropped directory reached.
pub const LOST_FOUND: &str = "/lost+found";

/// Links each inode of `lost` into [`LOST_FOUND`] (created if absent) as `#INO`: the
/// entry and the inode's link count (1, for a non-directory) committed together
/// through a journal.
fn keep_lost(fs: &crate::FileSystem, lost: &[u64], actions: &mut Vec<String>) -> Result<()> {
    match fs.lstat(LOST_FOUND) {
        Ok(st) if st.kind == FileKind::Dir => {}
        Ok(_) => {
            actions.push(format!(
                "kept {} inode(s) only dropped directories reached, but {LOST_FOUND} is not a \
                 directory: they stay unlinked",
                lost.len()
            ));
            return Ok(());
        }
        Err(crate::Error::NotFound) => {
            fs.mkdir(LOST_FOUND, 0o700)?;
            actions.push(format!("created {LOST_FOUND}"));
        }
        Err(e) => return Err(e),
    }
    let dir = fs.resolve(LOST_FOUND, false)?;
    for &ino in lost {
        let name = format!("#{ino}");
        let child = fs.inode(ino)?;
        let mut dst = fs.write_state(&dir);
        if dst.children.contains_key(&name) {
            actions.push(format!(
                "kept inode {ino}, but {LOST_FOUND}/{name} exists: it stays unlinked"
            ));
            continue;
        }
        let mut cst = fs.write_state(&child);
        let is_dir = cst.kind == FileKind::Dir;
        let now = crate::now_ns();
        let mut entries = vec![Entry::DentryAdd {
            ino,
            ctime: now,
            name: name.clone(),
        }];
        if is_dir {
            entries.push(Entry::Link {
                nlink: dst.nlink + 1,
                ctime: now,
            });
        }
        let ps = fs.stage(dir.ino, &mut dst, entries)?;
        let cs = if is_dir {
            None
        } else {
            Some(fs.stage(
                ino,
                &mut cst,
                vec![Entry::Link {
                    nlink: 1,
                    ctime: now,
                }],
            )?)
        };
        let mut staged = vec![&ps];
        staged.extend(cs.as_ref());
        fs.commit_journaled(&staged, &[]);
        crate::FileSystem::apply_staged(&mut dst, ps);
        if let Some(cs) = cs {
            crate::FileSystem::apply_staged(&mut cst, cs);
        }
        if is_dir {
            cst.parent = dir.ino;
        }
        actions.push(format!(
            "kept inode {ino}, which only a dropped directory reached, as {LOST_FOUND}/{name}"
        ));
    }
    Ok(())
}
