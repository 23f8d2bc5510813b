//! Who answers the shim's calls: the image mounted in this process (`EASYIO_IMAGE`),
//! or an `easyio serve` server this process is a client of (`EASYIO_SERVER`). Both
//! take the calls of [`fs::Session`] under the same names, so the shim's modules do
//! not know which one they call.

use easyio_serve::{Client, HeldLock, LockKind, On};
use fs::{Cred, DirEntryAt, Fd, FileSystem, OpenFlags, Stat, StatFs, Time, Whence};

/// The file system the shim calls.
pub(crate) enum Backend {
    /// Mounted in this process; path calls are checked with `cred`.
    Local { fs: Box<FileSystem>, cred: Cred },
    /// A server's: every call is a request (reads may be direct), checked by the
    /// server with this process's credentials as the kernel gives them.
    Remote(Client),
}

/// A server's refusal as the file system's error (its errno travels as is).
fn remote(e: easyio_serve::Error) -> fs::Error {
    fs::Error::Errno(e.errno())
}

fn num(fd: Option<Fd>) -> Option<u32> {
    fd.map(|f| f.0)
}

/// Defines a call of both backends: `$local` with the session `$s`, `$remote` with
/// the client `$c`.
macro_rules! both {
    ($( fn $name:ident(&self $(, $a:ident : $t:ty)*) -> $r:ty
        { local($s:ident) => $local:expr, remote($c:ident) => $remote:expr } )*) => {
        impl Backend {
            $( pub(crate) fn $name(&self $(, $a: $t)*) -> fs::Result<$r> {
                match self {
                    Backend::Local { fs, cred } => {
                        let $s = fs.as_user(cred);
                        $local
                    }
                    Backend::Remote($c) => $remote.map_err(remote),
                }
            } )*
        }
    };
}

