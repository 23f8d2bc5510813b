//! `easyio bench fuse --workload programs`: real programs, timed by wall clock on the
//! mount and on a tmpfs directory in the same run, step after step, each step on
//! tmpfs first and then on the mount.
//!
//! | step        | what runs (in a work directory of the door)                         |
//! |-------------|----------------------------------------------------------------------|
//! | tar x       | `tar -xf` of an archive of a tree of [`FILES`] files in [`DIRS`] directories |
//! | cp -a       | `cp -a` of that tree                                                  |
//! | git add     | `git init` and `git add -A` in the tree                               |
//! | git commit  | `git commit`                                                          |
//! | git status  | `git status --porcelain`                                              |
//! | make -j2    | `make -j2` of a C project of [`SOURCES`] files and a header           |
//! | sqlite3     | 10 000 inserts, in [`TRANSACTIONS`] transactions, into a new database |
//! | rm -rf      | `rm -rf` of everything above                                          |
//!
//! The inputs (the archive, the project, the SQL script) are made once in a staging
//! directory of tmpfs, untimed. Every step must succeed, and what it leaves is checked
//! and must be the same on both doors: the files of the tree, git's status (clean),
//! the program `make` built and what it prints, the database's row count and sum.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;

use super::requests;
use crate::report;
use command::signals;

/// Files of the tree `tar` and `cp` copy, `git` commits and `rm` removes.
pub const FILES: usize = 5_000;
/// Directories they are spread over.
pub const DIRS: usize = 100;
/// C files of the project `make` builds (besides `main.c` and a header).
pub const SOURCES: usize = 24;
/// Rows the database gets.
pub const ROWS: usize = 10_000;
/// Transactions they are inserted in.
pub const TRANSACTIONS: usize = 100;
/// What every step through the mount should take at most, as a multiple of tmpfs's
/// wall time.
pub const TARGET: f64 = 2.0;

/// What the programs' table's footnote says.
pub const NOTE: &str = "programs: wall time of each step, run on a tmpfs directory \
(/dev/shm) and then on the mount, in the same run; inputs made untimed in tmpfs; what \
each step leaves is checked and the same on both. Through the mount, every write and \
metadata change is durable when its call returns; on tmpfs nothing is persistent. FUSE \
requests: what the kernel sent the mount during the step, counted by the kernel's \
fuse_request_send trace event (root, tracefs at /sys/kernel/tracing; '-' without).";

/// One step on both doors.
#[derive(Serialize, Clone)]
pub struct ProgramRow {
    /// The step (see the module's table).
    pub step: &'static str,
    /// Wall seconds on the mount.
    pub fuse_s: f64,
    /// Wall seconds on tmpfs.
    pub tmpfs_s: f64,
    /// `fuse_s / tmpfs_s`: how many times tmpfs's time the mount took.
    pub times_tmpfs: f64,
    /// The FUSE requests the kernel sent the mount during the step, by kind (`None`
    /// where they could not be counted: no tracefs, or not root).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<requests::Counts>,
}

/// The inputs, made once.
struct Staging {
    dir: PathBuf,
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The contents of file `i` of the tree: some lines of text naming it (200 B to 12 KiB).
fn tree_file(i: usize) -> String {
    let len = 200 + (i * 7919) % 12_000;
    let mut s = String::with_capacity(len + 64);
    let mut line = 0;
    while s.len() < len {
        let _ = writeln!(s, "file {i} line {line}: the quick brown fox jumps over");
        line += 1;
    }
    s
}

/// The path of file `i` of the tree, under `tree`.
fn tree_path(tree: &Path, i: usize) -> PathBuf {
    let d = i % DIRS;
    tree.join(format!("d{:02}/s{}/f{i}.txt", d, d % 4))
}

impl Staging {
    fn make(dir: PathBuf) -> anyhow::Result<Staging> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let s = Staging { dir };
        let tree = s.dir.join("tree");
        for i in 0..FILES {
            let p = tree_path(&tree, i);
            std::fs::create_dir_all(p.parent().expect("a file in a directory"))?;
            std::fs::write(&p, tree_file(i))?;
        }
        run(
            Command::new("tar")
                .args(["-cf", "tree.tar", "tree"])
                .current_dir(&s.dir),
            "tar",
        )?;
        std::fs::remove_dir_all(&tree)?;
        s.make_project()?;
        s.make_sql()?;
        Ok(s)
    }

