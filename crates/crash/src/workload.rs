//! Workloads: the four of EASYIO's Table 2, named after the xfstests they come from,
//! and a seeded random mix of every operation the file system supports.
//!
//! A workload is generated against the model, so every operation in it is one that
//! succeeds on a correct file system; sizes and offsets are drawn from the seed and
//! chosen to cross page boundaries, leave holes and overwrite parts of pages.

use crate::error::UnknownWorkload;

use crate::model::Shadow;
use crate::ops::Op;
use crate::rng::{seeded, Below, Pcg64Mcg};

/// Bytes of a file-system page, for choosing sizes around its boundaries.
const PAGE: u64 = fs::BLOCK_SIZE;
/// Pages of a bulk write (modes with a copy engine): 16 to 64 KiB.
const BULK_MIN_PAGES: u64 = 4;
const BULK_MAX_PAGES: u64 = 16;
/// Rounds of each Table 2 workload.
const TABLE2_ROUNDS: usize = 6;
/// Operations of the random workload: enough for a directory log to outgrow its
/// cleaning threshold.
const RANDOM_OPS: usize = 600;
/// Share of the random workload's new names made in the root directory.
const ROOT_BIAS_PERCENT: u64 = 60;
/// Descriptor slots the random workload keeps open at most.
const RANDOM_SLOTS: u32 = 3;

/// The workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// Create, write, remove regular files.
    CreateDelete,
    /// Create, write, link regular files (xfstests generic/056).
    #[serde(rename = "generic_056")]
    Generic056,
    /// Write, append, link regular files (xfstests generic/090).
    #[serde(rename = "generic_090")]
    Generic090,
    /// Create, write, rename regular files (xfstests generic/322).
    #[serde(rename = "generic_322")]
    Generic322,
    /// A seeded mix of every operation.
    Random,
}

impl Workload {
    /// Every workload, Table 2's first.
    pub const ALL: [Workload; 5] = [
        Workload::CreateDelete,
        Workload::Generic056,
        Workload::Generic090,
        Workload::Generic322,
        Workload::Random,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::CreateDelete => "create_delete",
            Workload::Generic056 => "generic_056",
            Workload::Generic090 => "generic_090",
            Workload::Generic322 => "generic_322",
            Workload::Random => "random",
        }
    }

    /// What it does, for reports.
    pub fn description(self) -> &'static str {
        match self {
            Workload::CreateDelete => "create, write, remove on regular files",
            Workload::Generic056 => "create, write, link on regular files",
            Workload::Generic090 => "write, append, link on regular files",
            Workload::Generic322 => "create, write, rename on regular files",
            Workload::Random => "seeded mix of every operation",
        }
    }

    /// The operations, drawn from `seed`.
    pub fn generate(self, seed: u64) -> Vec<Op> {
        self.generate_with(seed, false)
    }

    /// The operations for a run in `mode`: in modes that copy off the caller's thread
    /// a third of the writes are bulk (16 to 64 KiB), since only larger copies go to
    /// the engine (above 4 KiB in `async`, from 16 KiB in `dma-sync`) and only those
    /// above one 32 KiB stripe are split across delegation threads.
    pub fn generate_for(self, seed: u64, mode: fs::Mode) -> Vec<Op> {
        self.generate_with(seed, mode.copies_off_thread())
    }

    fn generate_with(self, seed: u64, bulk: bool) -> Vec<Op> {
        let mut g = Gen {
            rng: seeded(seed ^ (self as u64).wrapping_mul(0xA076_1D64_78BD_642F)),
            model: Shadow::new(),
            ops: Vec::new(),
            fill: seed << 16,
            bulk,
        };
        match self {
            Workload::CreateDelete => g.create_delete(),
            Workload::Generic056 => g.generic_056(),
            Workload::Generic090 => g.generic_090(),
            Workload::Generic322 => g.generic_322(),
            Workload::Random => g.random(),
        }
        g.ops
    }
}

