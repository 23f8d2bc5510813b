//! The model against Linux: seeded random call sequences run on the model and on a real
//! tmpfs directory (under `/dev/shm`), every answer and errno compared, and after every
//! call the whole tree — names, kinds, permission bits, owners, link counts, sizes,
//! blocks of regular files, device numbers, symbolic-link targets, bytes, extended
//! attributes, which names share an inode — and every open descriptor.
//!
//! The kernel side runs in a child process (this test binary again, the `chrooted`
//! test) chrooted into the temporary directory, so that absolute paths, absolute
//! symbolic-link targets and `..` at the top mean the same on both sides. It needs root
//! (chroot, mknod of devices, chown); without it the test says so and skips.
//!
//! Left out, because Linux's answer depends on something the model does not track:
//! opening a FIFO or a device (the driver answers; a FIFO blocks), `SEEK_END` on a
//! directory (tmpfs's directory offsets count entries), directory sizes and symbolic-link
//! blocks (tmpfs's own accounting), times (set to "now" by most calls), path `truncate`
//! (it needs a raw syscall; `ftruncate` covers the same model code after resolution),
//! descriptor numbers that are not open (the fs property test covers `EBADF`).
//!
//! Sequences: `EASYIO_MODEL_KERNEL_CASES` (default 200) of up to 120 calls, seed
//! `EASYIO_MODEL_KERNEL_SEED`.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use model::{
    Access, Config, Fd, Kind, Model, OpenSpec, Stat, Target, Whence, FALLOC_KEEP_SIZE,
    FALLOC_PUNCH_HOLE, RENAME_EXCHANGE, RENAME_NOREPLACE, XATTR_CREATE, XATTR_REPLACE,
};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;
use testkit::pattern;

const ROOT_ENV: &str = "EASYIO_MODEL_KERNEL_ROOT";
const CASES_ENV: &str = "EASYIO_MODEL_KERNEL_CASES";
const SEED_ENV: &str = "EASYIO_MODEL_KERNEL_SEED";
const DEFAULT_CASES: u64 = 200;
const DEFAULT_SEED: u64 = 0x005E_ED0F_11A0;
const MAX_CALLS: usize = 120;
/// Longest the chrooted child may run before it is killed and the test fails.
const CHILD_LIMIT: std::time::Duration = std::time::Duration::from_secs(900);
/// The umask of both sides: new inodes lose these bits.
const UMASK: u32 = 0o022;

#[test]
fn the_model_answers_as_linux_does() {
    if testkit::not_root("comparing with the kernel: chroot, mknod, chown") {
        return;
    }
    let dir = shm_dir();
    let mut child = testkit::child_half("chrooted");
    child
        .env(ROOT_ENV, &dir)
        // Under AddressSanitizer: the chrooted child has no /proc, which LeakSanitizer
        // reads at exit (it then fails the process). The parent still checks for leaks.
        .env("ASAN_OPTIONS", child_asan_options());
    let out = testkit::run(&mut child, CHILD_LIMIT);
    std::fs::remove_dir_all(&dir).ok();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the chrooted child failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "the chrooted child ran no test:\n{text}"
    );
}

/// The sanitizer options of the chrooted child: the parent's, with leak detection off.
fn child_asan_options() -> String {
    match std::env::var("ASAN_OPTIONS") {
        Ok(o) if !o.is_empty() => format!("{o}:detect_leaks=0"),
        _ => "detect_leaks=0".to_string(),
    }
}

