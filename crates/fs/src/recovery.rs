//! Format, mount and recovery: rebuilding the DRAM state from the region.
//!
//! Mount reads the superblock (or its replica) and rolls back active journals. After a
//! clean unmount that is nearly all: the block allocator is the bitmap the unmount
//! saved, and an inode is read — its log walked, every checksum and pointer verified
//! before it is followed, every block it references checked to be allocated — only
//! when a directory entry first names it, so mounting costs the same whatever the size
//! of the image. After a crash (or when the saved bitmap fails its checksum) mount
//! walks every valid inode's log the same way, drops committed writes whose SN never
//! completed, frees inodes no directory reaches (unlinked while open, or created by an
//! interrupted operation), checks the tree, and rebuilds the allocator from what the
//! logs reference. `fsck` runs that full scan without changing anything.
//!
//! Mount state block ([`MOUNT_BLOCK`]):
//!
//! | offset | size | field                                                   |
//! |--------|------|---------------------------------------------------------|
//! | 0      | 8    | clean word: [`CLEAN`] after a clean unmount, else 0     |
//! | 8      | 4    | CRC-32C of the saved bitmap                             |
//! | 16     | 8    | free blocks recorded in the bitmap                      |
//!
//! The saved bitmap has one bit per block of the region (1 = free), from block 0.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use pmem::Pmem;
use serde::Serialize;

use crate::alloc::{BlockAlloc, Blocks, Extent, InoAlloc, LoadFree};
use crate::epoch::Epoch;
use crate::error::{Error, Result};
use crate::inode::{
    FileKind, Inode, InodeRecord, InodeState, HEAD_OFF, TAIL_OFF, VALID, VALID_OFF,
};
use crate::journal;
use crate::layout::{unseal_log_word, Geometry, LogWord, BLOCK_SIZE, MOUNT_BLOCK, ROOT_INO};
use crate::log::{Entry, LogState, PAGE_MAGIC, SLOT, SLOTS_PER_PAGE, TRAILER_OFF};
use crate::{FileSystem, Mode, MountOptions};

/// Clean word of a cleanly unmounted file system.
pub const CLEAN: u64 = 0x4E41_454C_434F_4945; // "EIOCLEAN"
pub(crate) const CLEAN_OFF: u64 = MOUNT_BLOCK * BLOCK_SIZE;
const BITMAP_CSUM_OFF: u64 = CLEAN_OFF + 8;
const BITMAP_FREE_OFF: u64 = CLEAN_OFF + 16;

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
}

/// Writes an empty file system: superblock, cleared metadata, root directory.
pub(crate) fn format(pm: &dyn Pmem, geo: &Geometry) -> Result<()> {
    // Zero every metadata block: the superblock's two (a device or an old image keeps
    // what was there before: the bytes after the superblock would differ between
    // the two copies, and an old superblock must not mount an interrupted format),
    // journals, inode table, mount state, records.
    let zero = vec![0u8; BLOCK_SIZE as usize];
    for b in 0..geo.pool_start {
        pm.write(b * BLOCK_SIZE, &zero);
        pm.flush(b * BLOCK_SIZE, BLOCK_SIZE);
    }
    pm.fence();
    engine::format_records(pm, geo.records_off(), geo.channels as usize)
        .map_err(|e| Error::Mover(e.into()))?;
    let now = crate::now_ns();
    let root = InodeRecord {
        ino: ROOT_INO,
        kind: FileKind::Dir,
        mode: 0o755,
        // SAFETY: geteuid/getegid cannot fail.
        uid: unsafe { libc::geteuid() },
        // SAFETY: as above.
        gid: unsafe { libc::getegid() },
        ctime: now,
        rdev: 0,
    };
    let off = geo.inode_off(ROOT_INO);
    root.write(pm, off);
    pm.store_u64_persist(off + VALID_OFF, VALID);
    // An empty pool, saved as after a clean unmount, so the first mount is fast.
    let pool = Extent {
        start: geo.pool_start,
        len: geo.pool_blocks(),
    };
    let blocks = BlockAlloc::with_free(geo.pool_start, geo.total_blocks, [pool]);
    save_clean(pm, geo, Some(&blocks));
    // The superblock last: a region whose format was interrupted does not mount.
    geo.write(pm);
    Ok(())
}

pub(crate) fn mount(pm: Arc<dyn Pmem>, opts: MountOptions) -> Result<(FileSystem, MountReport)> {
    mount_with(pm, opts, false).map(|(fs, report, _)| (fs, report))
}

