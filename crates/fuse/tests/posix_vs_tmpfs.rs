//! Random sequences of POSIX calls — open flags, reads and writes at odd offsets,
//! truncate, renames over files and directories, links, mkdir/rmdir, symlinks — made
//! through a mounted image and through a tmpfs directory: every return value, errno and
//! read, and the final trees, must be the same. Seeded: a failure names its seed and
//! step.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use easyio_fuse::{unmount, Mount, Options};
use fs::{FileSystem, FormatOptions, MountOptions};
use pmem::{Pmem, Region};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use rustix::fs::{Mode, OFlags};
use testkit::Watchdog;

const SEEDS: u64 = 10;
const STEPS: usize = 500;
/// Longest the test may run before the watchdog unmounts (calls then fail).
const LIMIT: Duration = Duration::from_secs(90);

/// The names the calls use: few, so that they collide often.
const PATHS: [&str; 10] = [
    "f0", "f1", "d0", "d0/f2", "d0/d1", "d0/d1/f3", "d2", "d2/f4", "l0", "d0/l1",
];

/// One call, made the same way under both roots.
#[derive(Clone, Debug)]
enum Op {
    Open(usize, i32),
    Close(usize),
    Pwrite(usize, u64, usize, u8),
    Write(usize, usize, u8),
    Pread(usize, u64, usize),
    Truncate(usize, u64),
    Rename(usize, usize),
    Link(usize, usize),
    Unlink(usize),
    Mkdir(usize),
    Rmdir(usize),
    Symlink(usize, usize),
    Stat(usize),
    Readdir(usize),
}

fn random_op(r: &mut Pcg64Mcg) -> Op {
    let p = |r: &mut Pcg64Mcg| r.random_range(0..PATHS.len());
    let slot = |r: &mut Pcg64Mcg| r.random_range(0..4usize);
    match r.random_range(0..15) {
        0 | 1 => {
            let acc = [libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR][r.random_range(0..3)];
            let mut f = acc;
            for (bit, odds) in [
                (libc::O_CREAT, 2),
                (libc::O_EXCL, 4),
                (libc::O_TRUNC, 4),
                (libc::O_APPEND, 4),
            ] {
                if r.random_range(0..odds) == 0 {
                    f |= bit;
                }
            }
            Op::Open(p(r), f)
        }
        2 => Op::Close(slot(r)),
        3 | 4 => Op::Pwrite(
            slot(r),
            r.random_range(0..20_000),
            r.random_range(1..6000),
            r.random(),
        ),
        5 => Op::Write(slot(r), r.random_range(1..3000), r.random()),
        6 => Op::Pread(slot(r), r.random_range(0..24_000), r.random_range(1..9000)),
        7 => Op::Truncate(p(r), r.random_range(0..30_000)),
        8 => Op::Rename(p(r), p(r)),
        9 => Op::Link(p(r), p(r)),
        10 => Op::Unlink(p(r)),
        11 => Op::Mkdir(p(r)),
        12 => Op::Rmdir(p(r)),
        13 => Op::Symlink(p(r), p(r)),
        _ => {
            if r.random() {
                Op::Stat(p(r))
            } else {
                Op::Readdir(p(r))
            }
        }
    }
}

/// One root: its directory and its open files.
struct Side {
    root: PathBuf,
    slots: [Option<OwnedFd>; 4],
}

fn errno<T>(r: std::io::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("errno {}", e.raw_os_error().unwrap_or(-1)))
}

fn rerr<T>(r: rustix::io::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("errno {}", e.raw_os_error()))
}

impl Side {
    fn path(&self, i: usize) -> PathBuf {
        self.root.join(PATHS[i])
    }

    /// The open file `slot` names: the `slot`-th of those open, cyclically, so that
    /// calls on open files seldom miss (both sides have the same files open).
    fn fd(&self, slot: usize) -> Result<&OwnedFd, String> {
        let open: Vec<&OwnedFd> = self.slots.iter().flatten().collect();
        match open.len() {
            0 => Err("no file".into()),
            n => Ok(open[slot % n]),
        }
    }

