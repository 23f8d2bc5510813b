//! Names: creating, linking, removing and renaming them.

use std::collections::BTreeMap;

use crate::path::Parent;
use crate::{Body, Fd, Id, Kind, Model, NAME_MAX, PATH_MAX, R, ROOT};

/// `renameat2` flag: fail with `EEXIST` rather than replace the target.
pub const RENAME_NOREPLACE: u32 = 1;
/// `renameat2` flag: swap source and target, both of which must exist.
pub const RENAME_EXCHANGE: u32 = 2;

impl Model {
    pub(crate) fn touch_dir(&mut self, dir: Id) {
        self.node_mut(dir).mtime = None;
    }

    /// Gives `body` a new inode named `path`; `perm` has had the umask applied.
    fn create(&mut self, path: &str, body: Body, perm: u32) -> R<Id> {
        let p = self.parent_of(path)?;
        if p.name.is_empty() || self.children(p.dir).contains_key(&p.name) {
            return Err(libc::EEXIST);
        }
        if p.slash && !matches!(body, Body::Dir { .. }) {
            return Err(libc::ENOENT);
        }
        let body = match body {
            Body::Dir { children, .. } => Body::Dir {
                children,
                parent: p.dir,
            },
            b => b,
        };
        let id = self.new_node(body, perm, Some(p.dir));
        self.children_mut(p.dir).insert(p.name, id);
        self.touch_dir(p.dir);
        Ok(id)
    }

    /// `mkdir`: permission bits `mode & 0o1777`, less the umask.
    pub fn mkdir(&mut self, path: &str, mode: u32) -> R<Id> {
        let perm = mode & 0o1777 & !self.cfg.umask;
        let body = Body::Dir {
            children: BTreeMap::new(),
            parent: ROOT,
        };
        self.create(path, body, perm)
    }

    /// `mknod`: the type from `mode`'s `S_IFMT` bits (0 is a regular file), `rdev` kept
    /// for devices only. A directory or an unknown type is `EINVAL`/`EPERM` as Linux.
    pub fn mknod(&mut self, path: &str, mode: u32, rdev: u64) -> R<Id> {
        let kind = match mode & libc::S_IFMT {
            0 => Kind::File,
            _ => Kind::from_mode(mode).ok_or(libc::EINVAL)?,
        };
        let body = match kind {
            Kind::File => Body::File(Default::default()),
            Kind::Dir => return Err(libc::EPERM),
            Kind::Symlink => return Err(libc::EINVAL),
            Kind::CharDev | Kind::BlockDev => Body::Special { kind, rdev },
            _ => Body::Special { kind, rdev: 0 },
        };
        self.create(path, body, mode & 0o7777 & !self.cfg.umask)
    }

    /// `symlink(target, path)`: an empty target is `ENOENT`, a target of `PATH_MAX`
    /// bytes or more `ENAMETOOLONG`.
    pub fn symlink(&mut self, target: &str, path: &str) -> R<Id> {
        if target.is_empty() {
            return Err(libc::ENOENT);
        }
        if target.len() > PATH_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        self.create(path, Body::Symlink(target.to_string()), 0o777)
    }

    /// `readlink`.
    pub fn readlink(&self, path: &str) -> R<String> {
        let id = self.resolve(path, false)?;
        match &self.node(id).body {
            Body::Symlink(t) => Ok(t.clone()),
            _ => Err(libc::EINVAL),
        }
    }

    /// `readdir`: the names in the directory `path` names, sorted.
    pub fn readdir(&self, path: &str) -> R<Vec<String>> {
        let id = self.resolve(path, true)?;
        match &self.node(id).body {
            Body::Dir { children, .. } => Ok(children.keys().cloned().collect()),
            _ => Err(libc::ENOTDIR),
        }
    }

    /// Removes the name `p` (which exists) and drops the link it held.
    fn drop_name(&mut self, p: &Parent, id: Id) {
        self.children_mut(p.dir).remove(&p.name);
        self.touch_dir(p.dir);
        self.unlink_node(id);
    }

    fn unlink_node(&mut self, id: Id) {
        if self.is_dir(id) {
            self.node_mut(id).dead = true;
        } else {
            self.node_mut(id).links -= 1;
        }
        self.gc(id);
    }

    /// `unlink`.
    pub fn unlink(&mut self, path: &str) -> R<()> {
        let p = self.parent_of(path)?;
        if p.name.is_empty() {
            return Err(libc::EISDIR);
        }
        let c = *self.children(p.dir).get(&p.name).ok_or(libc::ENOENT)?;
        if self.is_dir(c) {
            return Err(libc::EISDIR);
        }
        if p.slash {
            return Err(libc::ENOTDIR);
        }
        self.drop_name(&p, c);
        Ok(())
    }

    /// `rmdir`.
    pub fn rmdir(&mut self, path: &str) -> R<()> {
        let p = self.parent_of(path)?;
        let c = *self.children(p.dir).get(&p.name).ok_or(libc::ENOENT)?;
        if !self.is_dir(c) {
            return Err(libc::ENOTDIR);
        }
        if !self.children(c).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.drop_name(&p, c);
        Ok(())
    }

