//! One client's requests, answered with its credentials. The connection owns the
//! descriptors it opened: a request naming any other is `EBADF`, and when the
//! connection ends — the client closed it, died, or sent what cannot be framed —
//! every descriptor it left open is closed, so an unlinked file it held is freed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use fs::{Cred, Fd, FileKind, FileSystem, OpenFlags, SetAttr, Whence};

use crate::direct::{At, Direct, PageTable, TABLE_PAGES};
use crate::wire::{self, Answer, Request, Status, MAX_IO};

/// Counts shared by every connection of a server.
#[derive(Default)]
pub(crate) struct Counts {
    /// Connections open.
    pub clients: AtomicU32,
    /// Descriptors open over all connections.
    pub open: AtomicU32,
}

/// A descriptor a connection opened.
#[derive(Clone, Copy)]
struct Open {
    ino: u64,
    readable: bool,
    append: bool,
    /// Whether the client was given the file's page table (released at close).
    table: bool,
}

/// A client's view of the file system.
pub(crate) struct Conn<'a> {
    fs: &'a FileSystem,
    cred: Cred,
    /// Descriptors this connection opened.
    fds: BTreeMap<u32, Open>,
    counts: &'a Counts,
    /// Page tables and epochs, when clients read directly: every change of a file's
    /// data goes through it.
    direct: Option<&'a Direct>,
    /// Whether this client reads directly (it was given the image): only then does
    /// it get page tables.
    pub reads_directly: bool,
}

