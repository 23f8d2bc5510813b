//! Space accounting: blocks freed by `unlink`, `truncate` and overwrites are counted
//! free by `usage()` at once and taken by the next allocation, however few frees came
//! before (epoch reclamation must not hold them back once no reader can use them).

mod common;

use common::*;
use fs::{FileSystem, OpenFlags};

/// Writes files of `file_size` bytes until `target` pool blocks are in use; returns
/// their paths.
fn fill(fs: &FileSystem, dir: &str, target: u64, file_size: usize) -> Vec<String> {
    let pool = fs.geometry().pool_blocks();
    let mut paths = Vec::new();
    let data = vec![0x5Au8; file_size];
    while pool - fs.usage().free_blocks < target {
        let path = format!("{dir}/f{}", paths.len());
        write_file(fs, &path, &data);
        paths.push(path);
    }
    paths
}

fn free_fraction(fs: &FileSystem) -> f64 {
    fs.usage().free_blocks as f64 / fs.geometry().pool_blocks() as f64
}

#[test]
fn fill_remove_refill() {
    let pm = fresh(64 * MIB);
    let fs = mount(&pm);
    let pool = fs.geometry().pool_blocks();
    let target = pool * 9 / 10;
    fs.mkdir("/d", 0o755).unwrap();
    // Few, large files: far fewer frees than it takes to trigger a collection on the
    // freeing path, which is what used to leave the space counted as used.
    let first = fill(&fs, "/d", target, 3 << 20);
    let used_by_fill = pool - fs.usage().free_blocks;
    for p in &first {
        fs.unlink(p).unwrap();
    }
    fs.rmdir("/d").unwrap();
    let u = fs.usage();
    assert_eq!(u.reclaiming_blocks, 0, "nothing reads: nothing may wait");
    assert!(
        free_fraction(&fs) >= 0.99,
        "after removing every file: {} of {pool} pool blocks free",
        u.free_blocks
    );
    // The same fill again, at once, in the same mount.
    fs.mkdir("/e", 0o755).unwrap();
    let data = vec![0xA5u8; 3 << 20];
    for i in 0..first.len() {
        write_file(&fs, &format!("/e/f{i}"), &data);
    }
    assert!(pool - fs.usage().free_blocks >= used_by_fill);
    for i in 0..first.len() {
        fs.unlink(&format!("/e/f{i}")).unwrap();
    }
    assert!(free_fraction(&fs) >= 0.99);
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn overwritten_and_truncated_blocks_are_free_at_once() {
    let pm = fresh(64 * MIB);
    let fs = mount(&pm);
    let pool = fs.geometry().pool_blocks();
    let fd = fs.open("/f", rw_create(), 0o644).unwrap();
    let data = vec![1u8; 20 << 20];
    fs.pwrite(fd, &data, 0).unwrap();
    // A copy-on-write overwrite of the whole file displaces every block once.
    fs.pwrite(fd, &data, 0).unwrap();
    let u = fs.usage();
    assert_eq!(u.reclaiming_blocks, 0);
    assert!(
        pool - u.free_blocks < (20 << 20) / 4096 + 16,
        "displaced blocks still counted used: {} of {pool} used",
        pool - u.free_blocks
    );
    fs.ftruncate(fd, 0).unwrap();
    fs.close(fd).unwrap();
    assert!(free_fraction(&fs) >= 0.99);
    // More than the free space left after the first write: needs the displaced blocks.
    write_file(&fs, "/g", &vec![2u8; 40 << 20]);
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn blocks_a_reader_may_use_are_reclaiming_until_it_is_done() {
    let pm = fresh(16 * MIB);
    let fs = mount(&pm);
    write_file(&fs, "/f", &vec![3u8; 1 << 20]);
    let fd = fs.open("/f", OpenFlags::RDWR, 0).unwrap();
    let free0 = fs.usage().free_blocks;
    // The token holds the reader's epoch registration until it is waited for.
    let token = fs.submit_pread(fd, vec![0u8; 1 << 20], 0).unwrap();
    fs.pwrite(fd, &vec![4u8; 1 << 20], 0).unwrap();
    let during = fs.usage();
    assert_eq!(
        during.reclaiming_blocks, 256,
        "the displaced megabyte waits for the reader"
    );
    assert_eq!(during.free_blocks + 256, free0);
    let got = token.wait().unwrap();
    assert!(got.iter().all(|&b| b == 3), "reader saw the new data");
    let after = fs.usage();
    assert_eq!(after.reclaiming_blocks, 0);
    assert_eq!(after.free_blocks, free0);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

#[test]
fn a_reader_reading_all_the_time_does_not_make_overwrites_run_out_of_space() {
    let pm = fresh(32 * MIB);
    let fs = mount(&pm);
    write_file(&fs, "/r", &vec![5u8; 1 << 20]);
    let data = vec![6u8; 8 << 20];
    write_file(&fs, "/w", &data);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let fd = fs.open("/r", OpenFlags::RDONLY, 0).unwrap();
            let mut buf = vec![0u8; 4096];
            let mut off = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(fs.pread(fd, &mut buf, off).unwrap(), 4096);
                off = (off + 4096) % (1 << 20);
            }
            fs.close(fd).unwrap();
        });
        // Each overwrite needs the blocks the one before it displaced: the pool
        // holds three copies of the file at most.
        let fd = fs.open("/w", OpenFlags::RDWR, 0).unwrap();
        let r = (0..100).try_for_each(|i| fs.pwrite(fd, &data, 0).map(drop).map_err(|e| (i, e)));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r.unwrap();
        fs.close(fd).unwrap();
    });
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}
