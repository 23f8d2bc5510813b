//! Extended attributes and `fallocate` on real regions: exact space accounting, what
//! survives a clean unmount and a crash, log cleaning, read-only mounts, fsck finding a
//! damaged attribute set, `ENOSPC` that changes nothing, and concurrent callers.

mod common;

use std::sync::Arc;

use common::*;
use fs::{Error, FileSystem, MountOptions, OpenFlags, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};
use pmem::Pmem;

fn get(fs: &FileSystem, path: &str, name: &str) -> fs::Result<Vec<u8>> {
    let mut buf = vec![0u8; 64 << 10];
    let n = fs.getxattr(path, name, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn names(fs: &FileSystem, path: &str) -> Vec<String> {
    let mut buf = vec![0u8; 64 << 10];
    let n = fs.listxattr(path, &mut buf).unwrap();
    buf[..n]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect()
}

fn used(fs: &FileSystem) -> u64 {
    fs.geometry().pool_blocks() - fs.usage().free_blocks
}

#[test]
fn xattr_blocks_are_counted_exactly_and_all_given_back() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    write_file(&fs, "/f", b"x");
    let base = used(&fs);
    fs.setxattr("/f", "user.a", &vec![1; 9000], 0).unwrap();
    assert_eq!(used(&fs), base + 3, "a 9000-byte set takes three blocks");
    fs.setxattr("/f", "user.a", b"short", 0).unwrap();
    assert_eq!(used(&fs), base + 1, "the old set's blocks are freed");
    fs.setxattr("/f", "user.b", b"second", 0).unwrap();
    assert_eq!(used(&fs), base + 1);
    fs.removexattr("/f", "user.a").unwrap();
    fs.removexattr("/f", "user.b").unwrap();
    assert_eq!(used(&fs), base, "no attributes, no blocks");
    // An unlinked file's attributes go with it, also when it was open.
    fs.setxattr("/f", "user.c", &vec![2; 5000], 0).unwrap();
    let fd = fs.open("/f", OpenFlags::RDONLY, 0).unwrap();
    fs.unlink("/f").unwrap();
    assert_eq!(get(&fs, "/f", "user.c").unwrap_err().errno(), libc::ENOENT);
    let mut buf = [0u8; 10];
    assert_eq!(fs.fgetxattr(fd, "user.c", &mut []).unwrap(), 5000);
    assert_eq!(
        fs.fgetxattr(fd, "user.c", &mut buf).unwrap_err().errno(),
        libc::ERANGE
    );
    fs.close(fd).unwrap();
    assert!(
        used(&fs) < base,
        "the file's log, data and attributes are freed"
    );
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn xattrs_survive_a_clean_unmount_and_a_crash() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    fs.mkdir("/d", 0o755).unwrap();
    write_file(&fs, "/d/f", b"data");
    fs.setxattr("/d", "user.dir", b"dir value", 0).unwrap();
    fs.setxattr("/d/f", "user.big", &vec![3; 64 << 10], 0)
        .unwrap();
    fs.setxattr("/d/f", "trusted.t", b"t", 0).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    // Clean: inodes are read when first named.
    let fs = mount(&pm);
    assert_eq!(get(&fs, "/d", "user.dir").unwrap(), b"dir value");
    assert_eq!(get(&fs, "/d/f", "user.big").unwrap(), vec![3; 64 << 10]);
    fs.setxattr("/d/f", "user.after", b"after the remount", 0)
        .unwrap();
    fs.removexattr("/d/f", "trusted.t").unwrap();
    fs.abandon();
    // After a crash: every inode read and the allocator rebuilt.
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert!(!report.clean);
    let mut got = names(&fs, "/d/f");
    got.sort();
    assert_eq!(got, ["user.after", "user.big"]);
    assert_eq!(
        get(&fs, "/d/f", "user.after").unwrap(),
        b"after the remount"
    );
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn log_cleaning_keeps_the_current_set_and_frees_the_rest() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    write_file(&fs, "/f", b"data");
    fs.setxattr("/f", "user.keep", b"kept", 0).unwrap();
    let base = used(&fs);
    for i in 0..2000u32 {
        fs.setxattr("/f", "user.n", &i.to_le_bytes(), 0).unwrap();
    }
    // 2000 entries fill 32 log pages unless cleaning compacts the log.
    assert!(
        used(&fs) <= base + 8,
        "the log was not cleaned: {} blocks over the start",
        used(&fs) - base
    );
    assert_eq!(get(&fs, "/f", "user.n").unwrap(), 1999u32.to_le_bytes());
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    assert_eq!(get(&fs, "/f", "user.keep").unwrap(), b"kept");
    assert_eq!(get(&fs, "/f", "user.n").unwrap(), 1999u32.to_le_bytes());
    fs.unmount().unwrap();
}

#[test]
fn a_read_only_mount_reads_attributes_and_refuses_changes() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    write_file(&fs, "/f", &vec![9; 3 * 4096]);
    fs.setxattr("/f", "user.a", b"a", 0).unwrap();
    fs.unmount().unwrap();
    let opts = MountOptions {
        read_only: true,
        ..MountOptions::default()
    };
    let (fs, _) = FileSystem::mount(pm.clone(), opts).unwrap();
    assert_eq!(get(&fs, "/f", "user.a").unwrap(), b"a");
    let erofs = |r: fs::Result<()>| assert_eq!(r.unwrap_err().errno(), libc::EROFS);
    erofs(fs.setxattr("/f", "user.b", b"b", 0));
    erofs(fs.removexattr("/f", "user.a"));
    let fd = fs.open("/f", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(
        fs.fallocate(fd, 0, 0, 4096).unwrap_err().errno(),
        libc::EBADF
    );
    assert_eq!(fs.lseek(fd, 0, fs::Whence::Hole).unwrap(), 3 * 4096);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
}

/// The offset in the region of the first occurrence of `marker`.
fn find(pm: &Arc<dyn Pmem>, marker: &[u8]) -> u64 {
    let mut img = vec![0u8; pm.len() as usize];
    pm.read(0, &mut img);
    img.windows(marker.len())
        .position(|w| w == marker)
        .expect("marker on the region") as u64
}

#[test]
fn fsck_and_mount_find_a_damaged_attribute_set() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    write_file(&fs, "/f", b"data");
    let marker = b"a value only this test writes";
    fs.setxattr("/f", "user.m", marker, 0).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    let at = find(&pm, marker);
    pm.write(at + 3, b"#");
    let report = fs::fsck::check(&*pm).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("extended attributes")),
        "{:#?}",
        report.problems
    );
    let fs = mount(&pm);
    match fs.getxattr("/f", "user.m", &mut []) {
        Err(Error::Corrupt(why)) => assert!(why.contains("extended attributes"), "{why}"),
        other => panic!("a damaged set read as {other:?}"),
    }
}