impl<'a> Conn<'a> {
    pub fn new(
        fs: &'a FileSystem,
        cred: Cred,
        counts: &'a Counts,
        direct: Option<&'a Direct>,
    ) -> Conn<'a> {
        counts.clients.fetch_add(1, Ordering::SeqCst);
        Conn {
            fs,
            cred,
            fds: BTreeMap::new(),
            counts,
            direct,
            reads_directly: direct.is_some(),
        }
    }

    /// The answer to one frame's payload (`EBADMSG` if it is not a request), and the
    /// page table to send with it.
    pub fn answer_bytes(&mut self, payload: &[u8]) -> (Answer, Option<Arc<PageTable>>) {
        match wire::decode::<Request>(payload) {
            Some(Request::Table { fd }) => match self.table(fd) {
                Ok((ino, t)) => (
                    Answer::Table {
                        ino,
                        pages: TABLE_PAGES,
                    },
                    Some(t),
                ),
                Err(errno) => (Answer::Error(errno), None),
            },
            Some(req) => (self.answer(req), None),
            None => (Answer::Error(libc::EBADMSG), None),
        }
    }

    /// The answer to `req`.
    pub fn answer(&mut self, req: Request) -> Answer {
        self.call(req).unwrap_or_else(|e| Answer::Error(e.errno()))
    }

    fn call(&mut self, req: Request) -> fs::Result<Answer> {
        let s = self.fs.as_user(&self.cred);
        let fs = self.fs;
        Ok(match req {
            Request::Open { path, flags, mode } => Answer::Fd(self.open(&path, flags, mode)?),
            Request::Close { fd } => {
                let (fd, o) = self.own(fd)?;
                self.forget(fd.0, o);
                fs.close(fd)?;
                Answer::Done
            }
            Request::Read { fd, len } => {
                let mut buf = vec![0u8; (len as usize).min(MAX_IO)];
                let n = fs.read(self.own(fd)?.0, &mut buf)?;
                buf.truncate(n);
                Answer::Data(buf)
            }
            Request::Pread { fd, len, off } => {
                let (fd, o) = self.own(fd)?;
                let mut buf = vec![0u8; (len as usize).min(MAX_IO)];
                let n = fs.pread(fd, &mut buf, off)?;
                buf.truncate(n);
                if let (Some(d), true) = (self.direct, o.table) {
                    d.publish_read(fs, o.ino, off, n as u64);
                }
                Answer::Data(buf)
            }
            Request::Write { fd, data } => {
                let (fd, o) = self.own(fd)?;
                // An appending descriptor writes at the end, whatever its position.
                let at = match o.append {
                    true => At::End,
                    false => At::Offset(fs.lseek(fd, 0, Whence::Cur)?),
                };
                let n = self.writing(o.ino, at, data.len(), || fs.write(fd, &data))?;
                Answer::Count(n as u64)
            }
            Request::Pwrite { fd, data, off } => {
                let (fd, o) = self.own(fd)?;
                // `pwrite` on an appending descriptor writes at the end too, as Linux.
                let at = if o.append { At::End } else { At::Offset(off) };
                let n = self.writing(o.ino, at, data.len(), || fs.pwrite(fd, &data, off))?;
                Answer::Count(n as u64)
            }
            Request::Ftruncate { fd, len } => {
                let (fd, o) = self.own(fd)?;
                done(self.truncating(o.ino, len, || s.ftruncate(fd, len)))?
            }
            Request::Truncate { path, len } if self.direct.is_some() => {
                let ino = s.stat(&path)?.ino;
                let what = SetAttr {
                    size: Some(len),
                    ..SetAttr::default()
                };
                done(self.truncating(ino, len, || s.setattr(ino, &what).map(drop)))?
            }
            Request::Truncate { path, len } => done(s.truncate(&path, len))?,
            Request::Lseek { fd, off, whence } => {
                Answer::Count(fs.lseek(self.own(fd)?.0, off, whence_of(whence)?)?)
            }
            Request::Fsync { fd } => done(fs.fsync(self.own(fd)?.0))?,
            Request::Fstat { fd } => Answer::Stat(s.fstat(self.own(fd)?.0)?),
            req => self.path_call(req)?,
        })
    }

    /// `open`. With direct reads, `O_TRUNC` of a regular file is a truncation of the
    /// file opened (checked as `truncate` is: write permission), so that its page
    /// table is kept honest.
    fn open(&mut self, path: &str, flags: i32, mode: u32) -> fs::Result<u32> {
        let s = self.fs.as_user(&self.cred);
        let trunc = flags & libc::O_TRUNC != 0 && self.direct.is_some();
        let access = flags & libc::O_ACCMODE;
        // `O_TRUNC` does nothing, and checks nothing, to a file the open creates.
        let existed = trunc && (flags & libc::O_CREAT == 0 || s.stat(path).is_ok());
        let fd = s.open(
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
        self.fds.insert(
            fd.0,
            Open {
                ino,
                readable: flags & libc::O_PATH == 0 && access != libc::O_WRONLY,
                append: flags & libc::O_APPEND != 0,
                table: false,
            },
        );
        self.counts.open.fetch_add(1, Ordering::SeqCst);
        Ok(fd.0)
    }

    /// Runs `f`, a write of `len` bytes `at` file `ino`, through the page tables when
    /// clients read directly.
    fn writing<R>(&self, ino: u64, at: At, len: usize, f: impl FnOnce() -> R) -> R {
        match self.direct {
            Some(d) => d.write(self.fs, ino, at, len as u64, f),
            None => f(),
        }
    }

    /// Runs `f`, which sets file `ino`'s size to `len`, through the page tables when
    /// clients read directly.
    fn truncating<R>(&self, ino: u64, len: u64, f: impl FnOnce() -> R) -> R {
        match self.direct {
            Some(d) => d.truncate(self.fs, ino, len, f),
            None => f(),
        }
    }

    /// The page table of open file `fd`, for direct reads; an errno if it cannot be.
    fn table(&mut self, fd: u32) -> Result<(u64, Arc<PageTable>), i32> {
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
        self.fds.insert(fd, Open { table: true, ..o });
        Ok((o.ino, t))
    }

    /// Drops what this connection holds for descriptor `fd`.
    fn forget(&mut self, fd: u32, o: Open) {
        self.fds.remove(&fd);
        self.counts.open.fetch_sub(1, Ordering::SeqCst);
        if let (true, Some(d)) = (o.table, self.direct) {
            d.release(o.ino);
        }
    }

    /// The calls that name paths, not descriptors.
    fn path_call(&self, req: Request) -> fs::Result<Answer> {
        let s = self.fs.as_user(&self.cred);
        Ok(match req {
            Request::Stat { path } => Answer::Stat(s.stat(&path)?),
            Request::Lstat { path } => Answer::Stat(s.lstat(&path)?),
            Request::Mkdir { path, mode } => done(s.mkdir(&path, mode))?,
            Request::Rmdir { path } => done(s.rmdir(&path))?,
            Request::Unlink { path } => done(s.unlink(&path))?,
            Request::Rename { old, new, flags } => {
                done(s.renameat2(None, &old, None, &new, flags))?
            }
            Request::Link { old, new } => done(s.link(&old, &new))?,
            Request::Symlink { target, path } => done(s.symlink(&target, &path))?,
            Request::Readlink { path } => Answer::Text(s.readlink(&path)?),
            Request::Chmod { path, mode } => done(s.chmod(&path, mode))?,
            Request::Chown { path, uid, gid } => done(s.chown(&path, uid, gid))?,
            Request::Readdir { path } => Answer::Entries(s.readdir(&path)?),
            Request::Statfs => Answer::StatFs(self.fs.statfs()?),
            Request::Status => Answer::Status(Status {
                clients: self.counts.clients.load(Ordering::SeqCst),
                open_here: self.fds.len() as u32,
                open_total: self.counts.open.load(Ordering::SeqCst),
            }),
            _ => unreachable!("descriptor calls are answered by Conn::call"),
        })
    }

    /// `fd` and what is known of it if this connection opened it; `EBADF` otherwise.
    fn own(&self, fd: u32) -> fs::Result<(Fd, Open)> {
        self.fds
            .get(&fd)
            .map(|&o| (Fd(fd), o))
            .ok_or(fs::Error::BadFd)
    }
}

