//! Attributes: `stat`, and `setattr` — mode, owner, size and times — with the rules
//! Linux applies to them (`setattr_prepare`, `chown_common`, `utimes_common`).

use std::sync::Arc;

use crate::cred::{self, Who, MAY_WRITE};
use crate::error::{Error, Result};
use crate::inode::{FileKind, Inode, InodeState};
use crate::layout::BLOCK_SIZE;
use crate::log::{attr, Entry};
use crate::{now_ns, FileSystem, Stat};

/// A time `setattr` sets: the current time, or a given one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Time {
    /// The current time (`UTIME_NOW`): both times to now may be set by the owner or
    /// anyone who may write the file.
    Now,
    /// This time, in ns since the epoch: only the owner (or root) may set it (as any
    /// combination other than both now).
    At(i64),
}

/// What `setattr` changes; `None` leaves an attribute as it is (`UTIME_OMIT`, a
/// `chown` id of -1). Any change also sets `ctime` to now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (`chmod`; the kind bits are ignored).
    pub mode: Option<u32>,
    /// Owner (`chown`).
    pub uid: Option<u32>,
    /// Group (`chown`).
    pub gid: Option<u32>,
    /// Size (`truncate`): needs write permission.
    pub size: Option<u64>,
    /// Access time.
    pub atime: Option<Time>,
    /// Modification time.
    pub mtime: Option<Time>,
}

/// The attribute entry a `setattr` commits.
#[derive(Default)]
struct Change {
    mask: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    atime: i64,
    mtime: i64,
}

impl FileSystem {
    /// `setattr` of `inode` for `who`. `chown` is true for the chown family, which
    /// clears setuid/setgid of a non-directory even when no id changes; the trusted
    /// context changes exactly what it is asked to.
    pub(crate) fn setattr_as(
        &self,
        who: Who<'_>,
        inode: &Arc<Inode>,
        a: &SetAttr,
        chown: bool,
    ) -> Result<()> {
        if let Some(size) = a.size {
            {
                let st = inode.state.read();
                if st.kind == FileKind::Dir {
                    return Err(Error::IsDir);
                }
                cred::may(who, &st, MAY_WRITE)?;
            }
            self.truncate_as(who, inode, size)?;
        }
        let mut st = self.write_state(inode);
        if st.freed {
            return Err(Error::NotFound);
        }
        let Some(c) = change(who, &st, a, chown)? else {
            return Ok(());
        };
        self.check_writable()?;
        let e = Entry::Attr {
            mask: c.mask | attr::CTIME,
            mode: c.mode,
            uid: c.uid,
            gid: c.gid,
            size: 0,
            atime: c.atime,
            mtime: c.mtime,
            ctime: now_ns(),
        };
        let staged = self.stage(inode.ino, &mut st, vec![e])?;
        self.commit_one(&mut st, staged);
        self.maybe_clean(inode, &mut st);
        Ok(())
    }

    /// Clears the setuid/setgid bits a write by an unprivileged caller removes: one
    /// load of the mode when there is none to clear.
    pub(crate) fn drop_privs_on_write(&self, inode: &Arc<Inode>) -> Result<()> {
        let mode = inode.state.read().mode;
        let kill = kill_suid_bits(mode);
        if kill == 0 {
            return Ok(());
        }
        let a = SetAttr {
            mode: Some(mode & !kill),
            ..SetAttr::default()
        };
        self.setattr_as(None, inode, &a, false)
    }

    /// Truncates for `who`: a caller without root's privileges also loses the file's
    /// setuid bit (and setgid, if group-executable), as `should_remove_suid` says.
    pub(crate) fn truncate_as(&self, who: Who<'_>, inode: &Arc<Inode>, len: u64) -> Result<()> {
        self.truncate_inode(inode, len)?;
        if cred::privileged(who) {
            return Ok(());
        }
        self.drop_privs_on_write(inode)
    }
}

/// The setuid/setgid bits a write, truncate or chown clears: setuid, and setgid when
/// the group may execute (without it, setgid marks mandatory locking).
fn kill_suid_bits(mode: u32) -> u32 {
    let mut kill = mode & libc::S_ISUID;
    if mode & (libc::S_ISGID | 0o010) == (libc::S_ISGID | 0o010) {
        kill |= libc::S_ISGID;
    }
    kill
}

