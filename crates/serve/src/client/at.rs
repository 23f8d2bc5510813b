//! The calls of a [`Client`] that the LD_PRELOAD shim and the C ABI need beyond the
//! plain path calls: the `*at` family (from a directory descriptor of this
//! connection), attribute calls on descriptors, directory cookies, extended
//! attributes, `fallocate`, and the handoff of descriptors across `fork` and `exec`.

use fs::{DirEntryAt, Stat, Time};

use super::{unexpected, Client};
use crate::error::{Error, Result};
use crate::wire::{Answer, HeldLock, LockKind, LockOwner, On, Request, MAX_IO};

impl Client {
    /// `openat(dir, path, flags, mode)`; `dir` `None` is the root.
    pub fn openat(&self, dir: Option<u32>, path: &str, flags: i32, mode: u32) -> Result<u32> {
        // An absolute path names the same file whatever `dir` is.
        if let Some(e) = self.open_refused(path, flags) {
            return Err(e);
        }
        let path = path.to_string();
        match self.call(&Request::Openat {
            dir,
            path,
            flags,
            mode,
        })? {
            Answer::Fd(fd) => {
                self.forget_table(fd);
                Ok(fd)
            }
            other => Err(unexpected(other)),
        }
    }

    /// `fstatat(dir, path, flags)`. An absolute path (which names the same file
    /// whatever `dir` is) is resolved here when it can be, as [`Client::stat`].
    pub fn fstatat(&self, dir: Option<u32>, path: &str, flags: i32) -> Result<Stat> {
        if flags & !libc::AT_SYMLINK_NOFOLLOW == 0 {
            if let Some(r) = self.resolved(path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) {
                return r;
            }
        }
        let path = path.into();
        self.stat_of(Request::Fstatat { dir, path, flags })
    }

    /// `faccessat(dir, path, mode, flags)`. Whether an absolute path exists
    /// (`F_OK`) is resolved here when it can be, as [`Client::stat`].
    pub fn faccessat(&self, dir: Option<u32>, path: &str, mode: i32, flags: i32) -> Result<()> {
        let nofollow = libc::AT_SYMLINK_NOFOLLOW;
        if mode == libc::F_OK && flags & !(nofollow | libc::AT_EACCESS) == 0 {
            if let Some(r) = self.resolved(path, flags & nofollow == 0) {
                return r.map(drop);
            }
        }
        let path = path.into();
        self.done(Request::Faccessat {
            dir,
            path,
            mode,
            flags,
        })
    }

    /// `mkdirat(dir, path, mode)`.
    pub fn mkdirat(&self, dir: Option<u32>, path: &str, mode: u32) -> Result<()> {
        let path = path.into();
        self.done(Request::Mkdirat { dir, path, mode })
    }

    /// `mknodat(dir, path, mode, rdev)`.
    pub fn mknodat(&self, dir: Option<u32>, path: &str, mode: u32, rdev: u64) -> Result<()> {
        let path = path.into();
        self.done(Request::Mknodat {
            dir,
            path,
            mode,
            rdev,
        })
    }

    /// `unlinkat(dir, path, flags)`.
    pub fn unlinkat(&self, dir: Option<u32>, path: &str, flags: i32) -> Result<()> {
        let path = path.into();
        self.done(Request::Unlinkat { dir, path, flags })
    }

    /// `renameat2(old_dir, old, new_dir, new, flags)`.
    pub fn renameat(
        &self,
        (old_dir, old): (Option<u32>, &str),
        (new_dir, new): (Option<u32>, &str),
        flags: u32,
    ) -> Result<()> {
        let (old, new) = (old.into(), new.into());
        self.done(Request::Renameat {
            old_dir,
            old,
            new_dir,
            new,
            flags,
        })
    }

    /// `linkat(old_dir, old, new_dir, new, flags)`.
    pub fn linkat(
        &self,
        (old_dir, old): (Option<u32>, &str),
        (new_dir, new): (Option<u32>, &str),
        flags: i32,
    ) -> Result<()> {
        let (old, new) = (old.into(), new.into());
        self.done(Request::Linkat {
            old_dir,
            old,
            new_dir,
            new,
            flags,
        })
    }

    /// `symlinkat(target, dir, path)`.
    pub fn symlinkat(&self, target: &str, dir: Option<u32>, path: &str) -> Result<()> {
        let (target, path) = (target.into(), path.into());
        self.done(Request::Symlinkat { target, dir, path })
    }

