//! The operations a workload is made of: each applied to the real file system and to
//! the model, and each a single atomic step of the real one (it commits once).

use std::collections::HashMap;

use fs::{Fd, FileSystem, OpenFlags};
use rand::RngCore;

use crate::model::{ModelResult, Shadow};

/// One file-system operation of a workload. Paths are absolute; `mode` is permission
/// bits; `fill` seeds the bytes a write stores ([`pattern`]); `slot` names a descriptor
/// the workload keeps open across operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `open(O_CREAT|O_EXCL|O_WRONLY)` then `close`.
    Create {
        /// The new file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// `mkdir`.
    Mkdir {
        /// The new directory.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// `open`, `pwrite` of `len` pattern bytes `fill` at `off`, `close`.
    Write {
        /// The file.
        path: String,
        /// Where.
        off: u64,
        /// Bytes written.
        len: usize,
        /// Pattern seed.
        fill: u64,
    },
    /// `open(O_APPEND)`, `write`, `close`.
    Append {
        /// The file.
        path: String,
        /// Bytes written.
        len: usize,
        /// Pattern seed.
        fill: u64,
    },
    /// `truncate`.
    Truncate {
        /// The file.
        path: String,
        /// The new size.
        len: u64,
    },
    /// `open(O_TRUNC)` of an existing file, then `close`.
    OpenTrunc {
        /// The file.
        path: String,
    },
    /// `unlink`.
    Unlink {
        /// The name removed.
        path: String,
    },
    /// `rmdir`.
    Rmdir {
        /// The directory removed.
        path: String,
    },
    /// `link`.
    Link {
        /// An existing name.
        old: String,
        /// The new name.
        new: String,
    },
    /// `rename`.
    Rename {
        /// The name moved.
        old: String,
        /// Where to.
        new: String,
    },
    /// `symlink`.
    Symlink {
        /// What the link says.
        target: String,
        /// The new link.
        path: String,
    },
    /// `chmod`.
    Chmod {
        /// The inode's name.
        path: String,
        /// The new permission bits.
        mode: u32,
    },
    /// `open`, `fsync`, `close`.
    Fsync {
        /// The file.
        path: String,
    },
    /// `open(O_RDWR)` into descriptor slot `slot`, kept open across operations.
    Open {
        /// The slot.
        slot: u32,
        /// The file.
        path: String,
    },
    /// `close` of slot `slot` (frees an unlinked file).
    Close {
        /// The slot.
        slot: u32,
    },
    /// `pwrite` through slot `slot`.
    WriteFd {
        /// The slot.
        slot: u32,
        /// Where.
        off: u64,
        /// Bytes written.
        len: usize,
        /// Pattern seed.
        fill: u64,
    },
    /// `setxattr` of `len` pattern bytes `fill`.
    SetXattr {
        /// The inode's name.
        path: String,
        /// The attribute.
        name: String,
        /// Bytes of the value.
        len: usize,
        /// Pattern seed.
        fill: u64,
        /// 0, `XATTR_CREATE` or `XATTR_REPLACE`.
        flags: i32,
    },
    /// `removexattr`.
    RemoveXattr {
        /// The inode's name.
        path: String,
        /// The attribute.
        name: String,
    },
    /// `mknod` of a FIFO, socket or device.
    Mknod {
        /// The new special file.
        path: String,
        /// Kind (`S_IF*`) and permission bits.
        mode: u32,
        /// Device number.
        rdev: u64,
    },
    /// `renameat2(RENAME_EXCHANGE)`.
    Exchange {
        /// One name.
        old: String,
        /// The other.
        new: String,
    },
    /// `open`, `fallocate(PUNCH_HOLE|KEEP_SIZE)`, `close`.
    Punch {
        /// The file.
        path: String,
        /// Where.
        off: u64,
        /// Bytes punched.
        len: u64,
    },
    /// `open(dir, O_TMPFILE|O_RDWR)`, `write` of `len` pattern bytes `fill`,
    /// `linkat(AT_EMPTY_PATH)` as `path`, `close`.
    TmpfileLink {
        /// The directory the file is made in.
        dir: String,
        /// The name it gets.
        path: String,
        /// Bytes written.
        len: usize,
        /// Pattern seed.
        fill: u64,
    },
}

/// Permission bits of a file made by [`Op::TmpfileLink`].
const TMPFILE_MODE: u32 = 0o640;

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Create { path, mode } => write!(f, "create {path} {mode:o}"),
            Op::Mkdir { path, mode } => write!(f, "mkdir {path} {mode:o}"),
            Op::Write { path, off, len, .. } => write!(f, "pwrite {path} {len} bytes at {off}"),
            Op::Append { path, len, .. } => write!(f, "append {len} bytes to {path}"),
            Op::Truncate { path, len } => write!(f, "truncate {path} to {len}"),
            Op::OpenTrunc { path } => write!(f, "open {path} O_TRUNC"),
            Op::Unlink { path } => write!(f, "unlink {path}"),
            Op::Rmdir { path } => write!(f, "rmdir {path}"),
            Op::Link { old, new } => write!(f, "link {old} {new}"),
            Op::Rename { old, new } => write!(f, "rename {old} {new}"),
            Op::Symlink { target, path } => write!(f, "symlink {target} {path}"),
            Op::Chmod { path, mode } => write!(f, "chmod {path} {mode:o}"),
            Op::Fsync { path } => write!(f, "fsync {path}"),
            Op::Open { slot, path } => write!(f, "open {path} as fd slot {slot}"),
            Op::Close { slot } => write!(f, "close fd slot {slot}"),
            Op::WriteFd { slot, off, len, .. } => {
                write!(f, "pwrite fd slot {slot} {len} bytes at {off}")
            }
            Op::SetXattr {
                path,
                name,
                len,
                flags,
                ..
            } => write!(f, "setxattr {path} {name} {len} bytes flags {flags}"),
            Op::RemoveXattr { path, name } => write!(f, "removexattr {path} {name}"),
            Op::Mknod { path, mode, rdev } => write!(f, "mknod {path} {mode:o} {rdev:#x}"),
            Op::Exchange { old, new } => write!(f, "rename exchange {old} {new}"),
            Op::Punch { path, off, len } => write!(f, "punch {path} {len} bytes at {off}"),
            Op::TmpfileLink { dir, path, len, .. } => {
                write!(f, "O_TMPFILE in {dir}, {len} bytes, linked as {path}")
            }
        }
    }
}

