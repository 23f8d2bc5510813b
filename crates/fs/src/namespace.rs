//! The namespace: path resolution, create, mkdir, mknod, unlink, rmdir, link, symlink,
//! readlink, readdir (rename is in `rename`).
//!
//! Every walk checks search permission on each directory it passes through for the
//! caller ([`Who`]); the trusted context (`None`) passes every check.
//!
//! Lock order: directories before the inodes in them; two directories (a rename across
//! directories) as `rename::dir_lock_order` says, under the file system's rename lock.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::RwLockWriteGuard;

use crate::cred::{self, Who, MAY_EXEC, MAY_WRITE};
use crate::error::{Error, Result};
use crate::inode::{FileKind, Inode, InodeRecord, InodeState, VALID, VALID_OFF};
use crate::layout::ROOT_INO;
use crate::log::Entry;
use crate::{now_ns, DirEntry, FileSystem, MAX_LINKS, MAX_NAME, MAX_PATH, MAX_SYMLINK_HOPS};

/// A path split into its parent directory and final name.
pub(crate) struct Parent {
    pub dir: Arc<Inode>,
    pub name: String,
    /// The path ended with '/', so the final component must be a directory.
    pub trailing_slash: bool,
    /// The path ended with `.` or `..`: it names a directory but no entry of one, so
    /// it cannot be created, removed or renamed.
    pub dot: bool,
}

/// What a new inode is: its kind, requested mode, device number and contents.
pub(crate) struct NewInode<'a> {
    pub kind: FileKind,
    pub mode: u32,
    pub rdev: u64,
    /// Symbolic link target; empty otherwise.
    pub data: &'a [u8],
}

/// A path string as the kernel takes it: at most [`MAX_PATH`] bytes with its NUL.
pub(crate) fn check_path(path: &str) -> Result<()> {
    if path.len() >= MAX_PATH {
        return Err(Error::PathTooLong);
    }
    if path.is_empty() {
        return Err(Error::NotFound);
    }
    Ok(())
}

pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.len() > MAX_NAME {
        return Err(Error::NameTooLong);
    }
    Ok(())
}

impl FileSystem {
    /// Resolves `path` from the root in the trusted context (see [`Self::resolve_as`]).
    pub(crate) fn resolve(&self, path: &str, follow: bool) -> Result<Arc<Inode>> {
        self.resolve_as(None, None, path, follow)
    }

    /// Resolves `path` to an inode, following symbolic links (the last one only if
    /// `follow`, or if the path ends in '/'). A relative path starts at `base` (the
    /// root if `None`).
    pub(crate) fn resolve_as(
        &self,
        who: Who<'_>,
        base: Option<&Arc<Inode>>,
        path: &str,
        follow: bool,
    ) -> Result<Arc<Inode>> {
        check_path(path)?;
        let base = self.start_of(base, path)?;
        self.resolve_from(who, base, path, follow, 0)
    }

    /// Resolves every component but the last; symbolic links inside the path are
    /// followed. An empty final name means the path named the root (or `base`).
    pub(crate) fn resolve_parent_as(
        &self,
        who: Who<'_>,
        base: Option<&Arc<Inode>>,
        path: &str,
    ) -> Result<Parent> {
        check_path(path)?;
        let base = self.start_of(base, path)?;
        self.walk(who, base, path, 0)
    }

    /// Where a walk of `path` starts: the root for an absolute path or no base.
    fn start_of(&self, base: Option<&Arc<Inode>>, path: &str) -> Result<Arc<Inode>> {
        match base {
            Some(b) if !path.starts_with('/') => Ok(b.clone()),
            _ => self.inode(ROOT_INO),
        }
    }

    pub(crate) fn follow_base(&self, dir: &Arc<Inode>, target: &str) -> Result<Arc<Inode>> {
        if target.starts_with('/') {
            self.inode(ROOT_INO)
        } else {
            Ok(dir.clone())
        }
    }

