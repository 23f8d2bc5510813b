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
}

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
        }
    }
}