    /// Makes the call; what it returned, as text.
    fn apply(&mut self, op: &Op) -> String {
        let r: Result<String, String> = match *op {
            Op::Open(p, flags) => rerr(rustix::fs::open(
                self.path(p),
                OFlags::from_bits_retain(flags as u32),
                Mode::from_raw_mode(0o644),
            ))
            .map(|fd| {
                // All four in use: the new file replaces (closes) the first.
                let free = self.slots.iter().position(Option::is_none).unwrap_or(0);
                self.slots[free] = Some(fd);
                format!("slot {free}")
            }),
            Op::Close(s) => {
                let open: Vec<usize> = (0..4).filter(|&i| self.slots[i].is_some()).collect();
                match open.len() {
                    0 => Err("no file".into()),
                    n => {
                        self.slots[open[s % n]] = None;
                        Ok(format!("closed {}", open[s % n]))
                    }
                }
            }
            Op::Pwrite(s, off, len, b) => self
                .fd(s)
                .and_then(|fd| rerr(rustix::io::pwrite(fd, &vec![b; len], off)))
                .map(|n| n.to_string()),
            Op::Write(s, len, b) => self
                .fd(s)
                .and_then(|fd| rerr(rustix::io::write(fd, &vec![b; len])))
                .map(|n| n.to_string()),
            Op::Pread(s, off, len) => self.fd(s).and_then(|fd| {
                let mut buf = vec![0u8; len];
                let n = rerr(rustix::io::pread(fd, &mut buf[..], off))?;
                Ok(format!("{n} {:x}", checksum(&buf[..n])))
            }),
            Op::Truncate(p, len) => rerr(rustix::fs::open(
                self.path(p),
                OFlags::WRONLY,
                Mode::empty(),
            ))
            .and_then(|fd| rerr(rustix::fs::ftruncate(&fd, len)))
            .map(|()| "ok".into()),
            Op::Rename(a, b) => {
                errno(std::fs::rename(self.path(a), self.path(b))).map(|()| "ok".into())
            }
            Op::Link(a, b) => {
                errno(std::fs::hard_link(self.path(a), self.path(b))).map(|()| "ok".into())
            }
            Op::Unlink(p) => errno(std::fs::remove_file(self.path(p))).map(|()| "ok".into()),
            Op::Mkdir(p) => errno(std::fs::create_dir(self.path(p))).map(|()| "ok".into()),
            Op::Rmdir(p) => errno(std::fs::remove_dir(self.path(p))).map(|()| "ok".into()),
            Op::Symlink(t, p) => {
                errno(std::os::unix::fs::symlink(PATHS[t], self.path(p))).map(|()| "ok".into())
            }
            Op::Stat(p) => errno(std::fs::symlink_metadata(self.path(p))).map(|m| describe(&m)),
            Op::Readdir(p) => errno(std::fs::read_dir(self.path(p))).map(|rd| {
                let mut v: Vec<String> = rd
                    .map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect();
                v.sort();
                v.join(",")
            }),
        };
        match r {
            Ok(s) => s,
            Err(e) => e,
        }
    }

    /// Every name under the root, with what it is and holds.
    fn tree(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        walk(&self.root, &self.root, &mut out);
        out
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let what = if m.is_file() {
            format!(
                "{} {:x}",
                describe(&m),
                checksum(&std::fs::read(&p).unwrap())
            )
        } else if m.file_type().is_symlink() {
            format!(
                "{} -> {}",
                describe(&m),
                std::fs::read_link(&p).unwrap().display()
            )
        } else {
            describe(&m)
        };
        out.insert(rel, what);
        if m.is_dir() {
            walk(root, &p, out);
        }
    }
}

/// Kind, permission bits, links, and the size of what is not a directory (directory
/// sizes differ by design).
fn describe(m: &std::fs::Metadata) -> String {
    let size = if m.is_dir() { 0 } else { m.size() };
    format!("{:o} {} {}", m.mode(), m.nlink(), size)
}

fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A fresh directory, removed on drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Unmounts however the test ends.
struct Unmount(PathBuf, Watchdog);

impl Drop for Unmount {
    fn drop(&mut self) {
        self.1.disarm();
        let _ = unmount(&self.0, true);
    }
}