    pub(crate) fn resolve_from(
        &self,
        who: Who<'_>,
        base: Arc<Inode>,
        path: &str,
        follow: bool,
        hops: usize,
    ) -> Result<Arc<Inode>> {
        let p = self.walk(who, base, path, hops)?;
        if p.name.is_empty() {
            return Ok(p.dir);
        }
        let child = self.lookup_in(who, &p.dir, &p.name)?;
        let kind = child.state.read().kind;
        if kind == FileKind::Symlink && (follow || p.trailing_slash) {
            if hops >= MAX_SYMLINK_HOPS {
                return Err(Error::Loop);
            }
            let target = self.read_link_inode(&child)?;
            let base = self.follow_base(&p.dir, &target)?;
            let t = self.resolve_from(who, base, &target, true, hops + 1)?;
            if p.trailing_slash && t.state.read().kind != FileKind::Dir {
                return Err(Error::NotDir);
            }
            return Ok(t);
        }
        if p.trailing_slash && kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        Ok(child)
    }

    pub(crate) fn walk(
        &self,
        who: Who<'_>,
        mut dir: Arc<Inode>,
        path: &str,
        mut hops: usize,
    ) -> Result<Parent> {
        let trailing_slash = path.len() > 1 && path.ends_with('/');
        let mut comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let dot = matches!(comps.last(), Some(&".") | Some(&".."));
        if comps.last() == Some(&".") {
            comps.pop();
            // "d/." names d itself: resolve d as a directory, then stand on it.
            let p = self.walk(who, dir, &comps.join("/"), hops)?;
            let d = if p.name.is_empty() {
                p.dir
            } else {
                self.resolve_from(who, p.dir, &p.name, true, hops)?
            };
            if d.state.read().kind != FileKind::Dir {
                return Err(Error::NotDir);
            }
            return Ok(Parent {
                dir: d,
                name: String::new(),
                trailing_slash,
                dot,
            });
        }
        comps.retain(|c| *c != ".");
        let Some(last) = comps.pop() else {
            return Ok(Parent {
                dir,
                name: String::new(),
                trailing_slash,
                dot,
            });
        };
        for c in comps {
            check_name(c)?;
            let next = self.step(who, &dir, c)?;
            let kind = next.state.read().kind;
            dir = match kind {
                FileKind::Dir => next,
                FileKind::Symlink => {
                    if hops >= MAX_SYMLINK_HOPS {
                        return Err(Error::Loop);
                    }
                    hops += 1;
                    let target = self.read_link_inode(&next)?;
                    let base = self.follow_base(&dir, &target)?;
                    let t = self.resolve_from(who, base, &target, true, hops)?;
                    if t.state.read().kind != FileKind::Dir {
                        return Err(Error::NotDir);
                    }
                    t
                }
                _ => return Err(Error::NotDir),
            };
        }
        check_name(last)?;
        // Linux's walk asks for search permission on each directory before it looks
        // at the next name, the last one too: a parent that may not be searched is
        // EACCES before anything about the name or the other path of a rename.
        {
            let st = dir.state.read();
            if st.kind == FileKind::Dir {
                cred::may(who, &st, MAY_EXEC)?;
            }
        }
        if last == ".." {
            return Ok(Parent {
                dir: self.step(who, &dir, "..")?,
                name: String::new(),
                trailing_slash,
                dot,
            });
        }
        Ok(Parent {
            dir,
            name: last.to_string(),
            trailing_slash,
            dot,
        })
    }

    /// One component of a walk: `..` or a name, with search permission on `dir`.
    fn step(&self, who: Who<'_>, dir: &Arc<Inode>, c: &str) -> Result<Arc<Inode>> {
        if c == ".." {
            {
                let st = dir.state.read();
                if st.kind != FileKind::Dir {
                    return Err(Error::NotDir);
                }
                cred::may(who, &st, MAY_EXEC)?;
            }
            self.parent_of(dir)
        } else {
            self.lookup_in(who, dir, c)
        }
    }

    pub(crate) fn parent_of(&self, dir: &Arc<Inode>) -> Result<Arc<Inode>> {
        let parent = dir.state.read().parent;
        self.inode(parent)
    }

    /// Looks `name` up in directory `dir`, which `who` must be allowed to search.
    pub(crate) fn lookup_in(
        &self,
        who: Who<'_>,
        dir: &Arc<Inode>,
        name: &str,
    ) -> Result<Arc<Inode>> {
        let st = dir.state.read();
        if st.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        cred::may(who, &st, MAY_EXEC)?;
        let ino = *st.children.get(name).ok_or(Error::NotFound)?;
        // Take the inode while the entry still names it: once the directory lock is
        // gone the name may be unlinked, the inode freed and its number reused by a
        // file still being written. (Lock order: directory, then the inode table.)
        let inode = self.child_inode(dir.ino, ino);
        drop(st);
        inode
    }