/// A read-write mount for `fsck --repair` of an image that is not marked clean: the
/// full scan accepts the problems in [`Fix`] (returned for the caller to fix) and
/// refuses every other one.
pub(crate) fn mount_for_repair(pm: Arc<dyn Pmem>) -> Result<(FileSystem, Vec<Fix>)> {
    let opts = MountOptions {
        read_only_on_damage: false,
        ..MountOptions::default()
    };
    mount_with(pm, opts, true).map(|(fs, _, fixes)| (fs, fixes))
}

fn mount_with(
    pm: Arc<dyn Pmem>,
    opts: MountOptions,
    repair: bool,
) -> Result<(FileSystem, MountReport, Vec<Fix>)> {
    let start = Instant::now();
    let mut fixes = Vec::new();
    if opts.read_only {
        return mount_read_only(pm, opts, Vec::new(), start).map(|(fs, r)| (fs, r, fixes));
    }
    let (mut geo, replica_reason) = Geometry::read(&*pm)?;
    let upgraded_from = (geo.version < crate::layout::FORMAT_VERSION).then_some(geo.version);
    if upgraded_from.is_some() {
        // Before anything else is written (see `crate::layout`).
        geo.upgrade(&*pm);
    }
    let replay = journal::replay(&*pm, &geo)?;
    let clean = pm.load_u64(CLEAN_OFF) == CLEAN && !repair;
    let lazy = clean;
    let (states, blocks, mut report) = if clean {
        load_clean(&pm, geo)?
    } else {
        match full_scan(&*pm, geo, repair)? {
            Ok((states, blocks, report, found)) => {
                fixes = found;
                (states, Blocks::built(blocks), report)
            }
            Err(problems) if opts.read_only_on_damage => {
                return mount_read_only(pm, opts, problems, start).map(|(fs, r)| (fs, r, fixes))
            }
            Err(problems) => return Err(damage_error(&problems)),
        }
    };
    // From here on a crash must not trust the saved bitmap.
    pm.store_u64_persist(CLEAN_OFF, 0);

    let inos = InoAlloc::new(ROOT_INO + 1..geo.inodes);
    let inodes = in_dram(states);
    report.clean = lazy;
    report.format_upgraded_from = upgraded_from;
    report.superblock_replica_used = replica_reason;
    report.journals_rolled_back = replay.rolled_back;
    report.journal_words_restored = replay.words_restored;
    report.inodes = inodes.len() as u64;
    report.free_blocks = blocks.free_blocks();
    if report.superblock_replica_used.is_some() {
        // Heal the primary from the replica.
        geo.write(&*pm);
    }
    check_mover_options(&opts, &geo)?;
    let mover = mover::build(opts.mode, pm.clone(), geo.records_off(), &opts.mover)
        .map_err(Error::Mover)?;
    let fs = FileSystem {
        pm,
        geo,
        inodes: RwLock::new(inodes),
        lazy,
        blocks,
        inos,
        journals: (0..geo.journals).map(|_| Mutex::new(())).collect(),
        epoch: Epoch::new(),
        fds: RwLock::new(Vec::new()),
        rename_lock: Mutex::new(()),
        mover,
        deferred: Mutex::new(Vec::new()),
        lock_across_wait: opts.lock_across_wait,
        read_only: false,
        unmounted: AtomicBool::new(false),
        watcher: std::sync::OnceLock::new(),
        changes: Default::default(),
    };
    report.mount_us = start.elapsed().as_micros() as u64;
    Ok((fs, report, fixes))
}

/// The state of a cleanly unmounted image: nothing needs repair, the allocator is the
/// saved one, read when first used, and inodes are read when first named (see
/// `FileSystem::child_inode`) — only the root now.
fn load_clean(
    pm: &Arc<dyn Pmem>,
    geo: Geometry,
) -> Result<(HashMap<u64, InodeState>, Blocks, MountReport)> {
    let source = pm.clone();
    let load: LoadFree = Box::new(move || {
        load_bitmap(&*source, &geo).unwrap_or_else(|| referenced_free(&*source, &geo))
    });
    let saved_free = pm.load_u64(BITMAP_FREE_OFF);
    let blocks = Blocks::lazy(geo.pool_start, geo.total_blocks, saved_free, load);
    let root = load_inode(&**pm, &geo, ROOT_INO, ROOT_INO, &blocks)?;
    if root.kind != FileKind::Dir {
        return Err(Error::Corrupt("root is not a directory".into()));
    }
    Ok((
        HashMap::from([(ROOT_INO, root)]),
        blocks,
        MountReport::default(),
    ))
}

/// The DRAM inodes of rebuilt states.
fn in_dram(states: HashMap<u64, InodeState>) -> HashMap<u64, Arc<Inode>> {
    states
        .into_iter()
        .map(|(ino, st)| {
            let inode = Arc::new(Inode {
                ino,
                state: RwLock::new(st),
                opens: AtomicU32::new(0),
                io_lock: rt::sync::Mutex::new(()),
            });
            (ino, inode)
        })
        .collect()
}