    /// A C project: `SOURCES` files each with a function, `main.c` summing them.
    fn make_project(&self) -> anyhow::Result<()> {
        let p = self.dir.join("proj");
        std::fs::create_dir_all(&p)?;
        let mut h = String::from("#ifndef BENCH_H\n#define BENCH_H\n#include <stdint.h>\n");
        let mut main = String::from(
            "#include <stdio.h>\n#include \"bench.h\"\nint main(void) {\n  uint64_t s = 0;\n",
        );
        for k in 0..SOURCES {
            let _ = writeln!(h, "uint64_t f{k}(uint64_t x);");
            let _ = writeln!(main, "  s += f{k}({k});");
            let src = format!(
                "#include \"bench.h\"\n#include <string.h>\n\
                 static uint64_t mix{k}(uint64_t x) {{ x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; return x ^ (x >> 29); }}\n\
                 uint64_t f{k}(uint64_t x) {{\n  uint64_t a[64];\n  memset(a, 0, sizeof a);\n\
                 for (int i = 0; i < 64; i++) a[i] = mix{k}(x + (uint64_t)i * {m});\n\
                 uint64_t s = 0;\n  for (int i = 0; i < 64; i++) s += a[i] % 1000;\n  return s;\n}}\n",
                m = k + 1
            );
            std::fs::write(p.join(format!("m{k}.c")), src)?;
        }
        h.push_str("#endif\n");
        main.push_str("  printf(\"%llu\\n\", (unsigned long long)s);\n  return 0;\n}\n");
        std::fs::write(p.join("bench.h"), h)?;
        std::fs::write(p.join("main.c"), main)?;
        let objs: Vec<String> = (0..SOURCES)
            .map(|k| format!("m{k}.o"))
            .chain(["main.o".to_string()])
            .collect();
        let makefile = format!(
            "CC ?= cc\nCFLAGS = -O2 -g\nOBJS = {}\n\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\n\
             %.o: %.c bench.h\n\t$(CC) $(CFLAGS) -c $< -o $@\n",
            objs.join(" ")
        );
        std::fs::write(p.join("Makefile"), makefile)?;
        Ok(())
    }

    /// The SQL script: a table, `ROWS` inserts in `TRANSACTIONS` transactions, and a
    /// query of what is there.
    fn make_sql(&self) -> anyhow::Result<()> {
        let mut sql = String::from("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, n INTEGER);\n");
        let per = ROWS / TRANSACTIONS;
        for t in 0..TRANSACTIONS {
            sql.push_str("BEGIN;\n");
            for r in 0..per {
                let k = t * per + r;
                let _ = writeln!(
                    sql,
                    "INSERT INTO t(v, n) VALUES ('row {k} of the benchmark', {});",
                    (k * 7919) % 1000
                );
            }
            sql.push_str("COMMIT;\n");
        }
        sql.push_str("SELECT count(*), sum(n) FROM t;\n");
        std::fs::write(self.dir.join("insert.sql"), sql)?;
        Ok(())
    }
}

/// Runs `cmd`; its standard output, or an error naming `what` with its standard error.
fn run(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A git command in `dir`, with no user or system configuration.
fn git(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args);
    c
}

/// What a step left, to compare between the doors.
type Left = String;

/// The steps on one door's work directory `w`: each step's name, a closure that runs
/// it (timed), and what it left (checked untimed).
fn step(s: &Staging, w: &Path, name: &str) -> anyhow::Result<Left> {
    let tree = w.join("tree");
    match name {
        "tar x" => {
            run(
                Command::new("tar")
                    .arg("-xf")
                    .arg(s.dir.join("tree.tar"))
                    .arg("-C")
                    .arg(w),
                "tar -x",
            )?;
            Ok(String::new())
        }
        "cp -a" => {
            run(
                Command::new("cp").arg("-a").arg(&tree).arg(w.join("copy")),
                "cp -a",
            )?;
            Ok(String::new())
        }
        "git add" => {
            run(&mut git(&tree, &["init", "-q"]), "git init")?;
            run(&mut git(&tree, &["add", "-A"]), "git add")
        }
        "git commit" => run(
            &mut git(&tree, &["commit", "-q", "-m", "tree"]),
            "git commit",
        ),
        "git status" => run(&mut git(&tree, &["status", "--porcelain"]), "git status"),
        "make -j2" => run(
            Command::new("make")
                .args(["-s", "-j2", "-C"])
                .arg(w.join("proj")),
            "make",
        ),
        "sqlite3" => {
            let script = std::fs::File::open(s.dir.join("insert.sql"))?;
            let out = Command::new("sqlite3")
                .arg(w.join("bench.db"))
                .stdin(script)
                .output()
                .context("running sqlite3 (Debian package sqlite3)")?;
            if !out.status.success() {
                bail!("sqlite3 failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        "rm -rf" => {
            run(
                Command::new("rm")
                    .arg("-rf")
                    .arg(&tree)
                    .arg(w.join("copy"))
                    .arg(w.join("proj"))
                    .arg(w.join("bench.db")),
                "rm -rf",
            )?;
            Ok(String::new())
        }
        _ => unreachable!("a step of the table"),
    }
}

/// The steps, in order.
const STEPS: [&str; 8] = [
    "tar x",
    "cp -a",
    "git add",
    "git commit",
    "git status",
    "make -j2",
    "sqlite3",
    "rm -rf",
];

/// Untimed work before a step on `w`: the project's sources copied in for `make`.
fn before(s: &Staging, w: &Path, name: &str) -> anyhow::Result<()> {
    if name == "make -j2" {
        run(
            Command::new("cp")
                .arg("-a")
                .arg(s.dir.join("proj"))
                .arg(w.join("proj")),
            "cp of the project",
        )?;
    }
    Ok(())
}

/// Untimed checks after a step on `w`; what they found, to compare between doors.
fn after(w: &Path, name: &str, left: Left) -> anyhow::Result<Left> {
    Ok(match name {
        "tar x" | "cp -a" => {
            let root = w.join(if name == "tar x" { "tree" } else { "copy" });
            for i in (0..FILES).step_by(97) {
                let got = std::fs::read_to_string(tree_path(&root, i))
                    .with_context(|| format!("file {i} after {name}"))?;
                if got != tree_file(i) {
                    bail!("file {i} is wrong after {name}");
                }
            }
            let n = count_files(&root)?;
            if n != FILES {
                bail!("{n} files after {name}, not {FILES}");
            }
            format!("{n} files")
        }
        "git status" if !left.is_empty() => bail!("git status is not clean: {left}"),
        "make -j2" => run(
            &mut Command::new(w.join("proj/prog")),
            "the program make built",
        )?,
        "rm -rf" => {
            let n = std::fs::read_dir(w)?.count();
            if n != 0 {
                bail!("{n} entries left after rm -rf");
            }
            left
        }
        _ => left,
    })
}

/// Regular files under `dir`.
fn count_files(dir: &Path) -> anyhow::Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            n += count_files(&e.path())?;
        } else {
            n += 1;
        }
    }
    Ok(n)
}