    /// Checks that `who` may create `name` in the locked directory `dst`: a live
    /// directory, the name free, write and search permission.
    fn may_create(&self, who: Who<'_>, dst: &InodeState, name: &str) -> Result<()> {
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        cred::may(who, dst, MAY_EXEC)?;
        if dst.freed || dst.nlink == 0 {
            return Err(Error::NotFound);
        }
        if dst.children.contains_key(name) {
            return Err(Error::Exists);
        }
        self.check_writable()?;
        cred::may(who, dst, MAY_WRITE)
    }

    /// Creates an inode as `new` describes, named `name` in the locked directory
    /// `dst`, owned as [`cred::new_owner`] says. Returns the new inode.
    pub(crate) fn create_in(
        &self,
        who: Who<'_>,
        dir: &Arc<Inode>,
        dst: &mut InodeState,
        name: &str,
        new: &NewInode<'_>,
    ) -> Result<Arc<Inode>> {
        self.may_create(who, dst, name)?;
        if new.kind == FileKind::Dir && dst.nlink >= MAX_LINKS {
            return Err(Error::TooManyLinks);
        }
        let ino = self.inos.alloc(|i| {
            self.pm
                .load_u64(self.geo.inode_off(i) + crate::inode::VALID_OFF)
                == 0
        })?;
        let now = now_ns();
        let (uid, gid, mode) = cred::new_owner(who, dst, new.kind, new.mode);
        let rec = InodeRecord {
            ino,
            kind: new.kind,
            mode,
            uid,
            gid,
            ctime: now,
            rdev: if matches!(new.kind, FileKind::CharDev | FileKind::BlockDev) {
                new.rdev
            } else {
                0
            },
        };
        let change = self.inode_count.start();
        let result = self.commit_create(dir, dst, name, &rec, new.data);
        match result {
            Ok(st) => {
                change.made();
                let inode = Arc::new(Inode {
                    ino,
                    state: parking_lot::RwLock::new(st),
                    opens: Default::default(),
                    io_lock: rt::sync::Mutex::new(()),
                });
                self.inodes.write().insert(ino, inode.clone());
                self.made(ino);
                self.maybe_clean(dir, dst);
                Ok(inode)
            }
            Err(e) => {
                self.inos.free(ino);
                Err(e)
            }
        }
    }

    /// Writes the record of a new inode and commits it with its entry in `dst` (and
    /// its contents, `data`) through a journal. Returns its state.
    fn commit_create(
        &self,
        dir: &Arc<Inode>,
        dst: &mut InodeState,
        name: &str,
        rec: &InodeRecord,
        data: &[u8],
    ) -> Result<InodeState> {
        let (ino, kind, now) = (rec.ino, rec.kind, rec.ctime);
        let ioff = self.geo.inode_off(ino);
        rec.write(&*self.pm, ioff);
        let mut st = InodeState::new(rec);
        if kind == FileKind::Dir {
            st.parent = dir.ino;
        }
        let child_staged = if data.is_empty() {
            None
        } else {
            // Symlink targets are small: copied by this thread, never left pending
            // while the directory is locked.
            Some(self.stage_cpu_data(ino, &mut st, data, now)?)
        };
        let mut entries = vec![Entry::DentryAdd {
            ino,
            ctime: now,
            name: name.to_string(),
        }];
        if kind == FileKind::Dir {
            entries.push(Entry::Link {
                nlink: dst.nlink + 1,
                ctime: now,
            });
        }
        let parent_staged = match self.stage(dir.ino, dst, entries) {
            Ok(s) => s,
            Err(e) => {
                if let Some(c) = &child_staged {
                    self.release_staged_data(c);
                }
                self.free_log_pages(&st);
                return Err(e);
            }
        };
        let mut staged = vec![&parent_staged];
        if let Some(c) = &child_staged {
            staged.push(c);
        }
        self.commit_journaled(&staged, &[(ioff + VALID_OFF, VALID)]);
        let displaced = Self::apply_staged(dst, parent_staged);
        debug_assert!(displaced.is_empty());
        if let Some(c) = child_staged {
            Self::apply_staged(&mut st, c);
        }
        Ok(st)
    }

