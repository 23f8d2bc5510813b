//! The public calls: path calls (from the root), `*at` calls (from a directory
//! handle), and handle calls (by inode number, as a FUSE server makes them), each
//! made either on the [`FileSystem`] — the trusted context: no permission checks, new
//! inodes owned by the process — or on a [`Session`] holding a caller's [`Cred`],
//! checked as Linux checks them. All of them are thin walks over one core: resolve
//! a name to an inode, then act on the inode.

use std::sync::Arc;

use crate::attr::{stat_of, SetAttr, Time};
use crate::cred::{self, Cred, Who};
use crate::error::{Error, Result};
use crate::file::{Fd, OpenFlags};
use crate::inode::{FileKind, Inode};
use crate::layout::ROOT_INO;
use crate::namespace::NewInode;
use crate::rename::Side;
use crate::{DirEntry, FileSystem, Stat, BLOCK_SIZE, MAX_NAME};
use mover::Class;

/// `*at` flag: act on a final symbolic link itself.
pub const AT_SYMLINK_NOFOLLOW: i32 = libc::AT_SYMLINK_NOFOLLOW;
/// `linkat` flag: follow a final symbolic link of the old name.
pub const AT_SYMLINK_FOLLOW: i32 = libc::AT_SYMLINK_FOLLOW;
/// `unlinkat` flag: remove a directory.
pub const AT_REMOVEDIR: i32 = libc::AT_REMOVEDIR;
/// `*at` flag: an empty path names the directory handle itself.
pub const AT_EMPTY_PATH: i32 = libc::AT_EMPTY_PATH;

/// Cookie of `.` in [`FileSystem::readdir_ino`]; `..` is the next one.
const DOT_COOKIE: u64 = 1;
/// Cookies of names start above this.
const FIRST_NAME_COOKIE: u64 = 3;

/// What `statfs` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatFs {
    /// Block size, bytes.
    pub bsize: u64,
    /// Blocks of the data pool.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks an unprivileged caller may use (all of them: none is reserved).
    pub bavail: u64,
    /// Inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Longest name.
    pub namelen: u64,
}

/// One entry of [`FileSystem::readdir_ino`]: `offset` is where the next call resumes
/// to list the entries after it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DirEntryAt {
    /// The entry.
    pub entry: DirEntry,
    /// Cookie of this entry: pass it to continue after it.
    pub offset: u64,
}

/// Calls made with a caller's credentials: see [`FileSystem::as_user`].
pub struct Session<'a> {
    fs: &'a FileSystem,
    cred: Cred,
}

impl FileSystem {
    /// Calls made as `cred`: every one that can be refused is checked as Linux
    /// checks it, and what it creates is owned by `cred`. Reads and writes of the
    /// descriptors it opens go through the file system directly, unchecked.
    pub fn as_user(&self, cred: &Cred) -> Session<'_> {
        Session {
            fs: self,
            cred: cred.clone(),
        }
    }

    /// Blocks and inodes, as `statfs(2)` reports them.
    pub fn statfs(&self) -> Result<StatFs> {
        let u = self.usage();
        Ok(StatFs {
            bsize: BLOCK_SIZE,
            blocks: u.total_blocks - self.geo.pool_start,
            bfree: u.free_blocks,
            bavail: u.free_blocks,
            files: u.inodes,
            ffree: u.inodes - u.inodes_used,
            namelen: MAX_NAME as u64,
        })
    }

    fn ops(&self) -> Ops<'_> {
        Ops {
            fs: self,
            who: None,
        }
    }
}

impl<'a> Session<'a> {
    /// The credentials of this session.
    pub fn cred(&self) -> &Cred {
        &self.cred
    }

    /// The file system, for calls on descriptors (read, write, close, …).
    pub fn fs(&self) -> &'a FileSystem {
        self.fs
    }

    fn ops(&self) -> Ops<'_> {
        Ops {
            fs: self.fs,
            who: Some(&self.cred),
        }
    }
}