    /// Names `target` at `new`, as `link` and `linkat` do once the source is known.
    fn add_link(&mut self, target: Id, new: &str) -> R<()> {
        let p = self.parent_of(new)?;
        if p.name.is_empty() || self.children(p.dir).contains_key(&p.name) {
            return Err(libc::EEXIST);
        }
        if p.slash {
            return Err(libc::ENOENT);
        }
        if self.is_dir(target) {
            return Err(libc::EPERM);
        }
        let n = self.node(target);
        if n.links == 0 && !n.linkable {
            return Err(libc::ENOENT);
        }
        self.children_mut(p.dir).insert(p.name, target);
        self.touch_dir(p.dir);
        let n = self.node_mut(target);
        n.links += 1;
        n.linkable = false;
        Ok(())
    }

    /// `link(old, new)` (a final symbolic link in `old` is linked, not followed).
    pub fn link(&mut self, old: &str, new: &str) -> R<()> {
        let t = self.resolve(old, false)?;
        self.add_link(t, new)
    }

    /// `linkat(fd, "", AT_FDCWD, new, AT_EMPTY_PATH)`: names the file open as `fd`,
    /// which may be an `O_TMPFILE` file opened without `O_EXCL`; a file whose last name
    /// was removed is `ENOENT`.
    pub fn link_fd(&mut self, fd: Fd, new: &str) -> R<()> {
        let id = self.fd(fd)?.id;
        self.add_link(id, new)
    }

    pub(crate) fn is_ancestor_or_self(&self, anc: Id, mut of: Id) -> bool {
        loop {
            if of == anc {
                return true;
            }
            if of == ROOT {
                return false;
            }
            of = self.parent(of);
        }
    }

    /// `renameat2(old, new, flags)` with [`RENAME_NOREPLACE`] and [`RENAME_EXCHANGE`]
    /// (0 is `rename`), checked in the order Linux checks.
    pub fn rename(&mut self, old: &str, new: &str, flags: u32) -> R<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(libc::EINVAL);
        }
        Self::check_path(old)?;
        Self::check_path(new)?;
        let from = self.walk_parent(ROOT, old, &mut 0)?;
        let to = self.walk_parent(ROOT, new, &mut 0)?;
        if from.name.is_empty() {
            return Err(libc::EBUSY);
        }
        if to.name.is_empty() {
            return Err(if flags & RENAME_NOREPLACE != 0 {
                libc::EEXIST
            } else {
                libc::EBUSY
            });
        }
        if from.name.len() > NAME_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        let src = *self
            .children(from.dir)
            .get(&from.name)
            .ok_or(libc::ENOENT)?;
        if to.name.len() > NAME_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        let victim = self.children(to.dir).get(&to.name).copied();
        self.rename_checks(&from, &to, src, victim, flags)?;
        if victim == Some(src) {
            return Ok(());
        }
        if flags & RENAME_EXCHANGE != 0 {
            self.exchange(&from, &to, src, victim.expect("checked"));
            return Ok(());
        }
        if let Some(v) = victim {
            match (self.is_dir(src), self.is_dir(v)) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !self.children(v).is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
        }
        self.move_entry(&from, &to, src);
        if let Some(v) = victim {
            self.unlink_node(v);
        }
        Ok(())
    }

    /// The checks of `renameat2` between finding the source and touching anything:
    /// the flags against the target, trailing slashes, loops.
    fn rename_checks(
        &self,
        from: &Parent,
        to: &Parent,
        src: Id,
        victim: Option<Id>,
        flags: u32,
    ) -> R<()> {
        if flags & RENAME_NOREPLACE != 0 && victim.is_some() {
            return Err(libc::EEXIST);
        }
        let exchange = flags & RENAME_EXCHANGE != 0;
        if exchange {
            let v = victim.ok_or(libc::ENOENT)?;
            if !self.is_dir(v) && to.slash {
                return Err(libc::ENOTDIR);
            }
        }
        if !self.is_dir(src) && (from.slash || (!exchange && to.slash)) {
            return Err(libc::ENOTDIR);
        }
        if self.is_dir(src) && self.is_ancestor_or_self(src, to.dir) {
            return Err(libc::EINVAL);
        }
        if let Some(v) = victim {
            if self.is_dir(v) && self.is_ancestor_or_self(v, from.dir) {
                return Err(if exchange {
                    libc::EINVAL
                } else {
                    libc::ENOTEMPTY
                });
            }
        }
        Ok(())
    }

    /// Moves entry `from` (naming `src`) to `to`, which is free or about to be.
    fn move_entry(&mut self, from: &Parent, to: &Parent, src: Id) {
        self.children_mut(from.dir).remove(&from.name);
        self.children_mut(to.dir).insert(to.name.clone(), src);
        self.touch_dir(from.dir);
        self.touch_dir(to.dir);
        if let Body::Dir { parent, .. } = &mut self.node_mut(src).body {
            *parent = to.dir;
        }
    }

    /// `RENAME_EXCHANGE`: the two names swap inodes.
    fn exchange(&mut self, from: &Parent, to: &Parent, a: Id, b: Id) {
        self.children_mut(from.dir).insert(from.name.clone(), b);
        self.children_mut(to.dir).insert(to.name.clone(), a);
        self.touch_dir(from.dir);
        self.touch_dir(to.dir);
        for (id, dir) in [(a, to.dir), (b, from.dir)] {
            if let Body::Dir { parent, .. } = &mut self.node_mut(id).body {
                *parent = dir;
            }
        }
    }
}