    /// Creates an unnamed regular file in directory `dir` (`O_TMPFILE`): an inode
    /// with no links, committed with its link count 0 so that recovery frees it
    /// unless `linkat` names it first.
    pub(crate) fn create_tmpfile(
        &self,
        who: Who<'_>,
        dir: &Arc<Inode>,
        mode: u32,
        linkable: bool,
    ) -> Result<Arc<Inode>> {
        let dst = dir.state.read();
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        if dst.freed || dst.nlink == 0 {
            return Err(Error::NotFound);
        }
        self.check_writable()?;
        cred::may(who, &dst, MAY_WRITE | MAY_EXEC)?;
        let ino = self.inos.alloc(|i| {
            self.pm
                .load_u64(self.geo.inode_off(i) + crate::inode::VALID_OFF)
                == 0
        })?;
        let now = now_ns();
        let (uid, gid, mode) = cred::new_owner(who, &dst, FileKind::File, mode);
        drop(dst);
        let rec = InodeRecord {
            ino,
            kind: FileKind::File,
            mode,
            uid,
            gid,
            ctime: now,
            rdev: 0,
        };
        let ioff = self.geo.inode_off(ino);
        rec.write(&*self.pm, ioff);
        let mut st = InodeState::new(&rec);
        let staged = match self.stage(
            ino,
            &mut st,
            vec![Entry::Link {
                nlink: 0,
                ctime: now,
            }],
        ) {
            Ok(s) => s,
            Err(e) => {
                self.free_log_pages(&st);
                self.inos.free(ino);
                return Err(e);
            }
        };
        let change = self.inode_count.start();
        self.commit_journaled(&[&staged], &[(ioff + VALID_OFF, VALID)]);
        change.made();
        Self::apply_staged(&mut st, staged);
        st.linkable = linkable;
        let inode = Arc::new(Inode {
            ino,
            state: parking_lot::RwLock::new(st),
            opens: Default::default(),
            io_lock: rt::sync::Mutex::new(()),
        });
        self.inodes.write().insert(ino, inode.clone());
        self.made(ino);
        Ok(inode)
    }

    /// Creates `name` in directory `dir` as `new` says (mkdir, mknod, symlink).
    pub(crate) fn make_node(
        &self,
        who: Who<'_>,
        dir: &Arc<Inode>,
        name: &str,
        new: &NewInode<'_>,
    ) -> Result<Arc<Inode>> {
        check_name(name)?;
        let mut dst = self.write_state(dir);
        self.create_in(who, dir, &mut dst, name, new)
    }

    pub(crate) fn mkdir_as(
        &self,
        who: Who<'_>,
        base: Option<&Arc<Inode>>,
        path: &str,
        mode: u32,
    ) -> Result<()> {
        let p = self.resolve_parent_as(who, base, path)?;
        if p.name.is_empty() {
            return Err(Error::Exists);
        }
        let new = NewInode {
            kind: FileKind::Dir,
            mode,
            rdev: 0,
            data: &[],
        };
        self.make_node(who, &p.dir, &p.name, &new)?;
        Ok(())
    }

    pub(crate) fn symlink_as(
        &self,
        who: Who<'_>,
        target: &str,
        base: Option<&Arc<Inode>>,
        path: &str,
    ) -> Result<()> {
        if target.is_empty() {
            return Err(Error::NotFound);
        }
        if target.len() >= MAX_PATH {
            return Err(Error::PathTooLong);
        }
        let p = self.resolve_parent_as(who, base, path)?;
        if p.name.is_empty() {
            return Err(Error::Exists);
        }
        let mut dst = self.write_state(&p.dir);
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        // A trailing slash asks for a directory: EEXIST if the name is taken (checked
        // by `create_in`), else ENOENT, as Linux does.
        if p.trailing_slash && !dst.children.contains_key(&p.name) {
            return Err(Error::NotFound);
        }
        let new = NewInode {
            kind: FileKind::Symlink,
            mode: 0o777,
            rdev: 0,
            data: target.as_bytes(),
        };
        self.create_in(who, &p.dir, &mut dst, &p.name, &new)?;
        Ok(())
    }

