//! Rename, in three steps: *validate* the flags and names, take the *lock plan* (the
//! rename lock and both directories in the one order [`dir_lock_order`] gives), then
//! check what the locked directories hold and *commit* every change through one
//! journal — a plain rename, `RENAME_NOREPLACE`, or `RENAME_EXCHANGE`, which swaps two
//! names atomically across a crash like any other journaled operation.
//!
//! Lock order (the only place it is decided): the rename lock, if the directories
//! differ; then the two directories, an ancestor before its descendant and unrelated
//! ones in inode-number order; then the inode the destination name replaces. Every
//! other operation locks one directory and then inodes in it, so this order is
//! compatible with theirs.

use std::sync::Arc;

use parking_lot::{MutexGuard, RwLockWriteGuard};

use crate::commit::Staged;
use crate::cred::{self, Who, MAY_EXEC, MAY_WRITE};
use crate::error::{Error, Result};
use crate::inode::{FileKind, Inode, InodeState};
use crate::log::Entry;
use crate::namespace::check_name;
use crate::{now_ns, FileSystem};

/// `renameat2` flag: fail with EEXIST instead of replacing the destination.
pub const RENAME_NOREPLACE: u32 = libc::RENAME_NOREPLACE;
/// `renameat2` flag: swap source and destination, which must both exist.
pub const RENAME_EXCHANGE: u32 = libc::RENAME_EXCHANGE;

/// One name of a rename: its directory, the name, and whether the path ended in '/'.
pub(crate) struct Side {
    pub dir: Arc<Inode>,
    pub name: String,
    pub slash: bool,
}

/// Which of two directories a cross-directory rename locks first: `true` for `from`.
/// `from_anc` and `to_anc` are their ancestor chains (each starting with itself),
/// read under the rename lock. An ancestor goes before its descendant, as every other
/// operation locks a directory before what is in it; unrelated directories go in
/// inode-number order (only one cross-directory rename runs at a time, so any fixed
/// order would do).
pub(crate) fn dir_lock_order(from: u64, to: u64, from_anc: &[u64], to_anc: &[u64]) -> bool {
    if to_anc.contains(&from) {
        true
    } else if from_anc.contains(&to) {
        false
    } else {
        from < to
    }
}

/// The locks a rename holds, taken in the order of the lock plan.
struct Locked<'a> {
    _cross: Option<MutexGuard<'a, ()>>,
    from: RwLockWriteGuard<'a, InodeState>,
    /// `None` when both names are in one directory.
    to: Option<RwLockWriteGuard<'a, InodeState>>,
    from_anc: Vec<u64>,
    to_anc: Vec<u64>,
}

impl Locked<'_> {
    fn to_dir(&self) -> &InodeState {
        self.to.as_deref().unwrap_or(&self.from)
    }
}

/// What the locked directories say the rename does.
struct Plan {
    src: Arc<Inode>,
    src_is_dir: bool,
    /// The inode the destination name holds: replaced, or swapped with the source.
    victim: Option<Arc<Inode>>,
    victim_is_dir: bool,
}

impl FileSystem {
    /// `renameat2`: `old` from `obase`, `new` from `nbase`, with `flags`.
    pub(crate) fn rename_as(
        &self,
        who: Who<'_>,
        obase: Option<&Arc<Inode>>,
        old: &str,
        nbase: Option<&Arc<Inode>>,
        new: &str,
        flags: u32,
    ) -> Result<()> {
        validate_flags(flags)?;
        let from = self.resolve_parent_as(who, obase, old)?;
        let to = self.resolve_parent_as(who, nbase, new)?;
        if from.name.is_empty() || to.name.is_empty() {
            // Linux: EBUSY for a last component `.`, `..` or the root, on either side.
            return Err(Error::Errno(libc::EBUSY));
        }
        let side = |p: crate::namespace::Parent| Side {
            dir: p.dir,
            name: p.name,
            slash: p.trailing_slash,
        };
        self.rename_sides(who, &side(from), &side(to), flags)
    }