#[test]
fn random_posix_calls_as_on_tmpfs() {
    random_calls("plain", MountOptions::default(), &Options::default());
}

#[test]
fn random_posix_calls_as_on_tmpfs_with_uthread_handlers_in_async_mode() {
    let opts = Options {
        uthread_workers: 2,
        ..Options::default()
    };
    random_calls("uthreads", MountOptions::with_mode(fs::Mode::Async), &opts);
}

#[test]
fn random_posix_calls_as_on_tmpfs_with_the_writeback_cache() {
    let opts = Options {
        writeback_cache: true,
        ..Options::default()
    };
    random_calls("writeback", MountOptions::default(), &opts);
}

#[test]
fn random_posix_calls_as_on_tmpfs_without_the_page_cache() {
    let opts = Options {
        page_cache: false,
        ..Options::default()
    };
    random_calls("direct-io", MountOptions::default(), &opts);
}

/// The random calls of every seed through a mount of a fresh image, with the file
/// system's options `fs_opts` and the mount's `opts`, and through tmpfs.
fn random_calls(tag: &str, fs_opts: MountOptions, opts: &Options) {
    if testkit::fuse_missing() {
        return;
    }
    let base = Dir(PathBuf::from(format!(
        "/dev/shm/easyio-fuse-prop-{tag}-{}",
        std::process::id()
    )));
    let (tmp, mnt) = (base.0.join("tmp"), base.0.join("mnt"));
    let region = Region::create_temp(128 << 20).unwrap();
    FileSystem::format(&region, &FormatOptions::default()).unwrap();
    let pm: Arc<dyn Pmem> = Arc::new(region);
    let fs = Arc::new(FileSystem::mount(pm, fs_opts).unwrap().0);
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let m = Mount::new(fs.clone(), &mnt, opts).unwrap();
    let handlers = m.handler_stats();
    let server = std::thread::spawn(move || m.run());
    let wd = mnt.clone();
    let watchdog = Watchdog::arm(LIMIT, "unmounting", move || {
        let _ = unmount(&wd, true);
    });
    let guard = Unmount(mnt.clone(), watchdog);
    // Per kind of call: how many succeeded, how many failed (the same on both sides).
    let mut outcomes: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for seed in 0..SEEDS {
        let mut r = Pcg64Mcg::seed_from_u64(seed);
        let (sub_t, sub_m) = (tmp.join(seed.to_string()), mnt.join(seed.to_string()));
        std::fs::create_dir(&sub_t).unwrap();
        std::fs::create_dir(&sub_m).unwrap();
        let mut sides = [sub_t, sub_m].map(|root| Side {
            root,
            slots: Default::default(),
        });
        for step in 0..STEPS {
            let op = random_op(&mut r);
            let (a, b) = (sides[0].apply(&op), sides[1].apply(&op));
            assert_eq!(
                a, b,
                "seed {seed} step {step}: {op:?} (tmpfs, then the mount)"
            );
            let kind = format!("{op:?}").split('(').next().unwrap().to_string();
            let failed = a.starts_with("errno") || a == "no file";
            let e = outcomes.entry(kind).or_insert((0, 0));
            if failed {
                e.1 += 1;
            } else {
                e.0 += 1;
            }
        }
        let tree = sides[0].tree();
        eprintln!("seed {seed}: final tree {tree:?}");
        for s in &mut sides {
            s.slots = Default::default();
        }
        assert_eq!(tree, sides[1].tree(), "seed {seed}: final trees");
    }
    eprintln!("calls (succeeded, failed): {outcomes:?}");
    // Every kind of call must have succeeded some of the time, or the comparison of
    // its errors alone says little.
    assert_eq!(outcomes.len(), 14);
    for (kind, (ok, _)) in &outcomes {
        assert!(*ok >= 5, "{kind} succeeded only {ok} times: {outcomes:?}");
    }
    drop(guard);
    server.join().unwrap().unwrap();
    if let Some(h) = handlers {
        assert!(h.requests() > 100, "{}", h.summary());
    }
    let fs = Arc::try_unwrap(fs)
        .ok()
        .expect("the server dropped its reference");
    fs.unmount().unwrap();
}