    pub(crate) fn mknod_as(
        &self,
        who: Who<'_>,
        base: Option<&Arc<Inode>>,
        path: &str,
        mode: u32,
        rdev: u64,
    ) -> Result<()> {
        let kind = mknod_kind(who, mode)?;
        let p = self.resolve_parent_as(who, base, path)?;
        if p.name.is_empty() {
            return Err(Error::Exists);
        }
        let mut dst = self.write_state(&p.dir);
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        if p.trailing_slash && !dst.children.contains_key(&p.name) {
            return Err(Error::NotFound);
        }
        let new = NewInode {
            kind,
            mode,
            rdev,
            data: &[],
        };
        self.create_in(who, &p.dir, &mut dst, &p.name, &new)?;
        Ok(())
    }

    /// The target of `name` in `dir` if it is a symbolic link; `None` if it is
    /// something else or no longer there.
    pub(crate) fn symlink_target(
        &self,
        who: Who<'_>,
        dir: &Arc<Inode>,
        name: &str,
    ) -> Result<Option<String>> {
        let Ok(child) = self.lookup_in(who, dir, name) else {
            return Ok(None);
        };
        if child.state.read().kind != FileKind::Symlink {
            return Ok(None);
        }
        self.read_link_inode(&child).map(Some)
    }

    pub(crate) fn readlink_as(
        &self,
        who: Who<'_>,
        base: Option<&Arc<Inode>>,
        path: &str,
    ) -> Result<String> {
        let inode = self.resolve_as(who, base, path, false)?;
        self.readlink_inode(&inode)
    }

    /// The target of a symbolic link inode; EINVAL for any other kind.
    pub(crate) fn readlink_inode(&self, inode: &Arc<Inode>) -> Result<String> {
        if inode.state.read().kind != FileKind::Symlink {
            return Err(Error::Invalid("not a symbolic link".into()));
        }
        self.read_link_inode(inode)
    }

    pub(crate) fn read_link_inode(&self, inode: &Arc<Inode>) -> Result<String> {
        let size = inode.state.read().size as usize;
        let mut buf = vec![0u8; size];
        let n = self.read_inode(inode, 0, &mut buf, mover::Client::DEFAULT)?;
        buf.truncate(n);
        String::from_utf8(buf).map_err(|_| Error::Corrupt("symlink target is not UTF-8".into()))
    }

    /// The entries of directory `dir` (without `.` and `..`), in no order; `who`
    /// needs read permission.
    pub(crate) fn list_dir(&self, who: Who<'_>, dir: &Arc<Inode>) -> Result<Vec<DirEntry>> {
        // The inodes are taken while the entries name them (see `lookup`).
        let children: Vec<(String, u64, Option<Arc<Inode>>)> = {
            let st = dir.state.read();
            if st.kind != FileKind::Dir {
                return Err(Error::NotDir);
            }
            cred::may(who, &st, cred::MAY_READ)?;
            st.children
                .iter()
                .map(|(n, &i)| (n.clone(), i, self.child_inode(dir.ino, i).ok()))
                .collect()
        };
        Ok(children
            .into_iter()
            .map(|(name, ino, inode)| DirEntry {
                name,
                ino,
                kind: inode.map(|inode| inode.state.read().kind),
            })
            .collect())
    }

    pub(crate) fn remove_as(
        &self,
        who: Who<'_>,
        base: Option<&Arc<Inode>>,
        path: &str,
        want_dir: bool,
    ) -> Result<()> {
        let p = self.resolve_parent_as(who, base, path)?;
        if p.dot {
            // As Linux: unlink of `.` or `..` is EISDIR; rmdir of `.` EINVAL, of `..`
            // ENOTEMPTY (its parent is never empty: it holds the directory).
            let dotdot = path.trim_end_matches('/').rsplit('/').next() == Some("..");
            return Err(match (want_dir, dotdot) {
                (false, _) => Error::IsDir,
                (true, false) => Error::Invalid("cannot remove '.'".into()),
                (true, true) => Error::NotEmpty,
            });
        }
        if p.name.is_empty() {
            return Err(if want_dir {
                Error::NotPermitted("cannot remove the root directory")
            } else {
                Error::IsDir
            });
        }
        self.remove_in(who, &p.dir, &p.name, want_dir, p.trailing_slash)
    }

