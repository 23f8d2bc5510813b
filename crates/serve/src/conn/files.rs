//! The files a connection holds open: the descriptors, shared between connections
//! after a `fork`, and the calls that open, look up, truncate and close them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fs::{Fd, FileKind, FileSystem, OpenFlags, SetAttr};

use super::{Common, Conn};
use crate::direct::PageTable;
use crate::locks::Owner;
use crate::wire::{self, Answer};

/// A descriptor of the file system, open while a connection or a handoff holds it:
/// after a `fork` the parent's and the child's connections share one, as processes
/// share an open file description.
pub(crate) struct Held(Fd);

/// Lets `file` go; the last holder closes it (and its open-file locks go).
pub(super) fn let_go(fs: &FileSystem, common: &Common, file: Arc<Held>) -> fs::Result<()> {
    let id = file_id(&file);
    match Arc::into_inner(file) {
        Some(Held(fd)) => {
            common.locks.release(Owner::File(id), None);
            common.locks.release(Owner::Flock(id), None);
            common.counts.open.fetch_sub(1, Ordering::SeqCst);
            fs.close(fd)
        }
        None => Ok(()),
    }
}

/// The number that names an open file as the owner of its locks.
pub(super) fn file_id(file: &Arc<Held>) -> usize {
    Arc::as_ptr(file) as usize
}

/// A descriptor a connection holds.
#[derive(Clone)]
pub(super) struct Open {
    pub(super) file: Arc<Held>,
    pub(super) ino: u64,
    pub(super) readable: bool,
    pub(super) writable: bool,
    pub(super) append: bool,
    /// Whether the client was given the file's page table (released at close).
    pub(super) table: bool,
}