/// A fresh directory under `/dev/shm` (tmpfs), for the child to chroot into.
fn shm_dir() -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::path::PathBuf::from(format!(
        "/dev/shm/easyio-model-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir(&dir).expect("a directory in /dev/shm");
    dir
}

#[test]
#[ignore = "run by the_model_answers_as_linux_does, chrooted into a tmpfs directory"]
fn chrooted() {
    let root = std::env::var(ROOT_ENV).expect("run by the_model_answers_as_linux_does");
    rustix::process::chroot(root.as_str()).expect("chroot");
    rustix::process::chdir("/").expect("chdir");
    rustix::process::umask(Mode::from_raw_mode(UMASK));
    let cases = env_u64(CASES_ENV, DEFAULT_CASES);
    let seed = env_u64(SEED_ENV, DEFAULT_SEED);
    for case in 0..cases {
        let mut rng = Pcg64Mcg::seed_from_u64(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut h = Pair::new();
        let mut log = Vec::new();
        for _ in 0..MAX_CALLS {
            let Some(call) = h.draw(&mut rng) else {
                continue;
            };
            log.push(short(&format!("{call:?}")));
            let (want, got) = (h.on_model(&call), h.on_kernel(&call));
            let ctx = || {
                format!(
                    "case {case} (seed {seed:#x}), calls:\n  {}",
                    log.join("\n  ")
                )
            };
            assert_eq!(
                got,
                want,
                "{}: kernel (left) and model (right) differ; {}",
                short(&format!("{call:?}")),
                ctx()
            );
            if let Err(e) = h.compare_tree() {
                panic!(
                    "after {}: {}; {}",
                    short(&format!("{call:?}")),
                    short(&e),
                    ctx()
                );
            }
        }
        h.clear();
    }
}

/// `s` with the long names written as their length, for readable logs.
fn short(s: &str) -> String {
    let mut s = s.to_string();
    for n in [model::NAME_MAX + 1, model::NAME_MAX, 251, 250] {
        for c in ["n", "x"] {
            s = s.replace(&c.repeat(n), &format!("<{c}*{n}>"));
        }
    }
    s
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------
// Calls
// ---------------------------------------------------------------------------------

/// What an attribute or xattr call acts on, as drawn (descriptors by model number).
#[derive(Clone, Debug)]
enum On {
    Path(String),
    Link(String),
    Fd(Fd),
}

#[derive(Clone, Debug)]
enum Call {
    Open(String, OpenSpec),
    Close(Fd),
    Write(Fd, usize, u8),
    Pwrite(Fd, u64, usize, u8),
    Read(Fd, usize),
    Pread(Fd, u64, usize),
    Lseek(Fd, i64, Whence),
    Ftruncate(Fd, u64),
    Fallocate(Fd, u32, i64, i64),
    Mkdir(String, u32),
    Mknod(String, Kind, u32, (u32, u32)),
    Symlink(String, String),
    Readlink(String),
    Readdir(String),
    Unlink(String),
    Rmdir(String),
    Link(String, String),
    LinkFd(Fd, String),
    Rename(String, String, u32),
    Stat(On),
    Chmod(On, u32),
    Chown(On, Option<u32>, Option<u32>),
    Setxattr(On, String, usize, u8, u32),
    Getxattr(On, String, usize),
    Listxattr(On, usize),
    Removexattr(On, String),
}

/// A call's answer, in the terms both sides can give.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Out {
    Unit,
    /// A new descriptor (numbers are each side's own).
    NewFd,
    Num(u64),
    Bytes(Vec<u8>),
    Names(Vec<String>),
    Attrs(Attrs),
    Sized(usize, Vec<u8>),
}

/// The attributes compared: size of anything but a directory, blocks of regular files.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Attrs {
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    size: Option<u64>,
    blocks: Option<u64>,
    rdev: u64,
}

impl Attrs {
    fn of_model(s: &Stat) -> Attrs {
        Attrs {
            mode: s.mode,
            uid: s.uid,
            gid: s.gid,
            nlink: s.nlink,
            size: (s.kind != Kind::Dir).then_some(s.size),
            blocks: if s.kind == Kind::File { s.blocks } else { None },
            rdev: s.rdev,
        }
    }

    fn of_kernel(s: &rfs::Stat) -> Attrs {
        let kind = Kind::from_mode(s.st_mode).expect("known file type");
        Attrs {
            mode: s.st_mode,
            uid: s.st_uid,
            gid: s.st_gid,
            nlink: s.st_nlink as u32,
            size: (kind != Kind::Dir).then_some(s.st_size as u64),
            blocks: (kind == Kind::File).then_some(s.st_blocks as u64),
            rdev: s.st_rdev,
        }
    }
}

// ---------------------------------------------------------------------------------
// Drawing calls
// ---------------------------------------------------------------------------------

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

fn name(rng: &mut Pcg64Mcg) -> String {
    match rng.random_range(0..40) {
        0 => "n".repeat(model::NAME_MAX),
        1 => "n".repeat(model::NAME_MAX + 1),
        _ => NAMES[rng.random_range(0..NAMES.len())].to_string(),
    }
}

/// Absolute paths of 1 to 3 components, the inner ones sometimes `.` or `..`.
fn path(rng: &mut Pcg64Mcg) -> String {
    let mut p = String::new();
    for _ in 0..rng.random_range(0..=2) {
        p.push('/');
        match rng.random_range(0..14) {
            0 => p.push('.'),
            1 => p.push_str(".."),
            _ => p.push_str(&name(rng)),
        }
    }
    p.push('/');
    p.push_str(&name(rng));
    if rng.random_range(0..25) == 0 {
        p.push('/');
    }
    p
}

fn target(rng: &mut Pcg64Mcg) -> String {
    match rng.random_range(0..5) {
        0..=2 => path(rng),
        3 => name(rng),
        _ => format!("../{}", name(rng)),
    }
}

fn xattr_name(rng: &mut Pcg64Mcg) -> String {
    match rng.random_range(0..24) {
        0 => "user.".to_string(),
        1 => format!("user.{}", "x".repeat(model::XATTR_NAME_MAX - 5)),
        2 => format!("user.{}", "x".repeat(model::XATTR_NAME_MAX - 4)),
        3 => "bogus.a".to_string(),
        4 => String::new(),
        _ => format!("user.{}", NAMES[rng.random_range(0..3)]),
    }
}

fn xattr_len(rng: &mut Pcg64Mcg) -> usize {
    match rng.random_range(0..30) {
        0 => model::XATTR_SIZE_MAX,
        1 => model::XATTR_SIZE_MAX + 1,
        2 => 0,
        _ => rng.random_range(1..100),
    }
}

fn open_spec(rng: &mut Pcg64Mcg) -> OpenSpec {
    let access = [Access::Read, Access::Write, Access::ReadWrite][rng.random_range(0..3)];
    let mut s = OpenSpec::new(access);
    s.creat = rng.random_bool(0.5);
    s.excl = rng.random_bool(0.2);
    s.trunc = rng.random_bool(0.2);
    s.append = rng.random_bool(0.2);
    s.directory = rng.random_bool(0.05);
    s.nofollow = rng.random_bool(0.1);
    s.tmpfile = rng.random_bool(0.08);
    if s.tmpfile {
        s.creat = false;
    }
    s.mode = rng.random_range(0..0o10000);
    s
}

fn len(rng: &mut Pcg64Mcg) -> usize {
    match rng.random_range(0..10) {
        0 => 0,
        1 => 4096,
        2..=4 => rng.random_range(1..64),
        5..=7 => rng.random_range(1..5000),
        _ => rng.random_range(4000..13000),
    }
}

fn off(rng: &mut Pcg64Mcg) -> u64 {
    match rng.random_range(0..3) {
        0 => rng.random_range(0..5) * model::PAGE,
        _ => rng.random_range(0..20000),
    }
}

fn falloc_mode(rng: &mut Pcg64Mcg) -> u32 {
    match rng.random_range(0..8) {
        0 => FALLOC_PUNCH_HOLE,
        1 | 2 => 0,
        3 | 4 => FALLOC_KEEP_SIZE,
        _ => FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE,
    }
}

fn owner(rng: &mut Pcg64Mcg) -> Option<u32> {
    [None, Some(0), Some(1000), Some(1001)][rng.random_range(0..4)]
}

// ---------------------------------------------------------------------------------
// The two sides
// ---------------------------------------------------------------------------------

struct Pair {
    m: Model,
    /// Kernel descriptors by model descriptor number.
    fds: Vec<Option<OwnedFd>>,
}

fn errno(e: Errno) -> i32 {
    e.raw_os_error()
}

impl Pair {
    fn new() -> Pair {
        rfs::chmod("/", Mode::from_raw_mode(0o755)).unwrap();
        let cfg = Config {
            umask: UMASK,
            ..Config::default()
        };
        Pair {
            m: Model::new(cfg),
            fds: Vec::new(),
        }
    }

    /// Closes everything and empties the root on both sides.
    fn clear(&mut self) {
        self.fds.clear();
        for e in std::fs::read_dir("/").unwrap() {
            let p = e.unwrap().path();
            if p.symlink_metadata().unwrap().is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }

    fn any_fd(&self, rng: &mut Pcg64Mcg) -> Option<Fd> {
        let open = self.m.open_fds();
        (!open.is_empty()).then(|| open[rng.random_range(0..open.len())].0)
    }

    fn on(&self, rng: &mut Pcg64Mcg) -> Option<On> {
        Some(match rng.random_range(0..4) {
            0 | 1 => On::Path(path(rng)),
            2 => On::Link(path(rng)),
            _ => On::Fd(self.any_fd(rng)?),
        })
    }

    /// A special file at `p` (by either resolution) is not opened: see the header.
    fn names_special(&self, p: &str) -> bool {
        [true, false].into_iter().any(|follow| {
            self.m
                .resolve(p, follow)
                .is_ok_and(|id| self.m.node(id).kind().is_special())
        })
    }

    fn draw(&self, rng: &mut Pcg64Mcg) -> Option<Call> {
        let fd = self.any_fd(rng);
        Some(match rng.random_range(0..30) {
            0..=3 => {
                let p = path(rng);
                if self.names_special(&p) {
                    return None;
                }
                Call::Open(p, open_spec(rng))
            }
            4 => Call::Close(fd?),
            5 => Call::Write(fd?, len(rng), rng.random()),
            6 | 7 => Call::Pwrite(fd?, off(rng), len(rng), rng.random()),
            8 => Call::Read(fd?, len(rng)),
            9 => Call::Pread(fd?, off(rng), len(rng)),
            10 => {
                let fd = fd?;
                let whence = [
                    Whence::Set,
                    Whence::Cur,
                    Whence::End,
                    Whence::Data,
                    Whence::Hole,
                ][rng.random_range(0..5)];
                let dir = self.m.is_dir(self.m.fd(fd).ok()?.id);
                if whence == Whence::End && dir {
                    return None;
                }
                let o = match whence {
                    Whence::Cur | Whence::End => rng.random_range(-5000..20000),
                    _ => off(rng) as i64,
                };
                Call::Lseek(fd, o, whence)
            }
            11 => Call::Ftruncate(fd?, rng.random_range(0..20000)),
            12 | 13 => {
                let (o, l) = (
                    off(rng) as i64,
                    rng.random_range(-1..3 * model::PAGE as i64),
                );
                Call::Fallocate(fd?, falloc_mode(rng), o, l)
            }
            14 => Call::Mkdir(path(rng), rng.random_range(0..0o10000)),
            15 => {
                let kind = [
                    Kind::Fifo,
                    Kind::Socket,
                    Kind::CharDev,
                    Kind::BlockDev,
                    Kind::File,
                ][rng.random_range(0..5)];
                let dev = (rng.random_range(1..10), rng.random_range(0..300));
                Call::Mknod(path(rng), kind, rng.random_range(0..0o10000), dev)
            }
            16 => Call::Symlink(target(rng), path(rng)),
            17 => Call::Readlink(path(rng)),
            18 => Call::Readdir(path(rng)),
            19 => Call::Unlink(path(rng)),
            20 => Call::Rmdir(path(rng)),
            21 => Call::Link(path(rng), path(rng)),
            22 => Call::LinkFd(fd?, path(rng)),
            23 => {
                let flags = [0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE, 3, 8][rng.random_range(0..6)];
                Call::Rename(path(rng), path(rng), flags)
            }
            24 => Call::Stat(self.on(rng)?),
            25 => match self.on(rng)? {
                On::Link(_) => return None, // lchmod: Linux refuses it on symlinks
                on => Call::Chmod(on, rng.random_range(0..0o10000)),
            },
            26 => Call::Chown(self.on(rng)?, owner(rng), owner(rng)),
            27 => {
                let flags = [0, 0, XATTR_CREATE, XATTR_REPLACE, 3, 4][rng.random_range(0..6)];
                let on = self.on(rng)?;
                Call::Setxattr(on, xattr_name(rng), xattr_len(rng), rng.random(), flags)
            }
            28 => match rng.random_range(0..3) {
                0 => Call::Listxattr(self.on(rng)?, [0, 4, 1000][rng.random_range(0..3)]),
                1 => Call::Removexattr(self.on(rng)?, xattr_name(rng)),
                _ => Call::Getxattr(
                    self.on(rng)?,
                    xattr_name(rng),
                    [0, 3, 70000][rng.random_range(0..3)],
                ),
            },
            _ => Call::Stat(On::Path(path(rng))),
        })
    }
}

fn target_of(on: &On) -> Target<'_> {
    match on {
        On::Path(p) => Target::Path(p),
        On::Link(p) => Target::Link(p),
        On::Fd(fd) => Target::Fd(*fd),
    }
}

fn mode(m: u32) -> Mode {
    Mode::from_raw_mode(m)
}

impl Pair {
    fn on_model(&mut self, call: &Call) -> Result<Out, i32> {
        let m = &mut self.m;
        let unit = |r: Result<(), i32>| r.map(|()| Out::Unit);
        match call {
            Call::Open(p, s) => m.open(p, s).map(|_| Out::NewFd),
            Call::Close(fd) => unit(m.close(*fd)),
            Call::Write(fd, l, seed) => m
                .write(*fd, &pattern(u64::from(*seed), *l))
                .map(|n| Out::Num(n as u64)),
            Call::Pwrite(fd, o, l, seed) => m
                .pwrite(*fd, &pattern(u64::from(*seed), *l), *o)
                .map(|n| Out::Num(n as u64)),
            Call::Read(fd, l) => m.read(*fd, *l).map(Out::Bytes),
            Call::Pread(fd, o, l) => m.pread(*fd, *o, *l).map(Out::Bytes),
            Call::Lseek(fd, o, w) => m.lseek(*fd, *o, *w).map(Out::Num),
            Call::Ftruncate(fd, l) => unit(m.ftruncate(*fd, *l)),
            Call::Fallocate(fd, mo, o, l) => unit(m.fallocate(*fd, *mo, *o, *l)),
            Call::Mkdir(p, mo) => m.mkdir(p, *mo).map(|_| Out::Unit),
            Call::Mknod(p, kind, perm, (maj, min)) => m
                .mknod(p, kind.mode_bits() | perm, rfs::makedev(*maj, *min))
                .map(|_| Out::Unit),
            Call::Symlink(t, p) => m.symlink(t, p).map(|_| Out::Unit),
            Call::Readlink(p) => m.readlink(p).map(|t| Out::Bytes(t.into_bytes())),
            Call::Readdir(p) => m.readdir(p).map(Out::Names),
            Call::Unlink(p) => unit(m.unlink(p)),
            Call::Rmdir(p) => unit(m.rmdir(p)),
            Call::Link(a, b) => unit(m.link(a, b)),
            Call::LinkFd(fd, p) => unit(m.link_fd(*fd, p)),
            Call::Rename(a, b, f) => unit(m.rename(a, b, *f)),
            Call::Stat(on) => m
                .stat(target_of(on))
                .map(|s| Out::Attrs(Attrs::of_model(&s))),
            Call::Chmod(on, mo) => unit(m.chmod(target_of(on), *mo)),
            Call::Chown(on, u, g) => unit(m.chown(target_of(on), *u, *g)),
            Call::Setxattr(on, n, l, seed, f) => {
                unit(m.setxattr(target_of(on), n, &pattern(u64::from(*seed), *l), *f))
            }
            Call::Getxattr(on, n, size) => m
                .getxattr(target_of(on), n, *size)
                .map(|(n, v)| Out::Sized(n, v)),
            Call::Listxattr(on, size) => m
                .listxattr(target_of(on), *size)
                .map(|(n, v)| Out::Sized(n, v)),
            Call::Removexattr(on, n) => unit(m.removexattr(target_of(on), n)),
        }
    }

    fn kfd(&self, fd: Fd) -> &OwnedFd {
        self.fds[fd as usize].as_ref().expect("open on the model")
    }

    fn on_kernel(&mut self, call: &Call) -> Result<Out, i32> {
        self.kernel_call(call).map_err(errno)
    }

    fn kernel_call(&mut self, call: &Call) -> rustix::io::Result<Out> {
        use rustix::io;
        let num = |n: usize| Out::Num(n as u64);
        Ok(match call {
            Call::Open(p, s) => {
                let fd = rfs::open(p.as_str(), oflags(s), mode(s.mode))?;
                let slot = match self.fds.iter().position(Option::is_none) {
                    Some(s) => s,
                    None => {
                        self.fds.push(None);
                        self.fds.len() - 1
                    }
                };
                self.fds[slot] = Some(fd);
                Out::NewFd
            }
            Call::Close(fd) => {
                drop(self.fds[*fd as usize].take());
                Out::Unit
            }
            Call::Write(fd, l, seed) => {
                num(io::write(self.kfd(*fd), &pattern(u64::from(*seed), *l))?)
            }
            Call::Pwrite(fd, o, l, seed) => num(io::pwrite(
                self.kfd(*fd),
                &pattern(u64::from(*seed), *l),
                *o,
            )?),
            Call::Read(fd, l) => {
                let mut b = vec![0u8; *l];
                let n = io::read(self.kfd(*fd), &mut b[..])?;
                Out::Bytes(b[..n].to_vec())
            }
            Call::Pread(fd, o, l) => {
                let mut b = vec![0u8; *l];
                let n = io::pread(self.kfd(*fd), &mut b[..], *o)?;
                Out::Bytes(b[..n].to_vec())
            }
            Call::Lseek(fd, o, w) => {
                let pos = match w {
                    Whence::Set => rfs::SeekFrom::Start(*o as u64),
                    Whence::Cur => rfs::SeekFrom::Current(*o),
                    Whence::End => rfs::SeekFrom::End(*o),
                    Whence::Data => rfs::SeekFrom::Data(*o as u64),
                    Whence::Hole => rfs::SeekFrom::Hole(*o as u64),
                };
                Out::Num(rfs::seek(self.kfd(*fd), pos)?)
            }
            Call::Ftruncate(fd, l) => {
                rfs::ftruncate(self.kfd(*fd), *l)?;
                Out::Unit
            }
            Call::Fallocate(fd, mo, o, l) => {
                let flags = rfs::FallocateFlags::from_bits_retain(*mo);
                rfs::fallocate(self.kfd(*fd), flags, *o as u64, *l as u64)?;
                Out::Unit
            }
            Call::Mkdir(p, mo) => {
                rfs::mkdir(p.as_str(), mode(*mo))?;
                Out::Unit
            }
            Call::Mknod(p, kind, perm, (maj, min)) => {
                let ft = rfs::FileType::from_raw_mode(kind.mode_bits());
                rfs::mknodat(CWD, p.as_str(), ft, mode(*perm), rfs::makedev(*maj, *min))?;
                Out::Unit
            }
            Call::Symlink(t, p) => {
                rfs::symlink(t.as_str(), p.as_str())?;
                Out::Unit
            }
            Call::Readlink(p) => Out::Bytes(rfs::readlink(p.as_str(), Vec::new())?.into_bytes()),
            Call::Readdir(p) => Out::Names(kernel_readdir(p)?),
            Call::Unlink(p) => {
                rfs::unlink(p.as_str())?;
                Out::Unit
            }
            Call::Rmdir(p) => {
                rfs::rmdir(p.as_str())?;
                Out::Unit
            }
            Call::Link(a, b) => {
                rfs::link(a.as_str(), b.as_str())?;
                Out::Unit
            }
            Call::LinkFd(fd, p) => {
                rfs::linkat(self.kfd(*fd), "", CWD, p.as_str(), AtFlags::EMPTY_PATH)?;
                Out::Unit
            }
            Call::Rename(a, b, f) => {
                let flags = rfs::RenameFlags::from_bits_retain(*f);
                rfs::renameat_with(CWD, a.as_str(), CWD, b.as_str(), flags)?;
                Out::Unit
            }
            _ => return self.kernel_attr_call(call),
        })
    }

    fn kernel_attr_call(&mut self, call: &Call) -> rustix::io::Result<Out> {
        let uid = |u: &Option<u32>| u.map(rustix::process::Uid::from_raw);
        let gid = |g: &Option<u32>| g.map(rustix::process::Gid::from_raw);
        Ok(match call {
            Call::Stat(on) => Out::Attrs(Attrs::of_kernel(&match on {
                On::Path(p) => rfs::stat(p.as_str())?,
                On::Link(p) => rfs::lstat(p.as_str())?,
                On::Fd(fd) => rfs::fstat(self.kfd(*fd))?,
            })),
            Call::Chmod(on, mo) => {
                match on {
                    On::Path(p) | On::Link(p) => rfs::chmod(p.as_str(), mode(*mo))?,
                    On::Fd(fd) => rfs::fchmod(self.kfd(*fd), mode(*mo))?,
                }
                Out::Unit
            }
            Call::Chown(on, u, g) => {
                match on {
                    On::Path(p) => rfs::chownat(CWD, p.as_str(), uid(u), gid(g), AtFlags::empty())?,
                    On::Link(p) => {
                        rfs::chownat(CWD, p.as_str(), uid(u), gid(g), AtFlags::SYMLINK_NOFOLLOW)?
                    }
                    On::Fd(fd) => rfs::fchown(self.kfd(*fd), uid(u), gid(g))?,
                }
                Out::Unit
            }
            _ => return self.kernel_xattr_call(call),
        })
    }

    fn kernel_xattr_call(&mut self, call: &Call) -> rustix::io::Result<Out> {
        Ok(match call {
            Call::Setxattr(on, n, l, seed, f) => {
                let (v, flags) = (
                    pattern(u64::from(*seed), *l),
                    rfs::XattrFlags::from_bits_retain(*f),
                );
                match on {
                    On::Path(p) => rfs::setxattr(p.as_str(), n.as_str(), &v, flags)?,
                    On::Link(p) => rfs::lsetxattr(p.as_str(), n.as_str(), &v, flags)?,
                    On::Fd(fd) => rfs::fsetxattr(self.kfd(*fd), n.as_str(), &v, flags)?,
                }
                Out::Unit
            }
            Call::Getxattr(on, n, size) => {
                let mut b = vec![0u8; *size];
                let n = match (on, *size) {
                    (On::Path(p), 0) => rfs::getxattr_query(p.as_str(), n.as_str())?,
                    (On::Link(p), 0) => rfs::lgetxattr_query(p.as_str(), n.as_str())?,
                    (On::Fd(fd), 0) => rfs::fgetxattr_query(self.kfd(*fd), n.as_str())?,
                    (On::Path(p), _) => rfs::getxattr(p.as_str(), n.as_str(), &mut b[..])?,
                    (On::Link(p), _) => rfs::lgetxattr(p.as_str(), n.as_str(), &mut b[..])?,
                    (On::Fd(fd), _) => rfs::fgetxattr(self.kfd(*fd), n.as_str(), &mut b[..])?,
                };
                b.truncate(if *size == 0 { 0 } else { n });
                Out::Sized(n, b)
            }
            Call::Listxattr(on, size) => {
                let mut b = vec![0u8; *size];
                let n = match (on, *size) {
                    (On::Path(p), 0) => rfs::listxattr_query(p.as_str())?,
                    (On::Link(p), 0) => rfs::llistxattr_query(p.as_str())?,
                    (On::Fd(fd), 0) => rfs::flistxattr_query(self.kfd(*fd))?,
                    (On::Path(p), _) => rfs::listxattr(p.as_str(), &mut b[..])?,
                    (On::Link(p), _) => rfs::llistxattr(p.as_str(), &mut b[..])?,
                    (On::Fd(fd), _) => rfs::flistxattr(self.kfd(*fd), &mut b[..])?,
                };
                b.truncate(if *size == 0 { 0 } else { n });
                Out::Sized(n, sorted_names(&b))
            }
            Call::Removexattr(on, n) => {
                match on {
                    On::Path(p) => rfs::removexattr(p.as_str(), n.as_str())?,
                    On::Link(p) => rfs::lremovexattr(p.as_str(), n.as_str())?,
                    On::Fd(fd) => rfs::fremovexattr(self.kfd(*fd), n.as_str())?,
                }
                Out::Unit
            }
            _ => unreachable!("every call is handled"),
        })
    }
}

/// A `listxattr` list in sorted order (tmpfs lists in hash order; the model sorts).
fn sorted_names(list: &[u8]) -> Vec<u8> {
    let mut names: Vec<&[u8]> = list.split_inclusive(|&b| b == 0).collect();
    names.sort();
    names.concat()
}

fn oflags(s: &OpenSpec) -> OFlags {
    let mut f = match s.access {
        Access::Read => OFlags::RDONLY,
        Access::Write => OFlags::WRONLY,
        Access::ReadWrite => OFlags::RDWR,
    };
    for (on, flag) in [
        (s.creat, OFlags::CREATE),
        (s.excl, OFlags::EXCL),
        (s.trunc, OFlags::TRUNC),
        (s.append, OFlags::APPEND),
        (s.directory, OFlags::DIRECTORY),
        (s.nofollow, OFlags::NOFOLLOW),
        (s.tmpfile, OFlags::TMPFILE),
    ] {
        if on {
            f |= flag;
        }
    }
    f | OFlags::CLOEXEC
}

fn kernel_readdir(p: &str) -> rustix::io::Result<Vec<String>> {
    let io = |e: std::io::Error| Errno::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO));
    let mut names: Vec<String> = std::fs::read_dir(p)
        .map_err(io)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    names.sort();
    Ok(names)
}