    /// Removes `name` from directory `dir`: a directory only if `want_dir` (and
    /// empty), anything else only if not.
    pub(crate) fn remove_in(
        &self,
        who: Who<'_>,
        dir: &Arc<Inode>,
        name: &str,
        want_dir: bool,
        trailing_slash: bool,
    ) -> Result<()> {
        check_name(name)?;
        let mut dst = self.write_state(dir);
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        cred::may(who, &dst, MAY_EXEC)?;
        let ino = *dst.children.get(name).ok_or(Error::NotFound)?;
        let child = self.child_inode(dir.ino, ino)?;
        let mut cst = self.write_state(&child);
        self.check_writable()?;
        cred::may_delete(who, &dst, &cst)?;
        match (want_dir, cst.kind == FileKind::Dir) {
            (false, true) => return Err(Error::IsDir),
            (true, false) => return Err(Error::NotDir),
            (false, false) if trailing_slash => return Err(Error::NotDir),
            (true, true) if !cst.children.is_empty() => return Err(Error::NotEmpty),
            _ => {}
        }
        let now = now_ns();
        let mut parent_entries = vec![Entry::DentryDel {
            ino,
            ctime: now,
            name: name.to_string(),
        }];
        let new_nlink = if want_dir {
            parent_entries.push(Entry::Link {
                nlink: dst.nlink - 1,
                ctime: now,
            });
            0
        } else {
            cst.nlink - 1
        };
        let ps = self.stage(dir.ino, &mut dst, parent_entries)?;
        let cs = self.stage(
            ino,
            &mut cst,
            vec![Entry::Link {
                nlink: new_nlink,
                ctime: now,
            }],
        )?;
        self.commit_journaled(&[&ps, &cs], &[]);
        Self::apply_staged(&mut dst, ps);
        Self::apply_staged(&mut cst, cs);
        self.release_if_unused(&child, &mut cst);
        drop(cst);
        self.maybe_clean(dir, &mut dst);
        Ok(())
    }

    /// Frees an inode with no links and no open descriptors. Called with it locked.
    pub(crate) fn release_if_unused(
        &self,
        inode: &Arc<Inode>,
        st: &mut RwLockWriteGuard<'_, InodeState>,
    ) {
        if st.nlink != 0 || st.freed || inode.opens.load(Ordering::SeqCst) != 0 || self.read_only {
            return;
        }
        let change = self.inode_count.start();
        self.pm
            .store_u64_persist(self.geo.inode_off(inode.ino) + VALID_OFF, 0);
        change.freed();
        st.freed = true;
        self.free_log_pages(st);
        let data = st.data_extents();
        st.pages.clear();
        if self.mover.is_done(st.last_write) {
            self.retire(data);
        } else {
            self.deferred.lock().push((st.last_write, data));
        }
        self.inodes.write().remove(&inode.ino);
        self.inos.free(inode.ino);
    }

    /// Gives the pages of a log that nothing references any more back to the pool.
    pub(crate) fn free_log_pages(&self, st: &InodeState) {
        let mut pages = Vec::new();
        for p in &st.log.pages {
            crate::inode::push_block(&mut pages, p / crate::BLOCK_SIZE);
        }
        for e in pages {
            self.blocks.free(e);
        }
    }

    /// The directory `dir` and its ancestors up to the root, innermost first. The
    /// caller holds the rename lock (parents are stable) and no directory lock.
    pub(crate) fn ancestors(&self, dir: &Arc<Inode>) -> Result<Vec<u64>> {
        let mut chain = vec![dir.ino];
        let mut at = dir.state.read().parent;
        while chain.last() != Some(&ROOT_INO) {
            if chain.len() as u64 > self.geo.inodes {
                return Err(Error::Corrupt(format!(
                    "directory {} has a parent cycle",
                    dir.ino
                )));
            }
            chain.push(at);
            at = self.inode(at)?.state.read().parent;
        }
        Ok(chain)
    }