impl std::str::FromStr for Workload {
    type Err = UnknownWorkload;

    fn from_str(s: &str) -> Result<Workload, UnknownWorkload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
                UnknownWorkload {
                    name: s.to_string(),
                    known: names.join(", "),
                }
            })
    }
}

struct Gen {
    rng: Pcg64Mcg,
    model: Shadow,
    ops: Vec<Op>,
    fill: u64,
    /// Draw bulk sizes too (see [`Workload::generate_for`]).
    bulk: bool,
}

impl Gen {
    fn push(&mut self, op: Op) {
        op.apply(&mut self.model)
            .unwrap_or_else(|e| panic!("workload generated a failing operation {op}: {e}"));
        self.ops.push(op);
    }

    /// A size around page boundaries: small, just under or over a page, several pages.
    fn size(&mut self) -> usize {
        if self.bulk && self.rng.below(3) == 0 {
            let pages = BULK_MIN_PAGES + self.rng.below(BULK_MAX_PAGES - BULK_MIN_PAGES + 1);
            let tail = self.rng.below(2) * self.rng.below(PAGE);
            return (pages * PAGE + tail) as usize;
        }
        let pages = 1 + self.rng.below(3);
        match self.rng.below(4) {
            0 => 1 + self.rng.below(200) as usize,
            1 => (pages * PAGE) as usize,
            2 => (pages * PAGE - 1 - self.rng.below(100)) as usize,
            _ => (pages * PAGE + 1 + self.rng.below(PAGE)) as usize,
        }
    }

    fn next_fill(&mut self) -> u64 {
        self.fill += 1;
        self.fill
    }

    fn write(&mut self, path: &str, off: u64) {
        let (len, fill) = (self.size(), self.next_fill());
        self.push(Op::Write {
            path: path.into(),
            off,
            len,
            fill,
        });
    }

    fn append(&mut self, path: &str) {
        let (len, fill) = (self.size(), self.next_fill());
        self.push(Op::Append {
            path: path.into(),
            len,
            fill,
        });
    }

    /// An offset inside or just past the file at `path`.
    fn offset_in(&mut self, path: &str) -> u64 {
        let size = self.model.size(path);
        self.rng.below(size + PAGE / 2)
    }

    fn create(&mut self, path: &str) {
        self.push(Op::Create {
            path: path.into(),
            mode: 0o644,
        });
    }

    fn create_delete(&mut self) {
        self.push(Op::Mkdir {
            path: "/d".into(),
            mode: 0o755,
        });
        for r in 0..TABLE2_ROUNDS {
            let (f, g) = (format!("/f{r}"), format!("/d/g{r}"));
            self.create(&f);
            self.write(&f, 0);
            self.create(&g);
            self.write(&g, 0);
            let off = self.offset_in(&g);
            self.write(&g, off);
            if r >= 1 {
                self.push(Op::Unlink {
                    path: format!("/f{}", r - 1),
                });
            }
            if r >= 2 {
                self.push(Op::Unlink {
                    path: format!("/d/g{}", r - 2),
                });
            }
        }
    }

    fn generic_056(&mut self) {
        self.push(Op::Mkdir {
            path: "/d".into(),
            mode: 0o755,
        });
        for r in 0..TABLE2_ROUNDS {
            let (a, b, c) = (format!("/a{r}"), format!("/b{r}"), format!("/d/c{r}"));
            self.create(&a);
            self.write(&a, 0);
            self.push(Op::Link {
                old: a.clone(),
                new: b.clone(),
            });
            let off = self.offset_in(&b);
            self.write(&b, off);
            self.push(Op::Link {
                old: b.clone(),
                new: c,
            });
            self.push(Op::Fsync { path: a.clone() });
            if r >= 1 {
                self.push(Op::Unlink {
                    path: format!("/b{}", r - 1),
                });
            }
        }
    }

