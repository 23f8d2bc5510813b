//! The kernel's side: a forked child makes the calls in a fresh directory of the
//! temporary file system — the setup as root with umask 0, then the steps as the
//! scenario's user (setgroups, setgid, setuid: a real unprivileged process) — and
//! sends the outcomes back through a pipe.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use crate::{describe_stat, Op, Outcome, Scenario, Slot, T};

struct Host {
    root: PathBuf,
    root_fd: RawFd,
    fds: Vec<Option<RawFd>>,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn check(r: libc::c_int) -> Result<(), i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

fn ok(r: Result<(), i32>) -> Outcome {
    r.map(|()| String::new())
}

/// A `getxattr` answer: its length, and the value when one was copied.
fn value(r: isize, buf: &[u8]) -> Outcome {
    if r < 0 {
        return Err(errno());
    }
    let n = (r as usize).min(buf.len());
    Ok(format!("{r}: {}", String::from_utf8_lossy(&buf[..n])))
}

fn id(v: i64) -> u32 {
    if v < 0 {
        u32::MAX
    } else {
        v as u32
    }
}

fn ts(t: T) -> libc::timespec {
    match t {
        T::Now => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        T::Omit => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        T::At(s) => libc::timespec {
            tv_sec: s,
            tv_nsec: 0,
        },
    }
}

fn describe(st: &libc::stat) -> String {
    describe_stat(
        st.st_mode,
        st.st_nlink,
        st.st_uid,
        st.st_gid,
        st.st_size as u64,
        st.st_rdev,
    )
}

impl Host {
    /// A path of the scenario as the kernel names it: absolute ones under the root,
    /// relative ones as they are.
    fn c(&self, p: &str) -> CString {
        let mut s = if let Some(rel) = p.strip_prefix('/') {
            let mut s = self.root.as_os_str().as_encoded_bytes().to_vec();
            s.push(b'/');
            s.extend_from_slice(rel.as_bytes());
            s
        } else {
            p.as_bytes().to_vec()
        };
        if s.len() > 1 && s.ends_with(b"/") && !p.ends_with('/') {
            s.pop();
        }
        CString::new(s).unwrap()
    }

    fn dirfd(&self, slot: Option<Slot>) -> RawFd {
        match slot {
            None => self.root_fd,
            Some(s) => self.fds.get(s).copied().flatten().unwrap_or(-1),
        }
    }

    fn fd(&self, slot: Slot) -> RawFd {
        self.fds.get(slot).copied().flatten().unwrap_or(-1)
    }

    fn stat_at(&self, dirfd: RawFd, p: &str, flags: i32) -> Outcome {
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a stat buffer that outlives the call.
        check(unsafe { libc::fstatat(dirfd, self.c(p).as_ptr(), &mut st, flags) })?;
        Ok(describe(&st))
    }

    fn open(&mut self, slot: Slot, dir: Option<Slot>, p: &str, flags: i32, mode: u32) -> Outcome {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::openat(self.dirfd(dir), self.c(p).as_ptr(), flags, mode) };
        if fd < 0 {
            return Err(errno());
        }
        if self.fds.len() <= slot {
            self.fds.resize(slot + 1, None);
        }
        if let Some(old) = self.fds[slot].replace(fd) {
            // SAFETY: a descriptor this scenario opened.
            unsafe { libc::close(old) };
        }
        Ok(String::new())
    }

