//! Extended attributes, with Linux's limits and errnos (tmpfs: `user.*` and
//! `trusted.*` kept in the inode; `security.*` and `system.*` not modelled).

use crate::attr::Target;
use crate::{Kind, Model, R, XATTR_NAME_MAX, XATTR_SIZE_MAX};

/// `setxattr` flag: fail with `EEXIST` if the attribute exists.
pub const XATTR_CREATE: u32 = 1;
/// `setxattr` flag: fail with `ENODATA` unless the attribute exists.
pub const XATTR_REPLACE: u32 = 2;

/// Namespaces the model stores.
const NAMESPACES: [&str; 2] = ["user.", "trusted."];

/// The checks of the name before any lookup: `ERANGE` for an empty or too long name.
fn check_name(name: &str) -> R<()> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(libc::ERANGE);
    }
    Ok(())
}

/// The checks of `xattr_permission` and of the handler lookup, in that order.
fn check_access(kind: Kind, name: &str, write: bool) -> R<()> {
    if name.starts_with("user.") && kind != Kind::File && kind != Kind::Dir {
        return Err(if write { libc::EPERM } else { libc::ENODATA });
    }
    match NAMESPACES.iter().find(|p| name.starts_with(*p)) {
        None => Err(libc::EOPNOTSUPP),
        Some(p) if name.len() == p.len() => Err(libc::EINVAL),
        Some(_) => Ok(()),
    }
}

/// What `getxattr`/`listxattr` copy into a buffer of `size` bytes: with `size` 0 only
/// the length is reported (the bytes are empty), a shorter buffer is `ERANGE`.
fn sized(bytes: Vec<u8>, size: usize) -> R<(usize, Vec<u8>)> {
    match size {
        0 => Ok((bytes.len(), Vec::new())),
        s if s < bytes.len() => Err(libc::ERANGE),
        _ => Ok((bytes.len(), bytes)),
    }
}

impl Model {
    /// `setxattr`/`lsetxattr`/`fsetxattr`.
    pub fn setxattr(&mut self, t: Target<'_>, name: &str, value: &[u8], flags: u32) -> R<()> {
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return Err(libc::EINVAL);
        }
        check_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(libc::E2BIG);
        }
        let id = self.target(t)?;
        check_access(self.node(id).kind(), name, true)?;
        let n = self.node_mut(id);
        let exists = n.xattrs.contains_key(name);
        if exists && flags & XATTR_CREATE != 0 {
            return Err(libc::EEXIST);
        }
        if !exists && flags & XATTR_REPLACE != 0 {
            return Err(libc::ENODATA);
        }
        n.xattrs.insert(name.to_string(), value.to_vec());
        Ok(())
    }

    /// `getxattr`/`lgetxattr`/`fgetxattr` into a buffer of `size` bytes: the value's
    /// length and (unless `size` is 0) its bytes.
    pub fn getxattr(&self, t: Target<'_>, name: &str, size: usize) -> R<(usize, Vec<u8>)> {
        check_name(name)?;
        let id = self.target(t)?;
        check_access(self.node(id).kind(), name, false)?;
        let v = self.node(id).xattrs.get(name).ok_or(libc::ENODATA)?;
        sized(v.clone(), size.min(XATTR_SIZE_MAX))
    }

    /// `listxattr`/`llistxattr`/`flistxattr` into a buffer of `size` bytes: the names,
    /// each followed by a NUL, sorted (the order is each file system's own: tmpfs lists
    /// in hash order, so callers compare the names as a set).
    pub fn listxattr(&self, t: Target<'_>, size: usize) -> R<(usize, Vec<u8>)> {
        let id = self.target(t)?;
        let mut out = Vec::new();
        for name in self.node(id).xattrs.keys() {
            out.extend_from_slice(name.as_bytes());
            out.push(0);
        }
        sized(out, size.min(XATTR_SIZE_MAX))
    }

    /// `removexattr`/`lremovexattr`/`fremovexattr`.
    pub fn removexattr(&mut self, t: Target<'_>, name: &str) -> R<()> {
        check_name(name)?;
        let id = self.target(t)?;
        check_access(self.node(id).kind(), name, true)?;
        self.node_mut(id)
            .xattrs
            .remove(name)
            .map(drop)
            .ok_or(libc::ENODATA)
    }
}