    fn generic_090(&mut self) {
        self.create("/foo");
        self.write("/foo", 0);
        for r in 0..TABLE2_ROUNDS {
            let l = format!("/foo_link{r}");
            self.append("/foo");
            self.push(Op::Link {
                old: "/foo".into(),
                new: l.clone(),
            });
            self.append(&l);
            self.push(Op::Fsync {
                path: "/foo".into(),
            });
            let off = self.offset_in(&l);
            self.write(&l, off);
            if r >= 2 {
                self.push(Op::Unlink {
                    path: format!("/foo_link{}", r - 2),
                });
            }
        }
    }

    fn generic_322(&mut self) {
        for r in 0..TABLE2_ROUNDS {
            let (x, y, t, d) = (
                format!("/x{r}"),
                format!("/y{r}"),
                format!("/tmp{r}"),
                format!("/dir{r}"),
            );
            self.create(&x);
            self.write(&x, 0);
            self.push(Op::Rename {
                old: x,
                new: y.clone(),
            });
            self.create(&t);
            self.write(&t, 0);
            self.push(Op::Rename {
                old: t,
                new: y.clone(),
            });
            self.push(Op::Mkdir {
                path: d.clone(),
                mode: 0o755,
            });
            self.push(Op::Rename {
                old: y,
                new: format!("{d}/z"),
            });
            self.write(&format!("{d}/z"), 0);
            if r >= 1 {
                self.push(Op::Rename {
                    old: format!("/dir{}", r - 1),
                    new: format!("{d}/prev"),
                });
            }
        }
    }

    fn random(&mut self) {
        let mut next_name = 0u32;
        while self.ops.len() < RANDOM_OPS {
            next_name += 1;
            let Some(op) = self.random_op(next_name) else {
                continue;
            };
            if op.apply(&mut self.model.clone()).is_ok() {
                self.push(op);
            }
        }
        for slot in 0..RANDOM_SLOTS {
            if self.model.fd_open(slot) {
                self.push(Op::Close { slot });
            }
        }
    }

    /// What a random operation may act on: a fresh name (`n{next_name}`, most often in
    /// the root), a regular file, any path, a descriptor slot.
    fn random_targets(&mut self, next_name: u32) -> Targets {
        let paths = self.model.paths();
        let files: Vec<String> = paths
            .iter()
            .filter(|(p, _)| self.model.is_file(p))
            .map(|(p, _)| p.clone())
            .collect();
        let dirs: Vec<String> = std::iter::once(String::new())
            .chain(paths.iter().filter(|(_, d)| *d).map(|(p, _)| p.clone()))
            .collect();
        // Most new names go to the root, so its log grows past the cleaning
        // threshold and log cleaning is crashed into too.
        let dir = if self.rng.below(100) < ROOT_BIAS_PERCENT {
            String::new()
        } else {
            pick(&mut self.rng, &dirs).unwrap()
        };
        let fresh = format!("{dir}/n{next_name}");
        let file = pick(&mut self.rng, &files);
        let any = pick(
            &mut self.rng,
            &paths.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
        );
        let slot = self.rng.below(RANDOM_SLOTS as u64) as u32;
        Targets {
            files,
            fresh,
            file,
            any,
            slot,
        }
    }