both! {
    fn openat(&self, dir: Option<Fd>, path: &str, flags: OpenFlags, mode: u32) -> Fd {
        local(s) => s.openat(dir, path, flags, mode),
        remote(c) => c.openat(num(dir), path, flags.0, mode).map(Fd)
    }
    fn stat(&self, path: &str) -> Stat {
        local(s) => s.stat(path),
        remote(c) => c.stat(path)
    }
    fn lstat(&self, path: &str) -> Stat {
        local(s) => s.lstat(path),
        remote(c) => c.lstat(path)
    }
    fn fstatat(&self, dir: Option<Fd>, path: &str, flags: i32) -> Stat {
        local(s) => s.fstatat(dir, path, flags),
        remote(c) => c.fstatat(num(dir), path, flags)
    }
    fn faccessat(&self, dir: Option<Fd>, path: &str, mode: i32, flags: i32) -> () {
        local(s) => s.faccessat(dir, path, mode, flags),
        remote(c) => c.faccessat(num(dir), path, mode, flags)
    }
    fn mkdirat(&self, dir: Option<Fd>, path: &str, mode: u32) -> () {
        local(s) => s.mkdirat(dir, path, mode),
        remote(c) => c.mkdirat(num(dir), path, mode)
    }
    fn unlinkat(&self, dir: Option<Fd>, path: &str, flags: i32) -> () {
        local(s) => s.unlinkat(dir, path, flags),
        remote(c) => c.unlinkat(num(dir), path, flags)
    }
    fn renameat2(&self, d1: Option<Fd>, p1: &str, d2: Option<Fd>, p2: &str, flags: u32) -> () {
        local(s) => s.renameat2(d1, p1, d2, p2, flags),
        remote(c) => c.renameat((num(d1), p1), (num(d2), p2), flags)
    }
    fn linkat(&self, d1: Option<Fd>, p1: &str, d2: Option<Fd>, p2: &str, flags: i32) -> () {
        local(s) => s.linkat(d1, p1, d2, p2, flags),
        remote(c) => c.linkat((num(d1), p1), (num(d2), p2), flags)
    }
    fn symlinkat(&self, target: &str, dir: Option<Fd>, path: &str) -> () {
        local(s) => s.symlinkat(target, dir, path),
        remote(c) => c.symlinkat(target, num(dir), path)
    }
    fn readlink(&self, path: &str) -> String {
        local(s) => s.readlink(path),
        remote(c) => c.readlink(path)
    }
    fn readlinkat(&self, dir: Option<Fd>, path: &str) -> String {
        local(s) => s.readlinkat(dir, path),
        remote(c) => c.readlinkat(num(dir), path)
    }
    fn fchmodat(&self, dir: Option<Fd>, path: &str, mode: u32, flags: i32) -> () {
        local(s) => s.fchmodat(dir, path, mode, flags),
        remote(c) => c.fchmodat(num(dir), path, mode, flags)
    }
    fn fchmod(&self, fd: Fd, mode: u32) -> () {
        local(s) => s.fchmod(fd, mode),
        remote(c) => c.fchmod(fd.0, mode)
    }
    fn fchownat(&self, dir: Option<Fd>, path: &str, uid: Option<u32>, gid: Option<u32>, flags: i32) -> () {
        local(s) => s.fchownat(dir, path, uid, gid, flags),
        remote(c) => c.fchownat(num(dir), path, (uid, gid), flags)
    }
    fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> () {
        local(s) => s.fchown(fd, uid, gid),
        remote(c) => c.fchown(fd.0, uid, gid)
    }
    fn utimensat(&self, dir: Option<Fd>, path: &str, a: Option<Time>, m: Option<Time>, flags: i32) -> () {
        local(s) => s.utimensat(dir, path, a, m, flags),
        remote(c) => c.utimensat(num(dir), path, (a, m), flags)
    }
    fn futimens(&self, fd: Fd, a: Option<Time>, m: Option<Time>) -> () {
        local(s) => s.futimens(fd, a, m),
        remote(c) => c.futimens(fd.0, a, m)
    }
    fn truncate(&self, path: &str, len: u64) -> () {
        local(s) => s.truncate(path, len),
        remote(c) => c.truncate(path, len)
    }
    fn getxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> usize {
        local(s) => s.getxattr(path, name, buf),
        remote(c) => c.getxattr(On::Path(path.into()), name, buf)
    }
    fn lgetxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> usize {
        local(s) => s.lgetxattr(path, name, buf),
        remote(c) => c.getxattr(On::Link(path.into()), name, buf)
    }
    fn fgetxattr(&self, fd: Fd, name: &str, buf: &mut [u8]) -> usize {
        local(s) => s.fgetxattr(fd, name, buf),
        remote(c) => c.getxattr(On::Fd(fd.0), name, buf)
    }
    fn setxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> () {
        local(s) => s.setxattr(path, name, value, flags),
        remote(c) => c.setxattr(On::Path(path.into()), name, value, flags)
    }
    fn lsetxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> () {
        local(s) => s.lsetxattr(path, name, value, flags),
        remote(c) => c.setxattr(On::Link(path.into()), name, value, flags)
    }
    fn fsetxattr(&self, fd: Fd, name: &str, value: &[u8], flags: i32) -> () {
        local(s) => s.fsetxattr(fd, name, value, flags),
        remote(c) => c.setxattr(On::Fd(fd.0), name, value, flags)
    }
    fn listxattr(&self, path: &str, buf: &mut [u8]) -> usize {
        local(s) => s.listxattr(path, buf),
        remote(c) => c.listxattr(On::Path(path.into()), buf)
    }
    fn llistxattr(&self, path: &str, buf: &mut [u8]) -> usize {
        local(s) => s.llistxattr(path, buf),
        remote(c) => c.listxattr(On::Link(path.into()), buf)
    }
    fn flistxattr(&self, fd: Fd, buf: &mut [u8]) -> usize {
        local(s) => s.flistxattr(fd, buf),
        remote(c) => c.listxattr(On::Fd(fd.0), buf)
    }
    fn removexattr(&self, path: &str, name: &str) -> () {
        local(s) => s.removexattr(path, name),
        remote(c) => c.removexattr(On::Path(path.into()), name)
    }
    fn lremovexattr(&self, path: &str, name: &str) -> () {
        local(s) => s.lremovexattr(path, name),
        remote(c) => c.removexattr(On::Link(path.into()), name)
    }
    fn fremovexattr(&self, fd: Fd, name: &str) -> () {
        local(s) => s.fremovexattr(fd, name),
        remote(c) => c.removexattr(On::Fd(fd.0), name)
    }
    fn fstat(&self, fd: Fd) -> Stat {
        local(s) => s.fs().fstat(fd),
        remote(c) => c.fstat(fd.0)
    }
    fn read(&self, fd: Fd, buf: &mut [u8]) -> usize {
        local(s) => s.fs().read(fd, buf),
        remote(c) => c.read(fd.0, buf)
    }
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> usize {
        local(s) => s.fs().pread(fd, buf, off),
        remote(c) => c.pread(fd.0, buf, off)
    }
    fn write(&self, fd: Fd, buf: &[u8]) -> usize {
        local(s) => s.fs().write(fd, buf),
        remote(c) => c.write(fd.0, buf)
    }
    fn pwrite(&self, fd: Fd, buf: &[u8], off: u64) -> usize {
        local(s) => s.fs().pwrite(fd, buf, off),
        remote(c) => c.pwrite(fd.0, buf, off)
    }
    fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> u64 {
        local(s) => s.fs().lseek(fd, off, whence),
        remote(c) => c.lseek(fd.0, off, seek_of(whence))
    }
    fn fsync(&self, fd: Fd) -> () {
        local(s) => s.fs().fsync(fd),
        remote(c) => c.fsync(fd.0)
    }
    fn ftruncate(&self, fd: Fd, len: u64) -> () {
        local(s) => s.fs().ftruncate(fd, len),
        remote(c) => c.ftruncate(fd.0, len)
    }
    fn fallocate(&self, fd: Fd, mode: i32, off: u64, len: u64) -> () {
        local(s) => s.fallocate(fd, mode, off, len),
        remote(c) => c.fallocate(fd.0, mode, off, len)
    }
    fn close(&self, fd: Fd) -> () {
        local(s) => s.fs().close(fd),
        remote(c) => c.close(fd.0)
    }
    fn readdir_fd(&self, fd: Fd, offset: u64) -> Vec<DirEntryAt> {
        local(s) => s.fs().readdir_fd(fd, offset),
        remote(c) => c.readdir_fd(fd.0, offset)
    }
    fn statfs(&self) -> StatFs {
        local(s) => s.fs().statfs(),
        remote(c) => c.statfs()
    }
}

impl Backend {
    /// Whether the file system refuses changes (a server's image is writable).
    pub(crate) fn is_read_only(&self) -> bool {
        match self {
            Backend::Local { fs, .. } => fs.is_read_only(),
            Backend::Remote(_) => false,
        }
    }

    /// The server's client, if this is one.
    pub(crate) fn client(&self) -> Option<&Client> {
        match self {
            Backend::Remote(c) => Some(c),
            Backend::Local { .. } => None,
        }
    }
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

impl Backend {
    /// Sets, clears (`test` false) or tests for (`test` true) an advisory lock.
    /// Mounted here, the image has one process: every lock is granted and none is
    /// found. A server keeps them between its clients.
    pub(crate) fn lock(
        &self,
        fd: Fd,
        (open_file, test): (bool, bool),
        kind: LockKind,
        range: (u64, u64),
    ) -> fs::Result<Option<HeldLock>> {
        match self {
            Backend::Local { .. } => Ok(None),
            Backend::Remote(c) if test => c.test_lock(fd.0, open_file, kind, range).map_err(remote),
            Backend::Remote(c) => c
                .lock(fd.0, open_file, kind, range)
                .map(|()| None)
                .map_err(remote),
        }
    }
}
