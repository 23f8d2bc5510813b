//! Opening files: by path (from the root or a directory handle), by inode number, as
//! an `O_PATH` handle, or as an unnamed `O_TMPFILE` file. Permission is checked here,
//! once; the descriptor's reads and writes check only its access mode.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::cred::{self, Who, MAY_EXEC, MAY_READ, MAY_WRITE};
use crate::error::{Error, Result};
use crate::file::{Fd, OpenFile, OpenFlags};
use crate::inode::{FileKind, Inode};
use crate::namespace::NewInode;
use crate::FileSystem;
use mover::Class;

impl FileSystem {
    /// [`FileSystem::open`] for a client of the channel manager (EASYIO §4.4): the
    /// handle's copies go to the channels of `class`, and an L handle's read and write
    /// latencies feed the throttling loop.
    pub fn open_with_class(
        &self,
        path: &str,
        flags: OpenFlags,
        mode: u32,
        class: Class,
    ) -> Result<Fd> {
        self.open_as(None, None, path, flags, mode, class)
    }

    /// Opens `path` (relative ones from `base`) for `who`.
    pub(crate) fn open_as(
        &self,
        who: Who<'_>,
        base: Option<&Arc<Inode>>,
        path: &str,
        flags: OpenFlags,
        mode: u32,
        class: Class,
    ) -> Result<Fd> {
        let (readable, writable) = flags.validate()?;
        let follow = !flags.has(OpenFlags::NOFOLLOW);
        if flags.has(OpenFlags::PATH) {
            let inode = self.resolve_as(who, base, path, follow)?;
            if flags.has(OpenFlags::DIRECTORY) && inode.state.read().kind != FileKind::Dir {
                return Err(Error::NotDir);
            }
            return self.install(&inode, (false, false), flags, class, false);
        }
        if writable || flags.has(OpenFlags::TRUNC) {
            self.check_writable()?;
        }
        let drop_privs = writable && !cred::privileged(who);
        if flags.has(OpenFlags::TMPFILE) {
            return self.open_tmpfile(who, base, path, flags, mode, class);
        }
        let (inode, created) = if flags.has(OpenFlags::CREAT) {
            self.open_or_create(who, base, path, flags, mode, follow)?
        } else {
            (self.resolve_as(who, base, path, follow)?, false)
        };
        self.check_open(who, &inode, flags, (readable, writable), created)?;
        let fd = self.install(&inode, (readable, writable), flags, class, drop_privs)?;
        if !created {
            self.truncate_at_open(who, &inode, flags, fd)?;
        }
        Ok(fd)
    }

    /// Opens inode `ino` as [`OpenFlags`] say (no `O_CREAT`, `O_TMPFILE`), checking
    /// `who`'s permission on it: the `open` of a FUSE server.
    pub(crate) fn open_ino_as(
        &self,
        who: Who<'_>,
        inode: &Arc<Inode>,
        flags: OpenFlags,
        class: Class,
    ) -> Result<Fd> {
        if flags.has(OpenFlags::CREAT) || flags.has(OpenFlags::TMPFILE) {
            return Err(Error::Invalid("open_ino creates nothing".into()));
        }
        let (readable, writable) = flags.validate()?;
        if flags.has(OpenFlags::PATH) {
            return self.install(inode, (false, false), flags, class, false);
        }
        if writable || flags.has(OpenFlags::TRUNC) {
            self.check_writable()?;
        }
        self.check_open(who, inode, flags, (readable, writable), false)?;
        let drop_privs = writable && !cred::privileged(who);
        let fd = self.install(inode, (readable, writable), flags, class, drop_privs)?;
        self.truncate_at_open(who, inode, flags, fd)?;
        Ok(fd)
    }

    /// `O_TRUNC` of an open that found the inode: a regular file is truncated whatever
    /// the access mode (`O_RDONLY | O_TRUNC` too, as Linux does; [`Self::check_open`]
    /// has checked write permission for it); other kinds ignore the flag. A failure
    /// closes `fd`.
    fn truncate_at_open(
        &self,
        who: Who<'_>,
        inode: &Arc<Inode>,
        flags: OpenFlags,
        fd: Fd,
    ) -> Result<()> {
        if !flags.has(OpenFlags::TRUNC) || inode.state.read().kind != FileKind::File {
            return Ok(());
        }
        self.truncate_as(who, inode, 0).inspect_err(|_| {
            let _ = self.close(fd);
        })
    }

    /// The checks of `may_open`: kinds first (a directory for writing, a symbolic
    /// link, `O_DIRECTORY` on another kind), then permission for the access mode (none
    /// for an inode this open created), then special files, which are not opened for
    /// I/O here.
    fn check_open(
        &self,
        who: Who<'_>,
        inode: &Arc<Inode>,
        flags: OpenFlags,
        (readable, writable): (bool, bool),
        created: bool,
    ) -> Result<()> {
        let st = inode.state.read();
        // In the order of Linux's do_open and may_open: O_CREAT on a directory, then
        // O_DIRECTORY on anything else (a symbolic link too), then the kinds.
        if st.kind == FileKind::Dir && flags.has(OpenFlags::CREAT) {
            return Err(Error::IsDir);
        }
        if flags.has(OpenFlags::DIRECTORY) && st.kind != FileKind::Dir {
            return Err(Error::NotDir);
        }
        // O_TRUNC asks for write permission on every kind, and refuses a directory.
        let trunc = flags.has(OpenFlags::TRUNC);
        match st.kind {
            FileKind::Dir if writable || trunc => return Err(Error::IsDir),
            FileKind::Symlink => return Err(Error::Loop),
            _ => {}
        }
        if st.freed {
            return Err(Error::NotFound);
        }
        if !created {
            let want =
                if readable { MAY_READ } else { 0 } | if writable || trunc { MAY_WRITE } else { 0 };
            cred::may(who, &st, want)?;
        }
        if st.kind.is_special() {
            return Err(Error::NoDevice);
        }
        Ok(())
    }

