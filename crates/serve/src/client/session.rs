//! A client's calls under the names and types of [`fs::Session`]'s (descriptors as
//! [`Fd`], errors as [`fs::Error`]), so that a door written against the file
//! system — the LD_PRELOAD shim, the C ABI — can call a server instead with the
//! same code.

use fs::{DirEntryAt, Fd, OpenFlags, Stat, StatFs, Time, Whence};

use super::Client;
use crate::wire::{HeldLock, LockKind, LockOwner, On};

/// A [`Client`] whose calls read as [`fs::Session`]'s.
pub struct Remote(pub Client);

/// A server's refusal as the file system's error (its errno travels as is).
fn error(e: crate::Error) -> fs::Error {
    fs::Error::Errno(e.errno())
}

fn num(fd: Option<Fd>) -> Option<u32> {
    fd.map(|f| f.0)
}

/// The `SEEK_*` value of a [`Whence`].
fn seek_of(w: Whence) -> i32 {
    match w {
        Whence::Set => libc::SEEK_SET,
        Whence::Cur => libc::SEEK_CUR,
        Whence::End => libc::SEEK_END,
        Whence::Data => libc::SEEK_DATA,
        Whence::Hole => libc::SEEK_HOLE,
    }
}

/// Defines each call: `$body` with the client `$c`, its error converted.
macro_rules! like_session {
    ($( fn $name:ident(&self $(, $a:ident : $t:ty)*) -> $r:ty => |$c:ident| $body:expr; )*) => {
        impl Remote {
            $( #[doc = concat!("`", stringify!($name), "`, as [`fs::Session`]'s.")]
            pub fn $name(&self $(, $a: $t)*) -> fs::Result<$r> {
                let $c = &self.0;
                $body.map_err(error)
            } )*
        }
    };
}

