//! Sealed write entries (format version 4; a second kind since version 5): a
//! `cpu`-mode write of one run of blocks commits by its entry alone, which carries a
//! hash of its data. After a power loss, recovery keeps such a write past the stored
//! tail only if its data is all there, checking each entry with the hash's finish its
//! kind names.

use std::sync::Arc;

use fs::{FileSystem, FormatOptions, MountOptions, OpenFlags};
use pmem::seal::Finish;
use pmem::{MemPmem, Pmem};

fn write_file(fs: &FileSystem, path: &str, data: &[u8]) {
    let fd = fs
        .open(path, OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
        .unwrap();
    assert_eq!(fs.pwrite(fd, data, 0).unwrap(), data.len());
    fs.close(fd).unwrap();
}

fn read_file(fs: &FileSystem, path: &str) -> Vec<u8> {
    let fd = fs.open(path, OpenFlags::RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let n = fs.pread(fd, &mut buf, 0).unwrap();
    fs.close(fd).unwrap();
    buf.truncate(n);
    buf
}

/// The region offset of the first block of `path`.
fn first_block(fs: &FileSystem, path: &str) -> u64 {
    let ino = fs.lstat(path).unwrap().ino;
    let (_, segs) = fs.map_inode(ino, 0, 1).unwrap();
    segs[0].1.expect("a block, not a hole")
}

#[test]
fn a_sealed_write_whose_data_did_not_all_arrive_is_dropped_and_voided() {
    let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
    FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
    let (old, new) = (vec![1u8; 4096], vec![2u8; 4096]);
    let at = {
        let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
        write_file(&fs, "/f", &old);
        write_file(&fs, "/f", &new);
        let at = first_block(&fs, "/f");
        // Power fails with one line of the last write's data not yet in memory.
        pm.write(at + 640, &[0u8; 64]);
        fs.abandon();
        at
    };
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert_eq!(report.unsealed_writes_dropped, 1, "{report:?}");
    assert_eq!(report.pending_writes_dropped, 0, "{report:?}");
    assert_eq!(
        read_file(&fs, "/f"),
        old,
        "the write that never returned is gone"
    );
    assert_ne!(first_block(&fs, "/f"), at);
    // The file system goes on from there; a crash right after finds the new write.
    let newer = vec![3u8; 4096];
    write_file(&fs, "/f", &newer);
    fs.abandon();
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert_eq!(report.unsealed_writes_dropped, 0, "{report:?}");
    assert_eq!(read_file(&fs, "/f"), newer);
    fs.unmount().unwrap();
    let r = fs::fsck::check(&*pm).unwrap();
    assert!(r.ok(), "{:#?}", r.problems);
}

#[test]
fn sealed_writes_past_the_stored_tail_survive_a_crash_and_a_clean_unmount_stores_it() {
    let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
    FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
    // More writes than a log page has slots: the sealed entries move on to new pages.
    let data = |i: usize| vec![i as u8; 4096 + i];
    {
        let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
        for i in 0..150 {
            write_file(&fs, "/g", &data(i));
        }
        fs.abandon();
    }
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert_eq!(report.unsealed_writes_dropped, 0, "{report:?}");
    assert_eq!(read_file(&fs, "/g"), data(149));
    fs.unmount().unwrap();
    let r = fs::fsck::check(&*pm).unwrap();
    assert!(r.ok(), "{:#?}", r.problems);
    let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert_eq!(read_file(&fs, "/g"), data(149));
    fs.unmount().unwrap();
}

/// Byte offsets of the log pages of inode `ino`, head first.
fn log_pages(pm: &dyn Pmem, fs: &FileSystem, ino: u64) -> Vec<u64> {
    use fs::layout::{unseal_log_word, LogWord};
    let off = fs.geometry().inode_off(ino);
    let head = unseal_log_word(ino, LogWord::Head, pm.load_u64(off + 8)).unwrap();
    let mut out = Vec::new();
    let mut at = head;
    while at != 0 {
        out.push(at);
        at = pm.load_u64(at + 63 * 64);
    }
    out
}

#[test]
fn damage_to_the_last_sealed_entry_of_a_log_page_is_reported_after_a_crash() {
    let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
    FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
    let data = |i: usize| vec![i as u8; 4096];
    let (ino, first_page) = {
        let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
        // More sealed writes than a log page has slots: the log moves on to a
        // second page, and the writes there return before the power fails.
        for i in 0..80 {
            write_file(&fs, "/h", &data(i));
        }
        let ino = fs.lstat("/h").unwrap().ino;
        let pages = log_pages(&*pm, &fs, ino);
        assert!(pages.len() >= 2, "{pages:?}");
        fs.abandon();
        (ino, pages[0])
    };
    // The last entry of the first page (a write that returned long ago) is damaged.
    let last = first_page + 62 * 64;
    let mut entry = [0u8; 64];
    pm.read(last, &mut entry);
    assert_eq!(
        entry[0], 9,
        "a sealed write entry (kind 9) ends the first page"
    );
    pm.write_persist(last + 20, &[entry[20] ^ 0x10]);
    let strict = MountOptions {
        read_only_on_damage: false,
        ..MountOptions::default()
    };
    let reported = match FileSystem::mount(pm.clone(), strict) {
        Err(e) => Some(e),
        Ok((fs, _)) => {
            let r = fs
                .open("/h", OpenFlags::RDONLY, 0)
                .and_then(|fd| fs.close(fd))
                .err();
            fs.abandon();
            r
        }
    };
    let e = reported.expect("the damaged entry read as the end of the log: writes dropped unseen");
    assert_eq!(e.errno(), libc::EUCLEAN, "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("inode {ino}")), "{msg}");
    assert!(msg.contains(&format!("{last:#x}")), "{msg}");
    let r = fs::fsck::check(&*pm).unwrap();
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains(&format!("inode {ino}"))),
        "{:#?}",
        r.problems
    );
}

#[test]
fn a_damaged_count_of_used_slots_where_the_sealed_writes_end_is_reported() {
    let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
    FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
    let (ino, pages) = {
        let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
        // Exactly one full page and one write on the next: the stored tail is the
        // end of the first page, where the sealed writes past it start.
        for i in 0..64 {
            write_file(&fs, "/u", &vec![i as u8; 4096]);
        }
        let ino = fs.lstat("/u").unwrap().ino;
        let pages = log_pages(&*pm, &fs, ino);
        fs.abandon();
        (ino, pages)
    };
    assert_eq!(pages.len(), 2, "{pages:?}");
    // The first page's count of used slots (trailer + 24), 63, loses a bit.
    let used = pages[0] + 63 * 64 + 24;
    assert_eq!(pm.load_u64(used), 63);
    pm.write_persist(used, &62u64.to_le_bytes());
    let strict = MountOptions {
        read_only_on_damage: false,
        ..MountOptions::default()
    };
    let e = match FileSystem::mount(pm.clone(), strict) {
        Err(e) => e,
        Ok((fs, _)) => {
            let r = fs.open("/u", OpenFlags::RDONLY, 0).map(|_| ());
            fs.abandon();
            r.expect_err("the damaged count read as the end of the log: a write dropped unseen")
        }
    };
    assert_eq!(e.errno(), libc::EUCLEAN, "{e}");
    assert!(e.to_string().contains(&format!("inode {ino}")), "{e}");
    let r = fs::fsck::check(&*pm).unwrap();
    assert!(!r.ok(), "fsck found nothing");
}

/// Sealed write entry kinds: format version 4's (seal finished by `finish_v1`) and
/// version 5's (by `finish`).
const KIND_V4: u8 = 8;
const KIND_V5: u8 = 9;

/// Stores `version` in both superblocks, checksums renewed: how an image of that
/// version looks (the layout is the same).
fn set_format_version(pm: &dyn Pmem, version: u32) {
    for sb in [0u64, 4096] {
        let mut b = [0u8; 100];
        pm.read(sb, &mut b);
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32c::crc32c(&b[..96]);
        b[96..].copy_from_slice(&crc.to_le_bytes());
        pm.write_persist(sb, &b);
    }
}

/// Rewrites the sealed write entry at `at` as `kind`, its seal that of the data now in
/// its blocks finished as `how`, its checksum renewed.
fn reseal(pm: &dyn Pmem, at: u64, kind: u8, how: Finish) {
    let mut e = [0u8; 64];
    pm.read(at, &mut e);
    let word = |i: usize| u64::from_le_bytes(e[i..i + 8].try_into().unwrap());
    let (block, npages) = (word(16), word(24) as u32 as u64);
    let mut data = vec![0u8; (npages * fs::BLOCK_SIZE) as usize];
    pm.read(block * fs::BLOCK_SIZE, &mut data);
    e[0] = kind;
    e[56..64].copy_from_slice(&pmem::seal::seal_as(&data, how).to_le_bytes());
    e[4..8].fill(0);
    let crc = crc32c::crc32c(&e);
    e[4..8].copy_from_slice(&crc.to_le_bytes());
    pm.write_persist(at, &e);
}

/// The slots of inode `ino`'s log that hold a sealed write entry of `kind`.
fn sealed_slots(pm: &dyn Pmem, fs: &FileSystem, ino: u64, kind: u8) -> Vec<u64> {
    let mut out = Vec::new();
    for page in log_pages(pm, fs, ino) {
        for slot in 0..63 {
            let mut first = [0u8; 2];
            pm.read(page + slot * 64, &mut first);
            if first == [kind, 1] {
                out.push(page + slot * 64);
            }
        }
    }
    out
}

/// How the last write's entry of [`old_kind_case`] is left at the crash.
#[derive(Clone, Copy, Debug)]
enum Last {
    /// Its data all durable, its seal the one its kind names.
    Intact,
    /// One line of its data not durable.
    Torn,
    /// Its data all durable, but its seal finished as the other kind's.
    OtherFinish,
}

/// The old and the new contents of `/f` in [`two_sealed_writes`].
const OLD: [u8; 4096] = [1; 4096];
const NEW: [u8; 4096] = [2; 4096];

/// A fresh image where `/f` was written whole twice ([`OLD`], then [`NEW`]), one block,
/// each a sealed entry: the region, the file system (to abandon), `/f`'s inode and
/// the slots of its sealed entries of version 5's kind.
fn two_sealed_writes() -> (Arc<dyn Pmem>, FileSystem, u64, Vec<u64>) {
    let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
    FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
    let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    write_file(&fs, "/f", &OLD);
    write_file(&fs, "/f", &NEW);
    let ino = fs.lstat("/f").unwrap().ino;
    let slots = sealed_slots(&*pm, &fs, ino, KIND_V5);
    (pm, fs, ino, slots)
}

/// Two writes of one block to a file, power lost after the second returned; the
/// image then made one of format version 4 whose sealed entries are of its kind, the
/// last left as `last` says. Returns whether the second write survived a read-only
/// mount (which must not upgrade) and a writable one (which must), and the writable
/// mount's count of dropped sealed writes.
fn old_kind_case(last: Last) -> (bool, bool, u64) {
    let (pm, fs, ino, slots) = two_sealed_writes();
    let (old, new) = (OLD.to_vec(), NEW.to_vec());
    let at = first_block(&fs, "/f");
    assert_eq!(
        slots.len(),
        2,
        "both writes are sealed entries of version 5's kind"
    );
    fs.abandon();
    set_format_version(&*pm, 4);
    for &slot in &slots {
        reseal(&*pm, slot, KIND_V4, Finish::V1);
    }
    match last {
        Last::Intact => {}
        Last::Torn => pm.write(at + 640, &[0u8; 64]),
        Last::OtherFinish => reseal(&*pm, slots[1], KIND_V4, Finish::V2),
    }
    let ro = MountOptions {
        read_only: true,
        ..MountOptions::default()
    };
    let (fs, report) = FileSystem::mount(pm.clone(), ro).unwrap();
    assert_eq!(report.format_upgraded_from, None);
    let ro_kept = read_file(&fs, "/f") == new;
    fs.unmount().unwrap();
    let mut v = [0u8; 4];
    pm.read(8, &mut v);
    assert_eq!(
        u32::from_le_bytes(v),
        4,
        "a read-only mount does not upgrade"
    );
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert_eq!(report.format_upgraded_from, Some(4), "{report:?}");
    let kept = read_file(&fs, "/f") == new;
    assert!(kept || read_file(&fs, "/f") == old);
    // New writes after the upgrade are of version 5's kind; a crash after them finds
    // them, beside what stays of version 4's.
    let newer = vec![3u8; 4096];
    write_file(&fs, "/f", &newer);
    assert!(!sealed_slots(&*pm, &fs, ino, KIND_V5).is_empty());
    fs.abandon();
    let (fs, again) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert_eq!(again.unsealed_writes_dropped, 0, "{again:?}");
    assert_eq!(read_file(&fs, "/f"), newer);
    fs.unmount().unwrap();
    let r = fs::fsck::check(&*pm).unwrap();
    assert!(r.ok(), "{:#?}", r.problems);
    (ro_kept, kept, report.unsealed_writes_dropped)
}

#[test]
fn format_version_4_sealed_entries_are_checked_with_their_own_finish() {
    assert_eq!(
        old_kind_case(Last::Intact),
        (true, true, 0),
        "an intact write kept"
    );
    assert_eq!(
        old_kind_case(Last::Torn),
        (false, false, 1),
        "a torn write dropped"
    );
    assert_eq!(
        old_kind_case(Last::OtherFinish),
        (false, false, 1),
        "a seal of version 5's finish does not pass for version 4's kind"
    );
}

#[test]
fn a_sealed_entry_of_version_5_kind_is_not_taken_with_version_4_finish() {
    let (pm, fs, _, slots) = two_sealed_writes();
    fs.abandon();
    reseal(&*pm, slots[1], KIND_V5, Finish::V1);
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert_eq!(report.unsealed_writes_dropped, 1, "{report:?}");
    assert_eq!(read_file(&fs, "/f"), OLD);
    fs.unmount().unwrap();
}
