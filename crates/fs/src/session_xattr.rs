//! The calls a [`Session`] makes on extended attributes, checked with the session's
//! credentials as Linux checks them (the rules are in `xattr.rs`); and the by-inode
//! forms of the attribute calls, for doors that speak in inode numbers.

use crate::cred::Who;
use crate::error::Result;
use crate::file::Fd;
use crate::handle::Session;
use crate::xattr::{Target, XATTR_REPLACE};
use crate::FileSystem;

/// Defines each extended-attribute call of a [`Session`]: the file system's internal
/// call of the same kind, made with the session's credentials.
macro_rules! xattr_calls {
    ($( $(#[$m:meta])* fn $name:ident($($a:ident : $t:ty),*) -> $r:ty
        => $inner:ident($($arg:expr),*); )*) => {
        impl Session<'_> {
            $( $(#[$m])* pub fn $name(&self, $($a: $t),*) -> $r {
                let who: Who<'_> = Some(self.cred());
                self.fs().$inner(who, $($arg),*)
            } )*
        }
    };
}

xattr_calls! {
    /// `getxattr` as this caller: `user.*` needs read permission, `trusted.*` is
    /// `ENODATA` unless root, `security.*` is readable by anyone.
    fn getxattr(path: &str, name: &str, buf: &mut [u8]) -> Result<usize> => get_xattr(Target::Path(path, true), name, buf);
    /// `lgetxattr` as this caller.
    fn lgetxattr(path: &str, name: &str, buf: &mut [u8]) -> Result<usize> => get_xattr(Target::Path(path, false), name, buf);
    /// `fgetxattr` as this caller (permission is checked on the inode, as Linux).
    fn fgetxattr(fd: Fd, name: &str, buf: &mut [u8]) -> Result<usize> => get_xattr(Target::Fd(fd), name, buf);
    /// `getxattr` of inode `ino` as this caller.
    fn getxattr_ino(ino: u64, name: &str, buf: &mut [u8]) -> Result<usize> => get_xattr(Target::Ino(ino), name, buf);
    /// `setxattr` as this caller: `user.*` needs write permission (and ownership of a
    /// sticky directory), `trusted.*` and `security.*` need root (`EPERM`).
    fn setxattr(path: &str, name: &str, value: &[u8], flags: i32) -> Result<()> => set_xattr(Target::Path(path, true), name, Some(value), flags);
    /// `lsetxattr` as this caller.
    fn lsetxattr(path: &str, name: &str, value: &[u8], flags: i32) -> Result<()> => set_xattr(Target::Path(path, false), name, Some(value), flags);
    /// `fsetxattr` as this caller.
    fn fsetxattr(fd: Fd, name: &str, value: &[u8], flags: i32) -> Result<()> => set_xattr(Target::Fd(fd), name, Some(value), flags);
    /// `setxattr` of inode `ino` as this caller.
    fn setxattr_ino(ino: u64, name: &str, value: &[u8], flags: i32) -> Result<()> => set_xattr(Target::Ino(ino), name, Some(value), flags);
    /// `removexattr` as this caller (the permission of a change).
    fn removexattr(path: &str, name: &str) -> Result<()> => set_xattr(Target::Path(path, true), name, None, XATTR_REPLACE);
    /// `lremovexattr` as this caller.
    fn lremovexattr(path: &str, name: &str) -> Result<()> => set_xattr(Target::Path(path, false), name, None, XATTR_REPLACE);
    /// `fremovexattr` as this caller.
    fn fremovexattr(fd: Fd, name: &str) -> Result<()> => set_xattr(Target::Fd(fd), name, None, XATTR_REPLACE);
    /// `removexattr` of inode `ino` as this caller.
    fn removexattr_ino(ino: u64, name: &str) -> Result<()> => set_xattr(Target::Ino(ino), name, None, XATTR_REPLACE);
    /// `listxattr` as this caller: no permission needed; `trusted.*` names are
    /// hidden unless root.
    fn listxattr(path: &str, buf: &mut [u8]) -> Result<usize> => list_xattr(Target::Path(path, true), buf);
    /// `llistxattr` as this caller.
    fn llistxattr(path: &str, buf: &mut [u8]) -> Result<usize> => list_xattr(Target::Path(path, false), buf);
    /// `flistxattr` as this caller.
    fn flistxattr(fd: Fd, buf: &mut [u8]) -> Result<usize> => list_xattr(Target::Fd(fd), buf);
    /// `listxattr` of inode `ino` as this caller.
    fn listxattr_ino(ino: u64, buf: &mut [u8]) -> Result<usize> => list_xattr(Target::Ino(ino), buf);
}

impl FileSystem {
    /// `getxattr` of inode `ino` (trusted).
    pub fn getxattr_ino(&self, ino: u64, name: &str, buf: &mut [u8]) -> Result<usize> {
        self.get_xattr(None, Target::Ino(ino), name, buf)
    }

    /// `setxattr` of inode `ino` (trusted).
    pub fn setxattr_ino(&self, ino: u64, name: &str, value: &[u8], flags: i32) -> Result<()> {
        self.set_xattr(None, Target::Ino(ino), name, Some(value), flags)
    }

    /// `removexattr` of inode `ino` (trusted).
    pub fn removexattr_ino(&self, ino: u64, name: &str) -> Result<()> {
        self.set_xattr(None, Target::Ino(ino), name, None, XATTR_REPLACE)
    }

    /// `listxattr` of inode `ino` (trusted).
    pub fn listxattr_ino(&self, ino: u64, buf: &mut [u8]) -> Result<usize> {
        self.list_xattr(None, Target::Ino(ino), buf)
    }
}
