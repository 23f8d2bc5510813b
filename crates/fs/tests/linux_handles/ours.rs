//! easyio's side: the setup through a root session (umask 0), the steps through a
//! session with the scenario's credentials, on a fresh region.

use fs::{Cred, Fd, FileSystem, OpenFlags, Session, Stat, Time, Whence};

use crate::common::{fresh, MIB};
use crate::{describe_stat, Op, Outcome, Scenario, Slot, T};

struct Ours {
    fds: Vec<Option<Fd>>,
}

fn ok(r: fs::Result<()>) -> Outcome {
    r.map(|()| String::new()).map_err(|e| e.errno())
}

fn describe(st: fs::Result<Stat>) -> Outcome {
    let st = st.map_err(|e| e.errno())?;
    Ok(describe_stat(
        st.mode,
        st.nlink as u64,
        st.uid,
        st.gid,
        st.size,
        st.rdev,
    ))
}

/// A `getxattr` answer: its length, and the value when one was copied.
fn value(r: fs::Result<usize>, buf: &[u8]) -> Outcome {
    let r = r.map_err(|e| e.errno())?;
    Ok(format!(
        "{r}: {}",
        String::from_utf8_lossy(&buf[..r.min(buf.len())])
    ))
}

fn id(v: i64) -> Option<u32> {
    (v >= 0).then_some(v as u32)
}

fn time(t: T) -> Option<Time> {
    match t {
        T::Now => Some(Time::Now),
        T::Omit => None,
        T::At(s) => Some(Time::At(s * 1_000_000_000)),
    }
}

/// A bad descriptor for an empty slot (EBADF, as the kernel's -1).
const NO_FD: Fd = Fd(u32::MAX);

impl Ours {
    fn fd(&self, slot: Slot) -> Fd {
        self.fds.get(slot).copied().flatten().unwrap_or(NO_FD)
    }

    fn dirfd(&self, slot: Option<Slot>) -> Option<Fd> {
        slot.map(|s| self.fd(s))
    }

    fn open(
        &mut self,
        s: &Session<'_>,
        slot: Slot,
        dir: Option<Slot>,
        p: &str,
        flags: i32,
        mode: u32,
    ) -> Outcome {
        let fd = s
            .openat(self.dirfd(dir), p, OpenFlags(flags), mode)
            .map_err(|e| e.errno())?;
        if self.fds.len() <= slot {
            self.fds.resize(slot + 1, None);
        }
        if let Some(old) = self.fds[slot].replace(fd) {
            s.fs().close(old).unwrap();
        }
        Ok(String::new())
    }

    fn put(s: &Session<'_>, p: &str, mode: u32, data: &[u8]) -> Outcome {
        let flags = OpenFlags::CREAT | OpenFlags::WRONLY | OpenFlags::TRUNC;
        let fd = s.open(p, flags, mode).map_err(|e| e.errno())?;
        let r = s.fs().write(fd, data);
        s.fs().close(fd).unwrap();
        r.map(|_| String::new()).map_err(|e| e.errno())
    }