    /// Renames `from` to `to` (names in directories) with `flags`.
    pub(crate) fn rename_sides(
        &self,
        who: Who<'_>,
        from: &Side,
        to: &Side,
        flags: u32,
    ) -> Result<()> {
        validate_flags(flags)?;
        check_name(&from.name)?;
        check_name(&to.name)?;
        let mut locked = self.lock_plan(from, to)?;
        let Some(plan) = self.check_locked(who, from, to, flags, &locked)? else {
            return Ok(());
        };
        let exchange = flags & RENAME_EXCHANGE != 0;
        self.commit_rename(from, to, exchange, &plan, &mut locked)
    }

    /// Takes the rename lock (directories differ) and both directories' locks in the
    /// order [`dir_lock_order`] gives.
    fn lock_plan<'a>(&'a self, from: &'a Side, to: &'a Side) -> Result<Locked<'a>> {
        let same_dir = from.dir.ino == to.dir.ino;
        let cross = (!same_dir).then(|| self.rename_lock.lock());
        // Directories only change parents under the rename lock, so both ancestor
        // chains are stable from here on. They are read before any directory is
        // locked: reading an ancestor while holding a descendant inverts the
        // parent-before-child order every other operation follows.
        let (from_anc, to_anc) = if same_dir {
            (Vec::new(), Vec::new())
        } else {
            (self.ancestors(&from.dir)?, self.ancestors(&to.dir)?)
        };
        let (f, t) = if same_dir {
            (self.write_state(&from.dir), None)
        } else if dir_lock_order(from.dir.ino, to.dir.ino, &from_anc, &to_anc) {
            let f = self.write_state(&from.dir);
            (f, Some(self.write_state(&to.dir)))
        } else {
            let t = self.write_state(&to.dir);
            (self.write_state(&from.dir), Some(t))
        };
        Ok(Locked {
            _cross: cross,
            from: f,
            to: t,
            from_anc,
            to_anc,
        })
    }

    /// Checks the rename against the locked directories, in the order Linux makes
    /// its checks. `None`: nothing to do (both names are one inode).
    fn check_locked(
        &self,
        who: Who<'_>,
        from: &Side,
        to: &Side,
        flags: u32,
        l: &Locked<'_>,
    ) -> Result<Option<Plan>> {
        let exchange = flags & RENAME_EXCHANGE != 0;
        if l.from.kind != FileKind::Dir || l.to_dir().kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        self.check_writable()?;
        cred::may(who, &l.from, MAY_EXEC)?;
        cred::may(who, l.to_dir(), MAY_EXEC)?;
        let src_ino = *l.from.children.get(&from.name).ok_or(Error::NotFound)?;
        let dst = l.to_dir();
        if dst.freed || dst.nlink == 0 {
            return Err(Error::NotFound);
        }
        let victim_ino = dst.children.get(&to.name).copied();
        if flags & RENAME_NOREPLACE != 0 && victim_ino.is_some() {
            return Err(Error::Exists);
        }
        if exchange && victim_ino.is_none() {
            return Err(Error::NotFound);
        }
        // The destination must not be inside the directory being moved. Checked
        // before the source is read: it would be a directory this rename holds.
        if src_ino == to.dir.ino || l.to_anc.contains(&src_ino) {
            return Err(Error::Invalid("cannot move a directory into itself".into()));
        }
        let src = self.child_inode(from.dir.ino, src_ino)?;
        let src_is_dir = src.state.read().kind == FileKind::Dir;
        // As in Linux: a trailing slash on a name of a non-directory is ENOTDIR,
        // before the same-inode shortcut (`rename("f", "f/")` is no no-op) and before
        // the check below (`rename("d/f", "d/")`).
        if !src_is_dir && (from.slash || (!exchange && to.slash)) {
            return Err(Error::NotDir);
        }
        if victim_ino.is_some_and(|v| v == from.dir.ino || l.from_anc.contains(&v)) {
            // The destination is a directory the source lives in (and holds locked).
            return Err(if exchange {
                Error::Invalid("cannot swap a directory with its ancestor".into())
            } else {
                Error::NotEmpty
            });
        }
        let victim = victim_ino
            .map(|i| self.child_inode(to.dir.ino, i))
            .transpose()?;
        let victim_is_dir = victim
            .as_ref()
            .is_some_and(|v| v.state.read().kind == FileKind::Dir);
        if exchange && to.slash && !victim_is_dir {
            return Err(Error::NotDir);
        }
        if victim_ino == Some(src_ino) {
            return Ok(None);
        }
        let plan = Plan {
            src,
            src_is_dir,
            victim,
            victim_is_dir,
        };
        self.check_rename_access(who, from, to, exchange, &plan, l)?;
        Ok(Some(plan))
    }

    /// Permission and kind checks of `vfs_rename`: removal from the source directory,
    /// removal (or creation) in the destination, write permission on a directory that
    /// changes parent, and the kinds a replaced inode may have.
    fn check_rename_access(
        &self,
        who: Who<'_>,
        from: &Side,
        to: &Side,
        exchange: bool,
        plan: &Plan,
        l: &Locked<'_>,
    ) -> Result<()> {
        let src_st = plan.src.state.read();
        cred::may_delete(who, &l.from, &src_st)?;
        let cross = from.dir.ino != to.dir.ino;
        match &plan.victim {
            None => cred::may(who, l.to_dir(), MAY_WRITE | MAY_EXEC)?,
            Some(v) => {
                let vst = v.state.read();
                cred::may_delete(who, l.to_dir(), &vst)?;
                if !exchange {
                    match (plan.src_is_dir, plan.victim_is_dir) {
                        (true, false) => return Err(Error::NotDir),
                        (false, true) => return Err(Error::IsDir),
                        _ => {}
                    }
                }
                if exchange && plan.victim_is_dir && cross {
                    cred::may(who, &vst, MAY_WRITE)?;
                }
                if !exchange && plan.victim_is_dir && !vst.children.is_empty() {
                    return Err(Error::NotEmpty);
                }
            }
        }
        if plan.src_is_dir && cross {
            // Its `..` changes.
            cred::may(who, &src_st, MAY_WRITE)?;
        }
        Ok(())
    }

    /// Stages the entries of both directories (and the replaced inode's link count),
    /// commits them through one journal, and applies them.
    fn commit_rename(
        &self,
        from: &Side,
        to: &Side,
        exchange: bool,
        plan: &Plan,
        l: &mut Locked<'_>,
    ) -> Result<()> {
        let now = now_ns();
        let (src_entries, dst_entries) = dir_entries(from, to, exchange, plan, l, now);
        let mut staged: Vec<Staged> = Vec::new();
        if let Some(t) = l.to.as_mut() {
            staged.push(self.stage(from.dir.ino, &mut l.from, src_entries)?);
            staged.push(self.stage(to.dir.ino, t, dst_entries)?);
        } else {
            staged.push(self.stage(from.dir.ino, &mut l.from, src_entries)?);
        }
        let mut vst = plan
            .victim
            .as_ref()
            .filter(|_| !exchange)
            .map(|v| self.write_state(v));
        if let (Some(v), Some(vs)) = (&plan.victim, vst.as_mut()) {
            let nlink = if plan.victim_is_dir { 0 } else { vs.nlink - 1 };
            staged.push(self.stage(v.ino, vs, vec![Entry::Link { nlink, ctime: now }])?);
        }
        let refs: Vec<&Staged> = staged.iter().collect();
        self.commit_journaled(&refs, &[]);
        let mut staged = staged.into_iter();
        Self::apply_staged(&mut l.from, staged.next().expect("source staged"));
        if let Some(t) = l.to.as_mut() {
            Self::apply_staged(t, staged.next().expect("destination staged"));
        }
        if let (Some(v), Some(mut vs)) = (&plan.victim, vst) {
            Self::apply_staged(&mut vs, staged.next().expect("victim staged"));
            self.release_if_unused(v, &mut vs);
        }
        if plan.src_is_dir {
            self.write_state(&plan.src).parent = to.dir.ino;
        }
        if let (true, true, Some(v)) = (exchange, plan.victim_is_dir, &plan.victim) {
            self.write_state(v).parent = from.dir.ino;
        }
        self.maybe_clean(&from.dir, &mut l.from);
        if let Some(t) = l.to.as_mut() {
            self.maybe_clean(&to.dir, t);
        }
        Ok(())
    }
}