    fn put(&mut self, p: &str, mode: u32, data: &[u8]) -> Outcome {
        let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(self.c(p).as_ptr(), flags, mode) };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: `fd` is open; `data` outlives the call.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        if n < 0 {
            return Err(errno());
        }
        Ok(String::new())
    }

    fn pread(&self, slot: Slot, n: usize) -> Outcome {
        let mut buf = vec![0u8; n];
        // SAFETY: `buf` outlives the call.
        let r = unsafe { libc::pread(self.fd(slot), buf.as_mut_ptr().cast(), n, 0) };
        if r < 0 {
            return Err(errno());
        }
        buf.truncate(r as usize);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    fn times(&self, p: &str) -> Outcome {
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: NUL-terminated path, buffer outlives the call.
        check(unsafe { libc::lstat(self.c(p).as_ptr(), &mut st) })?;
        Ok(crate::times(st.st_atime, st.st_mtime))
    }

    fn list(&self, p: &str) -> Outcome {
        let path = if p == "/" {
            self.root.clone()
        } else {
            Path::new(std::str::from_utf8(self.c(p).as_bytes()).unwrap()).to_path_buf()
        };
        let rd = std::fs::read_dir(path).map_err(|e| e.raw_os_error().unwrap())?;
        let mut names: Vec<String> = rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names.join(" "))
    }

    fn readlink_at(&self, dirfd: RawFd, p: &str) -> Outcome {
        let mut buf = vec![0u8; 4096];
        // SAFETY: NUL-terminated path, buffer outlives the call.
        let n = unsafe {
            libc::readlinkat(
                dirfd,
                self.c(p).as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(errno());
        }
        buf.truncate(n as usize);
        Ok(String::from_utf8(buf).unwrap())
    }

    #[allow(clippy::too_many_lines)]
    fn run(&mut self, op: &Op) -> Outcome {
        use Op::*;
        let r = self.root_fd;
        // SAFETY: every call below gets NUL-terminated paths from `c`, buffers that
        // outlive the call, descriptors this scenario opened (or -1: EBADF).
        unsafe {
            match op {
                Mkdir(p, m) => ok(check(libc::mkdir(self.c(p).as_ptr(), *m))),
                MkdirAt(d, p, m) => {
                    ok(check(libc::mkdirat(self.dirfd(*d), self.c(p).as_ptr(), *m)))
                }
                Put(p, m, data) => self.put(p, *m, data),
                Open(s, d, p, f, m) => self.open(*s, *d, p, *f, *m),
                Close(s) => {
                    let fd = self.fds.get_mut(*s).and_then(Option::take).unwrap_or(-1);
                    ok(check(libc::close(fd)))
                }
                Write(s, data) => {
                    let n = libc::write(self.fd(*s), data.as_ptr().cast(), data.len());
                    if n < 0 {
                        Err(errno())
                    } else {
                        Ok(n.to_string())
                    }
                }
                Pread(s, n) => self.pread(*s, *n),
                Stat(p) => self.stat_at(r, p, 0),
                Lstat(p) => self.stat_at(r, p, libc::AT_SYMLINK_NOFOLLOW),
                Fstat(s) => self.stat_at(self.fd(*s), "", libc::AT_EMPTY_PATH),
                FstatAt(d, p, f) => self.stat_at(self.dirfd(*d), p, *f),
                Chmod(p, m) => ok(check(libc::chmod(self.c(p).as_ptr(), *m))),
                Fchmod(s, m) => ok(check(libc::fchmod(self.fd(*s), *m))),
                FchmodAt(d, p, m, f) => ok(check(libc::fchmodat(
                    self.dirfd(*d),
                    self.c(p).as_ptr(),
                    *m,
                    *f,
                ))),
                Chown(p, u, g) => ok(check(libc::chown(self.c(p).as_ptr(), id(*u), id(*g)))),
                Lchown(p, u, g) => ok(check(libc::lchown(self.c(p).as_ptr(), id(*u), id(*g)))),
                Fchown(s, u, g) => ok(check(libc::fchown(self.fd(*s), id(*u), id(*g)))),
                FchownAt(d, p, u, g, f) => ok(check(libc::fchownat(
                    self.dirfd(*d),
                    self.c(p).as_ptr(),
                    id(*u),
                    id(*g),
                    *f,
                ))),
                UtimensAt(d, p, a, m, f) => {
                    let t = [ts(*a), ts(*m)];
                    ok(check(libc::utimensat(
                        self.dirfd(*d),
                        self.c(p).as_ptr(),
                        t.as_ptr(),
                        *f,
                    )))
                }
                Futimens(s, a, m) => {
                    let t = [ts(*a), ts(*m)];
                    ok(check(libc::futimens(self.fd(*s), t.as_ptr())))
                }
                Times(p) => self.times(p),
                Truncate(p, n) => ok(check(libc::truncate(self.c(p).as_ptr(), *n as i64))),
                Ftruncate(s, n) => ok(check(libc::ftruncate(self.fd(*s), *n as i64))),
                Unlink(p) => ok(check(libc::unlink(self.c(p).as_ptr()))),
                Rmdir(p) => ok(check(libc::rmdir(self.c(p).as_ptr()))),
                UnlinkAt(d, p, f) => ok(check(libc::unlinkat(
                    self.dirfd(*d),
                    self.c(p).as_ptr(),
                    *f,
                ))),
                Link(a, b) => ok(check(libc::link(self.c(a).as_ptr(), self.c(b).as_ptr()))),
                LinkAt(da, a, db, b, f) => ok(check(libc::linkat(
                    self.dirfd(*da),
                    self.c(a).as_ptr(),
                    self.dirfd(*db),
                    self.c(b).as_ptr(),
                    *f,
                ))),
                Symlink(t, p) => {
                    let t = CString::new(*t).unwrap();
                    ok(check(libc::symlink(t.as_ptr(), self.c(p).as_ptr())))
                }
                SymlinkAt(t, d, p) => {
                    let t = CString::new(*t).unwrap();
                    ok(check(libc::symlinkat(
                        t.as_ptr(),
                        self.dirfd(*d),
                        self.c(p).as_ptr(),
                    )))
                }
                Readlink(p) => self.readlink_at(r, p),
                ReadlinkAt(d, p) => self.readlink_at(self.dirfd(*d), p),
                Rename(a, b) => ok(check(libc::rename(self.c(a).as_ptr(), self.c(b).as_ptr()))),
                RenameAt2(da, a, db, b, f) => ok(check(libc::renameat2(
                    self.dirfd(*da),
                    self.c(a).as_ptr(),
                    self.dirfd(*db),
                    self.c(b).as_ptr(),
                    *f,
                ))),
                Mknod(p, m, dev) => ok(check(libc::mknod(self.c(p).as_ptr(), *m, *dev))),
                MknodAt(d, p, m, dev) => ok(check(libc::mknodat(
                    self.dirfd(*d),
                    self.c(p).as_ptr(),
                    *m,
                    *dev,
                ))),
                List(p) => self.list(p),
                SetXattr(p, n, v, f) => {
                    let n = CString::new(*n).unwrap();
                    ok(check(libc::setxattr(
                        self.c(p).as_ptr(),
                        n.as_ptr(),
                        v.as_ptr().cast(),
                        v.len(),
                        *f,
                    )))
                }
                FsetXattr(s, n, v, f) => {
                    let n = CString::new(*n).unwrap();
                    ok(check(libc::fsetxattr(
                        self.fd(*s),
                        n.as_ptr(),
                        v.as_ptr().cast(),
                        v.len(),
                        *f,
                    )))
                }
                GetXattr(p, n, size) => {
                    let n = CString::new(*n).unwrap();
                    let mut buf = vec![0u8; *size];
                    let r = libc::getxattr(
                        self.c(p).as_ptr(),
                        n.as_ptr(),
                        buf.as_mut_ptr().cast(),
                        *size,
                    );
                    value(r, &buf)
                }
                FgetXattr(s, n, size) => {
                    let n = CString::new(*n).unwrap();
                    let mut buf = vec![0u8; *size];
                    let r =
                        libc::fgetxattr(self.fd(*s), n.as_ptr(), buf.as_mut_ptr().cast(), *size);
                    value(r, &buf)
                }
                ListXattr(p, size) => {
                    let mut buf = vec![0u8; *size];
                    let r = libc::listxattr(self.c(p).as_ptr(), buf.as_mut_ptr().cast(), *size);
                    if r < 0 {
                        return Err(errno());
                    }
                    let n = (r as usize).min(*size);
                    Ok(crate::describe_list(r as usize, &buf[..n]))
                }
                RemoveXattr(p, n) => {
                    let n = CString::new(*n).unwrap();
                    ok(check(libc::removexattr(self.c(p).as_ptr(), n.as_ptr())))
                }
                Fallocate(s, m, off, len) => ok(check(libc::fallocate(
                    self.fd(*s),
                    *m,
                    *off as i64,
                    *len as i64,
                ))),
                Seek(s, off, w) => {
                    let r = libc::lseek(self.fd(*s), *off, *w);
                    if r < 0 {
                        Err(errno())
                    } else {
                        Ok(r.to_string())
                    }
                }
            }
        }
    }
}