    fn pread(&self, fs: &FileSystem, slot: Slot, n: usize) -> Outcome {
        let mut buf = vec![0u8; n];
        let r = fs
            .pread(self.fd(slot), &mut buf, 0)
            .map_err(|e| e.errno())?;
        buf.truncate(r);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    #[allow(clippy::too_many_lines)]
    fn run(&mut self, s: &Session<'_>, op: &Op) -> Outcome {
        use Op::*;
        let fs = s.fs();
        match op {
            Mkdir(p, m) => ok(s.mkdir(p, *m)),
            MkdirAt(d, p, m) => ok(s.mkdirat(self.dirfd(*d), p, *m)),
            Put(p, m, data) => Self::put(s, p, *m, data),
            Open(slot, d, p, f, m) => self.open(s, *slot, *d, p, *f, *m),
            Close(slot) => {
                let fd = self
                    .fds
                    .get_mut(*slot)
                    .and_then(Option::take)
                    .unwrap_or(NO_FD);
                ok(fs.close(fd))
            }
            Write(slot, data) => fs
                .write(self.fd(*slot), data)
                .map(|n| n.to_string())
                .map_err(|e| e.errno()),
            Pread(slot, n) => self.pread(fs, *slot, *n),
            Stat(p) => describe(s.stat(p)),
            Lstat(p) => describe(s.lstat(p)),
            Fstat(slot) => describe(s.fstat(self.fd(*slot))),
            FstatAt(d, p, f) => describe(s.fstatat(self.dirfd(*d), p, *f)),
            Chmod(p, m) => ok(s.chmod(p, *m)),
            Fchmod(slot, m) => ok(s.fchmod(self.fd(*slot), *m)),
            FchmodAt(d, p, m, f) => ok(s.fchmodat(self.dirfd(*d), p, *m, *f)),
            Chown(p, u, g) => ok(s.chown(p, id(*u), id(*g))),
            Lchown(p, u, g) => ok(s.lchown(p, id(*u), id(*g))),
            Fchown(slot, u, g) => ok(s.fchown(self.fd(*slot), id(*u), id(*g))),
            FchownAt(d, p, u, g, f) => ok(s.fchownat(self.dirfd(*d), p, id(*u), id(*g), *f)),
            UtimensAt(d, p, a, m, f) => ok(s.utimensat(self.dirfd(*d), p, time(*a), time(*m), *f)),
            Futimens(slot, a, m) => ok(s.futimens(self.fd(*slot), time(*a), time(*m))),
            Times(p) => {
                let st = s.lstat(p).map_err(|e| e.errno())?;
                Ok(crate::times(
                    st.atime_ns.div_euclid(1_000_000_000),
                    st.mtime_ns.div_euclid(1_000_000_000),
                ))
            }
            Truncate(p, n) => ok(s.truncate(p, *n)),
            Ftruncate(slot, n) => ok(s.ftruncate(self.fd(*slot), *n)),
            Unlink(p) => ok(s.unlink(p)),
            Rmdir(p) => ok(s.rmdir(p)),
            UnlinkAt(d, p, f) => ok(s.unlinkat(self.dirfd(*d), p, *f)),
            Link(a, b) => ok(s.link(a, b)),
            LinkAt(da, a, db, b, f) => ok(s.linkat(self.dirfd(*da), a, self.dirfd(*db), b, *f)),
            Symlink(t, p) => ok(s.symlink(t, p)),
            SymlinkAt(t, d, p) => ok(s.symlinkat(t, self.dirfd(*d), p)),
            Readlink(p) => s.readlink(p).map_err(|e| e.errno()),
            ReadlinkAt(d, p) => s.readlinkat(self.dirfd(*d), p).map_err(|e| e.errno()),
            Rename(a, b) => ok(s.rename(a, b)),
            RenameAt2(da, a, db, b, f) => {
                ok(s.renameat2(self.dirfd(*da), a, self.dirfd(*db), b, *f))
            }
            Mknod(p, m, dev) => ok(s.mknod(p, *m, *dev)),
            MknodAt(d, p, m, dev) => ok(s.mknodat(self.dirfd(*d), p, *m, *dev)),
            List(p) => {
                let names: Vec<String> = s
                    .readdir(p)
                    .map_err(|e| e.errno())?
                    .into_iter()
                    .map(|e| e.name)
                    .collect();
                Ok(names.join(" "))
            }
            SetXattr(p, n, v, f) => ok(s.setxattr(p, n, v, *f)),
            FsetXattr(slot, n, v, f) => ok(s.fsetxattr(self.fd(*slot), n, v, *f)),
            GetXattr(p, n, size) => {
                let mut buf = vec![0u8; *size];
                value(s.getxattr(p, n, &mut buf), &buf)
            }
            FgetXattr(slot, n, size) => {
                let mut buf = vec![0u8; *size];
                value(s.fgetxattr(self.fd(*slot), n, &mut buf), &buf)
            }
            ListXattr(p, size) => {
                let mut buf = vec![0u8; *size];
                let r = s.listxattr(p, &mut buf).map_err(|e| e.errno())?;
                Ok(crate::describe_list(r, &buf[..r.min(*size)]))
            }
            RemoveXattr(p, n) => ok(s.removexattr(p, n)),
            Fallocate(slot, m, off, len) => ok(s.fallocate(self.fd(*slot), *m, *off, *len)),
            Seek(slot, off, w) => {
                let whence = match *w {
                    libc::SEEK_SET => Whence::Set,
                    libc::SEEK_CUR => Whence::Cur,
                    libc::SEEK_END => Whence::End,
                    libc::SEEK_DATA => Whence::Data,
                    _ => Whence::Hole,
                };
                s.lseek(self.fd(*slot), *off, whence)
                    .map(|n| n.to_string())
                    .map_err(|e| e.errno())
            }
        }
    }
}

/// Runs the scenario on easyio; the outcomes in step order, as the kernel's side
/// prints them.
pub fn run(s: &Scenario) -> Vec<String> {
    let pm = fresh(16 * MIB);
    let fs = crate::common::mount(&pm);
    let mut o = Ours { fds: Vec::new() };
    let root = fs.as_user(&Cred::root());
    for op in &s.setup {
        o.run(&root, op)
            .unwrap_or_else(|e| panic!("setup {op:?}: errno {e}"));
    }
    let user = fs.as_user(&s.cred);
    let out = s
        .steps
        .iter()
        .map(|op| format!("{:?}", o.run(&user, op)))
        .collect();
    for fd in o.fds.into_iter().flatten() {
        fs.close(fd).unwrap();
    }
    fs.unmount().unwrap();
    crate::common::assert_fsck_clean(&pm);
    out
}
