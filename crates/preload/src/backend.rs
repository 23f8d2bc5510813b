//! Who answers the shim's calls: the image mounted in this process (`EASYIO_IMAGE`),
//! or an `easyio serve` server this process is a client of (`EASYIO_SERVER`). Both
//! take the calls of [`fs::Session`] under the same names, so the shim's modules do
//! not know which one they call.

use easyio_serve::{Client, HeldLock, LockKind, LockOwner, Remote};
use fs::{Cred, DirEntryAt, Fd, FileSystem, OpenFlags, Stat, StatFs, Time, Whence};

/// The file system the shim calls.
pub(crate) enum Backend {
    /// Mounted in this process; path calls are checked with `cred`.
    Local {
        fs: Box<FileSystem>,
        cred: parking_lot::RwLock<Cred>,
    },
    /// A server's: every call is a request (reads may be direct), checked by the
    /// server with this process's credentials as the kernel gives them.
    Remote(Box<Remote>),
}

/// Defines a call of both backends: mounted here, `$local` with `$s` — a session
/// of the process's credentials (`|s|`, for the calls that check them), or the file
/// system itself (`fs |f|`, for calls on open descriptors: no session to make); a
/// server's client makes the call of the same name and arguments.
macro_rules! both {
    (@here $fs:ident $cred:ident |$s:ident| $local:expr) => {{
        let cred = $cred.read();
        let $s = $fs.as_user(&cred);
        $local
    }};
    (@here $fs:ident $cred:ident fs |$f:ident| $local:expr) => {{
        let _ = $cred;
        let $f: &FileSystem = $fs;
        $local
    }};
    ($( fn $name:ident(&self $(, $a:ident : $t:ty)*) -> $r:ty => $($how:ident)? |$s:ident| $local:expr; )*) => {
        impl Backend {
            $( pub(crate) fn $name(&self $(, $a: $t)*) -> fs::Result<$r> {
                match self {
                    Backend::Local { fs, cred } => both!(@here fs cred $($how)? |$s| $local),
                    Backend::Remote(r) => r.$name($($a),*),
                }
            } )*
        }
    };
}

