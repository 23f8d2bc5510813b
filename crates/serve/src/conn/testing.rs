//! What the tests of the connection's rooms share.

pub(crate) use std::sync::atomic::Ordering;
pub(crate) use std::sync::Arc;

pub(crate) use fs::{Cred, FileSystem, FormatOptions, MountOptions};
pub(crate) use pmem::{MemPmem, Pmem};
pub(crate) use proptest::prelude::*;

pub(crate) use super::{Attached, Common, Conn};
pub(crate) use crate::direct::Direct;
pub(crate) use crate::locks::Kind as LockKind;
pub(crate) use crate::staging;
pub(crate) use crate::wire::{self, Answer, Request};

/// A fresh file system of 16 MiB in memory.
pub(crate) fn memory_fs() -> FileSystem {
    let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
    FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
    FileSystem::mount(pm, MountOptions::default()).unwrap().0
}

/// The page table of `ino` names exactly the blocks the file system has.
pub(crate) fn assert_table_is_the_files(fs: &FileSystem, direct: &Direct, ino: u64) {
    use crate::direct::{HOLE, PAGE0, SIZE};
    let t = direct.table(fs, ino).unwrap();
    let (size, segs) = fs.map_inode(ino, 0, u64::MAX).unwrap();
    assert_eq!(t.words().at(SIZE).load(Ordering::SeqCst), size);
    let mut pg = 0;
    for (len, src) in segs {
        for k in 0..(len as u64).div_ceil(fs::BLOCK_SIZE) {
            let want = src.map_or(HOLE, |s| s / fs::BLOCK_SIZE + k);
            let got = t.words().at(PAGE0 + pg).load(Ordering::SeqCst);
            assert_eq!(got, want, "page {pg}");
            pg += 1;
        }
    }
    direct.release(ino);
}

/// Asks `c` for a staging buffer of `len` bytes: its number, and the client's
/// mapping of it.
pub(crate) fn staging_of(c: &mut Conn<'_>, len: u64) -> (u32, staging::Buffer) {
    let (answer, attached) = c.answer_bytes(&wire::frame(&Request::Staging { len }).unwrap()[4..]);
    let Answer::Staging { id, len } = answer else {
        panic!("{answer:?}")
    };
    let Attached::Staging(fd) = attached else {
        panic!("no descriptor")
    };
    (id, staging::Buffer::map(&fd, len as usize).unwrap())
}

/// Opens (creating it) `path` read-write on `c`: its descriptor.
pub(crate) fn open_rw(c: &mut Conn<'_>, path: &str) -> u32 {
    let answer = c.answer(Request::Open {
        path: path.into(),
        flags: libc::O_CREAT | libc::O_RDWR,
        mode: 0o644,
    });
    let Answer::Fd(fd) = answer else {
        panic!("{answer:?}")
    };
    fd
}

/// A child process that sleeps for a minute (a process to hand descriptors to).
pub(crate) fn sleeper() -> std::process::Child {
    std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap()
}

/// A connection of root's from process `pid`, without direct reads.
pub(crate) fn conn_of<'a>(fs: &'a FileSystem, common: &'a Common, pid: u32) -> Conn<'a> {
    let mut c = Conn::new(fs, Cred::root(), common, None);
    c.pid = pid;
    c
}
