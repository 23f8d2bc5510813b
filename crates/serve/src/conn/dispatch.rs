//! Each request answered: descriptor calls here, and the rest sent on to the room
//! that answers them, in a chain (`call`, then `data_call`, `staged_call`,
//! `process_call`, `path_call`, `at_call`, `xattr_call`).

use std::sync::atomic::Ordering;

use fs::{Fd, Whence};

use super::proc::credentials_of;
use super::Conn;
use crate::direct::At;
use crate::wire::{Answer, On, Request, Status, MAX_ENTRIES, MAX_IO};

/// The longest extended-attribute value or list of names, as in Linux.
const XATTR_MAX: usize = 64 << 10;

/// An extended-attribute request's file, its descriptor checked.
enum Target {
    Path(String),
    Link(String),
    Fd(Fd),
}

impl Conn<'_> {
    /// The answer to `req`, or what it failed with: the descriptor calls, the others
    /// sent on.
    pub(super) fn call(&mut self, req: Request) -> fs::Result<Answer> {
        if !self.submitted.is_empty() {
            self.submitted.reap(self.fs, self.direct);
        }
        let s = self.fs.as_user(&self.cred);
        let fs = self.fs;
        Ok(match req {
            Request::Open { path, flags, mode } => Answer::Fd(self.open(None, &path, flags, mode)?),
            Request::Openat {
                dir,
                path,
                flags,
                mode,
            } => {
                let dir = self.dir(dir)?;
                Answer::Fd(self.open(dir, &path, flags, mode)?)
            }
            Request::Close { fd } => {
                let (_, o) = self.own(fd)?;
                // Closing any descriptor of a file drops the process's record locks
                // on it, as POSIX says.
                self.common.locks.release(self.process(), Some(o.ino));
                self.forget(fd, o)?;
                Answer::Done
            }
            Request::Lock {
                fd,
                test,
                owner,
                kind,
                start,
                len,
            } => self.lock(fd, (test, owner), kind, (start, len))?,
            Request::Ftruncate { fd, len } => {
                let (fd, o) = self.own(fd)?;
                done(self.truncating(o.ino, len, || s.ftruncate(fd, len)))?
            }
            Request::Truncate { path, len } => done(self.truncate_path(&path, len))?,
            Request::Fallocate { fd, mode, off, len } => {
                let (fd, o) = self.own(fd)?;
                // Punching a hole or collapsing a range changes which blocks hold
                // which pages: readers ask for every page until it is published again.
                done(self.truncating(o.ino, 0, || s.fallocate(fd, mode, off, len)))?
            }
            Request::Lseek { fd, off, whence } => {
                Answer::Count(fs.lseek(self.own(fd)?.0, off, whence_of(whence)?)?)
            }
            Request::Fsync { fd } => done(fs.fsync(self.own(fd)?.0))?,
            Request::Fstat { fd } => Answer::Stat(s.fstat(self.own(fd)?.0)?),
            Request::Lookup { dir, name } => self.lookup(dir, &name)?,
            req => self.data_call(req)?,
        })
    }

    /// The calls that carry data in the request or the answer.
    fn data_call(&mut self, req: Request) -> fs::Result<Answer> {
        let fs = self.fs;
        Ok(match req {
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
                    false => At::Cursor(fd),
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
            req => self.staged_call(req)?,
        })
    }

    /// The calls on staging buffers, and on the writes submitted from them.
    fn staged_call(&mut self, req: Request) -> fs::Result<Answer> {
        let fs = self.fs;
        Ok(match req {
            Request::DropStaging { id } => done(self.drop_staging(id))?,
            Request::WriteStaged {
                fd,
                id,
                at,
                len,
                off,
            } => Answer::Count(self.write_staged((fd, id, at, len, off))? as u64),
            Request::ReadStaged {
                fd,
                id,
                at,
                len,
                off,
            } => Answer::Count(self.read_staged((fd, id, at, len, off))? as u64),
            Request::SubmitStaged {
                fd,
                id,
                at,
                len,
                off,
            } => self.submit_staged(fd, (id, at, len), off)?,
            Request::Settle { sn, wait: true } => {
                let r = self.submitted.settle(fs, self.direct, sn);
                done(r.map_err(fs::Error::Errno))?
            }
            Request::Settle { sn, wait: false } => match self.submitted.poll(fs, self.direct, sn) {
                Ok(true) => Answer::Done,
                Ok(false) => Answer::Running,
                Err(errno) => return Err(fs::Error::Errno(errno)),
            },
            // Answered by `answer_bytes`, which sends their descriptors.
            Request::Table { .. } | Request::Staging { .. } => {
                return Err(fs::Error::Errno(libc::EPROTO))
            }
            req => self.process_call(req)?,
        })
    }

    /// The calls about the client's process: handoffs and credentials.
    fn process_call(&mut self, req: Request) -> fs::Result<Answer> {
        Ok(match req {
            Request::Handoff { fds } => Answer::Count(self.handoff(&fds)?),
            Request::Heir { token, pid } => {
                self.heir(token, pid);
                Answer::Done
            }
            Request::Adopt { token } => Answer::Fds(self.adopt(token)?),
            Request::Recredential => {
                self.cred = credentials_of(self.pid, self.cred.umask)?;
                Answer::Done
            }
            req => self.path_call(req)?,
        })
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
                clients: self.common.counts.clients.load(Ordering::SeqCst),
                open_here: self.fds.len() as u32,
                open_total: self.common.counts.open.load(Ordering::SeqCst),
            }),
            req => self.at_call(req)?,
        })
    }

    /// The `*at` calls, the calls on a descriptor's attributes and the extended
    /// attributes.
    fn at_call(&self, req: Request) -> fs::Result<Answer> {
        let s = self.fs.as_user(&self.cred);
        Ok(match req {
            Request::Fstatat { dir, path, flags } => {
                Answer::Stat(s.fstatat(self.dir(dir)?, &path, flags)?)
            }
            Request::Faccessat {
                dir,
                path,
                mode,
                flags,
            } => done(s.faccessat(self.dir(dir)?, &path, mode, flags))?,
            Request::Mkdirat { dir, path, mode } => done(s.mkdirat(self.dir(dir)?, &path, mode))?,
            Request::Mknodat {
                dir,
                path,
                mode,
                rdev,
            } => done(s.mknodat(self.dir(dir)?, &path, mode, rdev))?,
            Request::Unlinkat { dir, path, flags } => {
                done(s.unlinkat(self.dir(dir)?, &path, flags))?
            }
            Request::Renameat {
                old_dir,
                old,
                new_dir,
                new,
                flags,
            } => done(s.renameat2(self.dir(old_dir)?, &old, self.dir(new_dir)?, &new, flags))?,
            Request::Linkat {
                old_dir,
                old,
                new_dir,
                new,
                flags,
            } => done(s.linkat(self.dir(old_dir)?, &old, self.dir(new_dir)?, &new, flags))?,
            Request::Symlinkat { target, dir, path } => {
                done(s.symlinkat(&target, self.dir(dir)?, &path))?
            }
            Request::Readlinkat { dir, path } => Answer::Text(s.readlinkat(self.dir(dir)?, &path)?),
            Request::Fchmodat {
                dir,
                path,
                mode,
                flags,
            } => done(s.fchmodat(self.dir(dir)?, &path, mode, flags))?,
            Request::Fchmod { fd, mode } => done(s.fchmod(self.own(fd)?.0, mode))?,
            Request::Fchownat {
                dir,
                path,
                uid,
                gid,
                flags,
            } => done(s.fchownat(self.dir(dir)?, &path, uid, gid, flags))?,
            Request::Fchown { fd, uid, gid } => done(s.fchown(self.own(fd)?.0, uid, gid))?,
            Request::Utimensat {
                dir,
                path,
                atime,
                mtime,
                flags,
            } => done(s.utimensat(self.dir(dir)?, &path, atime, mtime, flags))?,
            Request::Futimens { fd, atime, mtime } => {
                done(s.futimens(self.own(fd)?.0, atime, mtime))?
            }
            Request::ReaddirFd { fd, offset } => {
                let mut entries = self.fs.readdir_fd(self.own(fd)?.0, offset)?;
                entries.truncate(MAX_ENTRIES);
                Answer::EntriesAt(entries)
            }
            req => self.xattr_call(req)?,
        })
    }

    /// The extended-attribute calls.
    fn xattr_call(&self, req: Request) -> fs::Result<Answer> {
        let s = self.fs.as_user(&self.cred);
        // A value or a list of names is at most 64 KiB in Linux.
        let sized = |size: u32, f: &dyn Fn(&mut [u8]) -> fs::Result<usize>| {
            let mut buf = vec![0u8; (size as usize).min(XATTR_MAX)];
            let n = f(&mut buf)?;
            Ok::<_, fs::Error>(match size {
                0 => Answer::Count(n as u64),
                _ => {
                    buf.truncate(n);
                    Answer::Data(buf)
                }
            })
        };
        Ok(match req {
            Request::Getxattr { on, name, size } => match self.on(on)? {
                Target::Path(p) => sized(size, &|b| s.getxattr(&p, &name, b))?,
                Target::Link(p) => sized(size, &|b| s.lgetxattr(&p, &name, b))?,
                Target::Fd(fd) => sized(size, &|b| s.fgetxattr(fd, &name, b))?,
            },
            Request::Listxattr { on, size } => match self.on(on)? {
                Target::Path(p) => sized(size, &|b| s.listxattr(&p, b))?,
                Target::Link(p) => sized(size, &|b| s.llistxattr(&p, b))?,
                Target::Fd(fd) => sized(size, &|b| s.flistxattr(fd, b))?,
            },
            Request::Setxattr {
                on,
                name,
                value,
                flags,
            } => done(match self.on(on)? {
                Target::Path(p) => s.setxattr(&p, &name, &value, flags),
                Target::Link(p) => s.lsetxattr(&p, &name, &value, flags),
                Target::Fd(fd) => s.fsetxattr(fd, &name, &value, flags),
            })?,
            Request::Removexattr { on, name } => done(match self.on(on)? {
                Target::Path(p) => s.removexattr(&p, &name),
                Target::Link(p) => s.lremovexattr(&p, &name),
                Target::Fd(fd) => s.fremovexattr(fd, &name),
            })?,
            _ => unreachable!("every other request is answered by Conn::call"),
        })
    }

    /// What an extended-attribute request names, its descriptor checked.
    fn on(&self, on: On) -> fs::Result<Target> {
        Ok(match on {
            On::Path(p) => Target::Path(p),
            On::Link(p) => Target::Link(p),
            On::Fd(fd) => Target::Fd(self.own(fd)?.0),
        })
    }
}