/// Refuses mover options the mode or the image cannot honour.
fn check_mover_options(opts: &MountOptions, geo: &Geometry) -> Result<()> {
    if !opts.mode.uses_engine() && opts.mover.engine != engine::BackendKind::Software {
        return Err(Error::Invalid(format!(
            "the {} engine was asked for, but mode {} copies without an engine \
             (dma-sync and async use one)",
            opts.mover.engine.name(),
            opts.mode
        )));
    }
    if opts.mode.uses_engine() && opts.mover.engine_channels as u64 > geo.channels {
        return Err(Error::Invalid(format!(
            "{} engine channels requested; the file system was formatted with {}",
            opts.mover.engine_channels, geo.channels
        )));
    }
    Ok(())
}

/// The error of a mount that found damage and may not fall back to read-only.
fn damage_error(problems: &[String]) -> Error {
    let n = problems.len();
    let first: Vec<&str> = problems.iter().take(3).map(String::as_str).collect();
    Error::Corrupt(format!(
        "{} ({n} problem{} found; run `easyio fsck` for all)",
        first.join("; "),
        if n == 1 { "" } else { "s" }
    ))
}

/// A read-only mount: the region is seen through a view that rolls back interrupted
/// operations in memory and refuses stores; inodes are read when first named, each
/// checked on its own, so a damaged one is `Error::Corrupt` and the rest read back.
fn mount_read_only(
    pm: Arc<dyn Pmem>,
    opts: MountOptions,
    damage: Vec<String>,
    start: Instant,
) -> Result<(FileSystem, MountReport)> {
    let (geo, replica_reason) = Geometry::read(&*pm)?;
    let mut words = HashMap::new();
    for j in 0..geo.journals {
        if let Some(records) = journal::pending(&*pm, &geo, j)? {
            words.extend(records);
        }
    }
    let clean = pm.load_u64(CLEAN_OFF) == CLEAN;
    let view: Arc<dyn Pmem> = Arc::new(crate::fsck::RolledBack { pm, words });
    let source = view.clone();
    let load: LoadFree = Box::new(move || {
        load_bitmap(&*source, &geo).unwrap_or_else(|| referenced_free(&*source, &geo))
    });
    let saved_free = view.load_u64(BITMAP_FREE_OFF);
    let blocks = Blocks::lazy(geo.pool_start, geo.total_blocks, saved_free, load);
    let root = load_inode(&*view, &geo, ROOT_INO, ROOT_INO, &blocks)?;
    if root.kind != FileKind::Dir {
        return Err(Error::Corrupt("root is not a directory".into()));
    }
    let root = Arc::new(Inode {
        ino: ROOT_INO,
        state: RwLock::new(root),
        opens: AtomicU32::new(0),
        io_lock: rt::sync::Mutex::new(()),
    });
    let report = MountReport {
        clean,
        superblock_replica_used: replica_reason,
        inodes: 1,
        free_blocks: saved_free,
        read_only: true,
        damage,
        mount_us: start.elapsed().as_micros() as u64,
        ..MountReport::default()
    };
    let mover = mover::build(Mode::Cpu, view.clone(), geo.records_off(), &opts.mover)
        .map_err(Error::Mover)?;
    let fs = FileSystem {
        pm: view,
        geo,
        inodes: RwLock::new(HashMap::from([(ROOT_INO, root)])),
        lazy: true,
        blocks,
        inos: InoAlloc::new(0..0),
        journals: (0..geo.journals).map(|_| Mutex::new(())).collect(),
        epoch: Epoch::new(),
        fds: RwLock::new(Vec::new()),
        rename_lock: Mutex::new(()),
        mover,
        deferred: Mutex::new(Vec::new()),
        lock_across_wait: false,
        read_only: true,
        unmounted: AtomicBool::new(false),
        watcher: std::sync::OnceLock::new(),
        changes: Default::default(),
    };
    Ok((fs, report))
}

/// Mount after a crash (or with a saved allocator that fails its checksum): every
/// inode read and checked, orphans freed, the allocator rebuilt from what the logs
/// reference.
/// Damage found (as `fsck` words it) is the inner error. With `repair`, problems that
/// are all [`Fix`]es are accepted and returned.
#[allow(clippy::type_complexity)]
fn full_scan(
    pm: &dyn Pmem,
    geo: Geometry,
    repair: bool,
) -> Result<
    std::result::Result<(HashMap<u64, InodeState>, BlockAlloc, MountReport, Vec<Fix>), Vec<String>>,
