//! Extended attributes: `getxattr`, `setxattr`, `listxattr`, `removexattr` on a path
//! (following a final symbolic link or not) and on an open descriptor.
//!
//! Storage (format version 3): one encoded set per inode, written copy-on-write; the
//! set and its format are in `xattr_set.rs`.
//!
//! Namespaces: `user.*` (regular files and directories only, as Linux), `trusted.*`
//! and `security.*` are stored. `system.posix_acl_access` and
//! `system.posix_acl_default` answer `EOPNOTSUPP` (POSIX ACLs are not modelled), as does
//! any other namespace.
//!
//! Credentials (calls made through a [`crate::Session`], see `session_xattr.rs`) are
//! checked as Linux's `xattr_permission` and the capability hooks check them: `user.*`
//! needs read permission to get and write permission to set or remove (and, on a
//! sticky directory, ownership of it); `trusted.*` is root's alone (`ENODATA` to get,
//! `EPERM` to set or remove, hidden from lists); `security.*` is readable by anyone
//! and changed by root only (`EPERM`). Listing needs no permission. Calls made on the
//! [`FileSystem`] itself are trusted: nothing is checked.
//!
//! Limits and errnos are Linux's: a name is 1 to [`MAX_XATTR_NAME`] bytes (`ERANGE`
//! otherwise), a namespace prefix alone is `EINVAL`, a value at most
//! [`MAX_XATTR_VALUE`] bytes (`E2BIG`), a buffer too small for the answer `ERANGE`
//! (an empty buffer asks for the size), a missing name `ENODATA`, [`XATTR_CREATE`]
//! of an existing name `EEXIST` and [`XATTR_REPLACE`] of a missing one `ENODATA`.
//! One inode's encoded set is at most [`MAX_XATTR_SET_BYTES`]; beyond, or when the free
//! space is so fragmented that the set would need more than `MAX_XATTR_EXTENTS` (16)
//! extents, `ENOSPC`.

use std::sync::Arc;

use crate::cred::{self, Who, MAY_READ, MAY_WRITE};
use crate::error::{Error, Result};
use crate::file::Fd;
use crate::inode::{FileKind, Inode, InodeState};
use crate::layout::BLOCK_SIZE;
use crate::log::{Entry, MAX_XATTR_EXTENTS};
use crate::xattr_set::STORED_PREFIXES;
pub use crate::xattr_set::{
    Set, SetRef, MAX_XATTR_LIST, MAX_XATTR_NAME, MAX_XATTR_SET_BYTES, MAX_XATTR_VALUE,
};
use crate::{now_ns, FileSystem};

/// `setxattr` flag: fail with `EEXIST` if the attribute exists.
pub const XATTR_CREATE: i32 = 1;
/// `setxattr` flag: fail with `ENODATA` if the attribute does not exist.
pub const XATTR_REPLACE: i32 = 2;

/// Why a name is refused before any lookup: empty or too long (`ERANGE`).
fn check_name_length(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::Range("empty extended attribute name"));
    }
    if name.len() > MAX_XATTR_NAME {
        return Err(Error::Range("extended attribute name over 255 bytes"));
    }
    Ok(())
}

/// The checks Linux makes once the inode is known: `user.*` only on regular files and
/// directories (`EPERM` for a change, `ENODATA` for a read), then the namespace
/// (`EOPNOTSUPP` for an unknown or unsupported one, `EINVAL` for a prefix alone).
fn check_namespace(kind: FileKind, name: &str, write: bool) -> Result<()> {
    if name.starts_with("user.") && !matches!(kind, FileKind::File | FileKind::Dir) {
        return Err(if write {
            Error::NotPermitted("user.* extended attributes on a special file or symlink")
        } else {
            Error::NoData
        });
    }
    for p in STORED_PREFIXES {
        if name == p {
            return Err(Error::Invalid(format!("extended attribute name {name:?}")));
        }
    }
    if STORED_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Ok(());
    }
    Err(Error::NotSupported(
        if name.starts_with("system.posix_acl_") {
            "POSIX ACLs are not supported"
        } else {
            "extended attribute namespace"
        },
    ))
}