impl Conn<'_> {
    /// `open`. With direct reads, `O_TRUNC` of a regular file is a truncation of the
    /// file opened (checked as `truncate` is: write permission), so that its page
    /// table is kept honest.
    pub(super) fn open(
        &mut self,
        dir: Option<Fd>,
        path: &str,
        flags: i32,
        mode: u32,
    ) -> fs::Result<u32> {
        let s = self.fs.as_user(&self.cred);
        // Flags the open refuses are refused before anything else looks at them.
        OpenFlags(flags).validate()?;
        let trunc =
            flags & (libc::O_TRUNC | libc::O_PATH) == libc::O_TRUNC && self.direct.is_some();
        let access = flags & libc::O_ACCMODE;
        // `O_TRUNC` does nothing, and checks nothing, to a file the open creates. On a
        // directory it is EISDIR before any permission is checked (Linux's may_open).
        let found = match trunc {
            true => s.fstatat(dir, path, 0).ok(),
            false => None,
        };
        let exclusive = flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL;
        let follows = flags & libc::O_NOFOLLOW == 0;
        if follows && !exclusive && found.as_ref().is_some_and(|st| st.kind == FileKind::Dir) {
            return Err(fs::Error::IsDir);
        }
        let existed = trunc && (flags & libc::O_CREAT == 0 || found.is_some());
        let fd = s.openat(
            dir,
            path,
            OpenFlags(flags & !if trunc { libc::O_TRUNC } else { 0 }),
            mode,
        )?;
        let opened = (|| {
            let st = self.fs.fstat(fd)?;
            match st.kind {
                FileKind::Dir if trunc => return Err(fs::Error::IsDir),
                // Open for writing: the open checked write permission already.
                FileKind::File if existed && access != libc::O_RDONLY => {
                    self.truncating(st.ino, 0, || self.fs.ftruncate(fd, 0))?
                }
                // `O_RDONLY | O_TRUNC` truncates too, as Linux does, if the caller
                // may write the file.
                FileKind::File if existed => {
                    let what = SetAttr {
                        size: Some(0),
                        ..SetAttr::default()
                    };
                    self.truncating(st.ino, 0, || s.setattr(st.ino, &what))?;
                }
                _ => {}
            }
            Ok(st.ino)
        })();
        let ino = match opened {
            Ok(ino) => ino,
            Err(e) => {
                let _ = self.fs.close(fd);
                return Err(e);
            }
        };
        self.common.counts.open.fetch_add(1, Ordering::SeqCst);
        self.fds.insert(
            fd.0,
            Open {
                file: Arc::new(Held(fd)),
                ino,
                readable: flags & libc::O_PATH == 0 && access != libc::O_WRONLY,
                writable: flags & libc::O_PATH == 0 && access != libc::O_RDONLY,
                append: flags & libc::O_APPEND != 0,
                table: false,
            },
        );
        Ok(fd.0)
    }

    /// `truncate(path, len)`, through the page tables when clients read directly.
    pub(super) fn truncate_path(&self, path: &str, len: u64) -> fs::Result<()> {
        let s = self.fs.as_user(&self.cred);
        if self.direct.is_none() {
            return s.truncate(path, len);
        }
        let ino = s.stat(path)?.ino;
        let what = SetAttr {
            size: Some(len),
            ..SetAttr::default()
        };
        self.truncating(ino, len, || s.setattr(ino, &what).map(drop))
    }

    /// Looks `name` up in directory `dir` for a client that resolves paths itself
    /// (collaborative indexing): the answer, as the client's session finds it, and
    /// the versions it holds at. Each version is read before what it guards is
    /// taken and again after; one that moved meanwhile is [`wire::UNSTABLE`], so
    /// the client uses that part of the answer once and keeps nothing of it.
    pub(super) fn lookup(&self, dir: u64, name: &str) -> fs::Result<Answer> {
        let Some(d) = self.direct.filter(|_| self.reads_directly) else {
            return Err(fs::Error::Errno(libc::EOPNOTSUPP));
        };
        let s = self.fs.as_user(&self.cred);
        let stable = |before: u64, after: u64| match before == after {
            true => before,
            false => wire::UNSTABLE,
        };
        let dir_before = d.version(dir);
        let found = s.lookup(dir, name);
        let dir_version = stable(dir_before, d.version(dir));
        let first = match found {
            Ok(st) => st,
            Err(e) => {
                return Ok(Answer::NotThere {
                    dir_version,
                    errno: e.errno(),
                })
            }
        };
        // The attributes again, inside their own version's reads (an inode freed
        // meanwhile: the first ones, to be used once).
        let ino = first.ino;
        let before = d.version(ino);
        let (stat, version) = match s.getattr(ino) {
            Ok(st) => (st, stable(before, d.version(ino))),
            Err(_) => (first, wire::UNSTABLE),
        };
        Ok(Answer::Looked {
            dir_version,
            ino,
            version,
            stat,
        })
    }

    /// The page table of open file `fd`, for direct reads; an errno if it cannot be.
    pub(super) fn table(&mut self, fd: u32) -> Result<(u64, Arc<PageTable>), i32> {
        let (_, o) = self.own(fd).map_err(|e| e.errno())?;
        let Some(d) = self.direct.filter(|_| self.reads_directly) else {
            return Err(libc::EOPNOTSUPP);
        };
        if !o.readable {
            return Err(libc::EBADF);
        }
        let t = d.table(self.fs, o.ino)?;
        if o.table {
            // The descriptor holds a table already: one user per descriptor.
            d.release(o.ino);
        }
        let ino = o.ino;
        self.fds.insert(fd, Open { table: true, ..o });
        Ok((ino, t))
    }

    /// Drops what this connection holds for descriptor `fd`; the file closes if no
    /// other connection holds it.
    pub(super) fn forget(&mut self, fd: u32, o: Open) -> fs::Result<()> {
        self.fds.remove(&fd);
        if let (true, Some(d)) = (o.table, self.direct) {
            d.release(o.ino);
        }
        let_go(self.fs, self.common, o.file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::testing::*;

    #[test]
    fn lookups_say_the_versions_they_hold_at_and_a_change_moves_them() {
        let fs = memory_fs();
        let direct = Arc::new(Direct::new(fs.geometry().inodes).unwrap());
        fs.set_inode_changes(direct.clone());
        let common = Common::default();
        let mut c = Conn::new(&fs, Cred::user(1000, 1000), &common, Some(&direct));
        let look = |c: &mut Conn<'_>, dir: u64, name: &str| {
            c.answer(Request::Lookup {
                dir,
                name: name.into(),
            })
        };
        let root = fs::ROOT_INO;
        fs.mkdir("/d", 0o755).unwrap();
        let Answer::Looked {
            dir_version,
            ino: d,
            version,
            stat,
        } = look(&mut c, root, "d")
        else {
            panic!("no /d")
        };
        assert_eq!((stat.ino, stat.kind), (d, fs::FileKind::Dir));
        assert!(dir_version != wire::UNSTABLE && version != wire::UNSTABLE);
        // Nothing changed: the same versions.
        let same = look(&mut c, root, "d");
        assert!(
            matches!(same, Answer::Looked { dir_version: a, version: b, .. }
            if a == dir_version && b == version)
        );
        // A name made in /d moves its version, not the root's.
        fs.mkdir("/d/sub", 0o755).unwrap();
        let moved = look(&mut c, root, "d");
        assert!(
            matches!(moved, Answer::Looked { dir_version: a, version: b, .. }
            if a == dir_version && b > version)
        );
        assert!(matches!(look(&mut c, d, "nope"),
            Answer::NotThere { errno: libc::ENOENT, dir_version: v } if v == direct.version(d)));
        // Search permission is the client's, checked by the server.
        fs.chmod("/d", 0o700).unwrap();
        assert!(matches!(
            look(&mut c, d, "sub"),
            Answer::NotThere {
                errno: libc::EACCES,
                ..
            }
        ));
        // Inode numbers from a client are looked up, not trusted.
        fs.mknod("/file", 0o644, 0).unwrap();
        let file = fs.stat("/file").unwrap().ino;
        assert!(matches!(
            look(&mut c, file, "x"),
            Answer::NotThere {
                errno: libc::ENOTDIR,
                ..
            }
        ));
        for garbage in [0, file + 1000, u64::MAX] {
            assert!(
                matches!(look(&mut c, garbage, "x"), Answer::NotThere { .. }),
                "{garbage}"
            );
        }
        // A client that does not read directly resolves nothing itself.
        let mut plain = Conn::new(&fs, Cred::root(), &common, None);
        assert_eq!(look(&mut plain, root, "d"), Answer::Error(libc::EOPNOTSUPP));
    }

    #[test]
    fn writes_on_an_appending_descriptor_are_published_where_they_land() {
        let fs = memory_fs();
        let direct = Direct::new(1 << 16).unwrap();
        let common = Common::default();
        let mut c = Conn::new(&fs, Cred::root(), &common, Some(&direct));
        let flags = libc::O_CREAT | libc::O_RDWR | libc::O_APPEND;
        let Answer::Fd(fd) = c.answer(Request::Open {
            path: "/log".into(),
            flags,
            mode: 0o644,
        }) else {
            panic!()
        };
        c.answer(Request::Pwrite {
            fd,
            data: vec![1u8; 6000].into(),
            off: 0,
        });
        assert!(matches!(
            c.answer_bytes(&wire::frame(&Request::Table { fd }).unwrap()[4..])
                .0,
            Answer::Table { .. }
        ));
        let ino = fs.fstat(Fd(fd)).unwrap().ino;
        // `pwrite` at 0 on an appending descriptor lands at 6000, on page 1.
        c.answer(Request::Pwrite {
            fd,
            data: vec![2u8; 100].into(),
            off: 0,
        });
        assert_eq!(fs.fstat(Fd(fd)).unwrap().size, 6100);
        assert_table_is_the_files(&fs, &direct, ino);
        c.answer(Request::Write {
            fd,
            data: vec![3u8; 5000].into(),
        });
        assert_table_is_the_files(&fs, &direct, ino);
        c.answer(Request::Ftruncate { fd, len: 4097 });
        c.answer(Request::Write {
            fd,
            data: vec![4u8; 10].into(),
        });
        assert_table_is_the_files(&fs, &direct, ino);
    }

    /// `O_TRUNC` with direct reads on, as Linux does it: a file the open creates is
    /// not checked (mode 0444), a file the caller may not write is refused even
    /// read-only, a file it may write is truncated however it is opened.
    #[test]
    fn o_trunc_with_direct_reads_checks_and_truncates_as_linux_does() {
        let fs = memory_fs();
        let direct = Direct::new(1 << 16).unwrap();
        let common = Common::default();
        let mut root = Conn::new(&fs, Cred::root(), &common, Some(&direct));
        let mut user = Conn::new(&fs, Cred::user(1000, 1000), &common, Some(&direct));
        let open = |c: &mut Conn<'_>, path: &str, flags: i32, mode: u32| {
            c.answer(Request::Open {
                path: path.into(),
                flags,
                mode,
            })
        };
        assert!(matches!(
            open(&mut root, "/pub", libc::O_CREAT | libc::O_WRONLY, 0o644),
            Answer::Fd(_)
        ));
        root.answer(Request::Chmod {
            path: "/".into(),
            mode: 0o777,
        });
        let Answer::Fd(fd) = open(&mut root, "/roots", libc::O_CREAT | libc::O_WRONLY, 0o644)
        else {
            panic!()
        };
        root.answer(Request::Pwrite {
            fd,
            data: vec![1u8; 100].into(),
            off: 0,
        });
        let new = libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY;
        assert!(matches!(
            open(&mut user, "/mine", new, 0o444),
            Answer::Fd(_)
        ));
        let ro_trunc = libc::O_RDONLY | libc::O_TRUNC;
        assert_eq!(
            open(&mut user, "/roots", ro_trunc, 0),
            Answer::Error(libc::EACCES)
        );
        assert_eq!(
            fs.stat("/roots").unwrap().size,
            100,
            "refused, so untouched"
        );
        assert!(matches!(
            open(&mut root, "/roots", ro_trunc, 0),
            Answer::Fd(_)
        ));
        assert_eq!(fs.stat("/roots").unwrap().size, 0);
        root.answer(Request::Pwrite {
            fd,
            data: vec![1u8; 100].into(),
            off: 0,
        });
        assert!(matches!(
            open(&mut root, "/roots", libc::O_WRONLY | libc::O_TRUNC, 0),
            Answer::Fd(_)
        ));
        assert_eq!(fs.stat("/roots").unwrap().size, 0);
        assert_eq!(
            open(&mut root, "/", ro_trunc, 0),
            Answer::Error(libc::EISDIR)
        );
    }
}