/// The bytes a write with pattern `fill` stores: deterministic, different for every
/// fill, never zero (so bytes that were never written, which read as zero or as
/// another write's pattern, are told apart).
pub fn pattern(fill: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    crate::rng::seeded(fill).fill_bytes(&mut out);
    for b in &mut out {
        *b |= 1;
    }
    out
}

impl Op {
    /// Applies the operation to the model; an error means it would fail on a correct
    /// file system (workloads generate only operations that succeed).
    pub fn apply(&self, m: &mut Shadow) -> ModelResult<()> {
        match self {
            Op::Create { path, mode } => m.create(path, *mode),
            Op::Mkdir { path, mode } => m.mkdir(path, *mode),
            Op::Write {
                path,
                off,
                len,
                fill,
            } => m.write(path, Some(*off), &pattern(*fill, *len)),
            Op::Append { path, len, fill } => m.write(path, None, &pattern(*fill, *len)),
            Op::Truncate { path, len } => m.truncate(path, *len),
            Op::OpenTrunc { path } => m.open_trunc(path),
            Op::Unlink { path } => m.remove(path, false),
            Op::Rmdir { path } => m.remove(path, true),
            Op::Link { old, new } => m.link(old, new),
            Op::Rename { old, new } => m.rename(old, new),
            Op::Symlink { target, path } => m.symlink(target, path),
            Op::Chmod { path, mode } => m.chmod(path, *mode),
            Op::Fsync { path } => m.fsync(path),
            Op::Open { slot, path } => m.open(*slot, path),
            Op::Close { slot } => m.close(*slot),
            Op::WriteFd {
                slot,
                off,
                len,
                fill,
            } => m.write_fd(*slot, *off, &pattern(*fill, *len)),
            Op::SetXattr {
                path,
                name,
                len,
                fill,
                flags,
            } => m.setxattr(path, name, &pattern(*fill, *len), *flags as u32),
            Op::RemoveXattr { path, name } => m.removexattr(path, name),
            Op::Mknod { path, mode, rdev } => m.mknod(path, *mode, *rdev),
            Op::Exchange { old, new } => m.exchange(old, new),
            Op::Punch { path, off, len } => m.punch(path, *off, *len),
            Op::TmpfileLink {
                dir,
                path,
                len,
                fill,
            } => m.tmpfile_link(dir, path, TMPFILE_MODE, &pattern(*fill, *len)),
        }
    }

