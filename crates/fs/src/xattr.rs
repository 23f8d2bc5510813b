//! Extended attributes: `getxattr`, `setxattr`, `listxattr`, `removexattr` on a path
//! (following a final symbolic link or not) and on an open descriptor.
//!
//! Storage (format version 3). An inode's extended attributes are stored together, as
//! one encoded *set*, in pool blocks; the inode's log names them with an xattr entry
//! (`crate::log`: up to `MAX_XATTR_EXTENTS` (16) extents, bytes, CRC-32C of the bytes). A change writes the whole new set into freshly allocated blocks, makes them
//! durable, and only then commits the entry naming them with the inode's usual single
//! atomic tail store — copy-on-write, so a crash leaves the old set or the new one,
//! never a mix. The blocks of the set before are retired like displaced data blocks.
//! Removing the last attribute commits an entry with no blocks. Recovery replays the
//! entries (the last one wins), accounts the run's blocks to the inode, and checks the
//! set's checksum and encoding; fsck does the same, so a leaked or doubly referenced
//! block is found as for file data. Log cleaning keeps the current run.
//!
//! Encoded set, in the first `bytes` bytes of the extents' blocks taken in order,
//! attributes in name order:
//!
//! | offset | size | field                     |
//! |--------|------|---------------------------|
//! | 0      | 1    | name length n (1..=255)   |
//! | 1      | 4    | value length v (≤ 64 KiB) |
//! | 5      | n    | name (with its namespace) |
//! | 5 + n  | v    | value                     |
//!
//! repeated until `bytes`. The rest of the last block is zero.
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

use crate::alloc::Extent;
use crate::cred::{self, Who, MAY_READ, MAY_WRITE};
use crate::error::{Error, Result};
use crate::file::Fd;
use crate::inode::{FileKind, Inode, InodeState};
use crate::layout::BLOCK_SIZE;
use crate::log::{Entry, MAX_XATTR_EXTENTS};
use crate::{now_ns, FileSystem};

/// Longest name of an extended attribute, namespace prefix included (`XATTR_NAME_MAX`).
pub const MAX_XATTR_NAME: usize = 255;
/// Largest value of an extended attribute (`XATTR_SIZE_MAX`).
pub const MAX_XATTR_VALUE: usize = 64 * 1024;
/// Largest list of names `listxattr` returns into a buffer (`XATTR_LIST_MAX`).
pub const MAX_XATTR_LIST: usize = 64 * 1024;
/// Largest encoded set of one inode's extended attributes.
pub const MAX_XATTR_SET_BYTES: usize = 1 << 20;
/// `setxattr` flag: fail with `EEXIST` if the attribute exists.
pub const XATTR_CREATE: i32 = 1;
/// `setxattr` flag: fail with `ENODATA` if the attribute does not exist.
pub const XATTR_REPLACE: i32 = 2;

/// Bytes of an attribute's header in the encoded set.
const RECORD_HEADER: usize = 5;

/// Namespaces whose attributes are stored.
const STORED_PREFIXES: [&str; 3] = ["user.", "trusted.", "security."];

/// Where an inode's encoded set of extended attributes lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetRef {
    /// The blocks, in order.
    pub extents: Vec<Extent>,
    /// Bytes of the encoded set.
    pub bytes: u32,
    /// CRC-32C of those bytes.
    pub crc: u32,
}

impl SetRef {
    /// The log entry that names this set.
    pub fn entry(&self, ctime: i64) -> Entry {
        Entry::Xattr {
            extents: self
                .extents
                .iter()
                .map(|e| (e.start, e.len as u32))
                .collect(),
            bytes: self.bytes,
            crc: self.crc,
            ctime,
        }
    }