/// Checks `a` against `who`'s rights over an inode in state `st` and gives the entry
/// to commit, or `None` when nothing changes.
fn change(who: Who<'_>, st: &InodeState, a: &SetAttr, chown: bool) -> Result<Option<Change>> {
    let mut c = Change::default();
    let mut mode = st.mode;
    if let Some(m) = a.mode {
        if !cred::owner_or_root(who, st) {
            return Err(Error::NotPermitted("chmod: not the owner"));
        }
        mode = m & 0o7777;
        if let Some(u) = who {
            if !u.is_root() && !u.in_group(st.gid) {
                mode &= !libc::S_ISGID;
            }
        }
        c.mask |= attr::MODE;
    }
    if chown || a.uid.is_some() || a.gid.is_some() {
        check_chown(who, st, a)?;
        if let Some(uid) = a.uid {
            c.mask |= attr::UID;
            c.uid = uid;
        }
        if let Some(gid) = a.gid {
            c.mask |= attr::GID;
            c.gid = gid;
        }
        let kill = if st.kind == FileKind::Dir || who.is_none() {
            0
        } else {
            kill_suid_bits(mode)
        };
        if chown && c.mask & attr::MODE == 0 {
            c.mask |= attr::CTIME;
        }
        if kill != 0 {
            mode &= !kill;
            c.mask |= attr::MODE;
        }
    }
    c.mode = mode;
    times(who, st, a, &mut c)?;
    Ok((c.mask != 0).then_some(c))
}

/// `chown_ok` and `chgrp_ok`: root changes anything; the owner may "change" the owner
/// to itself and the group to one of its groups.
fn check_chown(who: Who<'_>, st: &InodeState, a: &SetAttr) -> Result<()> {
    let Some(c) = who else { return Ok(()) };
    if c.is_root() {
        return Ok(());
    }
    if a.uid.is_some_and(|u| u != st.uid || c.uid != st.uid) {
        return Err(Error::NotPermitted("chown: only root changes the owner"));
    }
    if a.gid
        .is_some_and(|g| c.uid != st.uid || (g != st.gid && !c.in_group(g)))
    {
        return Err(Error::NotPermitted(
            "chown: the owner may only change the group to one of its own",
        ));
    }
    Ok(())
}

/// The times of `a`: setting both to now needs ownership or write permission
/// (EACCES); anything else needs ownership (EPERM).
fn times(who: Who<'_>, st: &InodeState, a: &SetAttr, c: &mut Change) -> Result<()> {
    if a.atime.is_none() && a.mtime.is_none() {
        return Ok(());
    }
    // Linux takes only "both now" (`utimes(NULL)`) as a touch; anything else, even
    // now with the other omitted, sets times.
    let explicit = !(a.atime == Some(Time::Now) && a.mtime == Some(Time::Now));
    if !cred::owner_or_root(who, st) {
        if explicit {
            return Err(Error::NotPermitted("utimens: not the owner"));
        }
        cred::may(who, st, MAY_WRITE)?;
    }
    let now = now_ns();
    let value = |t: Time| match t {
        Time::Now => now,
        Time::At(ns) => ns,
    };
    if let Some(t) = a.atime {
        c.mask |= attr::ATIME;
        c.atime = value(t);
    }
    if let Some(t) = a.mtime {
        c.mask |= attr::MTIME;
        c.mtime = value(t);
    }
    Ok(())
}

/// What `stat` says about `inode`.
pub(crate) fn stat_of(inode: &Arc<Inode>) -> Stat {
    let st = inode.state.read();
    Stat {
        ino: inode.ino,
        generation: st.born as u64,
        kind: st.kind,
        mode: st.kind.mode_bits() | st.mode,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        rdev: st.rdev,
        size: st.size,
        blocks: st.pages.len() as u64 * (BLOCK_SIZE / 512),
        blksize: BLOCK_SIZE as u32,
        atime_ns: st.atime,
        mtime_ns: st.mtime,
        ctime_ns: st.ctime,
    }
}