/// Linux's `xattr_permission` and the capability hooks after it, for a caller `who`
/// on an inode in state `st`: whether it may read (`write` false) or change attribute
/// `name`. The trusted context may do anything.
fn xattr_permission(who: Who<'_>, st: &InodeState, name: &str, write: bool) -> Result<()> {
    let Some(c) = who else { return Ok(()) };
    if name.starts_with("security.") {
        // cap_inode_setxattr/cap_inode_removexattr: CAP_SYS_ADMIN to change.
        return if write && !c.is_root() {
            Err(Error::NotPermitted(
                "security.* extended attributes need root",
            ))
        } else {
            Ok(())
        };
    }
    if name.starts_with("system.") {
        return Ok(());
    }
    if name.starts_with("trusted.") && !c.is_root() {
        return Err(if write {
            Error::NotPermitted("trusted.* extended attributes need root")
        } else {
            Error::NoData
        });
    }
    if name.starts_with("user.") {
        if !matches!(st.kind, FileKind::File | FileKind::Dir) {
            return check_namespace(st.kind, name, write);
        }
        let sticky_dir = st.kind == FileKind::Dir && st.mode & libc::S_ISVTX != 0;
        if sticky_dir && write && !cred::owner_or_root(who, st) {
            return Err(Error::NotPermitted(
                "user.* extended attributes of a sticky directory: not the owner",
            ));
        }
    }
    cred::may(who, st, if write { MAY_WRITE } else { MAY_READ })
}

/// Whether `who` sees attribute `name` in a list: `trusted.*` only root does.
fn listed(who: Who<'_>, name: &[u8]) -> bool {
    cred::privileged(who) || !name.starts_with(b"trusted.")
}

/// Which inode an extended-attribute call names.
pub(crate) enum Target<'a> {
    /// A path from the root, its final symbolic link followed or not.
    Path(&'a str, bool),
    /// An open descriptor.
    Fd(Fd),
    /// An inode by number.
    Ino(u64),
}

impl FileSystem {
    fn xattr_target(&self, who: Who<'_>, t: Target<'_>) -> Result<Arc<Inode>> {
        match t {
            Target::Path(path, follow) => self.resolve_as(who, None, path, follow),
            Target::Fd(fd) => {
                let f = self.file(fd)?;
                // An O_PATH handle is not a descriptor the xattr calls take (EBADF).
                if !f.readable() && !f.writable() {
                    return Err(Error::BadFd);
                }
                Ok(f.inode().clone())
            }
            Target::Ino(ino) => self.inode(ino),
        }
    }

    /// `getxattr`: copies the value of attribute `name` of the file at `path` (a final
    /// symbolic link followed) into `buf` and returns its length; with an empty `buf`,
    /// only the length.
    pub fn getxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> Result<usize> {
        self.get_xattr(None, Target::Path(path, true), name, buf)
    }

    /// `lgetxattr`: [`FileSystem::getxattr`] of a final symbolic link itself.
    pub fn lgetxattr(&self, path: &str, name: &str, buf: &mut [u8]) -> Result<usize> {
        self.get_xattr(None, Target::Path(path, false), name, buf)
    }

    /// `fgetxattr`: [`FileSystem::getxattr`] of an open file, unlinked or not.
    pub fn fgetxattr(&self, fd: Fd, name: &str, buf: &mut [u8]) -> Result<usize> {
        self.get_xattr(None, Target::Fd(fd), name, buf)
    }

    /// `setxattr`: sets attribute `name` of the file at `path` (a final symbolic link
    /// followed) to `value`. `flags` is 0, [`XATTR_CREATE`] or [`XATTR_REPLACE`].
    /// Durable when it returns.
    pub fn setxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> Result<()> {
        self.set_xattr(None, Target::Path(path, true), name, Some(value), flags)
    }

    /// `lsetxattr`: [`FileSystem::setxattr`] of a final symbolic link itself.
    pub fn lsetxattr(&self, path: &str, name: &str, value: &[u8], flags: i32) -> Result<()> {
        self.set_xattr(None, Target::Path(path, false), name, Some(value), flags)
    }

    /// `fsetxattr`: [`FileSystem::setxattr`] of an open file, unlinked or not.
    pub fn fsetxattr(&self, fd: Fd, name: &str, value: &[u8], flags: i32) -> Result<()> {
        self.set_xattr(None, Target::Fd(fd), name, Some(value), flags)
    }

    /// `removexattr`: removes attribute `name` of the file at `path` (a final symbolic
    /// link followed). Durable when it returns.
    pub fn removexattr(&self, path: &str, name: &str) -> Result<()> {
        self.set_xattr(None, Target::Path(path, true), name, None, XATTR_REPLACE)
    }