    /// One operation of the random workload, or `None` if the draw does not apply to
    /// the current tree.
    fn random_op(&mut self, next_name: u32) -> Option<Op> {
        let Targets {
            files,
            fresh,
            file,
            any,
            slot,
        } = self.random_targets(next_name);
        let op = match (self.rng.below(27), file, any) {
            (0..=2, _, _) => Op::Create {
                path: fresh,
                mode: 0o600 | self.rng.below(0o100) as u32,
            },
            (3, _, _) => Op::Mkdir {
                path: fresh,
                mode: 0o755,
            },
            (4..=6, Some(f), _) => {
                let (off, len, fill) = (self.offset_in(&f), self.size(), self.next_fill());
                Op::Write {
                    path: f,
                    off,
                    len,
                    fill,
                }
            }
            (7, Some(f), _) => {
                let (len, fill) = (self.size(), self.next_fill());
                Op::Append { path: f, len, fill }
            }
            (8, Some(f), _) => {
                let len = self.offset_in(&f) + self.rng.below(2) * PAGE;
                Op::Truncate { path: f, len }
            }
            (9, Some(f), _) if self.rng.below(3) == 0 => Op::OpenTrunc { path: f },
            (9 | 10, _, Some(p)) if !self.model.is_dir(&p) => Op::Unlink { path: p },
            (9 | 10, _, Some(p)) if self.model.is_empty_dir(&p) => Op::Rmdir { path: p },
            (11, Some(f), _) => Op::Link { old: f, new: fresh },
            (12 | 13, _, Some(p)) => {
                // Onto a fresh name, or over an existing path of the same kind.
                let over = pick(&mut self.rng, &files)
                    .filter(|v| !self.model.is_dir(&p) && *v != p)
                    .filter(|_| self.rng.below(2) == 0);
                let new = over.unwrap_or(fresh);
                if new.starts_with(&format!("{p}/")) {
                    return None;
                }
                Op::Rename { old: p, new }
            }
            (14, _, _) => Op::Symlink {
                target: format!("target-{next_name}"),
                path: fresh,
            },
            (15, _, Some(p)) if self.model.is_file(&p) || self.model.is_dir(&p) => Op::Chmod {
                path: p,
                mode: 0o400 | self.rng.below(0o400) as u32,
            },
            (16, Some(f), _) if !self.model.fd_open(slot) => Op::Open { slot, path: f },
            (17, _, _) if self.model.fd_open(slot) => Op::Close { slot },
            (18 | 19, _, _) if self.model.fd_open(slot) => {
                let off = self.rng.below(self.model.fd_size(slot) + PAGE);
                let (len, fill) = (self.size(), self.next_fill());
                Op::WriteFd {
                    slot,
                    off,
                    len,
                    fill,
                }
            }
            (20.., file, any) => return self.random_new_op(fresh, file, any),
            _ => return None,
        };
        Some(op)
    }

    /// The operations that came with handles, credentials and extended attributes:
    /// xattr set and remove, mknod, rename exchange, hole punching, `O_TMPFILE` + link.
    fn random_new_op(
        &mut self,
        fresh: String,
        file: Option<String>,
        any: Option<String>,
    ) -> Option<Op> {
        let op = match (self.rng.below(7), file, any) {
            (0 | 1, _, Some(p)) if self.model.is_file(&p) || self.model.is_dir(&p) => {
                let name = XATTR_NAMES[self.rng.below(XATTR_NAMES.len() as u64) as usize];
                let exists = self.model.xattrs(&p).contains_key(name);
                let flags = match (self.rng.below(2), exists) {
                    (0, _) => 0,
                    (_, true) => fs::XATTR_REPLACE,
                    (_, false) => fs::XATTR_CREATE,
                };
                let len = if self.rng.below(4) == 0 {
                    (PAGE + self.rng.below(2 * PAGE)) as usize
                } else {
                    self.rng.below(300) as usize
                };
                Op::SetXattr {
                    path: p,
                    name: name.into(),
                    len,
                    fill: self.next_fill(),
                    flags,
                }
            }
            (2, _, Some(p)) => {
                let names: Vec<String> = self.model.xattrs(&p).into_keys().collect();
                let name = pick(&mut self.rng, &names)?;
                Op::RemoveXattr { path: p, name }
            }
            (3, _, _) => {
                let (kind, rdev) =
                    SPECIAL_KINDS[self.rng.below(SPECIAL_KINDS.len() as u64) as usize];
                Op::Mknod {
                    path: fresh,
                    mode: kind | 0o640,
                    rdev,
                }
            }
            (4, Some(f), Some(p)) if f != p => {
                if f.starts_with(&format!("{p}/")) || p.starts_with(&format!("{f}/")) {
                    return None;
                }
                Op::Exchange { old: f, new: p }
            }
            (5, Some(f), _) => {
                let off = self.offset_in(&f);
                let len = self.size() as u64;
                Op::Punch { path: f, off, len }
            }
            (6, _, _) => {
                let dir = match fresh.rsplit_once('/') {
                    Some(("", _)) | None => "/".to_string(),
                    Some((d, _)) => d.to_string(),
                };
                Op::TmpfileLink {
                    dir,
                    path: fresh,
                    len: self.size(),
                    fill: self.next_fill(),
                }
            }
            _ => return None,
        };
        Some(op)
    }
}