    /// Reads the set from the region, checking its checksum and encoding.
    pub fn load(&self, pm: &dyn pmem::Pmem) -> std::result::Result<Set, String> {
        let blocks: u64 = self.extents.iter().map(|e| e.len).sum();
        if self.bytes as u64 > blocks * BLOCK_SIZE {
            return Err(format!(
                "extended attributes: {} bytes in {blocks} blocks",
                self.bytes
            ));
        }
        let mut b = vec![0u8; self.bytes as usize];
        let mut at = 0;
        for e in &self.extents {
            let n = ((e.len * BLOCK_SIZE) as usize).min(b.len() - at);
            pm.read(e.start * BLOCK_SIZE, &mut b[at..at + n]);
            at += n;
        }
        if crc32c::crc32c(&b) != self.crc {
            return Err("extended attributes: checksum mismatch".into());
        }
        Set::decode(&b)
    }
}

impl InodeState {
    /// Applies an xattr entry: the set it names replaces the inode's set, whose blocks
    /// are displaced.
    pub(crate) fn apply_xattr(&mut self, e: &Entry, displaced: &mut Vec<Extent>) {
        let Entry::Xattr {
            extents,
            bytes,
            crc,
            ctime,
        } = e
        else {
            return;
        };
        if let Some(old) = self.xattr.take() {
            displaced.extend(old.extents);
        }
        self.xattr = (!extents.is_empty()).then(|| SetRef {
            extents: extents
                .iter()
                .map(|&(start, len)| Extent {
                    start,
                    len: len as u64,
                })
                .collect(),
            bytes: *bytes,
            crc: *crc,
        });
        self.ctime = *ctime;
    }
}

/// One inode's extended attributes, in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set(Vec<(Vec<u8>, Vec<u8>)>);

impl Set {
    fn find(&self, name: &[u8]) -> std::result::Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| n.as_slice().cmp(name))
    }

    /// The encoded set.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        for (n, v) in &self.0 {
            out.push(n.len() as u8);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(n);
            out.extend_from_slice(v);
        }
        out
    }

    fn encoded_len(&self) -> usize {
        self.0
            .iter()
            .map(|(n, v)| RECORD_HEADER + n.len() + v.len())
            .sum()
    }

    /// Decodes an encoded set; every name must be legal, in order, and unique.
    fn decode(b: &[u8]) -> std::result::Result<Set, String> {
        let bad = |why: &str| format!("extended attributes: {why}");
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut at = 0;
        while at < b.len() {
            if at + RECORD_HEADER > b.len() {
                return Err(bad("truncated record"));
            }
            let n = b[at] as usize;
            let v = u32::from_le_bytes(b[at + 1..at + 5].try_into().unwrap()) as usize;
            let start = at + RECORD_HEADER;
            if n == 0 || v > MAX_XATTR_VALUE || start + n + v > b.len() {
                return Err(bad("record of impossible length"));
            }
            let name = &b[start..start + n];
            if !STORED_PREFIXES.iter().any(|p| stored_name(name, p)) {
                return Err(bad("name outside the stored namespaces"));
            }
            if out.last().is_some_and(|(last, _)| last.as_slice() >= name) {
                return Err(bad("names out of order"));
            }
            out.push((name.to_vec(), b[start + n..start + n + v].to_vec()));
            at = start + n + v;
        }
        Ok(Set(out))
    }
}

fn stored_name(name: &[u8], prefix: &str) -> bool {
    name.len() > prefix.len() && name.starts_with(prefix.as_bytes())
}

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
    fn sets_round_trip_and_bad_encodings_are_refused() {
        let set = Set(vec![
            (b"security.x".to_vec(), vec![]),
            (b"trusted.t".to_vec(), vec![1, 2, 3]),
            (b"user.a".to_vec(), vec![7; MAX_XATTR_VALUE]),
        ]);
        let b = set.encode();
        assert_eq!(b.len(), set.encoded_len());
        assert_eq!(Set::decode(&b).unwrap(), set);
        assert!(Set::decode(&b[..b.len() - 1]).is_err(), "truncated");
        let mut unordered = Set(set.0.clone());
        unordered.0.swap(0, 1);
        assert!(Set::decode(&unordered.encode()).is_err(), "out of order");
        let foreign = Set(vec![(b"system.x".to_vec(), vec![])]);
        assert!(Set::decode(&foreign.encode()).is_err(), "foreign namespace");
        let bare = Set(vec![(b"user.".to_vec(), vec![])]);
        assert!(Set::decode(&bare.encode()).is_err(), "prefix alone");
    }

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
