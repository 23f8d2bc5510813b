//! The namespace: path resolution, create, mkdir, unlink, rmdir, rename, link,
//! symlink, readlink, readdir.
//!
//! Lock order: directories before the inodes in them; two directories (a rename across
//! directories) in inode-number order under the file system's rename lock, which also
//! keeps parent pointers stable for the "moving a directory into itself" check.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::RwLockWriteGuard;

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

fn check_path(path: &str) -> Result<()> {
    if path.len() > MAX_PATH {
        return Err(Error::PathTooLong);
    }
    if path.is_empty() {
        return Err(Error::NotFound);
    }
    Ok(())
}

fn check_name(name: &str) -> Result<()> {
    if name.len() > MAX_NAME {
        return Err(Error::NameTooLong);
    }
    Ok(())
}

impl FileSystem {
    /// Resolves `path` to an inode, following symbolic links (the last one only if
    /// `follow`, or if the path ends in '/').
    pub(crate) fn resolve(&self, path: &str, follow: bool) -> Result<Arc<Inode>> {
        check_path(path)?;
        self.resolve_from(self.inode(ROOT_INO)?, path, follow, 0)
    }

    /// Resolves every component but the last; symbolic links inside the path are
    /// followed. An empty final name means the path named the root.
    pub(crate) fn resolve_parent(&self, path: &str) -> Result<Parent> {
        check_path(path)?;
        self.walk(self.inode(ROOT_INO)?, path, 0)
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
        base: Arc<Inode>,
        path: &str,
        follow: bool,
        hops: usize,
    ) -> Result<Arc<Inode>> {
        let p = self.walk(base, path, hops)?;
        if p.name.is_empty() {
            return Ok(p.dir);
        }
        let child = self.lookup(&p.dir, &p.name)?;
        let kind = child.state.read().kind;
        if kind == FileKind::Symlink && (follow || p.trailing_slash) {
            if hops >= MAX_SYMLINK_HOPS {
                return Err(Error::Loop);
            }
            let target = self.read_link_inode(&child)?;
            let base = self.follow_base(&p.dir, &target)?;
            let t = self.resolve_from(base, &target, true, hops + 1)?;
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

    pub(crate) fn walk(&self, mut dir: Arc<Inode>, path: &str, mut hops: usize) -> Result<Parent> {
        let trailing_slash = path.len() > 1 && path.ends_with('/');
        let mut comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let dot = matches!(comps.last(), Some(&".") | Some(&".."));
        if comps.last() == Some(&".") {
            comps.pop();
            // "d/." names d itself: resolve d as a directory, then stand on it.
            let p = self.walk(dir, &comps.join("/"), hops)?;
            let d = if p.name.is_empty() {
                p.dir
            } else {
                self.resolve_from(p.dir, &p.name, true, hops)?
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
            let next = if c == ".." {
                self.parent_of(&dir)?
            } else {
                self.lookup(&dir, c)?
            };
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
                    let t = self.resolve_from(base, &target, true, hops)?;
                    if t.state.read().kind != FileKind::Dir {
                        return Err(Error::NotDir);
                    }
                    t
                }
                FileKind::File => return Err(Error::NotDir),
            };
        }
        check_name(last)?;
        if last == ".." {
            return Ok(Parent {
                dir: self.parent_of(&dir)?,
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

    fn parent_of(&self, dir: &Arc<Inode>) -> Result<Arc<Inode>> {
        let parent = dir.state.read().parent;
        self.inode(parent)
    }

    /// Looks `name` up in directory `dir`.
    pub(crate) fn lookup(&self, dir: &Arc<Inode>, name: &str) -> Result<Arc<Inode>> {
        let st = dir.state.read();
        if st.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        let ino = *st.children.get(name).ok_or(Error::NotFound)?;
        // Take the inode while the entry still names it: once the directory lock is
        // gone the name may be unlinked, the inode freed and its number reused by a
        // file still being written. (Lock order: directory, then the inode table.)
        let inode = self.child_inode(dir.ino, ino);
        drop(st);
        inode
    }

    /// Creates an inode of `kind` named `name` in the locked directory `dst`, with
    /// `data` as its contents (symlink targets). Returns the new inode.
    pub(crate) fn create_in(
        &self,
        dir: &Arc<Inode>,
        dst: &mut InodeState,
        name: &str,
        kind: FileKind,
        mode: u32,
        data: &[u8],
    ) -> Result<Arc<Inode>> {
        if dst.freed || dst.nlink == 0 {
            return Err(Error::NotFound);
        }
        if dst.children.contains_key(name) {
            return Err(Error::Exists);
        }
        self.check_writable()?;
        if kind == FileKind::Dir && dst.nlink >= MAX_LINKS {
            return Err(Error::TooManyLinks);
        }
        let ino = self.inos.alloc(|i| {
            self.pm
                .load_u64(self.geo.inode_off(i) + crate::inode::VALID_OFF)
                == 0
        })?;
        let now = now_ns();
        let rec = InodeRecord {
            ino,
            kind,
            mode: mode & 0o7777,
            // SAFETY: geteuid/getegid cannot fail.
            uid: unsafe { libc::geteuid() },
            // SAFETY: as above.
            gid: unsafe { libc::getegid() },
            ctime: now,
        };
        let result = (|| {
            let ioff = self.geo.inode_off(ino);
            rec.write(&*self.pm, ioff);
            let mut st = InodeState::new(&rec);
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
        })();
        match result {
            Ok(st) => {
                let inode = Arc::new(Inode {
                    ino,
                    state: parking_lot::RwLock::new(st),
                    opens: Default::default(),
                    io_lock: rt::sync::Mutex::new(()),
                });
                self.inodes.write().insert(ino, inode.clone());
                self.maybe_clean(dir, dst);
                Ok(inode)
            }
            Err(e) => {
                self.inos.free(ino);
                Err(e)
            }
        }
    }

    /// Creates a directory.
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        let p = self.resolve_parent(path)?;
        if p.name.is_empty() {
            return Err(Error::Exists);
        }
        let mut dst = p.dir.state.write();
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        self.create_in(&p.dir, &mut dst, &p.name, FileKind::Dir, mode, &[])?;
        Ok(())
    }

    /// Creates a symbolic link at `path` pointing to `target`.
    pub fn symlink(&self, target: &str, path: &str) -> Result<()> {
        if target.is_empty() {
            return Err(Error::NotFound);
        }
        if target.len() >= MAX_PATH {
            return Err(Error::PathTooLong);
        }
        let p = self.resolve_parent(path)?;
        if p.name.is_empty() {
            return Err(Error::Exists);
        }
        let mut dst = p.dir.state.write();
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        // A trailing slash asks for a directory: EEXIST if the name is taken (checked
        // by `create_in`), else ENOENT, as Linux does.
        if p.trailing_slash && !dst.children.contains_key(&p.name) {
            return Err(Error::NotFound);
        }
        self.create_in(
            &p.dir,
            &mut dst,
            &p.name,
            FileKind::Symlink,
            0o777,
            target.as_bytes(),
        )?;
        Ok(())
    }

    /// The target of `name` in `dir` if it is a symbolic link; `None` if it is
    /// something else or no longer there.
    pub(crate) fn symlink_target(&self, dir: &Arc<Inode>, name: &str) -> Result<Option<String>> {
        let Ok(child) = self.lookup(dir, name) else {
            return Ok(None);
        };
        if child.state.read().kind != FileKind::Symlink {
            return Ok(None);
        }
        self.read_link_inode(&child).map(Some)
    }

    /// The target of the symbolic link at `path`.
    pub fn readlink(&self, path: &str) -> Result<String> {
        let inode = self.resolve(path, false)?;
        if inode.state.read().kind != FileKind::Symlink {
            return Err(Error::Invalid("not a symbolic link".into()));
        }
        self.read_link_inode(&inode)
    }

    fn read_link_inode(&self, inode: &Arc<Inode>) -> Result<String> {
        let size = inode.state.read().size as usize;
        let mut buf = vec![0u8; size];
        let n = self.read_inode(inode, 0, &mut buf, mover::Client::DEFAULT)?;
        buf.truncate(n);
        String::from_utf8(buf).map_err(|_| Error::Corrupt("symlink target is not UTF-8".into()))
    }

    /// Lists a directory (without `.` and `..`), sorted by name. An entry whose inode
    /// cannot be read is listed with no kind.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let dir = self.resolve(path, true)?;
        // The inodes are taken while the entries name them (see `lookup`).
        let children: Vec<(String, u64, Option<Arc<Inode>>)> = {
            let st = dir.state.read();
            if st.kind != FileKind::Dir {
                return Err(Error::NotDir);
            }
            st.children
                .iter()
                .map(|(n, &i)| (n.clone(), i, self.child_inode(dir.ino, i).ok()))
                .collect()
        };
        let mut out: Vec<DirEntry> = children
            .into_iter()
            .map(|(name, ino, inode)| DirEntry {
                name,
                ino,
                kind: inode.map(|inode| inode.state.read().kind),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes a non-directory name; the inode goes when its last link and last open
    /// descriptor are gone.
    pub fn unlink(&self, path: &str) -> Result<()> {
        self.remove(path, false)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.remove(path, true)
    }

    fn remove(&self, path: &str, want_dir: bool) -> Result<()> {
        let p = self.resolve_parent(path)?;
        if p.dot {
            return Err(Error::Invalid("cannot remove '.' or '..'".into()));
        }
        if p.name.is_empty() {
            return Err(if want_dir {
                Error::NotPermitted("cannot remove the root directory")
            } else {
                Error::IsDir
            });
        }
        let mut dst = p.dir.state.write();
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        let ino = *dst.children.get(&p.name).ok_or(Error::NotFound)?;
        let child = self.child_inode(p.dir.ino, ino)?;
        let mut cst = child.state.write();
        match (want_dir, cst.kind == FileKind::Dir) {
            (false, true) => return Err(Error::IsDir),
            (true, false) => return Err(Error::NotDir),
            (false, false) if p.trailing_slash => return Err(Error::NotDir),
            (true, true) if !cst.children.is_empty() => return Err(Error::NotEmpty),
            _ => {}
        }
        let now = now_ns();
        let mut parent_entries = vec![Entry::DentryDel {
            ino,
            ctime: now,
            name: p.name.clone(),
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
        let ps = self.stage(p.dir.ino, &mut dst, parent_entries)?;
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
        self.maybe_clean(&p.dir, &mut dst);
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
        self.pm
            .store_u64_persist(self.geo.inode_off(inode.ino) + VALID_OFF, 0);
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
    fn ancestors(&self, dir: &Arc<Inode>) -> Result<Vec<u64>> {
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

    /// Adds a hard link `new` to the non-directory at `old`.
    pub fn link(&self, old: &str, new: &str) -> Result<()> {
        let target = self.resolve(old, false)?;
        // Kinds never change; knowing it now means a directory target is never
        // locked while the destination directory is (an unrelated directory).
        let target_is_dir = target.state.read().kind == FileKind::Dir;
        let p = self.resolve_parent(new)?;
        if p.name.is_empty() {
            return Err(Error::Exists);
        }
        let mut dst = p.dir.state.write();
        if dst.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        if dst.freed || dst.nlink == 0 {
            return Err(Error::NotFound);
        }
        if dst.children.contains_key(&p.name) {
            return Err(Error::Exists);
        }
        if p.trailing_slash {
            // As for symlink: a free name with a trailing slash is ENOENT.
            return Err(Error::NotFound);
        }
        if target_is_dir {
            return Err(Error::NotPermitted(
                "hard links to directories are not allowed",
            ));
        }
        let mut tst = target.state.write();
        if tst.freed || tst.nlink == 0 {
            return Err(Error::NotFound);
        }
        if tst.nlink >= MAX_LINKS {
            return Err(Error::TooManyLinks);
        }
        let now = now_ns();
        let ps = self.stage(
            p.dir.ino,
            &mut dst,
            vec![Entry::DentryAdd {
                ino: target.ino,
                ctime: now,
                name: p.name.clone(),
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
        drop(tst);
        self.maybe_clean(&p.dir, &mut dst);
        Ok(())
    }

    /// Renames `old` to `new` atomically, replacing `new` if it exists (a directory
    /// only by an empty directory).
    pub fn rename(&self, old: &str, new: &str) -> Result<()> {
        let from = self.resolve_parent(old)?;
        let to = self.resolve_parent(new)?;
        if from.name.is_empty() || to.name.is_empty() {
            return Err(Error::Invalid("cannot rename the root, '.' or '..'".into()));
        }
        let same_dir = from.dir.ino == to.dir.ino;
        let _cross = (!same_dir).then(|| self.rename_lock.lock());
        // Directories only change parents under the rename lock, so both ancestor
        // chains are stable from here on. They are read before any directory is
        // locked: reading an ancestor while holding a descendant inverts the
        // parent-before-child order every other operation follows.
        let (from_anc, to_anc) = if same_dir {
            (Vec::new(), Vec::new())
        } else {
            (self.ancestors(&from.dir)?, self.ancestors(&to.dir)?)
        };
        // An ancestor before its descendant; unrelated directories in inode order
        // (only one cross-directory rename runs at a time).
        let from_first = if to_anc.contains(&from.dir.ino) {
            true
        } else if from_anc.contains(&to.dir.ino) {
            false
        } else {
            from.dir.ino < to.dir.ino
        };
        let (mut fst, mut tst_guard);
        if same_dir {
            fst = from.dir.state.write();
            tst_guard = None;
        } else if from_first {
            fst = from.dir.state.write();
            tst_guard = Some(to.dir.state.write());
        } else {
            tst_guard = Some(to.dir.state.write());
            fst = from.dir.state.write();
        }
        if fst.kind != FileKind::Dir || tst_guard.as_ref().is_some_and(|t| t.kind != FileKind::Dir)
        {
            return Err(Error::NotDir);
        }
        let src_ino = *fst.children.get(&from.name).ok_or(Error::NotFound)?;
        let dst_dir_st: &InodeState = tst_guard.as_deref().unwrap_or(&fst);
        if dst_dir_st.freed || dst_dir_st.nlink == 0 {
            return Err(Error::NotFound);
        }
        // The destination must not be inside the directory being moved (checked
        // before the source is locked: it would be an ancestor of a held lock).
        if src_ino == to.dir.ino || to_anc.contains(&src_ino) {
            return Err(Error::Invalid("cannot move a directory into itself".into()));
        }
        let victim_ino = dst_dir_st.children.get(&to.name).copied();
        let src = self.child_inode(from.dir.ino, src_ino)?;
        let src_kind = src.state.read().kind;
        let src_is_dir = src_kind == FileKind::Dir;
        // First, as in Linux: a trailing slash on either name of a non-directory is
        // ENOTDIR, before the same-inode shortcut (`rename("f", "f/")` is no no-op)
        // and before the check below (`rename("d/f", "d/")`).
        if (from.trailing_slash || to.trailing_slash) && !src_is_dir {
            return Err(Error::NotDir);
        }
        if victim_ino.is_some_and(|v| v == from.dir.ino || from_anc.contains(&v)) {
            // Replacing a directory the source lives in: it is not empty.
            return Err(Error::NotEmpty);
        }
        if victim_ino == Some(src_ino) {
            return Ok(());
        }
        let victim = victim_ino
            .map(|i| self.child_inode(to.dir.ino, i))
            .transpose()?;
        let mut vst = victim.as_ref().map(|v| v.state.write());
        if let Some(v) = &vst {
            match (src_is_dir, v.kind == FileKind::Dir) {
                (true, false) => return Err(Error::NotDir),
                (false, true) => return Err(Error::IsDir),
                (true, true) if !v.children.is_empty() => return Err(Error::NotEmpty),
                _ => {}
            }
        }
        let victim_is_dir = vst.as_ref().is_some_and(|v| v.kind == FileKind::Dir);
        let now = now_ns();
        let del = |ino, name: &String| Entry::DentryDel {
            ino,
            ctime: now,
            name: name.clone(),
        };
        let mut src_entries = vec![del(src_ino, &from.name)];
        let mut dst_entries = Vec::new();
        if let Some(v) = victim_ino {
            dst_entries.push(del(v, &to.name));
        }
        dst_entries.push(Entry::DentryAdd {
            ino: src_ino,
            ctime: now,
            name: to.name.clone(),
        });
        // Directory link counts: the source parent loses a subdirectory if one moves
        // out; the destination gains it, and loses a replaced directory.
        let moved_out = src_is_dir && !same_dir;
        let dst_delta = moved_out as i64 - victim_is_dir as i64;
        let src_delta = -(moved_out as i64) + if same_dir { dst_delta } else { 0 };
        let mut staged = Vec::new();
        if same_dir {
            src_entries.extend(dst_entries);
            if src_delta != 0 {
                src_entries.push(Entry::Link {
                    nlink: (fst.nlink as i64 + src_delta) as u32,
                    ctime: now,
                });
            }
            staged.push(self.stage(from.dir.ino, &mut fst, src_entries)?);
        } else {
            let tst = tst_guard.as_mut().unwrap();
            if src_delta != 0 {
                src_entries.push(Entry::Link {
                    nlink: (fst.nlink as i64 + src_delta) as u32,
                    ctime: now,
                });
            }
            if dst_delta != 0 {
                dst_entries.push(Entry::Link {
                    nlink: (tst.nlink as i64 + dst_delta) as u32,
                    ctime: now,
                });
            }
            staged.push(self.stage(from.dir.ino, &mut fst, src_entries)?);
            staged.push(self.stage(to.dir.ino, tst, dst_entries)?);
        }
        if let (Some(v), Some(vs)) = (&victim, vst.as_mut()) {
            let nlink = if victim_is_dir { 0 } else { vs.nlink - 1 };
            staged.push(self.stage(v.ino, vs, vec![Entry::Link { nlink, ctime: now }])?);
        }
        let refs: Vec<&crate::commit::Staged> = staged.iter().collect();
        self.commit_journaled(&refs, &[]);
        let mut staged = staged.into_iter();
        Self::apply_staged(&mut fst, staged.next().unwrap());
        if let Some(tst) = tst_guard.as_mut() {
            Self::apply_staged(tst, staged.next().unwrap());
        }
        if let (Some(v), Some(mut vs)) = (&victim, vst) {
            Self::apply_staged(&mut vs, staged.next().unwrap());
            self.release_if_unused(v, &mut vs);
        }
        if src_is_dir {
            src.state.write().parent = to.dir.ino;
        }
        self.maybe_clean(&from.dir, &mut fst);
        if let Some(tst) = tst_guard.as_mut() {
            self.maybe_clean(&to.dir, tst);
        }
        Ok(())
    }
}