/// The entries a rename appends to the source directory and to the destination
/// directory (all in the source's when they are one): names removed and added, and
/// the directories' new link counts.
fn dir_entries(
    from: &Side,
    to: &Side,
    exchange: bool,
    plan: &Plan,
    l: &Locked<'_>,
    now: i64,
) -> (Vec<Entry>, Vec<Entry>) {
    let same_dir = l.to.is_none();
    let src_ino = plan.src.ino;
    let victim_ino = plan.victim.as_ref().map(|v| v.ino);
    let del = |ino, name: &str| Entry::DentryDel {
        ino,
        ctime: now,
        name: name.to_string(),
    };
    let add = |ino, name: &str| Entry::DentryAdd {
        ino,
        ctime: now,
        name: name.to_string(),
    };
    let mut src_entries = vec![del(src_ino, &from.name)];
    let mut dst_entries = Vec::new();
    if let Some(v) = victim_ino {
        dst_entries.push(del(v, &to.name));
    }
    dst_entries.push(add(src_ino, &to.name));
    if let (true, Some(v)) = (exchange, victim_ino) {
        src_entries.push(add(v, &from.name));
    }
    // Directory link counts: a subdirectory that moves out leaves its parent one link
    // fewer; a replaced directory takes one from the destination; with an exchange,
    // each directory gains what comes in and loses what goes out.
    let moved_out = (plan.src_is_dir && !same_dir) as i64;
    let moved_back = (exchange && plan.victim_is_dir && !same_dir) as i64;
    let replaced = (!exchange && plan.victim_is_dir) as i64;
    let dst_delta = moved_out - moved_back - replaced;
    let src_delta = moved_back - moved_out;
    let link = |st: &InodeState, delta: i64| Entry::Link {
        nlink: (st.nlink as i64 + delta) as u32,
        ctime: now,
    };
    match &l.to {
        None => {
            // One directory: the removal of the source name first, so a rename to a
            // name of the same directory ends with the name added.
            src_entries.extend(dst_entries);
            if dst_delta != 0 {
                src_entries.push(link(&l.from, dst_delta));
            }
            (src_entries, Vec::new())
        }
        Some(t) => {
            if src_delta != 0 {
                src_entries.push(link(&l.from, src_delta));
            }
            if dst_delta != 0 {
                dst_entries.push(link(t, dst_delta));
            }
            (src_entries, dst_entries)
        }
    }
}