    /// Adds a link at `new` (from `base`) to `target`.
    pub(crate) fn link_as(
        &self,
        who: Who<'_>,
        target: &Arc<Inode>,
        base: Option<&Arc<Inode>>,
        new: &str,
    ) -> Result<()> {
        let p = self.resolve_parent_as(who, base, new)?;
        if p.name.is_empty() {
            return Err(Error::Exists);
        }
        self.link_in(who, target, &p.dir, &p.name, p.trailing_slash)
    }

    /// Names `target` `name` in directory `dir`.
    pub(crate) fn link_in(
        &self,
        who: Who<'_>,
        target: &Arc<Inode>,
        dir: &Arc<Inode>,
        name: &str,
        trailing_slash: bool,
    ) -> Result<()> {
        check_name(name)?;
        // Kinds never change; knowing it now means a directory target is never
        // locked while the destination directory is (an unrelated directory).
        let target_is_dir = target.state.read().kind == FileKind::Dir;
        // Protected hard links are judged before the directory is locked: the target
        // may be that very directory. (Judged again below, with the target locked.)
        let protected = may_link(who, &target.state.read());
        let mut dst = self.write_state(dir);
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        cred::may(who, &dst, MAY_EXEC)?;
        if dst.freed || dst.nlink == 0 {
            return Err(Error::NotFound);
        }
        if dst.children.contains_key(name) {
            return Err(Error::Exists);
        }
        if trailing_slash {
            // As for symlink: a free name with a trailing slash is ENOENT.
            return Err(Error::NotFound);
        }
        // Linux's order: protected hard links (`may_linkat`), then write permission
        // on the directory (`may_create`), then a directory target.
        protected?;
        self.check_writable()?;
        cred::may(who, &dst, MAY_WRITE)?;
        if target_is_dir {
            return Err(Error::NotPermitted(
                "hard links to directories are not allowed",
            ));
        }
        let mut tst = self.write_state(target);
        if tst.freed || (tst.nlink == 0 && !tst.linkable) {
            return Err(Error::NotFound);
        }
        may_link(who, &tst)?;
        if tst.nlink >= MAX_LINKS {
            return Err(Error::TooManyLinks);
        }
        let now = now_ns();
        let ps = self.stage(
            dir.ino,
            &mut dst,
            vec![Entry::DentryAdd {
                ino: target.ino,
                ctime: now,
                name: name.to_string(),
            }],
        )?;
        let nlink = tst.nlink + 1;
        let ts = self.stage(
            target.ino,
            &mut tst,
            vec![Entry::Link { nlink, ctime: now }],
        )?;
        self.commit_journaled(&[&ps, &ts], &[]);
        Self::apply_staged(&mut dst, ps);
        Self::apply_staged(&mut tst, ts);
        tst.linkable = false;
        drop(tst);
        self.maybe_clean(dir, &mut dst);
        Ok(())
    }
}

/// The kind `mknod` creates for `mode`: regular files, FIFOs and sockets for anyone,
/// devices for root only, never directories or symbolic links (EPERM, as Linux).
pub(crate) fn mknod_kind(who: Who<'_>, mode: u32) -> Result<FileKind> {
    let kind = FileKind::from_mode(mode).ok_or(Error::Invalid("unknown file type".into()))?;
    match kind {
        FileKind::Dir | FileKind::Symlink => Err(Error::NotPermitted(
            "mknod makes no directories or symbolic links",
        )),
        FileKind::CharDev | FileKind::BlockDev if !cred::privileged(who) => {
            Err(Error::NotPermitted("only root makes devices"))
        }
        k => Ok(k),
    }
}

/// `fs.protected_hardlinks` as Linux sets it by default (`may_linkat`): a caller who
/// does not own the target links it only if it is a regular file, not setuid, not
/// setgid-executable, that it may read and write.
fn may_link(who: Who<'_>, st: &InodeState) -> Result<()> {
    if cred::owner_or_root(who, st) {
        return Ok(());
    }
    let regular = st.kind == FileKind::File;
    let suid = st.mode & libc::S_ISUID != 0;
    let sgid_x = st.mode & (libc::S_ISGID | 0o010) == (libc::S_ISGID | 0o010);
    if regular && !suid && !sgid_x && cred::may(who, st, cred::MAY_READ | MAY_WRITE).is_ok() {
        return Ok(());
    }
    Err(Error::NotPermitted("protected hard links: not the owner"))
}