    /// `lremovexattr`: [`FileSystem::removexattr`] of a final symbolic link itself.
    pub fn lremovexattr(&self, path: &str, name: &str) -> Result<()> {
        self.set_xattr(None, Target::Path(path, false), name, None, XATTR_REPLACE)
    }

    /// `fremovexattr`: [`FileSystem::removexattr`] of an open file, unlinked or not.
    pub fn fremovexattr(&self, fd: Fd, name: &str) -> Result<()> {
        self.set_xattr(None, Target::Fd(fd), name, None, XATTR_REPLACE)
    }

    /// `listxattr`: the names of the attributes of the file at `path` (a final
    /// symbolic link followed), each followed by a NUL byte, copied into `buf`;
    /// returns their length (with an empty `buf`, only the length).
    pub fn listxattr(&self, path: &str, buf: &mut [u8]) -> Result<usize> {
        self.list_xattr(None, Target::Path(path, true), buf)
    }

    /// `llistxattr`: [`FileSystem::listxattr`] of a final symbolic link itself.
    pub fn llistxattr(&self, path: &str, buf: &mut [u8]) -> Result<usize> {
        self.list_xattr(None, Target::Path(path, false), buf)
    }

    /// `flistxattr`: [`FileSystem::listxattr`] of an open file, unlinked or not.
    pub fn flistxattr(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        self.list_xattr(None, Target::Fd(fd), buf)
    }

    /// The inode's set of extended attributes, read from the region.
    fn xattr_set(&self, ino: u64, st: &InodeState) -> Result<Set> {
        match &st.xattr {
            None => Ok(Set::default()),
            Some(r) => r
                .load(&*self.pm)
                .map_err(|why| Error::Corrupt(format!("inode {ino}: {why}"))),
        }
    }

    /// Reads attribute `name` as `who` (see [`FileSystem::getxattr`]).
    pub(crate) fn get_xattr(
        &self,
        who: Who<'_>,
        t: Target<'_>,
        name: &str,
        buf: &mut [u8],
    ) -> Result<usize> {
        check_name_length(name)?;
        let inode = self.xattr_target(who, t)?;
        let st = inode.state.read();
        if st.freed {
            return Err(Error::NotFound);
        }
        xattr_permission(who, &st, name, false)?;
        check_namespace(st.kind, name, false)?;
        let set = self.xattr_set(inode.ino, &st)?;
        let i = set.find(name.as_bytes()).map_err(|_| Error::NoData)?;
        let value = &set.0[i].1;
        if buf.is_empty() {
            return Ok(value.len());
        }
        if buf.len() < value.len() {
            return Err(Error::Range("buffer too small for the attribute's value"));
        }
        buf[..value.len()].copy_from_slice(value);
        Ok(value.len())
    }

    /// Lists the attributes `who` may see (see [`FileSystem::listxattr`]).
    pub(crate) fn list_xattr(&self, who: Who<'_>, t: Target<'_>, buf: &mut [u8]) -> Result<usize> {
        let inode = self.xattr_target(who, t)?;
        let st = inode.state.read();
        if st.freed {
            return Err(Error::NotFound);
        }
        let mut set = self.xattr_set(inode.ino, &st)?;
        set.0.retain(|(n, _)| listed(who, n));
        let len: usize = set.0.iter().map(|(n, _)| n.len() + 1).sum();
        if buf.is_empty() {
            return Ok(len);
        }
        // Linux reads at most XATTR_LIST_MAX bytes, and says E2BIG when even that
        // is too little.
        if len > buf.len().min(MAX_XATTR_LIST) {
            return Err(if buf.len() >= MAX_XATTR_LIST {
                Error::TooBig("list of extended attribute names over 64 KiB")
            } else {
                Error::Range("buffer too small for the list of names")
            });
        }
        let mut at = 0;
        for (n, _) in &set.0 {
            buf[at..at + n.len()].copy_from_slice(n);
            buf[at + n.len()] = 0;
            at += n.len() + 1;
        }
        Ok(len)
    }

