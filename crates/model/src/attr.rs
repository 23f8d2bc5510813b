//! Attributes: `stat`, `chmod`, `chown`, `utimensat`, by path or by descriptor.

use crate::{Fd, Id, Kind, Model, Node, Stat, R};

/// Which inode an attribute call acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// A path, its final symbolic link followed (`stat`, `chmod`, `getxattr`).
    Path(&'a str),
    /// A path, its final symbolic link not followed (`lstat`, `lchown`, `lgetxattr`).
    Link(&'a str),
    /// An open descriptor (`fstat`, `fchmod`, `fgetxattr`), named or not.
    Fd(Fd),
}

impl Model {
    /// The inode a [`Target`] names.
    pub fn target(&self, t: Target<'_>) -> R<Id> {
        match t {
            Target::Path(p) => self.resolve(p, true),
            Target::Link(p) => self.resolve(p, false),
            Target::Fd(fd) => Ok(self.fd(fd)?.id),
        }
    }

    /// What `stat` reports of inode `id`.
    pub fn stat_id(&self, id: Id) -> Stat {
        let n = self.node(id);
        Stat {
            id,
            kind: n.kind(),
            mode: n.kind().mode_bits() | n.perm,
            uid: n.uid,
            gid: n.gid,
            nlink: self.nlink(id),
            size: n.size(),
            blocks: n.blocks(),
            rdev: n.rdev(),
        }
    }

    /// `stat`, `lstat` or `fstat`.
    pub fn stat(&self, t: Target<'_>) -> R<Stat> {
        Ok(self.stat_id(self.target(t)?))
    }

    /// Applies `f` to the inode `t` names.
    pub fn set_attr(&mut self, t: Target<'_>, f: impl FnOnce(&mut Node)) -> R<()> {
        let id = self.target(t)?;
        f(self.node_mut(id));
        Ok(())
    }

    /// `chmod`/`fchmod` (Linux refuses `lchmod`: callers do not ask it).
    pub fn chmod(&mut self, t: Target<'_>, mode: u32) -> R<()> {
        self.set_attr(t, |n| n.perm = mode & 0o7777)
    }

    /// `chown`/`lchown`/`fchown` as root: `None` leaves an id as it is. On anything but
    /// a directory it clears setuid, and setgid if group-execute is set (even when
    /// neither id changes), as Linux does.
    pub fn chown(&mut self, t: Target<'_>, uid: Option<u32>, gid: Option<u32>) -> R<()> {
        self.set_attr(t, |n| {
            n.uid = uid.unwrap_or(n.uid);
            n.gid = gid.unwrap_or(n.gid);
            if n.kind() != Kind::Dir {
                n.perm &= !libc::S_ISUID;
                if n.perm & libc::S_IXGRP != 0 {
                    n.perm &= !libc::S_ISGID;
                }
            }
        })
    }

    /// `utimensat`: `None` leaves a time as it is (`UTIME_OMIT`).
    pub fn utimens(&mut self, t: Target<'_>, atime: Option<i64>, mtime: Option<i64>) -> R<()> {
        self.set_attr(t, |n| {
            if atime.is_some() {
                n.atime = atime;
            }
            if mtime.is_some() {
                n.mtime = mtime;
            }
        })
    }
}
