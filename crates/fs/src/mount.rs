//! Format and mount: writing an empty file system, and rebuilding the DRAM state from
//! the region at mount (read-write, read-only, or for `fsck --repair`).
//!
//! Mount reads the superblock (or its replica) and rolls back active journals. After a
//! clean unmount that is nearly all: the block allocator is the bitmap the unmount
//! saved (`clean.rs`), and an inode is read only when a directory entry first names it
//! ([`crate::recovery::load_inode`]), so mounting costs the same whatever the size of
//! the image. After a crash (or when the saved bitmap fails its checksum) mount runs
//! the full scan of `recovery.rs`, frees the orphans it found and rebuilds the
//! allocator from what the logs reference.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use pmem::Pmem;

use crate::alloc::{BlockAlloc, Blocks, Extent, InoAlloc, LoadFree};
use crate::clean::{load_bitmap, save_clean, BITMAP_FREE_OFF, CLEAN, CLEAN_OFF};
use crate::epoch::Epoch;
use crate::error::{Error, Result};
use crate::inode::{FileKind, Inode, InodeRecord, InodeState, VALID, VALID_OFF};
use crate::journal;
use crate::layout::{Geometry, BLOCK_SIZE, ROOT_INO};
use crate::recovery::{free_extents, load_inode, referenced_free, scan, Fix, MountReport};
use crate::{FileSystem, Mode, MountOptions};

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
        epoch: Epoch::for_pool(geo.total_blocks - geo.pool_start),
        fds: Default::default(),
        rename_lock: Mutex::new(()),
        mover,
        deferred: Mutex::new(Vec::new()),
        lock_across_wait: opts.lock_across_wait,
        read_only: false,
        unmounted: AtomicBool::new(false),
        watcher: std::sync::OnceLock::new(),
        changes: Default::default(),
        inode_count: Default::default(),
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
    let view: Arc<dyn Pmem> = Arc::new(crate::rolled_back::RolledBack { pm, words });
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
        epoch: Epoch::for_pool(geo.total_blocks - geo.pool_start),
        fds: Default::default(),
        rename_lock: Mutex::new(()),
        mover,
        deferred: Mutex::new(Vec::new()),
        lock_across_wait: false,
        read_only: true,
        unmounted: AtomicBool::new(false),
        watcher: std::sync::OnceLock::new(),
        changes: Default::default(),
        inode_count: Default::default(),
    };
    Ok((fs, report))
}

/// The blocks freeing orphan `ino` (state `st`) frees, taking its [`Fix::Shared`]
/// out of `fixes`: not a block an earlier reference claimed (it stays with that one),
/// and not one a later file page shares (that page, its copy no longer needed, keeps
/// it).
fn orphan_blocks(st: &InodeState, ino: u64, fixes: &mut Vec<Fix>) -> Vec<u64> {
    let mut later: HashMap<u64, usize> = HashMap::new();
    fixes.retain(|f| match f {
        Fix::Shared { ino: i, block, .. } if *i == ino => {
            *later.entry(*block).or_default() += 1;
            false
        }
        _ => true,
    });
    let mut out = Vec::new();
    for (_, b) in st.pages.iter() {
        match later.get_mut(&b) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                let heir = fixes
                    .iter()
                    .position(|f| matches!(f, Fix::Shared { block, .. } if *block == b));
                match heir {
                    Some(i) => {
                        fixes.remove(i);
                    }
                    None => out.push(b),
                }
            }
        }
    }
    out.extend(
        st.xattr
            .iter()
            .flat_map(|x| &x.extents)
            .flat_map(|e| e.start..e.start + e.len),
    );
    out
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
            for b in orphan_blocks(&st, ino, &mut scan.fixes) {
                scan.used[(b - geo.pool_start) as usize] = false;
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