#[test]
fn enospc_changes_nothing() {
    let pm = fresh(2 * MIB);
    let fs = mount(&pm);
    let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    write_file(&fs, "/f", &data);
    let fd = fs.open("/f", OpenFlags::RDWR, 0).unwrap();
    let (before, stat) = (used(&fs), fs.fstat(fd).unwrap());
    let too_much = (fs.usage().free_blocks + 8) * 4096;
    let r = fs.fallocate(fd, 0, 0, too_much);
    assert_eq!(r.unwrap_err().errno(), libc::ENOSPC);
    let r = fs.fallocate(fd, FALLOC_FL_KEEP_SIZE, 20_000, too_much);
    assert_eq!(r.unwrap_err().errno(), libc::ENOSPC);
    // Far past the free space (8 TiB): refused before the pages are even listed.
    let r = fs.fallocate(fd, 0, 0, 1 << 43);
    assert_eq!(r.unwrap_err().errno(), libc::ENOSPC);
    assert_eq!(used(&fs), before);
    assert_eq!(fs.fstat(fd).unwrap(), stat);
    assert_eq!(read_file(&fs, "/f"), data);
    // One inode's set is bounded: past it, ENOSPC and the set as it was.
    for i in 0..15 {
        fs.fsetxattr(fd, &format!("user.v{i:02}"), &vec![i; 64 << 10], 0)
            .unwrap_or_else(|e| panic!("attribute {i}: {e}"));
    }
    let r = fs.fsetxattr(fd, "user.v15", &vec![15; 64 << 10], 0);
    assert_eq!(r.unwrap_err().errno(), libc::ENOSPC);
    assert_eq!(names(&fs, "/f").len(), 15);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn punch_then_allocate_then_write_reads_back_and_accounts_exactly() {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    let data = vec![0xAB; 8 * 4096];
    write_file(&fs, "/f", &data);
    let fd = fs.open("/f", OpenFlags::RDWR, 0).unwrap();
    let base = used(&fs);
    let punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    fs.fallocate(fd, punch, 4096, 4 * 4096).unwrap();
    assert_eq!(used(&fs), base - 4);
    assert_eq!(fs.fstat(fd).unwrap().blocks, 4 * 8);
    let mut want = data.clone();
    want[4096..5 * 4096].fill(0);
    assert_eq!(read_file(&fs, "/f"), want);
    fs.fallocate(fd, 0, 2 * 4096, 4096).unwrap();
    assert_eq!(used(&fs), base - 3);
    fs.pwrite(fd, b"new", 2 * 4096 + 10).unwrap();
    want[2 * 4096 + 10..2 * 4096 + 13].copy_from_slice(b"new");
    assert_eq!(read_file(&fs, "/f"), want);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
    let fs = mount(&pm);
    assert_eq!(read_file(&fs, "/f"), want);
    assert_eq!(fs.stat("/f").unwrap().blocks, 5 * 8);
    fs.unmount().unwrap();
}

#[test]
fn concurrent_setxattr_on_one_file_loses_nothing() {
    let pm = fresh(16 * MIB);
    let fs = Arc::new(mount(&pm));
    write_file(&fs, "/f", b"shared");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let name = format!("user.t{t}.{i}");
                    fs.setxattr("/f", &name, name.as_bytes(), 0).unwrap();
                    assert_eq!(get(&fs, "/f", &name).unwrap(), name.as_bytes());
                    if i % 3 == 0 {
                        fs.removexattr("/f", &name).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut got = names(&fs, "/f");
    got.sort();
    let mut want: Vec<String> = (0..4)
        .flat_map(|t| {
            (0..50)
                .filter(|i| i % 3 != 0)
                .map(move |i| format!("user.t{t}.{i}"))
        })
        .collect();
    want.sort();
    assert_eq!(got, want);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    assert_fsck_clean(&pm);
}