// ---------------------------------------------------------------------------------
// Comparing the whole state
// ---------------------------------------------------------------------------------

impl Pair {
    /// Every name and every open descriptor, compared.
    fn compare_tree(&self) -> Result<(), String> {
        let mut inodes: HashMap<u64, model::Id> = HashMap::new();
        let root = [("/".to_string(), model::ROOT)];
        for (path, id) in root.into_iter().chain(self.m.walk_tree()) {
            let st = rfs::lstat(path.as_str()).map_err(|e| format!("lstat {path}: {e}"))?;
            if *inodes.entry(st.st_ino).or_insert(id) != id {
                return Err(format!(
                    "{path}: the kernel shares an inode the model does not"
                ));
            }
            self.compare_inode(&path, id, &st)?;
            let node = self.m.node(id);
            match node.kind() {
                Kind::Dir => {
                    let names =
                        kernel_readdir(&path).map_err(|e| format!("readdir {path}: {e}"))?;
                    let want: Vec<String> = self.m.children(id).keys().cloned().collect();
                    same(&path, "entries", &names, &want)?;
                }
                Kind::Symlink => {
                    let t = rfs::readlink(path.as_str(), Vec::new()).map_err(|e| e.to_string())?;
                    same(
                        &path,
                        "target",
                        &t.into_bytes(),
                        &self.m.readlink(&path).unwrap().into_bytes(),
                    )?;
                }
                Kind::File => {
                    let got = std::fs::read(&path).map_err(|e| format!("read {path}: {e}"))?;
                    same(&path, "bytes", &got, &node.data().unwrap().to_vec())?;
                }
                _ => {}
            }
        }
        let named: std::collections::BTreeSet<model::Id> = inodes.values().copied().collect();
        if named.len() != inodes.len() {
            return Err("the model shares an inode the kernel does not".into());
        }
        for (fd, f) in self.m.open_fds() {
            let st = rfs::fstat(self.kfd(fd)).map_err(|e| format!("fstat {fd}: {e}"))?;
            self.compare_inode(&format!("descriptor {fd}"), f.id, &st)?;
        }
        Ok(())
    }

