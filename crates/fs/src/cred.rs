//! Credentials and the permission checks Linux makes with them.
//!
//! Calls made through a [`crate::Session`] carry the caller's [`Cred`] and are checked
//! as Linux checks them (`generic_permission`, `may_delete`, `setattr_prepare`): root
//! passes read and write checks, and execute checks when the inode has an execute bit
//! (or is a directory). Calls made on the [`crate::FileSystem`] itself are *trusted*:
//! nothing is checked and new inodes get the process's effective uid and gid, as
//! before credentials existed. Checks are made when a name is resolved, a file is
//! opened or an attribute changes; never on the reads and writes of an open descriptor.

use crate::error::{Error, Result};
use crate::inode::{FileKind, InodeState};

/// Who makes a call: user and group ids, supplementary groups, and the umask applied
/// to the modes of the inodes it creates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cred {
    /// Effective (file system) user id.
    pub uid: u32,
    /// Effective (file system) group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Bits cleared from the mode of created inodes (`umask(2)`).
    pub umask: u32,
}

impl Cred {
    /// The superuser, with no supplementary groups and umask 0.
    pub fn root() -> Cred {
        Cred {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            umask: 0,
        }
    }

    /// A user with one group and umask 022.
    pub fn user(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            groups: Vec::new(),
            umask: 0o022,
        }
    }

    /// Whether the caller is the superuser (every capability, as Linux's root).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether `gid` is the caller's group or one of its supplementary groups.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The caller of an internal operation: `None` is the trusted context.
pub(crate) type Who<'a> = Option<&'a Cred>;

/// Read permission, as in `MAY_READ`.
pub(crate) const MAY_READ: u32 = 4;
/// Write permission.
pub(crate) const MAY_WRITE: u32 = 2;
/// Execute permission (search, on a directory).
pub(crate) const MAY_EXEC: u32 = 1;

/// Checks that `who` may access an inode in state `st` for `want` (`MAY_*` bits).
pub(crate) fn may(who: Who<'_>, st: &InodeState, want: u32) -> Result<()> {
    let Some(c) = who else { return Ok(()) };
    if c.is_root() {
        // CAP_DAC_OVERRIDE: everything but executing a file no one may execute.
        let exec_file = want & MAY_EXEC != 0 && st.kind != FileKind::Dir;
        if exec_file && st.mode & 0o111 == 0 {
            return Err(Error::Access);
        }
        return Ok(());
    }
    let bits = if c.uid == st.uid {
        st.mode >> 6
    } else if c.in_group(st.gid) {
        st.mode >> 3
    } else {
        st.mode
    } & 7;
    if bits & want == want {
        Ok(())
    } else {
        Err(Error::Access)
    }
}

/// Whether `who` owns the inode or has the capabilities of root (`inode_owner_or_capable`).
pub(crate) fn owner_or_root(who: Who<'_>, st: &InodeState) -> bool {
    who.is_none_or(|c| c.is_root() || c.uid == st.uid)
}

/// Whether `who` is root or the trusted context.
pub(crate) fn privileged(who: Who<'_>) -> bool {
    who.is_none_or(Cred::is_root)
}

/// Checks that `who` may remove or rename away the entry for `child` in `dir`: write
/// and search on the directory, and in a sticky directory ownership of the entry's
/// inode or of the directory (`may_delete`).
pub(crate) fn may_delete(who: Who<'_>, dir: &InodeState, child: &InodeState) -> Result<()> {
    may(who, dir, MAY_WRITE | MAY_EXEC)?;
    let Some(c) = who else { return Ok(()) };
    if dir.mode & libc::S_ISVTX != 0 && !c.is_root() && c.uid != child.uid && c.uid != dir.uid {
        return Err(Error::NotPermitted("sticky directory: not the owner"));
    }
    Ok(())
}

/// Owner, group and mode of an inode `who` creates in directory `dir` with `mode`:
/// the caller's ids, the directory's group if it is setgid (and then setgid on a new
/// directory), the mode less the umask. The trusted context keeps the mode as given
/// and the process's effective ids.
pub(crate) fn new_owner(
    who: Who<'_>,
    dir: &InodeState,
    kind: FileKind,
    mode: u32,
) -> (u32, u32, u32) {
    let Some(c) = who else {
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        return (uid, gid, mode & 0o7777);
    };
    let mut mode = match kind {
        // vfs_mkdir keeps only the permission and sticky bits of the mode asked for.
        FileKind::Dir => mode & 0o1777,
        _ => mode & 0o7777,
    };
    let mut gid = c.gid;
    if dir.mode & libc::S_ISGID != 0 {
        gid = dir.gid;
        if kind == FileKind::Dir {
            mode |= libc::S_ISGID;
        } else if mode & (libc::S_ISGID | 0o010) == (libc::S_ISGID | 0o010)
            && !c.in_group(gid)
            && !c.is_root()
        {
            // mode_strip_sgid: no group-executable setgid file in a group the creator
            // is not in.
            mode &= !libc::S_ISGID;
        }
    }
    if kind != FileKind::Symlink {
        mode &= !c.umask;
    }
    (c.uid, gid, mode)
}