    /// Runs the operation on the real file system; `fds` maps descriptor slots.
    pub fn run(&self, fs: &FileSystem, fds: &mut HashMap<u32, Fd>) -> fs::Result<()> {
        let with_file = |path: &str, flags: OpenFlags, f: &dyn Fn(Fd) -> fs::Result<()>| {
            let fd = fs.open(path, flags, 0)?;
            let r = f(fd);
            fs.close(fd)?;
            r
        };
        match self {
            Op::Create { path, mode } => {
                let fd = fs.open(
                    path,
                    OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY,
                    *mode,
                )?;
                fs.close(fd)
            }
            Op::Mkdir { path, mode } => fs.mkdir(path, *mode),
            Op::Write {
                path,
                off,
                len,
                fill,
            } => with_file(path, OpenFlags::WRONLY, &|fd| {
                fs.pwrite(fd, &pattern(*fill, *len), *off).map(drop)
            }),
            Op::Append { path, len, fill } => {
                with_file(path, OpenFlags::WRONLY | OpenFlags::APPEND, &|fd| {
                    fs.write(fd, &pattern(*fill, *len)).map(drop)
                })
            }
            Op::Truncate { path, len } => fs.truncate(path, *len),
            Op::OpenTrunc { path } => {
                with_file(path, OpenFlags::WRONLY | OpenFlags::TRUNC, &|_| Ok(()))
            }
            Op::Unlink { path } => fs.unlink(path),
            Op::Rmdir { path } => fs.rmdir(path),
            Op::Link { old, new } => fs.link(old, new),
            Op::Rename { old, new } => fs.rename(old, new),
            Op::Symlink { target, path } => fs.symlink(target, path),
            Op::Chmod { path, mode } => fs.chmod(path, *mode),
            Op::Fsync { path } => with_file(path, OpenFlags::RDONLY, &|fd| fs.fsync(fd)),
            Op::Open { slot, path } => {
                let fd = fs.open(path, OpenFlags::RDWR, 0)?;
                fds.insert(*slot, fd);
                Ok(())
            }
            Op::Close { slot } => fs.close(fds.remove(slot).ok_or(fs::Error::BadFd)?),
            Op::WriteFd {
                slot,
                off,
                len,
                fill,
            } => {
                let fd = *fds.get(slot).ok_or(fs::Error::BadFd)?;
                fs.pwrite(fd, &pattern(*fill, *len), *off).map(drop)
            }
            _ => self.run_new(fs),
        }
    }

    /// [`Op::run`] of the calls that came with handles, credentials and extended
    /// attributes.
    fn run_new(&self, fs: &FileSystem) -> fs::Result<()> {
        match self {
            Op::SetXattr {
                path,
                name,
                len,
                fill,
                flags,
            } => fs.setxattr(path, name, &pattern(*fill, *len), *flags),
            Op::RemoveXattr { path, name } => fs.removexattr(path, name),
            Op::Mknod { path, mode, rdev } => fs.mknod(path, *mode, *rdev),
            Op::Exchange { old, new } => fs.renameat2(None, old, None, new, fs::RENAME_EXCHANGE),
            Op::Punch { path, off, len } => {
                let fd = fs.open(path, OpenFlags::WRONLY, 0)?;
                let mode = fs::FALLOC_FL_PUNCH_HOLE | fs::FALLOC_FL_KEEP_SIZE;
                let r = fs.fallocate(fd, mode, *off, *len);
                fs.close(fd)?;
                r
            }
            Op::TmpfileLink {
                dir,
                path,
                len,
                fill,
            } => {
                let at = if dir.is_empty() { "/" } else { dir };
                let fd = fs.open(at, OpenFlags::TMPFILE | OpenFlags::RDWR, TMPFILE_MODE)?;
                let r = fs
                    .write(fd, &pattern(*fill, *len))
                    .and_then(|_| fs.linkat(Some(fd), "", None, path, fs::AT_EMPTY_PATH));
                fs.close(fd)?;
                r
            }
            _ => unreachable!("run_new of an operation run handles: {self}"),
        }
    }
}