/// Defines each call on [`FileSystem`] (trusted) and on [`Session`] (checked), both
/// forwarding to the [`Ops`] method of the same name.
macro_rules! calls {
    ($( $(#[$m:meta])* fn $name:ident($($a:ident : $t:ty),*) -> $r:ty; )*) => {
        impl FileSystem {
            $( $(#[$m])* pub fn $name(&self, $($a: $t),*) -> $r { self.ops().$name($($a),*) } )*
        }
        impl Session<'_> {
            $( $(#[$m])* pub fn $name(&self, $($a: $t),*) -> $r { self.ops().$name($($a),*) } )*
        }
    };
}

calls! {
    /// Opens (and with `O_CREAT` creates) a file; returns the lowest free descriptor.
    fn open(path: &str, flags: OpenFlags, mode: u32) -> Result<Fd>;
    /// `openat`: a relative `path` from the directory handle `dirfd` (`None`: the root).
    fn openat(dirfd: Option<Fd>, path: &str, flags: OpenFlags, mode: u32) -> Result<Fd>;
    /// Opens inode `ino` (no `O_CREAT`, no `O_TMPFILE`).
    fn open_ino(ino: u64, flags: OpenFlags) -> Result<Fd>;
    /// `stat`, following a final symbolic link.
    fn stat(path: &str) -> Result<Stat>;
    /// `lstat`: a final symbolic link is described itself.
    fn lstat(path: &str) -> Result<Stat>;
    /// `fstat`: works on a file unlinked or renamed since it was opened.
    fn fstat(fd: Fd) -> Result<Stat>;
    /// `fstatat` with `AT_SYMLINK_NOFOLLOW` and `AT_EMPTY_PATH`.
    fn fstatat(dirfd: Option<Fd>, path: &str, flags: i32) -> Result<Stat>;
    /// `faccessat`: whether the caller may read, write and execute the file
    /// (`R_OK | W_OK | X_OK`; `F_OK`, 0: whether it exists), with
    /// `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH` and `AT_EACCESS` (a session has one set
    /// of ids, so the real and effective checks are the same).
    fn faccessat(dirfd: Option<Fd>, path: &str, mode: i32, flags: i32) -> Result<()>;
    /// `faccessat`'s check on inode `ino` (FUSE's `access`).
    fn access_ino(ino: u64, mode: i32) -> Result<()>;
    /// The attributes of inode `ino`.
    fn getattr(ino: u64) -> Result<Stat>;
    /// Looks `name` up in directory `parent` (search permission needed).
    fn lookup(parent: u64, name: &str) -> Result<Stat>;
    /// Changes attributes of inode `ino` as [`SetAttr`] says; returns them after.
    fn setattr(ino: u64, what: &SetAttr) -> Result<Stat>;
    /// Creates a directory.
    fn mkdir(path: &str, mode: u32) -> Result<()>;
    /// `mkdirat`.
    fn mkdirat(dirfd: Option<Fd>, path: &str, mode: u32) -> Result<()>;
    /// Creates directory `name` in `parent`.
    fn mkdir_in(parent: u64, name: &str, mode: u32) -> Result<Stat>;
    /// Creates a FIFO, socket, device or regular file (`mknod(2)`): the kind from
    /// `mode`'s `S_IF*` bits (0: a regular file), `rdev` for devices (root only).
    fn mknod(path: &str, mode: u32, rdev: u64) -> Result<()>;
    /// `mknodat`.
    fn mknodat(dirfd: Option<Fd>, path: &str, mode: u32, rdev: u64) -> Result<()>;
    /// Creates `name` in `parent` as [`FileSystem::mknod`] does.
    fn mknod_in(parent: u64, name: &str, mode: u32, rdev: u64) -> Result<Stat>;
    /// Creates a symbolic link at `path` pointing to `target`.
    fn symlink(target: &str, path: &str) -> Result<()>;
    /// `symlinkat`.
    fn symlinkat(target: &str, dirfd: Option<Fd>, path: &str) -> Result<()>;
    /// Creates symbolic link `name` in `parent`, pointing to `target`.
    fn symlink_in(parent: u64, name: &str, target: &str) -> Result<Stat>;
    /// The target of the symbolic link at `path`.
    fn readlink(path: &str) -> Result<String>;
    /// `readlinkat` (an empty path with a handle on a link: the link's target).
    fn readlinkat(dirfd: Option<Fd>, path: &str) -> Result<String>;
    /// The target of symbolic link `ino`.
    fn readlink_ino(ino: u64) -> Result<String>;
    /// Removes a non-directory name; the inode goes when its last link and last open
    /// descriptor are gone.
    fn unlink(path: &str) -> Result<()>;
    /// Removes an empty directory.
    fn rmdir(path: &str) -> Result<()>;
    /// `unlinkat`, with `AT_REMOVEDIR` for a directory.
    fn unlinkat(dirfd: Option<Fd>, path: &str, flags: i32) -> Result<()>;
    /// Removes non-directory `name` from `parent`.
    fn unlink_in(parent: u64, name: &str) -> Result<()>;
    /// Removes empty directory `name` from `parent`.
    fn rmdir_in(parent: u64, name: &str) -> Result<()>;
    /// Adds a hard link `new` to the non-directory at `old`.
    fn link(old: &str, new: &str) -> Result<()>;
    /// `linkat`, with `AT_SYMLINK_FOLLOW` and `AT_EMPTY_PATH` (which links an
    /// `O_TMPFILE` file; root only, as it needs `CAP_DAC_READ_SEARCH` in Linux).
    fn linkat(olddirfd: Option<Fd>, old: &str, newdirfd: Option<Fd>, new: &str, flags: i32) -> Result<()>;
    /// Links inode `ino` as `name` in `parent`.
    fn link_ino(ino: u64, parent: u64, name: &str) -> Result<Stat>;
    /// Renames `old` to `new` atomically, replacing `new` if it exists (a directory
    /// only by an empty directory).
    fn rename(old: &str, new: &str) -> Result<()>;
    /// `renameat2` with `RENAME_NOREPLACE` or `RENAME_EXCHANGE`.
    fn renameat2(olddirfd: Option<Fd>, old: &str, newdirfd: Option<Fd>, new: &str, flags: u32) -> Result<()>;
    /// Renames `name` in `parent` to `newname` in `newparent`, with `renameat2` flags.
    fn rename_in(parent: u64, name: &str, newparent: u64, newname: &str, flags: u32) -> Result<()>;
    /// Changes the permission bits.
    fn chmod(path: &str, mode: u32) -> Result<()>;
    /// `fchmod`: works on a file unlinked or renamed since it was opened.
    fn fchmod(fd: Fd, mode: u32) -> Result<()>;
    /// `fchmodat`; with `AT_SYMLINK_NOFOLLOW` a symbolic link is EOPNOTSUPP, as Linux.
    fn fchmodat(dirfd: Option<Fd>, path: &str, mode: u32, flags: i32) -> Result<()>;
    /// Changes owner and group; `None` leaves one as it is.
    fn chown(path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<()>;
    /// `lchown`: a final symbolic link changes itself.
    fn lchown(path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<()>;
    /// `fchown`.
    fn fchown(fd: Fd, uid: Option<u32>, gid: Option<u32>) -> Result<()>;
    /// `fchownat` with `AT_SYMLINK_NOFOLLOW` and `AT_EMPTY_PATH`.
    fn fchownat(dirfd: Option<Fd>, path: &str, uid: Option<u32>, gid: Option<u32>, flags: i32) -> Result<()>;
    /// Sets access and modification times (ns since the epoch); `None` leaves one.
    fn utimens(path: &str, atime: Option<i64>, mtime: Option<i64>) -> Result<()>;
    /// `utimensat`: `None` is `UTIME_OMIT`; `AT_SYMLINK_NOFOLLOW` sets a link's own.
    fn utimensat(dirfd: Option<Fd>, path: &str, atime: Option<Time>, mtime: Option<Time>, flags: i32) -> Result<()>;
    /// `futimens`.
    fn futimens(fd: Fd, atime: Option<Time>, mtime: Option<Time>) -> Result<()>;
    /// Sets the size of the file at `path`; holes read as zeros.
    fn truncate(path: &str, len: u64) -> Result<()>;
    /// Sets the size of an open file (EINVAL unless open for writing).
    fn ftruncate(fd: Fd, len: u64) -> Result<()>;
    /// Lists a directory (without `.` and `..`), sorted by name. An entry whose inode
    /// cannot be read is listed with no kind.
    fn readdir(path: &str) -> Result<Vec<DirEntry>>;
    /// The entries of directory `dir` after cookie `offset` (0: from the start, `.`
    /// and `..` first), in cookie order. A cookie is a hash of the name, so an entry
    /// added or removed between two calls neither repeats nor hides the others.
    fn readdir_ino(dir: u64, offset: u64) -> Result<Vec<DirEntryAt>>;
    /// [`FileSystem::readdir_ino`] of the directory a handle is open on.
    fn readdir_fd(fd: Fd, offset: u64) -> Result<Vec<DirEntryAt>>;
}

/// The core every call goes through: the file system and who calls.
#[derive(Clone, Copy)]
struct Ops<'a> {
    fs: &'a FileSystem,
    who: Who<'a>,
}

impl Ops<'_> {
    /// The inode a directory handle is open on (`None`: the root).
    fn base(&self, dirfd: Option<Fd>) -> Result<Option<Arc<Inode>>> {
        dirfd
            .map(|fd| Ok(self.fs.file(fd)?.inode.clone()))
            .transpose()
    }

    /// What `path` names from `dirfd`: the handle's own inode for an empty path with
    /// `AT_EMPTY_PATH`, a final symbolic link itself if `!follow`.
    fn at(&self, dirfd: Option<Fd>, path: &str, flags: i32, follow: bool) -> Result<Arc<Inode>> {
        let base = self.base(dirfd)?;
        if path.is_empty() && flags & AT_EMPTY_PATH != 0 {
            return base.map_or_else(|| self.fs.inode(ROOT_INO), Ok);
        }
        self.fs.resolve_as(self.who, base.as_ref(), path, follow)
    }

    /// An inode by number: one a lookup, a path or a descriptor has reached.
    fn ino(&self, ino: u64) -> Result<Arc<Inode>> {
        self.fs.inode(ino)
    }

    /// A descriptor's inode, for the attribute calls (EBADF on an `O_PATH` handle).
    fn fd_inode(&self, fd: Fd) -> Result<Arc<Inode>> {
        let f = self.fs.file(fd)?;
        if !f.readable && !f.writable {
            return Err(Error::BadFd);
        }
        Ok(f.inode.clone())
    }

    fn open(&self, path: &str, flags: OpenFlags, mode: u32) -> Result<Fd> {
        self.fs
            .open_as(self.who, None, path, flags, mode, Class::Default)
    }

    fn openat(&self, dirfd: Option<Fd>, path: &str, flags: OpenFlags, mode: u32) -> Result<Fd> {
        let base = self.base(dirfd)?;
        self.fs
            .open_as(self.who, base.as_ref(), path, flags, mode, Class::Default)
    }

    fn open_ino(&self, ino: u64, flags: OpenFlags) -> Result<Fd> {
        self.fs
            .open_ino_as(self.who, &self.ino(ino)?, flags, Class::Default)
    }

    fn stat(&self, path: &str) -> Result<Stat> {
        Ok(stat_of(&self.fs.resolve_as(self.who, None, path, true)?))
    }

    fn lstat(&self, path: &str) -> Result<Stat> {
        Ok(stat_of(&self.fs.resolve_as(self.who, None, path, false)?))
    }

    fn fstat(&self, fd: Fd) -> Result<Stat> {
        Ok(stat_of(&self.fs.file(fd)?.inode))
    }

    fn fstatat(&self, dirfd: Option<Fd>, path: &str, flags: i32) -> Result<Stat> {
        check_flags(flags, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)?;
        let follow = flags & AT_SYMLINK_NOFOLLOW == 0;
        Ok(stat_of(&self.at(dirfd, path, flags, follow)?))
    }

    fn faccessat(&self, dirfd: Option<Fd>, path: &str, mode: i32, flags: i32) -> Result<()> {
        check_flags(
            flags,
            AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | libc::AT_EACCESS,
        )?;
        check_access_mode(mode)?;
        let inode = self.at(dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)?;
        self.access(&inode, mode)
    }

    fn access_ino(&self, ino: u64, mode: i32) -> Result<()> {
        check_access_mode(mode)?;
        self.access(&*self.ino(ino)?, mode)
    }

    /// Whether the caller may access `inode` for `mode` (`R_OK | W_OK | X_OK`).
    fn access(&self, inode: &Inode, mode: i32) -> Result<()> {
        let st = inode.state.read();
        // As Linux's do_faccessat: writing a file, directory or link of a read-only
        // file system is refused whoever asks; special files live elsewhere.
        if mode & libc::W_OK != 0 && self.fs.is_read_only() && !st.kind.is_special() {
            return Err(Error::ReadOnly);
        }
        cred::may(self.who, &st, mode as u32)
    }

    fn getattr(&self, ino: u64) -> Result<Stat> {
        Ok(stat_of(&self.ino(ino)?))
    }

    fn lookup(&self, parent: u64, name: &str) -> Result<Stat> {
        crate::namespace::check_name(name)?;
        let dir = self.ino(parent)?;
        let inode = match name {
            "." | ".." => self.fs.resolve_from(self.who, dir, name, false, 0)?,
            _ => self.fs.lookup_in(self.who, &dir, name)?,
        };
        Ok(stat_of(&inode))
    }

    fn setattr(&self, ino: u64, what: &SetAttr) -> Result<Stat> {
        let inode = self.ino(ino)?;
        let chown = what.uid.is_some() || what.gid.is_some();
        self.fs.setattr_as(self.who, &inode, what, chown)?;
        Ok(stat_of(&inode))
    }

    fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.fs.mkdir_as(self.who, None, path, mode)
    }

    fn mkdirat(&self, dirfd: Option<Fd>, path: &str, mode: u32) -> Result<()> {
        let base = self.base(dirfd)?;
        self.fs.mkdir_as(self.who, base.as_ref(), path, mode)
    }

    fn make_in(&self, parent: u64, name: &str, new: &NewInode<'_>) -> Result<Stat> {
        if matches!(name, "" | "." | "..") || name.contains('/') {
            return Err(if name.is_empty() {
                Error::NotFound
            } else {
                Error::Exists
            });
        }
        let dir = self.ino(parent)?;
        Ok(stat_of(&self.fs.make_node(self.who, &dir, name, new)?))
    }

    fn mkdir_in(&self, parent: u64, name: &str, mode: u32) -> Result<Stat> {
        let new = NewInode {
            kind: FileKind::Dir,
            mode,
            rdev: 0,
            data: &[],
        };
        self.make_in(parent, name, &new)
    }

    fn mknod(&self, path: &str, mode: u32, rdev: u64) -> Result<()> {
        self.fs.mknod_as(self.who, None, path, mode, rdev)
    }

    fn mknodat(&self, dirfd: Option<Fd>, path: &str, mode: u32, rdev: u64) -> Result<()> {
        let base = self.base(dirfd)?;
        self.fs.mknod_as(self.who, base.as_ref(), path, mode, rdev)
    }

    fn mknod_in(&self, parent: u64, name: &str, mode: u32, rdev: u64) -> Result<Stat> {
        let kind = crate::namespace::mknod_kind(self.who, mode)?;
        let new = NewInode {
            kind,
            mode,
            rdev,
            data: &[],
        };
        self.make_in(parent, name, &new)
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.fs.symlink_as(self.who, target, None, path)
    }

    fn symlinkat(&self, target: &str, dirfd: Option<Fd>, path: &str) -> Result<()> {
        let base = self.base(dirfd)?;
        self.fs.symlink_as(self.who, target, base.as_ref(), path)
    }

    fn symlink_in(&self, parent: u64, name: &str, target: &str) -> Result<Stat> {
        if target.is_empty() {
            return Err(Error::NotFound);
        }
        if target.len() >= crate::MAX_PATH {
            return Err(Error::PathTooLong);
        }
        let new = NewInode {
            kind: FileKind::Symlink,
            mode: 0o777,
            rdev: 0,
            data: target.as_bytes(),
        };
        self.make_in(parent, name, &new)
    }

    fn readlink(&self, path: &str) -> Result<String> {
        self.fs.readlink_as(self.who, None, path)
    }

    fn readlinkat(&self, dirfd: Option<Fd>, path: &str) -> Result<String> {
        if path.is_empty() {
            let f = self.fs.file(dirfd.ok_or(Error::NotFound)?)?;
            return self.fs.readlink_inode(&f.inode);
        }
        let base = self.base(dirfd)?;
        self.fs.readlink_as(self.who, base.as_ref(), path)
    }

    fn readlink_ino(&self, ino: u64) -> Result<String> {
        self.fs.readlink_inode(&self.ino(ino)?)
    }

    fn unlink(&self, path: &str) -> Result<()> {
        self.fs.remove_as(self.who, None, path, false)
    }

    fn rmdir(&self, path: &str) -> Result<()> {
        self.fs.remove_as(self.who, None, path, true)
    }

    fn unlinkat(&self, dirfd: Option<Fd>, path: &str, flags: i32) -> Result<()> {
        check_flags(flags, AT_REMOVEDIR)?;
        let base = self.base(dirfd)?;
        let dir = flags & AT_REMOVEDIR != 0;
        self.fs.remove_as(self.who, base.as_ref(), path, dir)
    }

    fn unlink_in(&self, parent: u64, name: &str) -> Result<()> {
        self.fs
            .remove_in(self.who, &self.ino(parent)?, name, false, false)
    }

    fn rmdir_in(&self, parent: u64, name: &str) -> Result<()> {
        if matches!(name, "." | "..") {
            return Err(Error::Invalid("cannot remove '.' or '..'".into()));
        }
        self.fs
            .remove_in(self.who, &self.ino(parent)?, name, true, false)
    }

    fn link(&self, old: &str, new: &str) -> Result<()> {
        let target = self.fs.resolve_as(self.who, None, old, false)?;
        self.fs.link_as(self.who, &target, None, new)
    }

    fn linkat(
        &self,
        olddirfd: Option<Fd>,
        old: &str,
        newdirfd: Option<Fd>,
        new: &str,
        flags: i32,
    ) -> Result<()> {
        check_flags(flags, AT_SYMLINK_FOLLOW | AT_EMPTY_PATH)?;
        if old.is_empty() && flags & AT_EMPTY_PATH != 0 && !cred::privileged(self.who) {
            return Err(Error::NotFound);
        }
        let target = self.at(olddirfd, old, flags, flags & AT_SYMLINK_FOLLOW != 0)?;
        let base = self.base(newdirfd)?;
        self.fs.link_as(self.who, &target, base.as_ref(), new)
    }

    fn link_ino(&self, ino: u64, parent: u64, name: &str) -> Result<Stat> {
        let target = self.ino(ino)?;
        self.fs
            .link_in(self.who, &target, &self.ino(parent)?, name, false)?;
        Ok(stat_of(&target))
    }

    fn rename(&self, old: &str, new: &str) -> Result<()> {
        self.fs.rename_as(self.who, None, old, None, new, 0)
    }

    fn renameat2(
        &self,
        olddirfd: Option<Fd>,
        old: &str,
        newdirfd: Option<Fd>,
        new: &str,
        flags: u32,
    ) -> Result<()> {
        let (ob, nb) = (self.base(olddirfd)?, self.base(newdirfd)?);
        self.fs
            .rename_as(self.who, ob.as_ref(), old, nb.as_ref(), new, flags)
    }

    fn rename_in(
        &self,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        flags: u32,
    ) -> Result<()> {
        let side = |dir, name: &str| -> Result<Side> {
            if matches!(name, "" | "." | "..") || name.contains('/') {
                return Err(Error::Invalid("not a name of a directory entry".into()));
            }
            Ok(Side {
                dir: self.ino(dir)?,
                name: name.to_string(),
                slash: false,
            })
        };
        let (from, to) = (side(parent, name)?, side(newparent, newname)?);
        self.fs.rename_sides(self.who, &from, &to, flags)
    }

    fn set(&self, inode: &Arc<Inode>, a: SetAttr, chown: bool) -> Result<()> {
        self.fs.setattr_as(self.who, inode, &a, chown)
    }

    fn chmod(&self, path: &str, mode: u32) -> Result<()> {
        self.fchmodat(None, path, mode, 0)
    }

    fn fchmod(&self, fd: Fd, mode: u32) -> Result<()> {
        self.set(&self.fd_inode(fd)?, mode_attr(mode), false)
    }

    fn fchmodat(&self, dirfd: Option<Fd>, path: &str, mode: u32, flags: i32) -> Result<()> {
        check_flags(flags, AT_SYMLINK_NOFOLLOW)?;
        let inode = self.at(dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)?;
        if inode.state.read().kind == FileKind::Symlink {
            return Err(Error::NotSupported("the mode of a symbolic link"));
        }
        self.set(&inode, mode_attr(mode), false)
    }

    fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.fchownat(None, path, uid, gid, 0)
    }

    fn lchown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.fchownat(None, path, uid, gid, AT_SYMLINK_NOFOLLOW)
    }

    fn fchown(&self, fd: Fd, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.set(&self.fd_inode(fd)?, owner_attr(uid, gid), true)
    }

    fn fchownat(
        &self,
        dirfd: Option<Fd>,
        path: &str,
        uid: Option<u32>,
        gid: Option<u32>,
        flags: i32,
    ) -> Result<()> {
        check_flags(flags, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)?;
        let inode = self.at(dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)?;
        self.set(&inode, owner_attr(uid, gid), true)
    }

    fn utimens(&self, path: &str, atime: Option<i64>, mtime: Option<i64>) -> Result<()> {
        let (a, m) = (atime.map(Time::At), mtime.map(Time::At));
        self.utimensat(None, path, a, m, 0)
    }

    fn utimensat(
        &self,
        dirfd: Option<Fd>,
        path: &str,
        atime: Option<Time>,
        mtime: Option<Time>,
        flags: i32,
    ) -> Result<()> {
        check_flags(flags, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)?;
        let inode = self.at(dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)?;
        self.set(&inode, times_attr(atime, mtime), false)
    }

    fn futimens(&self, fd: Fd, atime: Option<Time>, mtime: Option<Time>) -> Result<()> {
        self.set(&self.fd_inode(fd)?, times_attr(atime, mtime), false)
    }

    fn truncate(&self, path: &str, len: u64) -> Result<()> {
        let inode = self.fs.resolve_as(self.who, None, path, true)?;
        let size = SetAttr {
            size: Some(len),
            ..SetAttr::default()
        };
        self.set(&inode, size, false)
    }

    fn ftruncate(&self, fd: Fd, len: u64) -> Result<()> {
        let f = self.fs.file(fd)?;
        if !f.writable {
            return Err(Error::Invalid("descriptor not open for writing".into()));
        }
        self.fs.truncate_as(self.who, &f.inode, len)
    }

    fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let dir = self.fs.resolve_as(self.who, None, path, true)?;
        let mut out = self.fs.list_dir(self.who, &dir)?;
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn readdir_ino(&self, dir: u64, offset: u64) -> Result<Vec<DirEntryAt>> {
        self.readdir_of(&self.ino(dir)?, offset)
    }

    fn readdir_fd(&self, fd: Fd, offset: u64) -> Result<Vec<DirEntryAt>> {
        self.readdir_of(&self.fs.file(fd)?.inode.clone(), offset)
    }

    fn readdir_of(&self, dir: &Arc<Inode>, offset: u64) -> Result<Vec<DirEntryAt>> {
        let parent = dir.state.read().parent;
        let mut out: Vec<DirEntryAt> = self
            .fs
            .list_dir(self.who, dir)?
            .into_iter()
            .map(|entry| DirEntryAt {
                offset: name_cookie(&entry.name),
                entry,
            })
            .collect();
        let dots = [(".", dir.ino), ("..", parent)];
        for (i, (name, ino)) in dots.into_iter().enumerate() {
            out.push(DirEntryAt {
                entry: DirEntry {
                    name: name.into(),
                    ino,
                    kind: Some(FileKind::Dir),
                },
                offset: DOT_COOKIE + i as u64,
            });
        }
        out.retain(|e| e.offset > offset);
        out.sort_by_key(|e| e.offset);
        Ok(out)
    }
}

/// The cookie of a name: a 64-bit FNV-1a hash kept above the cookies of `.` and
/// `..`, the same for the name in every listing and after a remount.
fn name_cookie(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Kept below 2^63 so that it is a valid `off_t`.
    (h >> 1).max(FIRST_NAME_COOKIE)
}

fn check_flags(flags: i32, allowed: i32) -> Result<()> {
    if flags & !allowed != 0 {
        return Err(Error::Invalid(format!("unsupported flags {flags:#x}")));
    }
    Ok(())
}

fn mode_attr(mode: u32) -> SetAttr {
    SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    }
}

fn owner_attr(uid: Option<u32>, gid: Option<u32>) -> SetAttr {
    SetAttr {
        uid,
        gid,
        ..SetAttr::default()
    }
}

fn times_attr(atime: Option<Time>, mtime: Option<Time>) -> SetAttr {
    SetAttr {
        atime,
        mtime,
        ..SetAttr::default()
    }
}

/// Refuses an access mode with bits other than `R_OK | W_OK | X_OK`.
fn check_access_mode(mode: i32) -> Result<()> {
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(Error::Invalid(format!("access mode {mode:#o}")));
    }
    Ok(())
}