/// Flags `renameat2` takes: none, `RENAME_NOREPLACE` or `RENAME_EXCHANGE`, not both.
fn validate_flags(flags: u32) -> Result<()> {
    if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0 {
        return Err(Error::Invalid(format!(
            "unsupported rename flags {flags:#x}"
        )));
    }
    if flags == RENAME_NOREPLACE | RENAME_EXCHANGE {
        return Err(Error::Invalid(
            "RENAME_NOREPLACE and RENAME_EXCHANGE together".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::dir_lock_order;

    #[test]
    fn an_ancestor_is_locked_before_its_descendant_and_others_by_number() {
        // /(1) → a(5) → b(3): a before b whichever is the source.
        let a = [5, 1];
        let b = [3, 5, 1];
        assert!(dir_lock_order(5, 3, &a, &b));
        assert!(!dir_lock_order(3, 5, &b, &a));
        // The root before anything.
        assert!(dir_lock_order(1, 3, &[1], &b));
        // Unrelated: /x(9) and /y(4): the lower number first, either way round.
        assert!(!dir_lock_order(9, 4, &[9, 1], &[4, 1]));
        assert!(dir_lock_order(4, 9, &[4, 1], &[9, 1]));
    }

    #[test]
    fn two_renames_in_opposite_directions_agree_on_the_order() {
        for (x, y) in [(2u64, 7u64), (7, 2), (10, 11)] {
            let (ax, ay) = ([x, 1], [y, 1]);
            assert_ne!(
                dir_lock_order(x, y, &ax, &ay),
                dir_lock_order(y, x, &ay, &ax)
            );
        }
    }
}