    /// `readlinkat(dir, path)`.
    pub fn readlinkat(&self, dir: Option<u32>, path: &str) -> Result<String> {
        let path = path.into();
        match self.call(&Request::Readlinkat { dir, path })? {
            Answer::Text(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }

    /// `fchmodat(dir, path, mode, flags)`.
    pub fn fchmodat(&self, dir: Option<u32>, path: &str, mode: u32, flags: i32) -> Result<()> {
        let path = path.into();
        self.done(Request::Fchmodat {
            dir,
            path,
            mode,
            flags,
        })
    }

    /// `fchmod(fd, mode)`.
    pub fn fchmod(&self, fd: u32, mode: u32) -> Result<()> {
        self.done(Request::Fchmod { fd, mode })
    }

    /// `fchownat(dir, path, uid, gid, flags)`; `None` leaves one as it is.
    pub fn fchownat(
        &self,
        dir: Option<u32>,
        path: &str,
        (uid, gid): (Option<u32>, Option<u32>),
        flags: i32,
    ) -> Result<()> {
        let path = path.into();
        self.done(Request::Fchownat {
            dir,
            path,
            uid,
            gid,
            flags,
        })
    }

    /// `fchown(fd, uid, gid)`.
    pub fn fchown(&self, fd: u32, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.done(Request::Fchown { fd, uid, gid })
    }

    /// `utimensat(dir, path, atime, mtime, flags)`; `None` is `UTIME_OMIT`.
    pub fn utimensat(
        &self,
        dir: Option<u32>,
        path: &str,
        (atime, mtime): (Option<Time>, Option<Time>),
        flags: i32,
    ) -> Result<()> {
        let path = path.into();
        self.done(Request::Utimensat {
            dir,
            path,
            atime,
            mtime,
            flags,
        })
    }

    /// `futimens(fd, atime, mtime)`.
    pub fn futimens(&self, fd: u32, atime: Option<Time>, mtime: Option<Time>) -> Result<()> {
        self.done(Request::Futimens { fd, atime, mtime })
    }

    /// `fallocate(fd, mode, off, len)`.
    pub fn fallocate(&self, fd: u32, mode: i32, off: u64, len: u64) -> Result<()> {
        self.done(Request::Fallocate { fd, mode, off, len })
    }

    /// The entries of open directory `fd` after cookie `offset` (0: from the start);
    /// empty at the end. One call may return only some: ask again after the last.
    pub fn readdir_fd(&self, fd: u32, offset: u64) -> Result<Vec<DirEntryAt>> {
        match self.call(&Request::ReaddirFd { fd, offset })? {
            Answer::EntriesAt(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    /// `getxattr` into `buf` (empty: the value's length only).
    pub fn getxattr(&self, on: On, name: &str, buf: &mut [u8]) -> Result<usize> {
        let (name, size) = (name.into(), buf.len().min(MAX_IO) as u32);
        let answer = self.call(&Request::Getxattr { on, name, size })?;
        sized(answer, buf)
    }

    /// `listxattr` into `buf` (empty: the list's length only).
    pub fn listxattr(&self, on: On, buf: &mut [u8]) -> Result<usize> {
        let size = buf.len().min(MAX_IO) as u32;
        sized(self.call(&Request::Listxattr { on, size })?, buf)
    }

    /// `setxattr(name, value, flags)`.
    pub fn setxattr(&self, on: On, name: &str, value: &[u8], flags: i32) -> Result<()> {
        let (name, value) = (name.into(), value.to_vec());
        self.done(Request::Setxattr {
            on,
            name,
            value,
            flags,
        })
    }

    /// `removexattr(name)`.
    pub fn removexattr(&self, on: On, name: &str) -> Result<()> {
        let name = name.into();
        self.done(Request::Removexattr { on, name })
    }

    /// Before a `fork` or an `exec`: the server keeps descriptors `fds` of this
    /// connection for the process that will adopt them ([`Client::adopt`]); the
    /// token to adopt by.
    pub fn handoff(&self, fds: &[u32]) -> Result<u64> {
        self.count(Request::Handoff { fds: fds.to_vec() })
    }

    /// Names the process handoff `token` is for (after `fork`, the child), so the
    /// server lets what it kept go once that process is gone; a negative `pid` gives
    /// the handoff up (the `fork` failed, the `exec` returned).
    pub fn heir(&self, token: u64, pid: i32) -> Result<()> {
        self.done(Request::Heir { token, pid })
    }

    /// Tells the server this process changed its ids: it reads them anew.
    pub fn recredential(&self) -> Result<()> {
        self.done(Request::Recredential)
    }

    /// Adopts the descriptors of handoff `token` under their numbers (this process
    /// made it and has since `exec`ed, or its parent did); the numbers adopted.
    pub fn adopt(&self, token: u64) -> Result<Vec<u32>> {
        match self.call(&Request::Adopt { token })? {
            Answer::Fds(fds) => Ok(fds),
            other => Err(unexpected(other)),
        }
    }
}

/// The value of a sized extended-attribute answer copied into `buf`: a length
/// when `buf` is empty, the bytes otherwise.
fn sized(answer: Answer, buf: &mut [u8]) -> Result<usize> {
    match answer {
        Answer::Count(n) if buf.is_empty() => Ok(n as usize),
        Answer::Data(d) if d.len() <= buf.len() => {
            buf[..d.len()].copy_from_slice(&d);
            Ok(d.len())
        }
        Answer::Data(_) => Err(Error::Protocol("a longer value than asked".into())),
        other => Err(unexpected(other)),
    }
}

impl Client {
    /// Sets or clears an advisory lock on `[start, start + len)` of open file `fd`
    /// (`len` 0: to the end of any file); `EAGAIN` while another owner's lock
    /// conflicts. `owner`: this process (`F_SETLK`), the open file (`F_OFD_SETLK`)
    /// or the open file's `flock`.
    pub fn lock(
        &self,
        fd: u32,
        owner: LockOwner,
        kind: LockKind,
        (start, len): (u64, u64),
    ) -> Result<()> {
        self.done(Request::Lock {
            fd,
            test: false,
            owner,
            kind,
            start,
            len,
        })
    }

    /// The lock of another owner that would conflict with `kind` on the range
    /// (`F_GETLK`), if any.
    pub fn test_lock(
        &self,
        fd: u32,
        owner: LockOwner,
        kind: LockKind,
        (start, len): (u64, u64),
    ) -> Result<Option<HeldLock>> {
        match self.call(&Request::Lock {
            fd,
            test: true,
            owner,
            kind,
            start,
            len,
        })? {
            Answer::Lock(l) => Ok(l),
            other => Err(unexpected(other)),
        }
    }
}