pub(super) fn done(r: fs::Result<()>) -> fs::Result<Answer> {
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
    use super::*;
    use crate::conn::testing::*;
    use crate::wire::LockOwner;

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
            2 => (prop_oneof![Just(1u64), 0..64u64, any::<u64>()], prop_oneof![Just(".".to_string()), "[a-c]{1,2}", ".{0,300}"]).prop_map(|(dir, name)| Request::Lookup { dir, name }),
            1 => fd.clone().prop_map(|fd| Request::Fsync { fd }),
            1 => (path.clone(), any::<u32>()).prop_map(|(path, mode)| Request::Mkdir { path, mode }),
            1 => path.clone().prop_map(|path| Request::Unlink { path }),
            1 => path.clone().prop_map(|path| Request::Rmdir { path }),
            1 => (path.clone(), path.clone(), 0..3u32).prop_map(|(old, new, flags)| Request::Rename {
                old,
                new,
                flags
            }),
            1 => (path.clone(), path.clone()).prop_map(|(old, new)| Request::Link { old, new }),
            1 => (path.clone(), off.clone()).prop_map(|(path, len)| Request::Truncate { path, len }),
            1 => path.clone().prop_map(|path| Request::Readdir { path }),
            2 => (prop::option::of(fd.clone()), path.clone(), 0..4i32).prop_map(|(dir, path, f)| Request::Openat {
                dir,
                path,
                flags: [libc::O_RDWR | libc::O_CREAT, libc::O_RDONLY, libc::O_DIRECTORY, libc::O_PATH][f as usize],
                mode: 0o644,
            }),
            1 => (prop::option::of(fd.clone()), path.clone(), any::<i32>()).prop_map(|(dir, path, flags)| Request::Unlinkat { dir, path, flags }),
            1 => (fd.clone(), any::<bool>(), 0..3u8, 0..3u8, off.clone(), off.clone()).prop_map(|(fd, test, o, k, start, len)| Request::Lock {
                fd,
                test,
                owner: [LockOwner::Process, LockOwner::OpenFile, LockOwner::Flock][o as usize],
                kind: [LockKind::Read, LockKind::Write, LockKind::Unlock][k as usize],
                start,
                len,
            }),
            1 => prop::collection::vec(fd.clone(), 0..3).prop_map(|fds| Request::Handoff { fds }),
            1 => any::<u64>().prop_map(|token| Request::Adopt { token }),
            1 => (any::<u64>(), any::<i32>()).prop_map(|(token, pid)| Request::Heir { token, pid }),
            1 => (fd.clone(), any::<u64>()).prop_map(|(fd, offset)| Request::ReaddirFd { fd, offset }),
            1 => (fd.clone(), any::<i32>(), off.clone(), off.clone()).prop_map(|(fd, mode, off, len)| Request::Fallocate { fd, mode, off, len }),
            1 => (fd.clone(), any::<u32>()).prop_map(|(fd, size)| Request::Getxattr { on: On::Fd(fd), name: "user.a".into(), size }),
            1 => (path.clone(), prop::collection::vec(any::<u8>(), 0..100), any::<i32>()).prop_map(|(p, value, flags)| Request::Setxattr { on: On::Path(p), name: "user.a".into(), value, flags }),
            1 => path.prop_map(|p| Request::Listxattr { on: On::Link(p), size: 4096 }),
            1 => (0..20_000u64).prop_map(|len| Request::Staging { len }),
            1 => (0..4u32).prop_map(|id| Request::DropStaging { id }),
            2 => (fd.clone(), 0..4u32, off.clone(), 0..20_000u64, prop::option::of(off.clone())).prop_map(|(fd, id, at, len, off)| Request::WriteStaged { fd, id, at, len, off }),
            2 => (fd.clone(), 0..4u32, off.clone(), 0..20_000u64, prop::option::of(off.clone())).prop_map(|(fd, id, at, len, off)| Request::ReadStaged { fd, id, at, len, off }),
            2 => (fd.clone(), 0..4u32, off.clone(), 0..20_000u64, off.clone()).prop_map(|(fd, id, at, len, off)| Request::SubmitStaged { fd, id, at, len, off }),
            1 => (any::<u64>(), any::<bool>()).prop_map(|(sn, wait)| Request::Settle { sn, wait }),

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
            engine_copies in any::<bool>(),
        ) {
            let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(32 << 20));
            FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
            // The async mode's copies run on after a submitted write is answered.
            let mode = if engine_copies { fs::Mode::Async } else { fs::Mode::Cpu };
            let options = MountOptions { mode, ..MountOptions::default() };
            let (fs, _) = FileSystem::mount(pm.clone(), options).unwrap();
            let common = Common::default();
            let direct = with_direct.then(|| Direct::new(1 << 16).unwrap());
            {
                let mut conn = Conn::new(&fs, Cred::root(), &common, direct.as_ref());
                for p in &payloads {
                    let (a, _) = conn.answer_bytes(p);
                    prop_assert!(wire::frame(&a).is_ok(), "an answer too long to send");
                }
            }
            // What was handed to a process that never came (this test's pid is 0,
            // which no process has) goes at the server's next sweep.
            common.sweep(&fs);
            prop_assert_eq!(common.handoffs.kept(), 0);
            prop_assert_eq!(common.counts.open.load(Ordering::SeqCst), 0);
            prop_assert_eq!(direct.as_ref().map_or(0, Direct::tables_published), 0);
            prop_assert_eq!(common.counts.clients.load(Ordering::SeqCst), 0);
            fs.unmount().unwrap();
            let report = fs::fsck::check(&*pm).unwrap();
            prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
        }
    }
}
