//! Extended attributes, `fallocate` and `SEEK_DATA`/`SEEK_HOLE` run twice: on the
//! kernel's tmpfs (a directory in /dev/shm) and on easyio. Every call's return value
//! and errno must be the same, and so must the files' contents and allocated blocks
//! afterwards. Skipped (saying so) where /dev/shm is not a tmpfs that takes `user.*`
//! attributes.
//!
//! Not compared, because easyio differs on purpose (see the module docs of `fs::xattr`
//! and `fs::space`): `system.posix_acl_*` (easyio: EOPNOTSUPP), the order `listxattr`
//! gives names in (compared sorted), and `SEEK_DATA` over preallocated, never written
//! ranges (easyio: data).

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::*;
use fs::{Fd, FileSystem, OpenFlags, Whence};

/// Which inode an extended-attribute call names.
#[derive(Clone, Copy, Debug)]
enum At {
    /// A path, a final symlink followed.
    Path(&'static str),
    /// A path, a final symlink not followed (the `l*` calls).
    NoFollow(&'static str),
    /// The descriptor opened by the `n`th `Open` (the `f*` calls).
    Fd(usize),
}

/// One call; paths are relative to the scenario's root.
#[derive(Clone, Debug)]
enum Op {
    Write(&'static str, Vec<u8>),
    Mkdir(&'static str),
    Symlink(&'static str, &'static str),
    Truncate(&'static str, u64),
    Unlink(&'static str),
    /// Opens with these flags; the descriptor gets the next slot.
    Open(&'static str, i32),
    Set(At, String, Vec<u8>, i32),
    /// Get into a buffer of this size (0: ask for the size).
    Get(At, String, usize),
    List(At, usize),
    Remove(At, String),
    Fallocate(usize, i32, u64, u64),
    Seek(usize, i64, i32),
    /// The file's contents and its allocated 512-byte blocks.
    Read(&'static str),
}

/// What a call gave: an errno, or bytes (values, lists, sizes and offsets as text).
type Outcome = Result<Vec<u8>, i32>;

fn text(v: impl std::fmt::Display) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// A list of names as returned, sorted, with the length the call returned.
fn sorted_list(buf: &[u8], n: usize) -> Vec<u8> {
    let mut names: Vec<&[u8]> = buf[..n].split(|&b| b == 0).collect();
    names.sort();
    let mut out = text(n);
    for name in names {
        out.push(b'|');
        out.extend_from_slice(name);
    }
    out
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

/// Calls returning -1 and errno, as outcomes.
fn host_result(r: isize) -> Result<usize, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

struct Host {
    root: PathBuf,
    fds: Vec<i32>,
}

impl Host {
    fn c(&self, p: &str) -> CString {
        let path = self.root.join(p.trim_start_matches('/'));
        CString::new(path.as_os_str().as_bytes()).unwrap()
    }

    fn run(&mut self, op: &Op) -> Option<Outcome> {
        let path = |p: &str| self.root.join(p.trim_start_matches('/'));
        match op {
            Op::Write(p, data) => std::fs::write(path(p), data).unwrap(),
            Op::Mkdir(p) => std::fs::create_dir(path(p)).unwrap(),
            Op::Symlink(t, p) => std::os::unix::fs::symlink(t, path(p)).unwrap(),
            Op::Truncate(p, len) => std::fs::File::options()
                .write(true)
                .open(path(p))
                .unwrap()
                .set_len(*len)
                .unwrap(),
            Op::Unlink(p) => std::fs::remove_file(path(p)).unwrap(),
            Op::Open(p, flags) => {
                // SAFETY: a NUL-terminated path; descriptors are closed at the end.
                let fd = unsafe { libc::open(self.c(p).as_ptr(), *flags, 0o644) };
                assert!(fd >= 0, "open {p}: {}", errno());
                self.fds.push(fd);
            }
            Op::Read(p) => {
                let data = std::fs::read(path(p)).unwrap();
                let meta = std::fs::metadata(path(p)).unwrap();
                return Some(Ok(read_outcome(
                    &data,
                    std::os::unix::fs::MetadataExt::blocks(&meta),
                )));
            }
            Op::Set(..) | Op::Get(..) | Op::List(..) | Op::Remove(..) => {
                return Some(self.xattr(op));
            }
            Op::Fallocate(fd, mode, off, len) => {
                // SAFETY: plain syscall on a descriptor this test opened.
                let r = unsafe {
                    libc::fallocate(self.fds[*fd], *mode, *off as i64, *len as i64) as isize
                };
                return Some(host_result(r).map(|_| Vec::new()));
            }
            Op::Seek(fd, off, whence) => {
                // SAFETY: plain syscall on a descriptor this test opened.
                let r = unsafe { libc::lseek(self.fds[*fd], *off, *whence) as isize };
                return Some(host_result(r).map(text));
            }
        }
        None
    }

    fn xattr(&self, op: &Op) -> Outcome {
        let name = |n: &str| CString::new(n).unwrap();
        let path = |at: At| match at {
            At::Path(x) | At::NoFollow(x) => self.c(x),
            At::Fd(_) => CString::default(),
        };
        let fd = |at: At| match at {
            At::Fd(i) => self.fds[i],
            _ => -1,
        };
        match op {
            Op::Set(at, n, v, flags) => {
                let (n, p, c) = (name(n), v.as_ptr().cast(), path(*at));
                // SAFETY: NUL-terminated path and name, a value of its true length, a
                // descriptor this test opened.
                let r = unsafe {
                    match *at {
                        At::Path(_) => libc::setxattr(c.as_ptr(), n.as_ptr(), p, v.len(), *flags),
                        At::NoFollow(_) => {
                            libc::lsetxattr(c.as_ptr(), n.as_ptr(), p, v.len(), *flags)
                        }
                        At::Fd(_) => libc::fsetxattr(fd(*at), n.as_ptr(), p, v.len(), *flags),
                    }
                };
                host_result(r as isize).map(|_| Vec::new())
            }
            Op::Get(at, n, size) => {
                let (n, c) = (name(n), path(*at));
                let mut buf = vec![0u8; *size];
                let p = buf.as_mut_ptr().cast();
                // SAFETY: NUL-terminated path and name, a buffer of its true length, a
                // descriptor this test opened.
                let r = unsafe {
                    match *at {
                        At::Path(_) => libc::getxattr(c.as_ptr(), n.as_ptr(), p, *size),
                        At::NoFollow(_) => libc::lgetxattr(c.as_ptr(), n.as_ptr(), p, *size),
                        At::Fd(_) => libc::fgetxattr(fd(*at), n.as_ptr(), p, *size),
                    }
                };
                host_result(r).map(|len| get_outcome(&buf, *size, len))
            }
            Op::List(at, size) => {
                let c = path(*at);
                let mut buf = vec![0u8; *size];
                let p = buf.as_mut_ptr().cast();
                // SAFETY: a NUL-terminated path, a buffer of its true length, a
                // descriptor this test opened.
                let r = unsafe {
                    match *at {
                        At::Path(_) => libc::listxattr(c.as_ptr(), p, *size),
                        At::NoFollow(_) => libc::llistxattr(c.as_ptr(), p, *size),
                        At::Fd(_) => libc::flistxattr(fd(*at), p, *size),
                    }
                };
                host_result(r).map(|len| list_outcome(&buf, *size, len))
            }
            Op::Remove(at, n) => {
                let (n, c) = (name(n), path(*at));
                // SAFETY: NUL-terminated path and name, a descriptor this test opened.
                let r = unsafe {
                    match *at {
                        At::Path(_) => libc::removexattr(c.as_ptr(), n.as_ptr()),
                        At::NoFollow(_) => libc::lremovexattr(c.as_ptr(), n.as_ptr()),
                        At::Fd(_) => libc::fremovexattr(fd(*at), n.as_ptr()),
                    }
                };
                host_result(r as isize).map(|_| Vec::new())
            }
            _ => unreachable!(),
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for &fd in &self.fds {
            // SAFETY: a descriptor this test opened, closed once.
            unsafe { libc::close(fd) };
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn get_outcome(buf: &[u8], size: usize, len: usize) -> Vec<u8> {
    if size == 0 {
        text(len)
    } else {
        buf[..len].to_vec()
    }
}

fn list_outcome(buf: &[u8], size: usize, len: usize) -> Vec<u8> {
    if size == 0 {
        text(len)
    } else {
        sorted_list(buf, len)
    }
}

fn read_outcome(data: &[u8], blocks: u64) -> Vec<u8> {
    let mut out = text(format!("{blocks} blocks|"));
    out.extend_from_slice(data);
    out
}

struct Easyio {
    fs: FileSystem,
    fds: Vec<Fd>,
    _pm: std::sync::Arc<dyn pmem::Pmem>,
}

impl Easyio {
    fn run(&mut self, op: &Op) -> Option<Outcome> {
        let fs = &self.fs;
        match op {
            Op::Write(p, data) => write_file(fs, p, data),
            Op::Mkdir(p) => fs.mkdir(p, 0o755).unwrap(),
            Op::Symlink(t, p) => fs.symlink(t, p).unwrap(),
            Op::Truncate(p, len) => fs.truncate(p, *len).unwrap(),
            Op::Unlink(p) => fs.unlink(p).unwrap(),
            Op::Open(p, flags) => self.fds.push(fs.open(p, OpenFlags(*flags), 0o644).unwrap()),
            Op::Read(p) => {
                let blocks = fs.stat(p).unwrap().blocks;
                return Some(Ok(read_outcome(&read_file(fs, p), blocks)));
            }
            Op::Set(..) | Op::Get(..) | Op::List(..) | Op::Remove(..) => {
                return Some(self.xattr(op).map_err(|e| e.errno()));
            }
            Op::Fallocate(fd, mode, off, len) => {
                let r = fs.fallocate(self.fds[*fd], *mode, *off, *len);
                return Some(r.map(|_| Vec::new()).map_err(|e| e.errno()));
            }
            Op::Seek(fd, off, whence) => {
                let whence = match *whence {
                    libc::SEEK_DATA => Whence::Data,
                    libc::SEEK_HOLE => Whence::Hole,
                    libc::SEEK_SET => Whence::Set,
                    _ => unreachable!(),
                };
                let r = fs.lseek(self.fds[*fd], *off, whence);
                return Some(r.map(text).map_err(|e| e.errno()));
            }
        }
        None
    }

    fn xattr(&self, op: &Op) -> fs::Result<Vec<u8>> {
        let fs = &self.fs;
        match op {
            Op::Set(at, n, v, flags) => match *at {
                At::Path(x) => fs.setxattr(x, n, v, *flags),
                At::NoFollow(x) => fs.lsetxattr(x, n, v, *flags),
                At::Fd(i) => fs.fsetxattr(self.fds[i], n, v, *flags),
            }
            .map(|_| Vec::new()),
            Op::Get(at, n, size) => {
                let mut buf = vec![0u8; *size];
                let len = match *at {
                    At::Path(x) => fs.getxattr(x, n, &mut buf),
                    At::NoFollow(x) => fs.lgetxattr(x, n, &mut buf),
                    At::Fd(i) => fs.fgetxattr(self.fds[i], n, &mut buf),
                }?;
                Ok(get_outcome(&buf, *size, len))
            }
            Op::List(at, size) => {
                let mut buf = vec![0u8; *size];
                let len = match *at {
                    At::Path(x) => fs.listxattr(x, &mut buf),
                    At::NoFollow(x) => fs.llistxattr(x, &mut buf),
                    At::Fd(i) => fs.flistxattr(self.fds[i], &mut buf),
                }?;
                Ok(list_outcome(&buf, *size, len))
            }
            Op::Remove(at, n) => match *at {
                At::Path(x) => fs.removexattr(x, n),
                At::NoFollow(x) => fs.lremovexattr(x, n),
                At::Fd(i) => fs.fremovexattr(self.fds[i], n),
            }
            .map(|_| Vec::new()),
            _ => unreachable!(),
        }
    }
}

/// A directory for the kernel's side on a tmpfs that takes `user.*` attributes, or
/// `None` (the test is skipped) where there is none.
fn tmpfs_root(name: &str) -> Option<PathBuf> {
    let shm = Path::new("/dev/shm");
    let c = CString::new("/dev/shm").unwrap();
    // SAFETY: plain old data, filled by the call below.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statfs we own.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut sfs) };
    if r != 0 || sfs.f_type != libc::TMPFS_MAGIC {
        return None;
    }
    let root = shm.join(format!("easyio-linux-xattr-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir(&root).unwrap();
    let probe = CString::new(root.as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated strings and a one-byte value.
    let r = unsafe {
        libc::setxattr(
            probe.as_ptr(),
            c"user.probe".as_ptr(),
            [1u8].as_ptr().cast(),
            1,
            0,
        )
    };
    if r != 0 {
        let _ = std::fs::remove_dir_all(&root);
        return None;
    }
    // SAFETY: as above.
    unsafe { libc::removexattr(probe.as_ptr(), c"user.probe".as_ptr()) };
    Some(root)
}

/// Runs `ops` on both sides and compares every outcome.
fn agree(name: &str, ops: &[Op]) {
    let Some(root) = tmpfs_root(name) else {
        testkit::skip(format_args!(
            "{name}: /dev/shm is not a tmpfs with user extended attributes"
        ));
        return;
    };
    let mut host = Host {
        root,
        fds: Vec::new(),
    };
    let pm = fresh(16 * MIB);
    let mut ours = Easyio {
        fs: mount(&pm),
        fds: Vec::new(),
        _pm: pm.clone(),
    };
    for (i, op) in ops.iter().enumerate() {
        let want = host.run(op);
        let got = ours.run(op);
        let show = |o: &Option<Outcome>| match o {
            Some(Ok(b)) if b.len() > 80 => format!(
                "Ok({:?}… {} bytes)",
                String::from_utf8_lossy(&b[..24]),
                b.len()
            ),
            Some(Ok(b)) => format!("Ok({:?})", String::from_utf8_lossy(b)),
            other => format!("{other:?}"),
        };
        assert!(
            got == want,
            "{name}: step {i} {:?}: easyio {} but the kernel {}",
            short(op),
            show(&got),
            show(&want)
        );
    }
    let Easyio { fs, fds, .. } = ours;
    for fd in fds {
        fs.close(fd).unwrap();
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

fn short(op: &Op) -> String {
    let s = format!("{op:?}");
    if s.len() > 160 {
        format!("{}…", &s[..160])
    } else {
        s
    }
}

fn s(x: &str) -> String {
    x.to_string()
}

const RW: i32 = libc::O_RDWR;

#[test]
fn xattr_calls_and_limits_agree_with_the_kernel() {
    use At::*;
    use Op::*;
    let long_ok = format!("user.{}", "n".repeat(250));
    let too_long = format!("user.{}", "n".repeat(251));
    agree(
        "xattr-limits",
        &[
            Write("/f", b"data".to_vec()),
            Get(Path("/f"), s("user.a"), 0),
            Set(Path("/f"), s("user.a"), b"one".to_vec(), 0),
            Get(Path("/f"), s("user.a"), 0),
            Get(Path("/f"), s("user.a"), 3),
            Get(Path("/f"), s("user.a"), 2),
            Get(Path("/f"), s("user.a"), 100),
            Set(Path("/f"), s("user.a"), b"two".to_vec(), libc::XATTR_CREATE),
            Set(Path("/f"), s("user.b"), b"b".to_vec(), libc::XATTR_REPLACE),
            Set(
                Path("/f"),
                s("user.a"),
                b"three".to_vec(),
                libc::XATTR_REPLACE,
            ),
            Get(Path("/f"), s("user.a"), 10),
            Set(Path("/f"), s("user.b"), b"b".to_vec(), libc::XATTR_CREATE),
            Set(Path("/f"), s("user.c"), b"c".to_vec(), 4),
            Set(
                Path("/f"),
                s("user.c"),
                b"c".to_vec(),
                libc::XATTR_CREATE | libc::XATTR_REPLACE,
            ),
            Set(Path("/f"), s(""), b"x".to_vec(), 0),
            Get(Path("/f"), s(""), 10),
            Remove(Path("/f"), s("")),
            Set(Path("/f"), long_ok.clone(), b"long name".to_vec(), 0),
            Get(Path("/f"), long_ok.clone(), 100),
            Set(Path("/f"), too_long.clone(), b"x".to_vec(), 0),
            Get(Path("/f"), too_long.clone(), 100),
            Remove(Path("/f"), too_long),
            Set(Path("/f"), s("user.max"), vec![7; 65536], 0),
            Get(Path("/f"), s("user.max"), 0),
            Get(Path("/f"), s("user.max"), 65536),
            Set(Path("/f"), s("user.over"), vec![7; 65537], 0),
            Set(Path("/f"), s("user.empty"), Vec::new(), 0),
            Get(Path("/f"), s("user.empty"), 0),
            Get(Path("/f"), s("user.empty"), 10),
            Set(Path("/f"), s("user."), b"x".to_vec(), 0),
            Get(Path("/f"), s("user."), 10),
            Set(Path("/f"), s("trusted."), b"x".to_vec(), 0),
            Set(Path("/f"), s("foo.bar"), b"x".to_vec(), 0),
            Get(Path("/f"), s("foo.bar"), 10),
            Set(Path("/f"), s("system.foo"), b"x".to_vec(), 0),
            Set(Path("/f"), s("trusted.t"), b"trusted".to_vec(), 0),
            Set(Path("/f"), s("security.s"), b"security".to_vec(), 0),
            Get(Path("/f"), s("trusted.t"), 100),
            Get(Path("/f"), s("security.s"), 100),
            Get(Path("/f"), s("user.missing"), 100),
            List(Path("/f"), 0),
            List(Path("/f"), 10),
            List(Path("/f"), 4096),
            Remove(Path("/f"), s("user.missing")),
            Remove(Path("/f"), s("user.a")),
            Get(Path("/f"), s("user.a"), 10),
            Remove(Path("/f"), s("user.a")),
            Remove(Path("/f"), s("foo.bar")),
            List(Path("/f"), 4096),
            Get(Path("/nope"), s("user.a"), 10),
            Set(Path("/nope"), s("user.a"), b"x".to_vec(), 0),
            List(Path("/nope"), 10),
            Remove(Path("/nope"), s("user.a")),
            Get(Path("/f/x"), s("user.a"), 10),
            Read("/f"),
        ],
    );
}

#[test]
fn xattrs_on_directories_symlinks_and_open_files_agree_with_the_kernel() {
    use At::*;
    use Op::*;
    agree(
        "xattr-kinds",
        &[
            Write("/f", b"data".to_vec()),
            Mkdir("/d"),
            Symlink("f", "/l"),
            Symlink("missing", "/dangling"),
            Set(Path("/d"), s("user.dir"), b"on a directory".to_vec(), 0),
            Get(Path("/d"), s("user.dir"), 100),
            List(Path("/d"), 100),
            // Through the link: the file's attributes.
            Set(Path("/l"), s("user.via"), b"link".to_vec(), 0),
            Get(Path("/f"), s("user.via"), 100),
            List(Path("/l"), 100),
            // The link itself: no user.* (EPERM to set, ENODATA to get), trusted.* yes.
            Set(NoFollow("/l"), s("user.x"), b"x".to_vec(), 0),
            Get(NoFollow("/l"), s("user.via"), 100),
            Remove(NoFollow("/l"), s("user.via")),
            Set(NoFollow("/l"), s("user."), b"x".to_vec(), 0),
            Set(
                NoFollow("/l"),
                s("trusted.link"),
                b"on the link".to_vec(),
                0,
            ),
            Get(NoFollow("/l"), s("trusted.link"), 100),
            List(NoFollow("/l"), 100),
            List(Path("/l"), 100),
            Get(Path("/l"), s("trusted.link"), 100),
            Remove(NoFollow("/l"), s("trusted.link")),
            List(NoFollow("/l"), 100),
            Get(Path("/dangling"), s("user.x"), 10),
            Set(NoFollow("/dangling"), s("trusted.d"), b"d".to_vec(), 0),
            Get(NoFollow("/dangling"), s("trusted.d"), 10),
            // On open descriptors, read-only ones included, and after an unlink.
            Open("/f", libc::O_RDONLY),
            Set(Fd(0), s("user.ro"), b"via a read-only fd".to_vec(), 0),
            Get(Fd(0), s("user.ro"), 100),
            Write("/g", b"soon unlinked".to_vec()),
            Open("/g", RW),
            Set(Fd(1), s("user.g"), b"before".to_vec(), 0),
            Unlink("/g"),
            Get(Fd(1), s("user.g"), 100),
            Set(
                Fd(1),
                s("user.g"),
                b"after the unlink".to_vec(),
                libc::XATTR_REPLACE,
            ),
            Set(Fd(1), s("user.h"), b"new".to_vec(), libc::XATTR_CREATE),
            List(Fd(1), 0),
            List(Fd(1), 100),
            Remove(Fd(1), s("user.g")),
            Remove(Fd(1), s("user.g")),
            List(Fd(1), 100),
            Open("/d", libc::O_RDONLY),
            Get(Fd(2), s("user.dir"), 100),
            Read("/f"),
        ],
    );
}

#[test]
fn fallocate_modes_and_punching_agree_with_the_kernel() {
    use Op::*;
    let data: Vec<u8> = (0..5 * 4096u32).map(|i| (i % 251) as u8 + 1).collect();
    let keep = fs::FALLOC_FL_KEEP_SIZE;
    let punch = fs::FALLOC_FL_PUNCH_HOLE | keep;
    agree(
        "fallocate",
        &[
            Write("/f", data.clone()),
            Open("/f", RW),
            // Punch: whole pages freed, partial ones zeroed; the size is kept.
            Fallocate(0, punch, 4096 + 100, 2 * 4096),
            Read("/f"),
            Fallocate(0, punch, 10, 20),
            Read("/f"),
            Fallocate(0, punch, 4 * 4096, 4096),
            Read("/f"),
            Fallocate(0, punch, 3 * 4096 - 1, 2),
            Read("/f"),
            Fallocate(0, punch, 100 * 4096, 4096),
            Read("/f"),
            // Allocation: the size grows, or not with KEEP_SIZE.
            Fallocate(0, 0, 30_000, 5000),
            Read("/f"),
            Fallocate(0, keep, 40_000, 8192),
            Read("/f"),
            Fallocate(0, 0, 0, 4096),
            Read("/f"),
            // Refused.
            Fallocate(0, libc::FALLOC_FL_PUNCH_HOLE, 0, 4096),
            Fallocate(0, libc::FALLOC_FL_ZERO_RANGE, 0, 4096),
            Fallocate(0, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096),
            Fallocate(0, 0x100, 0, 4096),
            Fallocate(0, 0, 0, 0),
            Open("/f", libc::O_RDONLY),
            Fallocate(1, 0, 0, 4096),
            Fallocate(1, punch, 0, 4096),
            Mkdir("/d"),
            Open("/d", libc::O_RDONLY),
            Fallocate(2, 0, 0, 4096),
            // Blocks kept past the end stay when the size grows over or past them,
            // by truncate or by allocation, and go when it shrinks below them.
            Write("/k", b"0123456789".to_vec()),
            Open("/k", RW),
            Fallocate(3, keep, 4096, 3 * 4096),
            Read("/k"),
            Truncate("/k", 5000),
            Read("/k"),
            Fallocate(3, 0, 0, 2 * 4096),
            Read("/k"),
            Truncate("/k", 6 * 4096),
            Read("/k"),
            Truncate("/k", 4096 + 10),
            Read("/k"),
            Truncate("/k", 10),
            Read("/k"),
            // A new empty file preallocated, then written into.
            Write("/p", Vec::new()),
            Open("/p", RW),
            Fallocate(4, 0, 0, 3 * 4096),
            Read("/p"),
            Fallocate(4, punch, 0, 3 * 4096),
            Read("/p"),
        ],
    );
}

#[test]
fn seek_data_and_hole_agree_with_the_kernel() {
    use Op::*;
    let seek = |fd, off, w| Seek(fd, off, w);
    let (data, hole) = (libc::SEEK_DATA, libc::SEEK_HOLE);
    let page = |c: u8| vec![c; 4096];
    agree(
        "seek",
        &[
            // A hole at the start.
            Write("/start", Vec::new()),
            Open("/start", RW),
            Truncate("/start", 8192),
            seek(0, 0, data),
            seek(0, 0, hole),
            // Then data after it.
            Op::Fallocate(
                0,
                fs::FALLOC_FL_PUNCH_HOLE | fs::FALLOC_FL_KEEP_SIZE,
                0,
                4096,
            ),
            Write("/mid", [page(1), page(0), page(2)].concat()),
            Open("/mid", RW),
            Fallocate(
                1,
                fs::FALLOC_FL_PUNCH_HOLE | fs::FALLOC_FL_KEEP_SIZE,
                4096,
                4096,
            ),
            seek(1, 0, data),
            seek(1, 0, hole),
            seek(1, 100, hole),
            seek(1, 4096, data),
            seek(1, 5000, data),
            seek(1, 5000, hole),
            seek(1, 8192, hole),
            seek(1, 12287, data),
            seek(1, 12288, data),
            seek(1, 12288, hole),
            seek(1, -1, data),
            seek(1, -1, hole),
            // A hole at the end.
            Write("/end", page(3)),
            Truncate("/end", 5 * 4096 + 10),
            Open("/end", RW),
            seek(2, 0, hole),
            seek(2, 4096, data),
            seek(2, 5 * 4096, hole),
            seek(2, 5 * 4096 + 9, hole),
            seek(2, 5 * 4096 + 10, hole),
            // No holes: one at the end of the file; an empty file has nothing.
            Write("/full", [page(4), vec![5; 100]].concat()),
            Open("/full", RW),
            seek(3, 0, hole),
            seek(3, 4195, data),
            seek(3, 4196, data),
            Write("/empty", Vec::new()),
            Open("/empty", RW),
            seek(4, 0, data),
            seek(4, 0, hole),
            // Written at the start of a hole at the start: data from there.
            Write("/late", Vec::new()),
            Open("/late", RW),
            Truncate("/late", 3 * 4096),
            Fallocate(5, 0, 4096, 10),
            seek(5, 0, hole),
            Read("/mid"),
            Read("/end"),
        ],
    );
}