    /// Attributes and extended attributes of one inode.
    fn compare_inode(&self, what: &str, id: model::Id, st: &rfs::Stat) -> Result<(), String> {
        same(
            what,
            "attributes",
            &Attrs::of_kernel(st),
            &Attrs::of_model(&self.m.stat_id(id)),
        )?;
        let got = kernel_xattrs(self, what, id)?;
        let want: Vec<(String, Vec<u8>)> = self
            .m
            .node(id)
            .xattrs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        same(what, "extended attributes", &got, &want)
    }
}

/// The extended attributes of inode `id` on the kernel side, read through a name of it
/// or a descriptor.
fn kernel_xattrs(p: &Pair, what: &str, id: model::Id) -> Result<Vec<(String, Vec<u8>)>, String> {
    let err = |e: Errno| format!("{what}: xattrs: {e}");
    let fd =
        p.m.open_fds()
            .into_iter()
            .find(|(_, f)| f.id == id)
            .map(|(fd, _)| p.kfd(fd));
    let path = p.m.path_of(id);
    let mut buf = vec![0u8; 1 << 17];
    let n = match (&path, fd) {
        (Some(path), _) => rfs::llistxattr(path.as_str(), &mut buf[..]).map_err(err)?,
        (None, Some(fd)) => rfs::flistxattr(fd, &mut buf[..]).map_err(err)?,
        (None, None) => return Err(format!("{what}: neither named nor open")),
    };
    let names: Vec<String> = buf[..n]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    let mut out = Vec::new();
    for name in names {
        let mut v = vec![0u8; model::XATTR_SIZE_MAX];
        let n = match (&path, fd) {
            (Some(path), _) => rfs::lgetxattr(path.as_str(), name.as_str(), &mut v[..]),
            (_, Some(fd)) => rfs::fgetxattr(fd, name.as_str(), &mut v[..]),
            _ => unreachable!(),
        }
        .map_err(err)?;
        v.truncate(n);
        out.push((name, v));
    }
    out.sort();
    Ok(out)
}

fn same<T: PartialEq + std::fmt::Debug>(
    what: &str,
    field: &str,
    got: &T,
    want: &T,
) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let (g, w) = (format!("{got:?}"), format!("{want:?}"));
    let cut = |s: &str| s.chars().take(300).collect::<String>();
    Err(format!(
        "{what}: {field}: kernel {} vs model {}",
        cut(&g),
        cut(&w)
    ))
}