impl Drop for Conn<'_> {
    /// Closes what the client left open.
    fn drop(&mut self) {
        for (fd, o) in std::mem::take(&mut self.fds) {
            self.forget(fd, o);
            let _ = self.fs.close(Fd(fd));
        }
        self.counts.clients.fetch_sub(1, Ordering::SeqCst);
    }
}

fn done(r: fs::Result<()>) -> fs::Result<Answer> {
    r.map(|()| Answer::Done)
}

/// The [`Whence`] of a `SEEK_*` value.
fn whence_of(w: i32) -> fs::Result<Whence> {
    Ok(match w {
        libc::SEEK_SET => Whence::Set,
        libc::SEEK_CUR => Whence::Cur,
        libc::SEEK_END => Whence::End,
        libc::SEEK_DATA => Whence::Data,
        libc::SEEK_HOLE => Whence::Hole,
        _ => return Err(fs::Error::Invalid(format!("whence {w}"))),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    /// The page table of `ino` names exactly the blocks the file system has.
    fn assert_table_is_the_files(fs: &FileSystem, direct: &Direct, ino: u64) {
        use crate::direct::{HOLE, PAGE0, SIZE};
        let t = direct.table(fs, ino).unwrap();
        let (size, segs) = fs.map_inode(ino, 0, u64::MAX).unwrap();
        assert_eq!(t.words().at(SIZE).load(Ordering::SeqCst), size);
        let mut pg = 0;
        for (len, src) in segs {
            for k in 0..(len as u64).div_ceil(fs::BLOCK_SIZE) {
                let want = src.map_or(HOLE, |s| s / fs::BLOCK_SIZE + k);
                let got = t.words().at(PAGE0 + pg).load(Ordering::SeqCst);
                assert_eq!(got, want, "page {pg}");
                pg += 1;
            }
        }
        direct.release(ino);
    }

    #[test]
    fn writes_on_an_appending_descriptor_are_published_where_they_land() {
        let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let (fs, _) = FileSystem::mount(pm, MountOptions::default()).unwrap();
        let direct = Direct::new().unwrap();
        let counts = Counts::default();
        let mut c = Conn::new(&fs, Cred::root(), &counts, Some(&direct));
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
        let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let (fs, _) = FileSystem::mount(pm, MountOptions::default()).unwrap();
        let direct = Direct::new().unwrap();
        let counts = Counts::default();
        let mut root = Conn::new(&fs, Cred::root(), &counts, Some(&direct));
        let mut user = Conn::new(&fs, Cred::user(1000, 1000), &counts, Some(&direct));
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

    use fs::{FormatOptions, MountOptions};
    use pmem::{MemPmem, Pmem};
    use proptest::prelude::*;

    use super::*;

    /// Requests a client could send, valid or not: paths from a few names, any
    /// descriptor, offsets and lengths up to the largest.
    fn request() -> impl Strategy<Value = Request<'static>> {
        let path =
            prop::sample::select(vec!["/a", "/b", "/d", "/d/a", "/a/x", "", "/", "//d/../b"])
                .prop_map(String::from);
        let fd = prop_oneof![8 => 0u32..3, 1 => any::<u32>()];
        let off = prop_oneof![0u64..100_000, any::<u64>()];
        prop_oneof![
            1 => (path.clone(), any::<i32>(), any::<u32>())
                .prop_map(|(path, flags, mode)| Request::Open { path, flags, mode }),
            4 => (path.clone(), 0..4i32).prop_map(|(path, f)| Request::Open {
                path,
                flags: [
                    libc::O_RDWR | libc::O_CREAT,
                    libc::O_RDONLY,
                    libc::O_WRONLY | libc::O_TRUNC,
                    libc::O_DIRECTORY
                ][f as usize],
                mode: 0o644
            }),
            1 => fd.clone().prop_map(|fd| Request::Close { fd }),
            1 => (fd.clone(), any::<u32>(), off.clone()).prop_map(|(fd, len, off)| Request::Pread {
                fd,
                len,
                off
            }),
            3 => (
                fd.clone(),
                prop::collection::vec(any::<u8>(), 0..9000),
                off.clone()
            )
                .prop_map(|(fd, data, off)| Request::Pwrite { fd, data: data.into(), off }),
            1 => (fd.clone(), any::<i64>(), any::<i32>()).prop_map(|(fd, off, whence)| Request::Lseek {
                fd,
                off,
                whence
            }),
            1 => (fd.clone(), off.clone()).prop_map(|(fd, len)| Request::Ftruncate { fd, len }),
            2 => fd.clone().prop_map(|fd| Request::Table { fd }),
            1 => fd.prop_map(|fd| Request::Fsync { fd }),
            1 => (path.clone(), any::<u32>()).prop_map(|(path, mode)| Request::Mkdir { path, mode }),
            1 => path.clone().prop_map(|path| Request::Unlink { path }),
            1 => path.clone().prop_map(|path| Request::Rmdir { path }),
            1 => (path.clone(), path.clone(), 0..3u32).prop_map(|(old, new, flags)| Request::Rename {
                old,
                new,
                flags
            }),
            1 => (path.clone(), path.clone()).prop_map(|(old, new)| Request::Link { old, new }),
            1 => (path.clone(), off).prop_map(|(path, len)| Request::Truncate { path, len }),
            1 => path.prop_map(|path| Request::Readdir { path }),

        ]
    }

    /// A payload: a request, a request with bytes flipped or cut, or noise.
    fn payload() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            6 => request().prop_map(|r| wire::frame(&r).unwrap()[4..].to_vec()),
            1 => (request(), any::<usize>(), any::<u8>()).prop_map(|(r, at, x)| {
                let mut b = wire::frame(&r).unwrap()[4..].to_vec();
                let at = at % b.len();
                b[at] ^= x | 1;
                b
            }),
            1 => (request(), any::<usize>()).prop_map(|(r, cut)| {
                let b = wire::frame(&r).unwrap()[4..].to_vec();
                b[..cut % b.len()].to_vec()
            }),
            1 => prop::collection::vec(any::<u8>(), 0..64),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Whatever a client sends, it gets answers, the server does not panic, and
        /// the image is consistent once the connection ends and the image is unmounted.
        #[test]
        fn any_payloads_leave_the_image_consistent(
            payloads in prop::collection::vec(payload(), 1..120),
            with_direct in any::<bool>(),
        ) {
            let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(32 << 20));
            FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
            let (fs, _) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
            let counts = Counts::default();
            let direct = with_direct.then(|| Direct::new().unwrap());
            {
                let mut conn = Conn::new(&fs, Cred::root(), &counts, direct.as_ref());
                for p in &payloads {
                    let (a, _) = conn.answer_bytes(p);
                    prop_assert!(wire::frame(&a).is_ok(), "an answer too long to send");
                }
            }
            prop_assert_eq!(counts.open.load(Ordering::SeqCst), 0);
            prop_assert_eq!(direct.as_ref().map_or(0, Direct::tables_published), 0);
            prop_assert_eq!(counts.clients.load(Ordering::SeqCst), 0);
            fs.unmount().unwrap();
            let report = fs::fsck::check(&*pm).unwrap();
            prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
        }
    }
}