/// Drops the child to `cred`: supplementary groups, then group, then user (all three
/// ids, so nothing of root is left), then its umask.
fn become_user(cred: &fs::Cred) -> Result<(), i32> {
    // SAFETY: plain system calls on this (child) process.
    unsafe {
        check(libc::setgroups(cred.groups.len(), cred.groups.as_ptr()))?;
        check(libc::setresgid(cred.gid, cred.gid, cred.gid))?;
        check(libc::setresuid(cred.uid, cred.uid, cred.uid))?;
        libc::umask(cred.umask);
    }
    Ok(())
}

/// The child: setup, become the user, steps; every outcome as one line.
fn child(root: &Path, s: &Scenario) -> String {
    let croot = CString::new(root.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    let root_fd = unsafe { libc::open(croot.as_ptr(), libc::O_PATH | libc::O_DIRECTORY) };
    assert!(root_fd >= 0);
    let mut h = Host {
        root: root.to_path_buf(),
        root_fd,
        fds: Vec::new(),
    };
    // SAFETY: sets this process's umask.
    unsafe { libc::umask(0) };
    for op in &s.setup {
        h.run(op)
            .unwrap_or_else(|e| panic!("setup {op:?}: errno {e}"));
    }
    become_user(&s.cred).expect("dropping to the scenario's user");
    let mut out = String::new();
    for op in &s.steps {
        out.push_str(&format!("{:?}\n", h.run(op)));
    }
    out
}

/// Runs the scenario on the kernel; the outcomes in step order.
pub fn run(s: &Scenario) -> Vec<String> {
    let root = std::env::temp_dir().join(format!(
        "easyio-linux-handles-{}-{}",
        std::process::id(),
        s.name
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir(&root).unwrap();
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two ends.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only makes system calls, allocates (glibc's malloc is safe
    // after fork) and writes to the pipe, then `_exit`s without unwinding.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let out = std::panic::catch_unwind(|| child(&root, s))
            .unwrap_or_else(|_| "child panicked\n".to_string());
        let mut rest = out.as_bytes();
        while !rest.is_empty() {
            // SAFETY: the write end of the pipe; `rest` outlives the call.
            let n = unsafe { libc::write(fds[1], rest.as_ptr().cast(), rest.len()) };
            if n <= 0 {
                break;
            }
            rest = &rest[n as usize..];
        }
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: the parent's copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: the read end; `buf` outlives the call.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    let mut status = 0;
    // SAFETY: our child; `status` outlives the call.
    unsafe {
        libc::close(fds[0]);
        libc::waitpid(pid, &mut status, 0);
    }
    std::fs::remove_dir_all(&root).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(!text.starts_with("child panicked"), "{}: {text}", s.name);
    text.lines().map(str::to_string).collect()
}