/// Runs every step on tmpfs (`tmpfs_dir`) and on the mount (`fuse_dir`), each
/// directory made fresh and removed after.
pub fn measure(fuse_dir: &Path, tmpfs_dir: &Path, quiet: bool) -> anyhow::Result<Vec<ProgramRow>> {
    for tool in ["tar", "cp", "git", "make", "cc", "sqlite3", "rm"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map_or(true, |o| !o.status.success())
        {
            bail!(
                "{tool} is not installed (Debian packages tar, coreutils, git, make, gcc, sqlite3)"
            );
        }
    }
    let staging = Staging::make(tmpfs_dir.with_extension("staging"))?;
    for d in [fuse_dir, tmpfs_dir] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).with_context(|| format!("{}", d.display()))?;
    }
    let tracer = requests::Tracer::new(fuse_dir)
        .inspect_err(|why| eprintln!("easyio bench fuse: FUSE requests not counted: {why}"))
        .ok();
    let mut rows = Vec::new();
    for name in STEPS {
        signals::check()?;
        let mut times = [0.0; 2];
        let mut left = [String::new(), String::new()];
        let mut counts = None;
        for (i, w) in [tmpfs_dir, fuse_dir].into_iter().enumerate() {
            before(&staging, w, name)?;
            let tracing = tracer.as_ref().filter(|_| i == 1);
            if let Some(t) = tracing {
                t.start()?;
            }
            let t = Instant::now();
            let l = step(&staging, w, name)?;
            times[i] = t.elapsed().as_secs_f64();
            if let Some(t) = tracing {
                counts = Some(t.stop()?);
            }
            left[i] = after(w, name, l)?;
        }
        // git's add and commit print nothing with -q; its objects differ by time.
        if left[0] != left[1] {
            bail!(
                "{name} left different results: tmpfs {:?}, mount {:?}",
                left[0],
                left[1]
            );
        }
        if !quiet {
            eprintln!("  {name}: tmpfs {:.3} s, mount {:.3} s", times[0], times[1]);
        }
        rows.push(ProgramRow {
            step: name,
            fuse_s: times[1],
            tmpfs_s: times[0],
            times_tmpfs: times[1] / times[0].max(1e-9),
            requests: counts,
        });
    }
    let total = |f: fn(&ProgramRow) -> f64| rows.iter().map(f).sum::<f64>();
    let (fuse_s, tmpfs_s) = (total(|r| r.fuse_s), total(|r| r.tmpfs_s));
    let all = rows.iter().try_fold(requests::Counts::new(), |mut all, r| {
        for (k, n) in r.requests.as_ref()? {
            *all.entry(k.clone()).or_default() += n;
        }
        Some(all)
    });
    rows.push(ProgramRow {
        step: "all",
        fuse_s,
        tmpfs_s,
        times_tmpfs: fuse_s / tmpfs_s.max(1e-9),
        requests: all,
    });
    for d in [fuse_dir, tmpfs_dir] {
        let _ = std::fs::remove_dir_all(d);
    }
    Ok(rows)
}

/// The rows as a table.
pub fn table(rows: &[ProgramRow]) -> String {
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                r.step.to_string(),
                format!("{:.3}", r.fuse_s),
                format!("{:.3}", r.tmpfs_s),
                format!("{:.2}x", r.times_tmpfs),
                if r.times_tmpfs <= TARGET { "yes" } else { "no" }.to_string(),
                r.requests
                    .as_ref()
                    .map_or("-".to_string(), |c| requests::total(c).to_string()),
                r.requests
                    .as_ref()
                    .map_or(String::new(), |c| requests::top(c, 6)),
            ]
        })
        .collect();
    report::table(
        &[
            "program step",
            "easyio-fuse s",
            "tmpfs s",
            "mount / tmpfs",
            "≤ 2x",
            "FUSE requests",
            "most sent",
        ],
        cells,
    )
}
