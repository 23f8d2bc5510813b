//! Crash consistency of the calls of the handle layer: an `O_TMPFILE` file is freed
//! by recovery unless `linkat` named it, and `RENAME_EXCHANGE` swaps two names in one
//! step. Each operation runs on a tracing region; at every event of it, the images a
//! crash could leave (nothing pending landed, everything, two random samples) are
//! mounted, checked by fsck and read back.

mod common;

use std::sync::Arc;

use fs::{FileKind, FileSystem, FormatOptions, MountOptions, OpenFlags, AT_EMPTY_PATH};
use pmem::{CrashCursor, MemPmem, Pmem, TracePmem};

const SIZE: usize = 8 << 20;

fn traced() -> (Arc<TracePmem>, FileSystem) {
    let tp = Arc::new(TracePmem::new(vec![0u8; SIZE]));
    FileSystem::format(&*tp, &FormatOptions::default()).unwrap();
    let (fs, _) = FileSystem::mount(tp.clone() as Arc<dyn Pmem>, MountOptions::default()).unwrap();
    (tp, fs)
}

/// Mounts every crash image of the events from `start` on (`end` excluded) and hands
/// each mounted file system to `check`, with the event index.
fn every_crash(tp: &TracePmem, start: usize, end: usize, check: impl Fn(usize, &FileSystem)) {
    let trace = tp.trace();
    let mut cursor = CrashCursor::new(&trace);
    let mut images = 0;
    for pos in start..=end {
        cursor.advance_to(pos);
        for choice in cursor.choices(2, 0x5eed) {
            let pm: Arc<dyn Pmem> = Arc::new(MemPmem::from_image(cursor.image(choice)));
            let report = fs::fsck::check(&*pm).unwrap();
            // Recovery frees orphans; fsck of the raw image may note them, nothing else.
            let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default())
                .unwrap_or_else(|e| panic!("event {pos} {choice}: mount: {e}"));
            check(pos, &fs);
            fs.unmount().unwrap();
            let after = fs::fsck::check(&*pm).unwrap();
            assert!(
                after.ok(),
                "event {pos} {choice}: fsck after recovery: {:#?} (before: {:#?})",
                after.problems,
                report.problems
            );
            images += 1;
        }
    }
    assert!(images > end - start, "{images} images");
}

#[test]
fn an_o_tmpfile_file_is_freed_by_recovery_unless_linked_first() {
    let (tp, fs) = traced();
    fs.mkdir("/d", 0o755).unwrap();
    let before = fs.usage();
    let start = tp.position();
    let fd = fs
        .open("/d", OpenFlags::RDWR | OpenFlags::TMPFILE, 0o600)
        .unwrap();
    fs.pwrite(fd, &[7u8; 10_000], 0).unwrap();
    let written = tp.position();
    fs.linkat(Some(fd), "", None, "/d/kept", AT_EMPTY_PATH)
        .unwrap();
    let linked = tp.position();
    fs.close(fd).unwrap();
    fs.abandon();
    every_crash(&tp, start, linked, |pos, fs| {
        let u = fs.usage();
        match fs.stat("/d/kept") {
            Ok(st) => {
                assert!(pos > written, "event {pos}: named before linkat");
                assert_eq!(st.size, 10_000);
                assert_eq!(st.nlink, 1);
                assert_eq!(common::read_file(fs, "/d/kept"), vec![7u8; 10_000]);
                assert_eq!(u.inodes_used, before.inodes_used + 1);
            }
            Err(fs::Error::NotFound) => {
                // Never named: nothing of it is left, neither inode nor data blocks.
                // (A log page `linkat` staged for /d stays in /d's log: at most one.)
                assert_eq!(u.inodes_used, before.inodes_used, "event {pos}");
                let lost = before.free_blocks - u.free_blocks.min(before.free_blocks);
                assert!(lost <= 1, "event {pos}: {lost} blocks not freed");
            }
            Err(e) => panic!("event {pos}: {e}"),
        }
    });
}

#[test]
fn rename_exchange_swaps_both_names_or_neither_across_a_crash() {
    let (tp, fs) = traced();
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/b", 0o755).unwrap();
    common::write_file(&fs, "/a/x", b"file");
    fs.mkdir("/b/y", 0o700).unwrap();
    common::write_file(&fs, "/b/y/inner", b"in");
    let start = tp.position();
    fs.renameat2(None, "/a/x", None, "/b/y", fs::RENAME_EXCHANGE)
        .unwrap();
    let end = tp.position();
    fs.abandon();
    let mut seen = std::sync::Mutex::new([false; 2]);
    every_crash(&tp, start, end, |pos, fs| {
        let (x, y) = (fs.lstat("/a/x").unwrap(), fs.lstat("/b/y").unwrap());
        let swapped = x.kind == FileKind::Dir;
        let (file, dir, dir_path) = if swapped {
            (y, x, "/a/x")
        } else {
            (x, y, "/b/y")
        };
        assert_eq!(file.kind, FileKind::File, "event {pos}");
        assert_eq!(dir.kind, FileKind::Dir, "event {pos}");
        assert_eq!(
            common::read_file(fs, &format!("{dir_path}/inner")),
            b"in",
            "event {pos}"
        );
        // `..` of the moved directory and the link counts of both parents follow.
        let parent = if swapped { "/a" } else { "/b" };
        assert_eq!(
            fs.stat(&format!("{dir_path}/..")).unwrap().ino,
            fs.stat(parent).unwrap().ino
        );
        assert_eq!(fs.stat(parent).unwrap().nlink, 3, "event {pos}");
        seen.lock().unwrap()[swapped as usize] = true;
    });
    assert_eq!(*seen.get_mut().unwrap(), [true, true]);
}