both! {
    fn openat(&self, dir: Option<Fd>, path: &str, flags: OpenFlags, mode: u32) -> Fd => |s| s.openat(dir, path, flags, mode);
    fn stat(&self, path: &str) -> Stat => |s| s.stat(path);
    fn lstat(&self, path: &str) -> Stat => |s| s.lstat(path);
    fn fstatat(&self, dir: Option<Fd>, path: &str, flags: i32) -> Stat => |s| s.fstatat(dir, path, flags);
    fn faccessat(&self, dir: Option<Fd>, path: &str, mode: i32, flags: i32) -> () => |s| s.faccessat(dir, path, mode, flags);
    fn mkdirat(&self, dir: Option<Fd>, path: &str, mode: u32) -> () => |s| s.mkdirat(dir, path, mode);
    fn unlinkat(&self, dir: Option<Fd>, path: &str, flags: i32) -> () => |s| s.unlinkat(dir, path, flags);
    fn renameat2(&self, d1: Option<Fd>, p1: &str, d2: Option<Fd>, p2: &str, flags: u32) -> () => |s| s.renameat2(d1, p1, d2, p2, flags);
    fn linkat(&self, d1: Option<Fd>, p1: &str, d2: Option<Fd>, p2: &str, flags: i32) -> () => |s| s.linkat(d1, p1, d2, p2, flags);
    fn symlinkat(&self, target: &str, dir: Option<Fd>, path: &str) -> () => |s| s.symlinkat(target, dir, path);
    fn readlink(&self, path: &str) -> String => |s| s.readlink(path);
    fn readlinkat(&self, dir: Option<Fd>, path: &str) -> String => |s| s.readlinkat(dir, path);
    fn fchmodat(&self, dir: Option<Fd>, path: &str, mode: u32, flags: i32) -> () => |s| s.fchmodat(dir, path, mode, flags);
    fn fchmod(&self, fd: Fd, mode: u32) -> () => |s| s.fchmod(fd, mode);
    fn fchownat(&self, dir: Option<Fd>, path: &str, uid: Option<u32>, gid: Option<u32>, flags: i32) -> () => |s| s.fchownat(dir, path, uid, gid, flags);
    fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> () => |s| s.fchown(fd, uid, gid);
    fn utimensat(&self, dir: Option<Fd>, path: &str, a: Option<Time>, m: Option<Time>, flags: i32) -> () => |s| s.utimensat(dir, path, a, m, flags);
    fn futimens(&self, fd: Fd, a: Option<Time>, m: Option<Time>) -> () => |s| s.futimens(fd, a, m);
    fn truncate(&self, path: &str, len: u64) -> () => |s| s.truncate(path, len);
    fn getxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> usize => |s| s.getxattr(path, name, buf);
    fn lgetxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> usize => |s| s.lgetxattr(path, name, buf);
    fn fgetxattr(&self, fd: Fd, name: &str, buf: &mut [u8]) -> usize => |s| s.fgetxattr(fd, name, buf);
    fn setxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> () => |s| s.setxattr(path, name, value, flags);
    fn lsetxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> () => |s| s.lsetxattr(path, name, value, flags);
    fn fsetxattr(&self, fd: Fd, name: &str, value: &[u8], flags: i32) -> () => |s| s.fsetxattr(fd, name, value, flags);
    fn listxattr(&self, path: &str, buf: &mut [u8]) -> usize => |s| s.listxattr(path, buf);
    fn llistxattr(&self, path: &str, buf: &mut [u8]) -> usize => |s| s.llistxattr(path, buf);
    fn flistxattr(&self, fd: Fd, buf: &mut [u8]) -> usize => |s| s.flistxattr(fd, buf);
    fn removexattr(&self, path: &str, name: &str) -> () => |s| s.removexattr(path, name);
    fn lremovexattr(&self, path: &str, name: &str) -> () => |s| s.lremovexattr(path, name);
    fn fremovexattr(&self, fd: Fd, name: &str) -> () => |s| s.fremovexattr(fd, name);
    fn fstat(&self, fd: Fd) -> Stat => fs |f| f.fstat(fd);
    fn read(&self, fd: Fd, buf: &mut [u8]) -> usize => fs |f| f.read(fd, buf);
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> usize => fs |f| f.pread(fd, buf, off);
    fn write(&self, fd: Fd, buf: &[u8]) -> usize => fs |f| f.write(fd, buf);
    fn pwrite(&self, fd: Fd, buf: &[u8], off: u64) -> usize => fs |f| f.pwrite(fd, buf, off);
    fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> u64 => fs |f| f.lseek(fd, off, whence);
    fn fsync(&self, fd: Fd) -> () => fs |f| f.fsync(fd);
    fn ftruncate(&self, fd: Fd, len: u64) -> () => fs |f| f.ftruncate(fd, len);
    fn fallocate(&self, fd: Fd, mode: i32, off: u64, len: u64) -> () => fs |f| f.fallocate(fd, mode, off, len);
    fn close(&self, fd: Fd) -> () => fs |f| f.close(fd);
    fn readdir_fd(&self, fd: Fd, offset: u64) -> Vec<DirEntryAt> => fs |f| f.readdir_fd(fd, offset);
    fn statfs(&self) -> StatFs => fs |f| f.statfs();
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
    /// After the process changed its ids: the calls check the new ones (a server
    /// reads them from the kernel).
    pub(crate) fn recredential(&self, now: Cred) {
        match self {
            Backend::Local { cred, .. } => *cred.write() = now,
            Backend::Remote(r) => {
                let _ = r.0.recredential();
            }
        }
    }

    pub(crate) fn client(&self) -> Option<&Client> {
        match self {
            Backend::Remote(r) => Some(&r.0),
            Backend::Local { .. } => None,
        }
    }
}

impl Backend {
    /// Sets, clears (`test` false) or tests for (`test` true) an advisory lock.
    /// Mounted here, the image has one process: every lock is granted and none is
    /// found. A server keeps them between its clients.
    pub(crate) fn lock(
        &self,
        fd: Fd,
        how: (LockOwner, bool),
        kind: LockKind,
        range: (u64, u64),
    ) -> fs::Result<Option<HeldLock>> {
        match self {
            Backend::Local { .. } => Ok(None),
            Backend::Remote(r) => r.lock(fd, how, kind, range),
        }
    }
}
