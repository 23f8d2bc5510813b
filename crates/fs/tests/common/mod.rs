//! Helpers shared by the file system's integration tests: real regions in /dev/shm.

#![allow(dead_code)]

use std::sync::Arc;

use fs::{FileSystem, FormatOptions, MountOptions, OpenFlags};
use pmem::{Pmem, Region};

pub const MIB: u64 = 1 << 20;

/// A formatted temporary region.
pub fn fresh(size: u64) -> Arc<dyn Pmem> {
    let r: Arc<dyn Pmem> = Arc::new(Region::create_temp(size).unwrap());
    FileSystem::format(&*r, &FormatOptions::default()).unwrap();
    r
}

pub fn mount(pm: &Arc<dyn Pmem>) -> FileSystem {
    FileSystem::mount(pm.clone(), MountOptions::default())
        .unwrap()
        .0
}

pub fn rw_create() -> OpenFlags {
    OpenFlags::RDWR | OpenFlags::CREAT
}

pub fn write_file(fs: &FileSystem, path: &str, data: &[u8]) {
    let fd = fs
        .open(path, rw_create() | OpenFlags::TRUNC, 0o644)
        .unwrap();
    assert_eq!(fs.write(fd, data).unwrap(), data.len());
    fs.close(fd).unwrap();
}

pub fn read_file(fs: &FileSystem, path: &str) -> Vec<u8> {
    let fd = fs.open(path, OpenFlags::RDONLY, 0).unwrap();
    let size = fs.fstat(fd).unwrap().size as usize;
    let mut buf = vec![0u8; size + 10];
    let n = fs.pread(fd, &mut buf, 0).unwrap();
    fs.close(fd).unwrap();
    buf.truncate(n);
    buf
}

pub fn assert_fsck_clean(pm: &Arc<dyn Pmem>) {
    let r = fs::fsck::check(&**pm, None).unwrap();
    assert!(r.ok(), "fsck problems: {:#?}", r.problems);
}