> {
    let mut scan = scan(pm, geo, true)?;
    let fixable = repair && scan.problems.len() == scan.fixes.len();
    if !scan.problems.is_empty() && !fixable {
        return Ok(Err(scan.problems));
    }
    let mut orphans = std::mem::take(&mut scan.orphans);
    if repair {
        // An inode unlinked while open has no links left; one with links that no
        // reached directory names was reached through a dropped one: it is kept, and
        // so is what it reaches; those no other kept directory names go to lost+found.
        let kept: Vec<u64> = orphans
            .iter()
            .copied()
            .filter(|i| scan.states[i].nlink > 0)
            .collect();
        let named: std::collections::HashSet<u64> = kept
            .iter()
            .flat_map(|i| scan.states[i].children.values().copied())
            .collect();
        for &ino in &kept {
            if !named.contains(&ino) {
                scan.fixes.push(Fix::Lost { ino });
            }
        }
        orphans.retain(|i| !kept.contains(i));
    }
    // Free orphans durably before anything can reuse their number.
    for &ino in &orphans {
        pm.store_u64_persist(geo.inode_off(ino) + VALID_OFF, 0);
        if let Some(st) = scan.states.remove(&ino) {
            for p in &st.log.pages {
                scan.used[(p / BLOCK_SIZE - geo.pool_start) as usize] = false;
            }
            for e in st.data_extents() {
                for b in e.start..e.start + e.len {
                    scan.used[(b - geo.pool_start) as usize] = false;
                }
            }
        }
    }
    let blocks = BlockAlloc::with_free(
        geo.pool_start,
        geo.total_blocks,
        free_extents(&scan.used, geo.pool_start),
    );
    Ok(Ok((scan.states, blocks, scan.report, scan.fixes)))
}

/// The free blocks when the saved bitmap fails its checksum: those no inode that
/// reads without error references (an inode too damaged to read is refused when used,
/// so its blocks are not missed).
fn referenced_free(pm: &dyn Pmem, geo: &Geometry) -> Vec<Extent> {
    let mut used = vec![false; geo.pool_blocks() as usize];
    let mut report = MountReport::default();
    let mut notes = Vec::new();
    for ino in ROOT_INO..geo.inodes {
        if pm.load_u64(geo.inode_off(ino) + VALID_OFF) != VALID {
            continue;
        }
        let mut mark = |b: u64| {
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
    let mut mark = |b: u64| {
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

fn free_extents(used: &[bool], pool_start: u64) -> Vec<Extent> {
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
        let mut mark = |block: u64| mark_used(used, pool_start, block);
        match scan_inode(pm, &geo, ino, repair, &mut mark, &mut found) {
            Ok(st) => {
                s.states.insert(ino, st);
            }
            Err(e) => s.problems.push(e.to_string()),
        }
    }
    check_tree(&mut s);
    Ok(s)
}

/// The inodes in use that cannot be kept: a valid word that is neither valid nor free,
/// or a record or log that fails its checks, or a block also referenced by an inode of
/// a lower number that reads (which keeps it). Each with why.
pub(crate) fn unreadable_inodes(pm: &dyn Pmem, geo: &Geometry) -> Vec<(u64, String)> {
    let mut used = vec![false; geo.pool_blocks() as usize];
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
        let mut mine = std::collections::HashSet::new();
        let mut mark = |b: u64| {
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
        if let Err(e) = scan_inode(pm, geo, ino, false, &mut mark, &mut found) {
            out.push((ino, e.to_string()));
            continue;
        }
        let index = |b: u64| (b - geo.pool_start) as usize;
        if let Some(b) = blocks.iter().find(|&&b| used[index(b)]) {
            out.push((
                ino,
                format!("inode {ino}: block {b} is also referenced by a lower-numbered inode"),
            ));
            continue;
        }
        for b in blocks {
            used[index(b)] = true;
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
/// before it is followed; `mark(block)` is told every pool block the inode references
/// (log pages and data) and may refuse one.
fn scan_inode(
    pm: &dyn Pmem,
    geo: &Geometry,
    ino: u64,
    repair: bool,
    mark: &mut dyn FnMut(u64) -> std::result::Result<(), String>,
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
    st.log = LogState {
        head,
        tail,
        pages,
        entries: st.log.entries,
    };
    for e in st.data_extents() {
        for b in e.start..e.start + e.len {
            mark(b).map_err(|why| bad(format!("data: {why}")))?;
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
    mark: &mut dyn FnMut(u64) -> std::result::Result<(), String>,
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
        mark(next / BLOCK_SIZE).map_err(|why| bad(format!("log page {next:#x}: {why}")))?;
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