    /// Sets (`Some(value)`) or removes (`None`) attribute `name` as `who`.
    pub(crate) fn set_xattr(
        &self,
        who: Who<'_>,
        t: Target<'_>,
        name: &str,
        value: Option<&[u8]>,
        flags: i32,
    ) -> Result<()> {
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return Err(Error::Invalid(format!("setxattr flags {flags:#x}")));
        }
        check_name_length(name)?;
        if value.is_some_and(|v| v.len() > MAX_XATTR_VALUE) {
            return Err(Error::TooBig("extended attribute value over 64 KiB"));
        }
        let inode = self.xattr_target(who, t)?;
        self.check_writable()?;
        let mut st = self.write_state(&inode);
        if st.freed {
            return Err(Error::NotFound);
        }
        xattr_permission(who, &st, name, true)?;
        check_namespace(st.kind, name, true)?;
        let mut set = self.xattr_set(inode.ino, &st)?;
        match (set.find(name.as_bytes()), value) {
            (Ok(_), _) if flags & XATTR_CREATE != 0 => return Err(Error::Exists),
            (Err(_), _) if flags & XATTR_REPLACE != 0 => return Err(Error::NoData),
            (Ok(i), Some(v)) => set.0[i].1 = v.to_vec(),
            (Ok(i), None) => {
                set.0.remove(i);
            }
            (Err(i), Some(v)) => set.0.insert(i, (name.as_bytes().to_vec(), v.to_vec())),
            (Err(_), None) => return Err(Error::NoData),
        }
        self.commit_xattr_set(&inode, &mut st, &set)
    }

    /// Writes `set` into fresh blocks, durably, then commits the entry naming them and
    /// retires the blocks of the set before.
    fn commit_xattr_set(&self, inode: &Arc<Inode>, st: &mut InodeState, set: &Set) -> Result<()> {
        let bytes = set.encode();
        if bytes.len() > MAX_XATTR_SET_BYTES {
            return Err(Error::NoSpace);
        }
        let new = if bytes.is_empty() {
            None
        } else {
            let blocks = (bytes.len() as u64).div_ceil(BLOCK_SIZE);
            let extents = self.alloc_blocks(blocks)?;
            if extents.len() > MAX_XATTR_EXTENTS {
                extents.into_iter().for_each(|x| self.blocks.free(x));
                return Err(Error::NoSpace);
            }
            let mut padded = bytes.clone();
            padded.resize((blocks * BLOCK_SIZE) as usize, 0);
            // Durable before the entry that names it is committed (the staging fence).
            let mut at = 0;
            for e in &extents {
                let n = (e.len * BLOCK_SIZE) as usize;
                let (off, bytes) = (e.start * BLOCK_SIZE, &padded[at..at + n]);
                if crate::fault::active(crate::fault::Fault::XattrSetWithoutWriteBack) {
                    self.pm.write(off, bytes);
                } else {
                    self.pm.copy_nt(off, bytes);
                }
                at += n;
            }
            Some(SetRef {
                extents,
                bytes: bytes.len() as u32,
                crc: crc32c::crc32c(&bytes),
            })
        };
        let entry = match &new {
            Some(r) => r.entry(now_ns()),
            None => Entry::Xattr {
                extents: Vec::new(),
                bytes: 0,
                crc: 0,
                ctime: now_ns(),
            },
        };
        let staged = match self.stage(inode.ino, st, vec![entry]) {
            Ok(s) => s,
            Err(e) => {
                for x in new.into_iter().flat_map(|r| r.extents) {
                    self.blocks.free(x);
                }
                return Err(e);
            }
        };
        let displaced = self.commit_one(st, staged);
        self.retire(displaced);
        self.maybe_clean(inode, st);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_linux_does() {
        assert!(matches!(check_name_length(""), Err(Error::Range(_))));
        assert!(matches!(
            check_name_length(&"u".repeat(256)),
            Err(Error::Range(_))
        ));
        let ok = |n: &str| check_namespace(FileKind::File, n, true);
        assert!(ok("user.x").is_ok() && ok("trusted.x").is_ok() && ok("security.x").is_ok());
        assert!(matches!(ok("user."), Err(Error::Invalid(_))));
        assert!(matches!(ok("system."), Err(Error::NotSupported(_))));
        assert!(matches!(
            ok("system.posix_acl_access"),
            Err(Error::NotSupported(_))
        ));
        assert!(matches!(ok("other.x"), Err(Error::NotSupported(_))));
        assert!(matches!(
            check_namespace(FileKind::Symlink, "user.x", true),
            Err(Error::NotPermitted(_))
        ));
        assert!(matches!(
            check_namespace(FileKind::Symlink, "user.x", false),
            Err(Error::NoData)
        ));
        assert!(check_namespace(FileKind::Symlink, "trusted.x", true).is_ok());
    }
}
