//! Corrupted images: flipped bytes in every on-region metadata structure make mount,
//! the first use of the damaged inode, or fsck fail with a message naming what is
//! corrupt — never a panic, never an access outside the region — and a damaged primary
//! superblock is healed from its replica. (After a clean unmount, mount reads an inode
//! only when a path first leads to it: damage in one inode is reported there, for it
//! alone.)
//!
//! Cases of the random-flip property: `EASYIO_PROPTEST_CASES` (default 150).

mod common;

use std::sync::{Arc, OnceLock};

use common::*;
use fs::layout::{
    seal_log_word, unseal_log_word, Geometry, LogWord, BLOCK_SIZE, INODE_SIZE, MOUNT_BLOCK,
};
use fs::{FileSystem, MountOptions, OpenFlags};
use pmem::{Pmem, Region};
use proptest::prelude::*;

const SIZE: u64 = 8 * MIB;
/// Log page layout (see the fs `log` module): 63 entry slots, then the trailer.
const TRAILER_OFF: u64 = 63 * 64;
const HEAD_OFF: u64 = 8;
const TAIL_OFF: u64 = 16;
const JOURNAL_ACTIVE: u64 = 0x4A52_4E4C_4143_5456;

/// Builds a populated image: directories, files of several pages, overwrites that
/// make multi-page logs, hard links, symlinks, an unlinked file. Returns the region
/// and the geometry.
fn populated(clean: bool) -> (Arc<dyn Pmem>, Geometry) {
    let pm = fresh(SIZE);
    let fs = mount(&pm);
    let geo = *fs.geometry();
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/d/e", 0o700).unwrap();
    for i in 0..6u32 {
        write_file(
            &fs,
            &format!("/d/f{i}"),
            &vec![i as u8 + 1; 3000 + i as usize * 5000],
        );
    }
    let fd = fs.open("/log", rw_create(), 0o644).unwrap();
    for i in 0..150u32 {
        fs.pwrite(fd, &i.to_le_bytes(), (i as u64 % 5) * 4096)
            .unwrap();
    }
    fs.close(fd).unwrap();
    fs.link("/d/f1", "/d/e/hard").unwrap();
    fs.symlink("/d/f2", "/sym").unwrap();
    write_file(&fs, "/gone", b"bye");
    fs.unlink("/gone").unwrap();
    if clean {
        fs.unmount().unwrap();
        assert_fsck_clean(&pm);
    } else {
        fs.abandon();
    }
    (pm, geo)
}

fn ino_of(pm: &Arc<dyn Pmem>, path: &str) -> u64 {
    let fs = mount(pm);
    let ino = fs.lstat(path).unwrap().ino;
    fs.unmount().unwrap();
    ino
}

fn flip(pm: &dyn Pmem, off: u64, mask: u8) {
    let mut b = [0u8];
    pm.read(off, &mut b);
    pm.write_persist(off, &[b[0] ^ mask]);
}

/// A mount that fails on damage instead of falling back to read-only.
fn strict() -> MountOptions {
    MountOptions {
        read_only_on_damage: false,
        ..MountOptions::default()
    }
}