/// Extended attributes the random workload sets: two user ones and a trusted one.
const XATTR_NAMES: [&str; 3] = ["user.a", "user.b", "trusted.t"];

/// Special files the random workload makes: kind and device number.
const SPECIAL_KINDS: [(u32, u64); 4] = [
    (libc::S_IFIFO, 0),
    (libc::S_IFSOCK, 0),
    (libc::S_IFCHR, 0x0103),
    (libc::S_IFBLK, 0x0801),
];

/// One of `v`, if any.
fn pick(rng: &mut Pcg64Mcg, v: &[String]) -> Option<String> {
    (!v.is_empty()).then(|| v[rng.below(v.len() as u64) as usize].clone())
}

/// What a random operation may act on (see [`Gen::random_targets`]).
struct Targets {
    files: Vec<String>,
    fresh: String,
    file: Option<String>,
    any: Option<String>,
    slot: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_random_workload_crashes_into_every_new_call() {
        let ops: Vec<Op> = (1..=2).flat_map(|s| Workload::Random.generate(s)).collect();
        let has = |f: fn(&Op) -> bool, what: &str| {
            assert!(ops.iter().any(f), "no {what} in the random workload");
        };
        has(|o| matches!(o, Op::SetXattr { flags: 0, .. }), "setxattr");
        has(
            |o| matches!(o, Op::SetXattr { flags, .. } if *flags == fs::XATTR_REPLACE),
            "setxattr XATTR_REPLACE",
        );
        has(
            |o| matches!(o, Op::SetXattr { len, .. } if *len as u64 > PAGE),
            "setxattr of a value over a block",
        );
        has(|o| matches!(o, Op::RemoveXattr { .. }), "removexattr");
        has(|o| matches!(o, Op::Mknod { .. }), "mknod");
        has(|o| matches!(o, Op::Exchange { .. }), "rename exchange");
        has(|o| matches!(o, Op::Punch { .. }), "punch");
        has(|o| matches!(o, Op::TmpfileLink { .. }), "O_TMPFILE + link");
    }

    #[test]
    fn workloads_are_deterministic_and_valid() {
        for w in Workload::ALL {
            let a = w.generate(7);
            assert_eq!(a, w.generate(7), "{}", w.name());
            assert!(a.len() >= 20, "{}: {} ops", w.name(), a.len());
            assert_eq!(w.name().parse::<Workload>().unwrap(), w);
        }
        assert_ne!(Workload::Random.generate(1), Workload::Random.generate(2));
        assert_eq!(
            Workload::Generic090.generate(3),
            Workload::Generic090.generate_for(3, fs::Mode::Cpu),
            "cpu runs keep their workloads"
        );
        assert_eq!(
            Workload::Generic090.generate_for(3, fs::Mode::Semaphore),
            Workload::Generic090.generate_for(3, fs::Mode::Cpu),
            "semaphore copies as cpu does"
        );
        for mode in [fs::Mode::Delegate, fs::Mode::DmaSync, fs::Mode::Async] {
            let bulk = Workload::Generic090.generate_for(3, mode);
            assert!(
                bulk.iter().any(|op| matches!(
                    op,
                    Op::Write { len, .. } | Op::Append { len, .. } if *len > 32 << 10
                )),
                "{}: a write of more than one stripe",
                mode.name()
            );
        }
    }
}