like_session! {
    fn open(&self, path: &str, flags: OpenFlags, mode: u32) -> Fd => |c| c.openat(None, path, flags.0, mode).map(Fd);
    fn mknod(&self, path: &str, mode: u32, rdev: u64) -> () => |c| c.mknodat(None, path, mode, rdev);
    fn mknodat(&self, dir: Option<Fd>, path: &str, mode: u32, rdev: u64) -> () => |c| c.mknodat(num(dir), path, mode, rdev);
    fn openat(&self, dir: Option<Fd>, path: &str, flags: OpenFlags, mode: u32) -> Fd => |c| c.openat(num(dir), path, flags.0, mode).map(Fd);
    fn stat(&self, path: &str) -> Stat => |c| c.stat(path);
    fn lstat(&self, path: &str) -> Stat => |c| c.lstat(path);
    fn fstatat(&self, dir: Option<Fd>, path: &str, flags: i32) -> Stat => |c| c.fstatat(num(dir), path, flags);
    fn faccessat(&self, dir: Option<Fd>, path: &str, mode: i32, flags: i32) -> () => |c| c.faccessat(num(dir), path, mode, flags);
    fn mkdirat(&self, dir: Option<Fd>, path: &str, mode: u32) -> () => |c| c.mkdirat(num(dir), path, mode);
    fn unlinkat(&self, dir: Option<Fd>, path: &str, flags: i32) -> () => |c| c.unlinkat(num(dir), path, flags);
    fn renameat2(&self, d1: Option<Fd>, p1: &str, d2: Option<Fd>, p2: &str, flags: u32) -> () => |c| c.renameat((num(d1), p1), (num(d2), p2), flags);
    fn linkat(&self, d1: Option<Fd>, p1: &str, d2: Option<Fd>, p2: &str, flags: i32) -> () => |c| c.linkat((num(d1), p1), (num(d2), p2), flags);
    fn symlinkat(&self, target: &str, dir: Option<Fd>, path: &str) -> () => |c| c.symlinkat(target, num(dir), path);
    fn readlink(&self, path: &str) -> String => |c| c.readlink(path);
    fn readlinkat(&self, dir: Option<Fd>, path: &str) -> String => |c| c.readlinkat(num(dir), path);
    fn fchmodat(&self, dir: Option<Fd>, path: &str, mode: u32, flags: i32) -> () => |c| c.fchmodat(num(dir), path, mode, flags);
    fn fchmod(&self, fd: Fd, mode: u32) -> () => |c| c.fchmod(fd.0, mode);
    fn fchownat(&self, dir: Option<Fd>, path: &str, uid: Option<u32>, gid: Option<u32>, flags: i32) -> () => |c| c.fchownat(num(dir), path, (uid, gid), flags);
    fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> () => |c| c.fchown(fd.0, uid, gid);
    fn utimensat(&self, dir: Option<Fd>, path: &str, a: Option<Time>, m: Option<Time>, flags: i32) -> () => |c| c.utimensat(num(dir), path, (a, m), flags);
    fn futimens(&self, fd: Fd, a: Option<Time>, m: Option<Time>) -> () => |c| c.futimens(fd.0, a, m);
    fn truncate(&self, path: &str, len: u64) -> () => |c| c.truncate(path, len);
    fn getxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> usize => |c| c.getxattr(On::Path(path.into()), name, buf);
    fn lgetxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> usize => |c| c.getxattr(On::Link(path.into()), name, buf);
    fn fgetxattr(&self, fd: Fd, name: &str, buf: &mut [u8]) -> usize => |c| c.getxattr(On::Fd(fd.0), name, buf);
    fn setxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> () => |c| c.setxattr(On::Path(path.into()), name, value, flags);
    fn lsetxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> () => |c| c.setxattr(On::Link(path.into()), name, value, flags);
    fn fsetxattr(&self, fd: Fd, name: &str, value: &[u8], flags: i32) -> () => |c| c.setxattr(On::Fd(fd.0), name, value, flags);
    fn listxattr(&self, path: &str, buf: &mut [u8]) -> usize => |c| c.listxattr(On::Path(path.into()), buf);
    fn llistxattr(&self, path: &str, buf: &mut [u8]) -> usize => |c| c.listxattr(On::Link(path.into()), buf);
    fn flistxattr(&self, fd: Fd, buf: &mut [u8]) -> usize => |c| c.listxattr(On::Fd(fd.0), buf);
    fn removexattr(&self, path: &str, name: &str) -> () => |c| c.removexattr(On::Path(path.into()), name);
    fn lremovexattr(&self, path: &str, name: &str) -> () => |c| c.removexattr(On::Link(path.into()), name);
    fn fremovexattr(&self, fd: Fd, name: &str) -> () => |c| c.removexattr(On::Fd(fd.0), name);
    fn fstat(&self, fd: Fd) -> Stat => |c| c.fstat(fd.0);
    fn read(&self, fd: Fd, buf: &mut [u8]) -> usize => |c| c.read(fd.0, buf);
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> usize => |c| c.pread(fd.0, buf, off);
    fn write(&self, fd: Fd, buf: &[u8]) -> usize => |c| c.write(fd.0, buf);
    fn pwrite(&self, fd: Fd, buf: &[u8], off: u64) -> usize => |c| c.pwrite(fd.0, buf, off);
    fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> u64 => |c| c.lseek(fd.0, off, seek_of(whence));
    fn fsync(&self, fd: Fd) -> () => |c| c.fsync(fd.0);
    fn ftruncate(&self, fd: Fd, len: u64) -> () => |c| c.ftruncate(fd.0, len);
    fn fallocate(&self, fd: Fd, mode: i32, off: u64, len: u64) -> () => |c| c.fallocate(fd.0, mode, off, len);
    fn close(&self, fd: Fd) -> () => |c| c.close(fd.0);
    fn readdir_fd(&self, fd: Fd, offset: u64) -> Vec<DirEntryAt> => |c| c.readdir_fd(fd.0, offset);
    fn statfs(&self) -> StatFs => |c| c.statfs();
}

impl Remote {
    /// Sets, clears (`test` false) or tests for (`test` true) an advisory lock of
    /// open file `fd`, owned as `owner` says.
    pub fn lock(
        &self,
        fd: Fd,
        (owner, test): (LockOwner, bool),
        kind: LockKind,
        range: (u64, u64),
    ) -> fs::Result<Option<HeldLock>> {
        match test {
            true => self.0.test_lock(fd.0, owner, kind, range),
            false => self.0.lock(fd.0, owner, kind, range).map(|()| None),
        }
        .map_err(error)
    }
}