/// Mount must fail with a "corrupted" error whose message contains every `words`.
fn mount_fails(pm: &Arc<dyn Pmem>, words: &[&str]) -> String {
    let err = match FileSystem::mount(pm.clone(), strict()) {
        Ok(_) => panic!("mount accepted an image corrupted in {words:?}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert_eq!(err.errno(), libc::EUCLEAN, "{msg}");
    for w in words {
        assert!(
            msg.contains(w),
            "mount error {msg:?} does not mention {w:?}"
        );
    }
    msg
}

/// Every path of the populated image.
const PATHS: [&str; 11] = [
    "/d",
    "/d/e",
    "/d/f0",
    "/d/f1",
    "/d/f2",
    "/d/f3",
    "/d/f4",
    "/d/f5",
    "/d/e/hard",
    "/log",
    "/sym",
];

/// Mount, or the first use of the damaged inode, must fail with a "corrupted" error
/// whose message contains every `words`; returns that message.
fn damage_reported(pm: &Arc<dyn Pmem>, words: &[&str]) -> String {
    let fs = match FileSystem::mount(pm.clone(), strict()) {
        Err(_) => return mount_fails(pm, words),
        Ok((fs, _)) => fs,
    };
    let mut errors = Vec::new();
    for p in PATHS {
        let got = fs.lstat(p).and_then(|st| {
            if st.kind != fs::FileKind::File {
                return Ok(());
            }
            let fd = fs.open(p, OpenFlags::RDONLY, 0)?;
            let mut buf = vec![0u8; st.size as usize];
            fs.pread(fd, &mut buf, 0)?;
            fs.close(fd)
        });
        if let Err(e) = got {
            assert_eq!(e.errno(), libc::EUCLEAN, "{p}: {e}");
            errors.push(e.to_string());
        }
    }
    fs.unmount().unwrap();
    errors
        .into_iter()
        .find(|m| words.iter().all(|w| m.contains(w)))
        .unwrap_or_else(|| panic!("no mount or access error mentions {words:?}"))
}

/// fsck must report a problem containing every `words`.
fn fsck_reports(pm: &Arc<dyn Pmem>, words: &[&str]) {
    let r = fs::fsck::check(&**pm).unwrap();
    assert!(
        r.problems
            .iter()
            .any(|p| words.iter().all(|w| p.contains(w))),
        "fsck problems {:?} do not mention {words:?}",
        r.problems
    );
}

/// Byte offsets of the log pages of inode `ino`, head first.
fn log_pages(pm: &Arc<dyn Pmem>, geo: &Geometry, ino: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let head = pm.load_u64(geo.inode_off(ino) + HEAD_OFF);
    let mut at = unseal_log_word(ino, LogWord::Head, head).unwrap();
    while at != 0 {
        out.push(at);
        at = pm.load_u64(at + TRAILER_OFF);
    }
    out
}

#[test]
fn primary_superblock_is_healed_from_the_replica() {
    let (pm, _) = populated(true);
    flip(&*pm, 0, 0xFF); // magic
    flip(&*pm, 40, 0x01); // a geometry field
    fsck_reports(&pm, &["primary superblock bad", "replica is good"]);
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    let why = report
        .superblock_replica_used
        .clone()
        .expect("replica use not reported");
    assert!(why.contains("superblock"), "{why}");
    assert_eq!(read_file(&fs, "/d/f3"), vec![4u8; 18000]);
    fs.unmount().unwrap();
    // Healed: the primary matches the replica again, and the next mount uses it.
    assert_fsck_clean(&pm);
    let (_fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert!(report.superblock_replica_used.is_none(), "{report:?}");
}

#[test]
fn both_superblocks_bad_is_a_clear_error() {
    let (pm, _) = populated(true);
    flip(&*pm, 20, 0x10);
    flip(&*pm, BLOCK_SIZE + 20, 0x10);
    let msg = mount_fails(&pm, &["superblock", "replica", "checksum"]);
    assert!(msg.contains("corrupt"), "{msg}");
    fsck_reports(&pm, &["superblock", "replica"]);
    // Not a file system at all.
    let blank: Arc<dyn Pmem> = Arc::new(Region::create_temp(SIZE).unwrap());
    mount_fails(&blank, &["magic"]);
}

#[test]
fn flipped_log_entry_names_the_inode_and_the_entry() {
    let (pm, geo) = populated(true);
    let ino = ino_of(&pm, "/d/f4");
    let page = log_pages(&pm, &geo, ino)[0];
    flip(&*pm, page + 20, 0x04); // inside the first entry's payload
    let msg = damage_reported(&pm, &[&format!("inode {ino}"), "log entry", "checksum"]);
    assert!(
        msg.contains(&format!("{page:#x}")),
        "entry offset not named: {msg}"
    );
    fsck_reports(&pm, &[&format!("inode {ino}"), "checksum"]);
}

#[test]
fn corrupt_log_page_pointers_and_trailers() {
    let (pm, geo) = populated(true);
    let ino = ino_of(&pm, "/log");
    let pages = log_pages(&pm, &geo, ino);
    assert!(
        pages.len() >= 2,
        "the overwrite log should span pages: {pages:?}"
    );
    let snapshot = {
        let mut v = vec![0u8; pm.len() as usize];
        pm.read(0, &mut v);
        v
    };
    let restore = || pm.write_persist(0, &snapshot);
    // Next-page pointer sent outside the region.
    pm.store_u64_persist(pages[0] + TRAILER_OFF, u64::MAX - 7);
    damage_reported(
        &pm,
        &[
            &format!("inode {ino}"),
            "log page pointer",
            "outside the pool",
        ],
    );
    fsck_reports(&pm, &["log page pointer"]);
    restore();
    // Next-page pointer into the metadata area.
    pm.store_u64_persist(pages[0] + TRAILER_OFF, geo.inode_start * BLOCK_SIZE);
    damage_reported(&pm, &["log page pointer"]);
    restore();
    // Trailer magic and owner.
    flip(&*pm, pages[1] + TRAILER_OFF + 16, 0x20);
    damage_reported(&pm, &[&format!("inode {ino}"), "bad trailer"]);
    restore();
    flip(&*pm, pages[1] + TRAILER_OFF + 8, 0x01);
    damage_reported(&pm, &["bad trailer"]);
    restore();
    // A used-slot count beyond the page.
    pm.store_u64_persist(pages[0] + TRAILER_OFF + 24, 1000);
    damage_reported(&pm, &["claims 1000 used slots"]);
    restore();
    // The head and tail words of the inode: damaged words fail their check…
    let (head, tail) = (geo.inode_off(ino) + HEAD_OFF, geo.inode_off(ino) + TAIL_OFF);
    pm.store_u64_persist(head, 12345);
    damage_reported(
        &pm,
        &[&format!("inode {ino}"), "log head", "fails its check"],
    );
    restore();
    // …including a tail moved back by one slot, which would otherwise look valid and
    // silently drop the entries after it.
    flip(&*pm, tail, 0x40);
    damage_reported(
        &pm,
        &[&format!("inode {ino}"), "log tail", "fails its check"],
    );
    fsck_reports(&pm, &[&format!("inode {ino}"), "log tail"]);
    restore();
    // Well-sealed words that point to the wrong place are caught by the walk.
    pm.store_u64_persist(head, seal_log_word(ino, LogWord::Head, 12345));
    damage_reported(&pm, &["log page pointer"]);
    restore();
    pm.store_u64_persist(tail, seal_log_word(ino, LogWord::Tail, pages[0] + 8));
    damage_reported(&pm, &["log tail", "not inside its log"]);
    restore();
    // A cycle in the chain: the second page points back to the first.
    pm.store_u64_persist(pages[1] + TRAILER_OFF, pages[0]);
    damage_reported(&pm, &[&format!("inode {ino}")]);
    fsck_reports(&pm, &[&format!("inode {ino}")]);
    restore();
    let fs = mount(&pm);
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn corrupt_inode_record() {
    let (pm, geo) = populated(true);
    let ino = ino_of(&pm, "/d/e/hard");
    flip(&*pm, geo.inode_off(ino) + 33, 0x01); // kind
    damage_reported(&pm, &[&format!("inode {ino}"), "checksum"]);
    fsck_reports(&pm, &[&format!("inode {ino}")]);
    flip(&*pm, geo.inode_off(ino) + 33, 0x01);
    // The valid word of a free inode: no path leads there, fsck finds it, and the
    // number is never handed out (it does not read as free).
    let free = geo.inodes - 1;
    pm.store_u64_persist(geo.inode_off(free), 0x1234);
    fsck_reports(&pm, &[&format!("inode {free}"), "valid word"]);
    let fs = mount(&pm);
    let mut made = 0;
    while fs.mkdir(&format!("/n{made}"), 0o755).is_ok() {
        made += 1;
    }
    assert!(made > 0);
    fs.abandon();
    // After a crash the full scan reads every inode, this one too: a strict mount
    // fails; by default the mount falls back to read-only, says why, and every file
    // reads back.
    mount_fails(&pm, &[&format!("inode {free}"), "valid word"]);
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert!(report.read_only && fs.is_read_only(), "{report:?}");
    assert!(
        report
            .damage
            .iter()
            .any(|d| d.contains(&format!("inode {free}"))),
        "{report:?}"
    );
    assert_eq!(read_file(&fs, "/d/f5"), vec![6u8; 28000]);
    assert!(matches!(fs.mkdir("/x", 0o755), Err(fs::Error::ReadOnly)));
    assert_eq!(fs::Error::ReadOnly.errno(), libc::EROFS);
    fs.unmount().unwrap();
}

#[test]
fn corrupt_active_journal() {
    let (pm, geo) = populated(false);
    let j = geo.journal_start * BLOCK_SIZE;
    // Marked active, with records whose checksum does not hold.
    pm.write_persist(j + 8, &[2, 0, 0, 0, 0xAB, 0xCD, 0xEF, 0x01]);
    pm.store_u64_persist(j, JOURNAL_ACTIVE);
    mount_fails(&pm, &["journal 0", "checksum"]);
    fsck_reports(&pm, &["journal 0"]);
    // An unknown state word.
    pm.store_u64_persist(j, 0x55);
    mount_fails(&pm, &["journal 0", "state word"]);
    // Too many records.
    pm.write_persist(j + 8, &u32::MAX.to_le_bytes());
    pm.store_u64_persist(j, JOURNAL_ACTIVE);
    mount_fails(&pm, &["journal 0", "records"]);
    // Valid checksum, but a record that points outside the inode table.
    let mut rec = vec![0u8; 16];
    rec[..8].copy_from_slice(&(geo.pool_start * BLOCK_SIZE).to_le_bytes());
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&1u32.to_le_bytes());
    head[4..].copy_from_slice(&crc32c::crc32c(&rec).to_le_bytes());
    pm.write_persist(j + 8, &head);
    pm.write_persist(j + 16, &rec);
    mount_fails(&pm, &["journal 0", "outside the inode table"]);
    // Idle again: the image mounts.
    pm.store_u64_persist(j, 0);
    let fs = mount(&pm);
    assert_eq!(read_file(&fs, "/sym"), vec![3u8; 13000]);
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn corrupt_saved_bitmap_is_reported_and_rebuilt() {
    let (pm, geo) = populated(true);
    flip(
        &*pm,
        geo.bitmap_start * BLOCK_SIZE + geo.pool_start / 8 + 3,
        0x40,
    );
    fsck_reports(&pm, &["bitmap", "corrupt"]);
    // The allocator is built when first used; it does not trust the bitmap then but
    // rebuilds the free space from what the logs reference.
    let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    write_file(&fs, "/new", &vec![9u8; 50_000]);
    assert_eq!(read_file(&fs, "/d/f5"), vec![6u8; 28000]);
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

// ---------------------------------------------------------------------------------
// Random flips anywhere in the metadata
// ---------------------------------------------------------------------------------

struct Template {
    clean: Vec<u8>,
    crashed: Vec<u8>,
    /// (start, len) byte ranges holding live metadata, in either image.
    ranges: Vec<(u64, u64)>,
}

fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| {
        let image = |pm: &Arc<dyn Pmem>| {
            let mut v = vec![0u8; pm.len() as usize];
            pm.read(0, &mut v);
            v
        };
        let (pm, geo) = populated(true);
        let clean = image(&pm);
        let (pm2, _) = populated(false);
        let crashed = image(&pm2);
        let mut ranges = vec![
            (0, 104),
            (BLOCK_SIZE, 104),
            (MOUNT_BLOCK * BLOCK_SIZE, 24),
            (geo.journal_start * BLOCK_SIZE, 64),
            (geo.bitmap_start * BLOCK_SIZE, geo.total_blocks.div_ceil(8)),
        ];
        for p in [&pm, &pm2] {
            for ino in 1..geo.inodes {
                if p.load_u64(geo.inode_off(ino)) == 0 {
                    continue;
                }
                ranges.push((geo.inode_off(ino), 64));
                for page in log_pages(p, &geo, ino) {
                    ranges.push((page, BLOCK_SIZE));
                    ranges.push((page + TRAILER_OFF, 32));
                }
            }
        }
        // A few free inode records too.
        ranges.push((geo.inode_off(geo.inodes - 3), INODE_SIZE * 3));
        Template {
            clean,
            crashed,
            ranges,
        }
    })
}

fn flip_cases() -> u32 {
    std::env::var("EASYIO_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

/// Reads everything reachable; must not panic whatever mount accepted.
fn walk_everything(fs: &FileSystem) {
    let mut dirs = vec!["/".to_string()];
    while let Some(d) = dirs.pop() {
        let Ok(list) = fs.readdir(&d) else { continue };
        for e in list {
            let p = format!("{}/{}", d.trim_end_matches('/'), e.name);
            let _ = fs.lstat(&p);
            match e.kind {
                None | Some(fs::FileKind::Fifo | fs::FileKind::Socket) => {}
                Some(fs::FileKind::CharDev | fs::FileKind::BlockDev) => {}
                Some(fs::FileKind::Dir) => dirs.push(p),
                Some(fs::FileKind::Symlink) => {
                    let _ = fs.readlink(&p);
                }
                Some(fs::FileKind::File) => {
                    if let Ok(fd) = fs.open(&p, OpenFlags::RDWR, 0) {
                        let mut buf = vec![0u8; 64 * 1024];
                        let _ = fs.pread(fd, &mut buf, 0);
                        let _ = fs.pwrite(fd, b"more", 100);
                        let _ = fs.close(fd);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: flip_cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_metadata_flips_never_panic(
        crashed in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let t = template();
        let pm: Arc<dyn Pmem> = Arc::new(Region::create_temp(SIZE).unwrap());
        pm.write_persist(0, if crashed { &t.crashed } else { &t.clean });
        for (range, at, mask) in &flips {
            let (start, len) = t.ranges[range.index(t.ranges.len())];
            flip(&*pm, start + at.index(len as usize) as u64, *mask);
        }
        let before = fs::fsck::check(&*pm).expect("fsck returns findings, not errors");
        match FileSystem::mount(pm.clone(), MountOptions::default()) {
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("corrupt"), "unclear mount error: {msg}");
                prop_assert!(!before.ok(), "fsck passed an image mount refused: {msg}");
            }
            Ok((fs, _)) => {
                walk_everything(&fs);
                fs.unmount().unwrap();
                // Whatever was wrong is either repaired or still reported.
                let after = fs::fsck::check(&*pm).unwrap();
                if before.ok() {
                    prop_assert!(after.ok(), "mount of a clean image left {:?}", after.problems);
                }
            }
        }
    }
}