    /// Gives `inode` a descriptor: the lowest free one.
    fn install(
        &self,
        inode: &Arc<Inode>,
        (readable, writable): (bool, bool),
        flags: OpenFlags,
        class: Class,
        drop_privs: bool,
    ) -> Result<Fd> {
        {
            let st = inode.state.read();
            if st.freed {
                return Err(Error::NotFound);
            }
            inode.opens.fetch_add(1, Ordering::SeqCst);
        }
        let file = Arc::new(OpenFile {
            inode: inode.clone(),
            readable,
            writable,
            append: flags.has(OpenFlags::APPEND),
            pos: Mutex::new(0),
            client: self.mover.register(class),
            drop_privs,
        });
        Ok(self.fds.insert(file))
    }

    /// `O_TMPFILE`: an unnamed regular file in the directory `path` names, open for
    /// writing (and reading with `O_RDWR`).
    fn open_tmpfile(
        &self,
        who: Who<'_>,
        base: Option<&Arc<Inode>>,
        path: &str,
        flags: OpenFlags,
        mode: u32,
        class: Class,
    ) -> Result<Fd> {
        let (readable, writable) = flags.validate()?;
        if !writable || flags.has(OpenFlags::CREAT) {
            return Err(Error::Invalid(
                "O_TMPFILE needs O_WRONLY or O_RDWR, and no O_CREAT".into(),
            ));
        }
        let dir = self.resolve_as(who, base, path, !flags.has(OpenFlags::NOFOLLOW))?;
        let linkable = !flags.has(OpenFlags::EXCL);
        let inode = self.create_tmpfile(who, &dir, mode, linkable)?;
        let drop_privs = !cred::privileged(who);
        let r = self.install(&inode, (readable, writable), flags, class, drop_privs);
        if r.is_err() {
            self.drop_unopened(&inode);
        }
        r
    }

    /// Frees an inode created with no links that never got a descriptor.
    fn drop_unopened(&self, inode: &Arc<Inode>) {
        let mut st = self.write_state(inode);
        self.release_if_unused(inode, &mut st);
    }

    /// The inode `open(O_CREAT)` opens, and whether it created it. A name that is a
    /// symbolic link leading nowhere gets its target created, as open(2) does: the
    /// last missing name at the end of the chain of links (without `O_NOFOLLOW`; with
    /// `O_EXCL` the link's own name already exists).
    fn open_or_create(
        &self,
        who: Who<'_>,
        base: Option<&Arc<Inode>>,
        path: &str,
        flags: OpenFlags,
        mode: u32,
        follow: bool,
    ) -> Result<(Arc<Inode>, bool)> {
        crate::namespace::check_path(path)?;
        // Where the name being opened is looked up from: the path, then each link's
        // target from the link's directory.
        let mut base = match base {
            Some(b) if !path.starts_with('/') => b.clone(),
            _ => self.inode(crate::layout::ROOT_INO)?,
        };
        let mut rel = path.to_string();
        let mut hops = 0;
        let mut p = self.walk(who, base.clone(), &rel, 0)?;
        // As in Linux, O_CREAT with a trailing slash is EISDIR, whatever the name is.
        if p.trailing_slash && !p.name.is_empty() {
            return Err(Error::IsDir);
        }
        loop {
            if p.name.is_empty() {
                // `.`, `..` or the root: it exists (Linux checks O_EXCL first).
                if flags.has(OpenFlags::EXCL) {
                    return Err(Error::Exists);
                }
                return Ok((p.dir, false));
            }
            crate::namespace::check_name(&p.name)?;
            let mut dst = self.write_state(&p.dir);
            if dst.kind != FileKind::Dir {
                return Err(Error::NotDir);
            }
            cred::may(who, &dst, MAY_EXEC)?;
            if !dst.children.contains_key(&p.name) {
                if p.trailing_slash {
                    return Err(Error::IsDir);
                }
                let new = NewInode {
                    kind: FileKind::File,
                    mode,
                    rdev: 0,
                    data: &[],
                };
                let inode = self.create_in(who, &p.dir, &mut dst, &p.name, &new)?;
                return Ok((inode, true));
            }
            if flags.has(OpenFlags::EXCL) {
                return Err(Error::Exists);
            }
            drop(dst);
            match self.resolve_from(who, base.clone(), &rel, follow, hops) {
                Err(Error::NotFound) if follow && !p.trailing_slash => {
                    let Some(target) = self.symlink_target(who, &p.dir, &p.name)? else {
                        return Err(Error::NotFound);
                    };
                    hops += 1;
                    if hops > crate::MAX_SYMLINK_HOPS {
                        return Err(Error::Loop);
                    }
                    base = self.follow_base(&p.dir, &target)?;
                    rel = target;
                    p = self.walk(who, base.clone(), &rel, hops)?;
                }
                r => return r.map(|inode| (inode, false)),
            }
        }
    }
}
