//! `easyio mount` on real images in /dev/shm: unmodified programs on the mount and on
//! a tmpfs directory give the same results; permissions for an unprivileged user;
//! concurrent writers; SIGKILL of the server and recovery; clean unmounts.
//!
//! Every server runs under a watchdog that kills it (and lazily unmounts) if a test
//! hangs, and a `Drop` guard unmounts and kills it however the test ends. Every
//! program runs with a time limit. Without /dev/fuse the tests are skipped, saying so
//! (and fail when `CI` is set); a missing program fails the test naming the Debian
//! package to install.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use testkit::need;

const EASYIO: &str = env!("CARGO_BIN_EXE_easyio");
/// Longest a test's server may live before the watchdog kills it.
const SERVER_LIMIT: Duration = Duration::from_secs(150);
/// Longest one program may run.
const PROGRAM_LIMIT: Duration = Duration::from_secs(90);

/// A directory of this test in /dev/shm (tmpfs), removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = PathBuf::from(format!(
            "/dev/shm/easyio-fuse-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.0.join("mnt"))
            .output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a program, killed (and the test failed) after [`PROGRAM_LIMIT`]; its output.
fn run(prog: &str, args: &[&str], dir: &Path) -> Output {
    testkit::run(
        Command::new(prog).args(args).current_dir(dir),
        PROGRAM_LIMIT,
    )
}

/// Runs a shell script with `$1` = `arg`; its standard output, failing on failure.
fn sh(script: &str, dir: &Path, arg: &Path) -> String {
    let out = run("sh", &["-c", script, "sh", arg.to_str().unwrap()], dir);
    assert!(
        out.status.success(),
        "script failed ({}) in {}:\n{script}\nstdout: {}\nstderr: {}",
        out.status,
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn easyio(args: &[&str]) -> Output {
    run(EASYIO, args, Path::new("/"))
}

/// A formatted image in `dir`.
fn mkfs(dir: &Path, size: &str) -> PathBuf {
    let image = dir.join("image");
    let out = easyio(&["mkfs", "--image", image.to_str().unwrap(), "--size", size]);
    assert!(
        out.status.success(),
        "mkfs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    image
}

/// `easyio mount -f` of an image, served until [`Server::umount`] or drop.
struct Server {
    child: Child,
    mp: PathBuf,
    log: PathBuf,
    watchdog: testkit::Watchdog,
    /// What the server printed when the mount was up.
    line: String,
}

impl Server {
    fn start(image: &Path, mp: &Path, extra: &[&str]) -> Server {
        std::fs::create_dir_all(mp).unwrap();
        let log = mp.with_extension("log");
        let mut child = Command::new(EASYIO)
            .arg("mount")
            .arg(image)
            .arg(mp)
            .arg("-f")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let watchdog = watchdog(child.id(), mp.to_path_buf());
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let s = Server {
            child,
            mp: mp.to_path_buf(),
            log,
            watchdog,
            line: line.clone(),
        };
        assert!(
            line.contains("mounted on"),
            "mount failed: {line:?}\n{}",
            s.log_text()
        );
        s
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `easyio umount`, then the server's exit.
    fn umount(mut self) -> String {
        let out = easyio(&["umount", self.mp.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "umount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let st = wait_exit(&mut self.child, Duration::from_secs(30));
        assert!(st.success(), "server exit {st}: {}", self.log_text());
        self.log_text()
    }
}

/// Waits for a child to exit, killing it (and failing) past `limit`.
fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    testkit::wait(child, limit)
}

/// Kills server `pid` and lazily unmounts `mp` if the test is still running after
/// [`SERVER_LIMIT`]: calls blocked on the mount then fail and the test ends.
fn watchdog(pid: u32, mp: PathBuf) -> testkit::Watchdog {
    testkit::Watchdog::arm(SERVER_LIMIT, format!("killing server {pid}"), move || {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .output();
        let _ = Command::new("umount").arg("-l").arg(&mp).output();
    })
}

impl Drop for Server {
    fn drop(&mut self) {
        self.watchdog.disarm();
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("umount").arg("-l").arg(&self.mp).output();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The fs crate's sources: a real tree of a few dozen files to copy around.
fn source_tree() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fs")
}

/// A scratch directory with an image mounted on `mnt` and a tmpfs twin `tmp`.
fn setup(name: &str, size: &str, extra: &[&str]) -> (Scratch, Server, PathBuf) {
    let s = Scratch::new(name);
    let image = mkfs(&s.0, size);
    let server = Server::start(&image, &s.0.join("mnt"), extra);
    let tmp = s.0.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    (s, server, tmp)
}

/// `ls -lRn` with what differs between file systems by design left out: the "total"
/// lines (blocks) and the sizes of directories.
fn normalise_ls(out: &str) -> String {
    let mut v = Vec::new();
    for l in out.lines() {
        if l.starts_with("total ") {
            continue;
        }
        if l.starts_with('d') {
            let mut f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 4 {
                f.remove(4);
            }
            v.push(f.join(" "));
        } else {
            v.push(l.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    v.join("\n")
}

#[test]
fn cp_tar_find_ls_du_sha256sum_as_on_tmpfs() {
    if testkit::fuse_missing() {
        return;
    }
    for (p, pkg) in [
        ("tar", "tar"),
        ("diff", "diffutils"),
        ("sha256sum", "coreutils"),
    ] {
        need(p, pkg);
    }
    let (s, server, tmp) = setup("tree", "512M", &[]);
    let src = source_tree();
    let script = format!(
        "set -e; cd \"$1\"; cp -a {} src; mkdir untar; tar cf - src | tar xf - -C untar; \
         diff -r src untar/src; \
         dd if=/dev/urandom of=big1 bs=1M count=40 status=none; \
         dd if=/dev/urandom of=big2 bs=4099 count=3001 status=none; \
         cp big1 big1.copy; cat big2 big1 > big3",
        src.display()
    );
    for root in [&tmp, &server.mp] {
        sh(&script, root, root);
    }
    // The same bytes everywhere: the mount's against tmpfs, then the hashes within.
    let diff = run(
        "diff",
        &["-r", "src", server.mp.join("src").to_str().unwrap()],
        &tmp,
    );
    assert!(
        diff.status.success(),
        "diff -r: {}",
        String::from_utf8_lossy(&diff.stdout)
    );
    let hash = |root: &Path| {
        let sums = sh("sha256sum big1 big1.copy big3", root, root);
        let first: Vec<&str> = sums.lines().map(|l| &l[..64]).collect();
        assert_eq!(first[0], first[1], "a copy on {} differs", root.display());
        sums
    };
    let (h_tmp, h_mnt) = (hash(&tmp), hash(&server.mp));
    // big1, big2 are random per root: compare each file's hash across roots by copying.
    let cross = sh(
        &format!(
            "cp big1 {0}/x1 && cp big3 {0}/x3 && sha256sum big1 big3",
            server.mp.display()
        ),
        &tmp,
        &tmp,
    );
    let back = sh("sha256sum x1 x3", &server.mp, &server.mp);
    let col = |t: &str| t.lines().map(|l| l[..64].to_string()).collect::<Vec<_>>();
    assert_eq!(col(&cross), col(&back));
    assert!(!h_tmp.is_empty() && !h_mnt.is_empty());
    let listing = |root: &Path| {
        let find = sh(
            "cd src && find . -type f -printf '%P %m %n %s %T@\\n' | sort && \
             find . -type d -printf '%P %m %n\\n' | sort",
            root,
            root,
        );
        let ls = normalise_ls(&sh("ls -lRn --time-style=+%s src", root, root));
        let du = sh(
            "cd src && du -ab --apparent-size $(find . -type f | sort)",
            root,
            root,
        );
        (find, ls, du)
    };
    assert_eq!(listing(&tmp), listing(&server.mp));
    let log = server.umount();
    assert!(log.contains("unmounted cleanly"), "{log}");
    drop(s);
}

const PY_SCRIPT: &str = r#"
import os, sys, errno
os.chdir(sys.argv[1])
out = []
def rec(*a): out.append(" ".join(str(x) for x in a))
os.makedirs("a/b/c")
with open("a/f", "wb") as f:
    f.write(b"0123456789" * 1000)
with open("a/f", "r+b") as f:
    f.seek(4097); f.write(b"XYZ"); f.seek(-5, 2); rec("tail", f.read())
    f.seek(4095); rec("mid", f.read(6)); f.truncate(5000)
rec("size", os.stat("a/f").st_size)
fd = os.open("a/g", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o640)
os.pwrite(fd, b"odd", 12345); os.close(fd)
try:
    os.open("a/g", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
except OSError as e:
    rec("excl", errno.errorcode[e.errno])
rec("g", os.stat("a/g").st_size, oct(os.stat("a/g").st_mode))
with open("a/g", "rb") as f:
    rec("hole", f.read(12345) == bytes(12345), f.read())
fd = os.open("a/app", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
for i in range(50):
    os.write(fd, b"line %d\n" % i)
os.lseek(fd, 0, 0); os.write(fd, b"end\n"); os.close(fd)
rec("app", open("a/app").read().splitlines()[-2:])
os.rename("a/f", "a/b/f2")
os.replace("a/g", "a/b/f2")
rec("replaced", os.stat("a/b/f2").st_size)
os.link("a/b/f2", "a/h"); rec("nlink", os.stat("a/h").st_nlink)
os.symlink("b/f2", "a/s"); rec("readlink", os.readlink("a/s"), os.stat("a/s").st_size)
os.rename("a/b", "a/bb")
try:
    os.rmdir("a/bb")
except OSError as e:
    rec("rmdir", errno.errorcode[e.errno])
try:
    os.rename("a/bb", "a/bb/c/x")
except OSError as e:
    rec("into-self", errno.errorcode[e.errno])
os.makedirs("d/e")
os.rename("d/e", "a/bb/c")
rec("listdir", sorted(os.listdir("a")), sorted(os.listdir("a/bb")))
for root, dirs, files in sorted(os.walk(".")):
    rec("walk", root, sorted(dirs), sorted(files))
fd = os.open("sparse", os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(fd, b"data", 1 << 20)
rec("seek", os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 1 << 20, os.SEEK_HOLE))
os.posix_fallocate(fd, 0, 3 << 20); rec("falloc", os.fstat(fd).st_size)
os.close(fd)
with open("a/h", "rb") as f:
    os.unlink("a/h"); os.unlink("a/bb/f2")
    rec("unlinked-open", len(f.read()))
rec("gone", os.path.exists("a/h"))
for n in ("a/app", "a/s", "sparse"):
    os.unlink(n)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def renameat2(a, b, flags):
    r = libc.renameat2(-100, a.encode(), -100, b.encode(), flags)
    return "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]
open("x1", "w").write("one"); open("x2", "w").write("two")
rec("noreplace", renameat2("x1", "x2", 1), open("x2").read())
rec("exchange", renameat2("x1", "x2", 2), open("x1").read(), open("x2").read())
rec("exchange-dir", renameat2("x1", "d", 2), os.path.isdir("x1"), open("d").read())
renameat2("x1", "d", 2)
rec("exchange-missing", renameat2("x1", "nothere", 2))
os.unlink("x1"); os.unlink("x2")
open("xa", "w").write("x")
os.setxattr("xa", "user.k", b"v1"); os.setxattr("xa", "user.j", b"")
try:
    os.setxattr("xa", "user.k", b"v2", os.XATTR_CREATE)
except OSError as e:
    rec("xattr-create", errno.errorcode[e.errno])
rec("xattr", os.getxattr("xa", "user.k"), sorted(os.listxattr("xa")))
os.removexattr("xa", "user.k")
try:
    os.getxattr("xa", "user.k")
except OSError as e:
    rec("xattr-removed", errno.errorcode[e.errno], os.listxattr("xa"))
os.unlink("xa")
os.mkfifo("fifo", 0o640); rec("fifo", oct(os.stat("fifo").st_mode)); os.unlink("fifo")
rec("final", sorted((r, sorted(d), sorted(f)) for r, d, f in os.walk(".")))
print("\n".join(out))
"#;

#[test]
fn python_script_as_on_tmpfs() {
    if testkit::fuse_missing() {
        return;
    }
    need("python3", "python3");
    let (s, server, tmp) = setup("python", "256M", &[]);
    let script = s.0.join("t.py");
    std::fs::write(&script, PY_SCRIPT).unwrap();
    let py = |root: &Path| {
        let out = run(
            "python3",
            &[script.to_str().unwrap(), root.to_str().unwrap()],
            root,
        );
        assert!(
            out.status.success(),
            "python on {}: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let (a, b) = (py(&tmp), py(&server.mp));
    eprintln!("on tmpfs:\n{a}");
    assert!(
        a.contains("excl EEXIST") && a.contains("unlinked-open 12348"),
        "{a}"
    );
    assert_eq!(a, b);
    server.umount();
}

#[test]
fn sqlite_and_git_as_on_tmpfs() {
    if testkit::fuse_missing() {
        return;
    }
    need("sqlite3", "sqlite3");
    need("git", "git");
    let (_s, server, tmp) = setup("apps", "256M", &["--mode", "delegate"]);
    let sql = "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, n INTEGER); \
        CREATE INDEX tv ON t(v); \
        WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5000) \
        INSERT INTO t(v, n) SELECT printf('row-%05d', i), i * 7 FROM c; \
        WITH RECURSIVE c(i) AS (SELECT 5001 UNION ALL SELECT i + 1 FROM c WHERE i < 10000) \
        INSERT INTO t(v, n) SELECT printf('row-%05d', i), i * 7 FROM c; \
        UPDATE t SET n = n + 1 WHERE id % 3 = 0; DELETE FROM t WHERE id % 97 = 0; \
        SELECT count(*), sum(n), max(v) FROM t; PRAGMA integrity_check;";
    let git = format!(
        "set -e; export HOME=\"$1\" GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=t GIT_COMMITTER_NAME=t \
         GIT_AUTHOR_EMAIL=t@example.org GIT_COMMITTER_EMAIL=t@example.org \
         GIT_AUTHOR_DATE='1700000000 +0000' GIT_COMMITTER_DATE='1700000000 +0000'; \
         cp -r {} tree; cd tree; git init -q; git add -A; git commit -q -m one; \
         echo change >> Cargo.toml; git commit -qam two; \
         git rev-parse HEAD; git status --porcelain; git fsck --strict 2>&1; git log --oneline | wc -l",
        source_tree().display()
    );
    let both = |root: &Path| {
        let db = sh(&format!("sqlite3 \"$1/db\" \"{sql}\""), root, root);
        let g = run("sh", &["-c", &git, "sh", root.to_str().unwrap()], root);
        assert!(
            g.status.success(),
            "git on {}: {}",
            root.display(),
            String::from_utf8_lossy(&g.stderr)
        );
        (db, String::from_utf8(g.stdout).unwrap())
    };
    // Fixed names and dates (in the script), so that the commits and their hashes are
    // the same on both.
    let (a, b) = (both(&tmp), both(&server.mp));
    eprintln!("on tmpfs:\n{}{}", a.0, a.1);
    assert!(a.0.ends_with("ok\n"), "{}", a.0);
    assert!(a.0.starts_with("9897|"), "{}", a.0);
    assert_eq!(a, b);
    server.umount();
}

const WRITER: &str = r#"
import os, sys
me, n = int(sys.argv[1]), int(sys.argv[2])
own = os.open("own%d" % me, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
log = os.open("log", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
for i in range(n):
    os.write(own, (b"%d:%06d|" % (me, i)).ljust(4096, b"."))
    os.write(log, (b"%d %06d " % (me, i)).ljust(63, b"x") + b"\n")
os.close(own); os.close(log)
"#;

#[test]
fn two_processes_write_files_and_append_to_one_log_at_once() {
    if testkit::fuse_missing() {
        return;
    }
    need("python3", "python3");
    // In `async` mode: the handlers wait for the copy engine's completions.
    let (s, server, _tmp) = setup("concurrent", "256M", &["--mode", "async"]);
    let script = s.0.join("w.py");
    std::fs::write(&script, WRITER).unwrap();
    const N: usize = 300;
    let mut kids: Vec<Child> = (0..2)
        .map(|me| {
            Command::new("timeout")
                .args([
                    PROGRAM_LIMIT.as_secs().to_string().as_str(),
                    "python3",
                    script.to_str().unwrap(),
                ])
                .args([me.to_string(), N.to_string()])
                .current_dir(&server.mp)
                .spawn()
                .unwrap()
        })
        .collect();
    for k in &mut kids {
        assert!(wait_exit(k, Duration::from_secs(100)).success());
    }
    for me in 0..2 {
        let data = std::fs::read(server.mp.join(format!("own{me}"))).unwrap();
        assert_eq!(data.len(), N * 4096);
        for (i, chunk) in data.chunks(4096).enumerate() {
            assert!(
                chunk.starts_with(format!("{me}:{i:06}|").as_bytes()),
                "own{me} chunk {i}"
            );
        }
    }
    let log = std::fs::read_to_string(server.mp.join("log")).unwrap();
    assert_eq!(
        log.len(),
        2 * N * 64,
        "every append whole, none overwritten"
    );
    let mut seen: Vec<(u32, u32)> = log
        .lines()
        .map(|l| {
            assert_eq!(l.len(), 63, "torn line {l:?}");
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().unwrap(), f[1].parse().unwrap())
        })
        .collect();
    seen.sort();
    let want: Vec<(u32, u32)> = (0..2)
        .flat_map(|m| (0..N as u32).map(move |i| (m, i)))
        .collect();
    assert_eq!(seen, want);
    server.umount();
}

const PERM_SETUP: &str = "set -e; cd \"$1\"; mkdir pub priv sticky sg; chmod 777 pub; \
    chmod 755 priv; chmod 1777 sticky; echo secret > secret; chmod 600 secret; \
    echo r > sticky/rootfile; chmod 666 sticky/rootfile; echo open > priv/readable; \
    chmod 644 priv/readable; chgrp 100 sg; chmod 2777 sg; for f in suid sgid trunc; do \
    echo $f > pub/$f; done; chmod 4777 pub/suid; chmod 2777 pub/sgid; chmod 6777 pub/trunc";

const PERM_CHECKS: &str = r#"cd "$1"; umask 027
t() { if "$@" 2>/dev/null; then echo "ok $*"; else echo "refused $*"; fi; }
t sh -c 'echo x > priv/new'
t cat secret
t cat priv/readable
t sh -c 'echo x > pub/mine'
stat -c '%u %g %a' pub/mine
t mkdir pub/d
stat -c '%u %g %a' pub/d
t rm -f sticky/rootfile
t sh -c 'echo w >> sticky/rootfile'
t chmod 777 secret
t touch -d @1000 secret
t touch secret
t chown 0 pub/mine
t chmod 700 pub/mine
stat -c '%a' pub/mine
t sh -c 'echo y > sg/f'
stat -c '%g %a' sg/f
t mkdir sg/d
stat -c '%g %a' sg/d
t ls priv
t mv pub/mine priv/
t rm pub/mine
t rmdir pub/d
t sh -c 'echo x >> pub/suid'
echo "suid $(stat -c %a pub/suid)"
t sh -c 'echo x > pub/sgid'
echo "sgid $(stat -c %a pub/sgid)"
t truncate -s 1 pub/trunc
echo "trunc $(stat -c %a pub/trunc)"
"#;

#[test]
fn an_unprivileged_user_is_refused_what_the_mode_bits_refuse() {
    if testkit::fuse_missing() {
        return;
    }
    need("setpriv", "util-linux");
    let (_s, server, tmp) = setup("perm", "64M", &["-o", "allow_other"]);
    let as_nobody = |root: &Path| {
        sh(PERM_SETUP, root, root);
        let out = run(
            "setpriv",
            &[
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                PERM_CHECKS,
                "sh",
            ]
            .into_iter()
            .chain([root.to_str().unwrap()])
            .collect::<Vec<_>>(),
            Path::new("/"),
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let (a, b) = (as_nobody(&tmp), as_nobody(&server.mp));
    eprintln!("as nobody on tmpfs:\n{a}");
    for line in [
        "refused sh -c echo x > priv/new",
        "refused cat secret",
        "ok cat priv/readable",
        "65534 65534 640",
        "65534 65534 750",
        "refused rm -f sticky/rootfile",
        "ok sh -c echo w >> sticky/rootfile",
        "refused chmod 777 secret",
        "refused touch -d @1000 secret",
        "refused chown 0 pub/mine",
        "100 2750",
        // A write or truncate by a user without CAP_FSETID clears setuid, and setgid
        // where the group may execute.
        "suid 777",
        "sgid 777",
        "trunc 777",
    ] {
        assert!(a.lines().any(|l| l == line), "tmpfs: no {line:?} in\n{a}");
    }
    assert_eq!(a, b, "tmpfs, then the mount");
    server.umount();
}

#[test]
fn sigkill_of_the_server_loses_no_acknowledged_write() {
    if testkit::fuse_missing() {
        return;
    }
    need("python3", "python3");
    let (s, server, _tmp) = setup("crash", "256M", &["--mode", "dma-sync"]);
    let writer = "import os, sys\n\
        for i in range(1000000):\n\
        \x20   fd = os.open('w%d' % i, os.O_CREAT | os.O_WRONLY, 0o644)\n\
        \x20   os.write(fd, bytes([i % 251]) * (4096 + i))\n\
        \x20   os.close(fd)\n\
        \x20   print(i, flush=True)\n";
    let mut w = Command::new("timeout")
        .args([
            PROGRAM_LIMIT.as_secs().to_string().as_str(),
            "python3",
            "-c",
            writer,
        ])
        .current_dir(&server.mp)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = w.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            let _ = tx.send(l.parse::<usize>().unwrap());
        }
    });
    let mut acked = Vec::new();
    while acked.len() < 200 {
        acked.push(
            rx.recv_timeout(Duration::from_secs(30))
                .expect("writer stalled"),
        );
    }
    let mut server = server;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    acked.extend(rx.iter());
    eprintln!("{} writes acknowledged before the kill", acked.len());
    wait_exit(&mut w, Duration::from_secs(30));
    assert!(easyio(&["umount", server.mp.to_str().unwrap()])
        .status
        .success());
    drop(server);
    let image = s.0.join("image");
    let server = Server::start(&image, &s.0.join("mnt"), &[]);
    assert!(
        server
            .log_text()
            .contains("not cleanly unmounted; recovered"),
        "{}",
        server.log_text()
    );
    for &i in &acked {
        let data = std::fs::read(server.mp.join(format!("w{i}"))).unwrap();
        assert_eq!(
            data,
            vec![(i % 251) as u8; 4096 + i],
            "w{i} acknowledged but not kept"
        );
    }
    server.umount();
    let fsck = easyio(&["fsck", "--image", image.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&fsck.stdout);
    assert!(
        fsck.status.success() && text.contains("cleanly unmounted"),
        "{text}"
    );
}

/// Kills a detached server (by pid) and lazily unmounts, however the test ends.
struct Detached {
    pid: String,
    mp: PathBuf,
}

impl Drop for Detached {
    fn drop(&mut self) {
        if Path::new(&format!("/proc/{}", self.pid)).exists() {
            let _ = Command::new("umount").arg("-l").arg(&self.mp).output();
            let _ = Command::new("kill").args(["-KILL", &self.pid]).output();
        }
    }
}

/// Checks that a command failed with `code` and one line containing `text`; removes
/// the log that a failed background server keeps and names.
fn one_line_error(out: &Output, code: i32, text: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(text), "{err}");
    if let Some(log) = err
        .split("(server log: ")
        .nth(1)
        .and_then(|r| r.split(')').next())
    {
        std::fs::remove_file(log).unwrap();
    }
}

#[test]
fn bad_input_then_clean_unmounts_by_every_door() {
    if testkit::fuse_missing() {
        return;
    }
    need("fusermount3", "fuse3");
    let s = Scratch::new("doors");
    let image = mkfs(&s.0, "64M");
    let (img, mp) = (image.to_str().unwrap(), s.0.join("mnt"));
    let mps = mp.to_str().unwrap();
    std::fs::create_dir(&mp).unwrap();
    // Refused before anything is mounted.
    let missing = s.0.join("nope");
    one_line_error(
        &easyio(&["mount", missing.to_str().unwrap(), mps]),
        2,
        "no such file",
    );
    one_line_error(
        &easyio(&["mount", img, missing.to_str().unwrap()]),
        2,
        "mount point",
    );
    one_line_error(&easyio(&["mount", img, img]), 20, "Not a directory");
    // The detached server: up when `mount` returns, gone when `umount` returns (the
    // image given before the command, as every command that opens one takes it).
    let log = s.0.join("server.log");
    let out = easyio(&["--image", img, "mount", mps, "--log", log.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = text
        .split("server pid ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .to_string();
    let _guard = Detached {
        pid: pid.clone(),
        mp: mp.clone(),
    };
    std::fs::write(mp.join("f"), b"kept").unwrap();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(mps))
        .unwrap();
    // The kernel checks mode bits itself unless only root's processes reach the mount.
    let root = rustix::process::getuid().is_root();
    assert!(
        line.starts_with("easyio ") && line.contains("default_permissions") != root,
        "{line}"
    );
    let other = s.0.join("mnt2");
    std::fs::create_dir(&other).unwrap();
    one_line_error(
        &easyio(&["mount", img, other.to_str().unwrap()]),
        16,
        "in use",
    );
    one_line_error(&easyio(&["mount", img, mps]), 16, "already a mount point");
    assert!(easyio(&["umount", mps]).status.success());
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("unmounted cleanly"));
    assert!(
        !Path::new(&format!("/proc/{pid}/exe")).exists(),
        "umount returned before the server exited"
    );
    assert!(
        std::fs::read_dir(&mp).unwrap().next().is_none(),
        "mount point left in use"
    );
    let fsck = |what: &str| {
        let out = easyio(&["fsck", "--image", img]);
        let t = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success() && t.contains("cleanly unmounted"),
            "after {what}: {t}"
        );
    };
    fsck("easyio umount");
    // SIGTERM: unmounted at once, served until the last open file is closed.
    let server = Server::start(&image, &mp, &[]);
    let f = std::fs::File::open(mp.join("f")).unwrap();
    let mut server = server;
    assert!(Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    while std::fs::metadata(mp.join("f")).is_ok() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "SIGTERM did not unmount"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut kept = String::new();
    std::io::Read::read_to_string(&mut &f, &mut kept).unwrap();
    assert_eq!(kept, "kept");
    drop(f);
    let st = wait_exit(&mut server.child, Duration::from_secs(30));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(libc::SIGTERM)
    );
    assert!(
        server.log_text().contains("unmounted cleanly"),
        "{}",
        server.log_text()
    );
    drop(server);
    fsck("SIGTERM");
    // fusermount3 -u.
    let mut server = Server::start(&image, &mp, &[]);
    let out = run("fusermount3", &["-u", mps], Path::new("/"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(wait_exit(&mut server.child, Duration::from_secs(30)).success());
    assert!(
        !server.log_text().contains("not cleanly"),
        "{}",
        server.log_text()
    );
    drop(server);
    fsck("fusermount3 -u");
    assert_eq!(std::fs::read_dir(&mp).unwrap().count(), 0);
}

/// Writes `a{me}_{0,1}` (3 MiB and more, random, in pieces of 64 KiB to 1 MiB),
/// fsyncs them and prints each name and the SHA-256 of what it wrote.
const ASYNC_WRITER: &str = r#"
import hashlib, os, random, sys
me = int(sys.argv[1])
r = random.Random(me)
for f in range(2):
    name = "a%d_%d" % (me, f)
    data = r.randbytes(3 * 1024 * 1024 + 12345 * me + f)
    fd = os.open(name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    off = 0
    while off < len(data):
        n = r.choice([65536, 131072 + 17, 1 << 20])
        assert os.pwrite(fd, data[off:off + n], off) == len(data[off:off + n])
        off += n
    os.fsync(fd)
    os.close(fd)
    print(name, hashlib.sha256(data).hexdigest())
"#;

/// Reads every name given in a random order, in pieces of 256 KiB at odd offsets
/// first, and prints each name and the SHA-256 of its contents.
const ASYNC_READER: &str = r#"
import hashlib, os, random, sys
r = random.Random(int(sys.argv[1]))
names = sys.argv[2:]
r.shuffle(names)
for name in names:
    fd = os.open(name, os.O_RDONLY)
    size = os.fstat(fd).st_size
    probe = r.randrange(0, size)
    head = os.pread(fd, 5000, probe)
    parts, off = [], 0
    while off < size:
        b = os.pread(fd, 262144, off)
        assert b, "short read"
        parts.append(b)
        off += len(b)
    os.close(fd)
    data = b"".join(parts)
    assert data[probe:probe + 5000] == head
    print(name, hashlib.sha256(data).hexdigest())
"#;

/// Runs `script` with `args` in `dir` under `timeout`, in the background.
fn python(script: &Path, args: &[String], dir: &Path) -> Child {
    Command::new("timeout")
        .args([
            PROGRAM_LIMIT.as_secs().to_string().as_str(),
            "python3",
            script.to_str().unwrap(),
        ])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The lines a background program printed, failing if it failed.
fn lines_of(mut kid: Child) -> Vec<String> {
    let mut out = String::new();
    std::io::Read::read_to_string(kid.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(wait_exit(&mut kid, Duration::from_secs(100)).success());
    out.lines().map(str::to_string).collect()
}

/// The counts in the server's "N requests ran as uthreads on W workers (S switches,
/// Y waits for a copy)" line.
fn uthread_counts(log: &str) -> Option<(u64, u64, u64, u64)> {
    let l = log
        .lines()
        .find(|l| l.contains("requests ran as uthreads"))?;
    let n: Vec<u64> = l
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    Some((n[0], n[1], n[2], n[3]))
}

#[test]
fn async_mode_serves_concurrent_reads_and_writes_as_uthreads() {
    if testkit::fuse_missing() {
        return;
    }
    need("python3", "python3");
    let extra = ["--mode", "async", "--threads", "2", "--slowmem", "optane"];
    let (s, server, _tmp) = setup("uthreads", "256M", &extra);
    assert!(
        server.line.contains("(slowmem optane EMULATED)"),
        "{}",
        server.line
    );
    let (writer, reader) = (s.0.join("w.py"), s.0.join("r.py"));
    std::fs::write(&writer, ASYNC_WRITER).unwrap();
    std::fs::write(&reader, ASYNC_READER).unwrap();
    const PROCS: usize = 4;
    let kids: Vec<Child> = (0..PROCS)
        .map(|me| python(&writer, &[me.to_string()], &server.mp))
        .collect();
    let mut want: Vec<String> = kids.into_iter().flat_map(lines_of).collect();
    want.sort();
    assert_eq!(want.len(), 2 * PROCS);
    let names: Vec<String> = want
        .iter()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    // Each reader opens every file anew: the kernel drops its cached pages at open,
    // so every byte is read from the server, by four processes at once.
    let kids: Vec<Child> = (0..PROCS)
        .map(|me| {
            let args: Vec<String> = std::iter::once(me.to_string())
                .chain(names.iter().cloned())
                .collect();
            python(&reader, &args, &server.mp)
        })
        .collect();
    for kid in kids {
        let mut got = lines_of(kid);
        got.sort();
        assert_eq!(got, want, "a reader saw other bytes than were written");
    }
    let log = server.umount();
    assert!(log.contains("slowmem optane EMULATED"), "{log}");
    assert!(log.contains("as uthreads on 2 workers"), "{log}");
    let (requests, workers, switches, waits) =
        uthread_counts(&log).unwrap_or_else(|| panic!("no uthread counts in\n{log}"));
    // Of each file at least 4 writes and 3 reads (of at most 1 MiB each: a page a
    // reader brought in may serve another reader, but every byte came from the server
    // at least once).
    let least = 2 * PROCS as u64 * (4 + 3);
    assert!(requests >= least, "{requests} < {least} in\n{log}");
    assert_eq!(workers, 2);
    assert!(switches >= requests, "{log}");
    // A handler that waited for its copy in a worker's wait set: only a uthread can.
    assert!(waits > 0, "{log}");
    drop(s);
}

/// Through a mount with the writeback cache: `synced` written by one write-only
/// descriptor, fsynced and kept open; `closed` written, reopened write-only (no
/// truncation) for small overwrites the kernel must first read pages for, appended to
/// with `O_APPEND`, and closed. Prints each name and the SHA-256 of what it should
/// hold, then `done`, then (with `hold`) waits on standard input.
const WRITEBACK_WRITER: &str = r#"
import hashlib, os, random, sys
r = random.Random(int(sys.argv[1]))
def put(fd, model, off, data):
    assert os.pwrite(fd, data, off) == len(data)
    end = off + len(data)
    if end > len(model):
        model.extend(bytes(end - len(model)))
    model[off:end] = data
def scribble(fd, model, n, most):
    for _ in range(n):
        data = r.randbytes(r.randrange(1, most))
        off = r.randrange(0, len(model) + 1) if model and r.random() < 0.3 else len(model)
        put(fd, model, off, data)
synced = bytearray()
fd = os.open("synced", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
scribble(fd, synced, 600, 9000)
os.fsync(fd)
closed = bytearray()
c = os.open("closed", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
scribble(c, closed, 400, 9000)
os.close(c)
c = os.open("closed", os.O_WRONLY)
for _ in range(100):
    put(c, closed, r.randrange(0, len(closed)), r.randbytes(r.randrange(1, 3000)))
os.close(c)
c = os.open("closed", os.O_WRONLY | os.O_APPEND)
for _ in range(100):
    data = r.randbytes(r.randrange(1, 700))
    assert os.write(c, data) == len(data)
    closed.extend(data)
os.close(c)
print("synced", hashlib.sha256(synced).hexdigest())
print("closed", hashlib.sha256(closed).hexdigest())
print("done", flush=True)
if sys.argv[2] == "hold":
    sys.stdin.read()
os.close(fd)
"#;

/// SHA-256 lines of `names` in `dir`, as the script prints them.
fn sums(dir: &Path, names: &[&str]) -> Vec<String> {
    sh(&format!("sha256sum {}", names.join(" ")), dir, dir)
        .lines()
        .map(|l| {
            let (sum, name) = l.split_once("  ").unwrap();
            format!("{name} {sum}")
        })
        .collect()
}

#[test]
fn writeback_cache_data_is_durable_after_fsync_and_close() {
    if testkit::fuse_missing() {
        return;
    }
    need("python3", "python3");
    let (s, server, _tmp) = setup("writeback", "256M", &["--writeback-cache"]);
    let image = s.0.join("image");
    let script = s.0.join("wb.py");
    std::fs::write(&script, WRITEBACK_WRITER).unwrap();
    assert!(server.log_text().contains("kernel writeback cache"));
    // 1. fsync'd (file still open) and closed files survive a SIGKILL of the server.
    let mut w = Command::new("timeout")
        .args([
            PROGRAM_LIMIT.as_secs().to_string().as_str(),
            "python3",
            script.to_str().unwrap(),
            "1",
            "hold",
        ])
        .current_dir(&server.mp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut want = Vec::new();
    for l in BufReader::new(w.stdout.take().unwrap()).lines() {
        let l = l.unwrap();
        if l == "done" {
            break;
        }
        want.push(l);
    }
    assert_eq!(want.len(), 2, "the writer failed");
    let mut server = server;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    // `timeout` passes SIGTERM on to the writer, which still holds `synced` open.
    let _ = Command::new("kill")
        .args(["-TERM", &w.id().to_string()])
        .output();
    wait_exit(&mut w, Duration::from_secs(30));
    assert!(easyio(&["umount", server.mp.to_str().unwrap()])
        .status
        .success());
    drop(server);
    let wb_other = ["--writeback-cache", "-o", "allow_other"];
    let server = Server::start(&image, &s.0.join("mnt"), &wb_other);
    assert_eq!(sums(&server.mp, &["synced", "closed"]), want);
    // A user who may only write a file writes part of a page: the kernel reads the
    // page through that write-only handle first, and the user still cannot read.
    need("setpriv", "util-linux");
    sh(
        "set -e; cd \"$1\"; mkdir wo; chmod 777 wo; printf 0123456789 > wo/f; \
         chown 65534 wo/f; chmod 200 wo/f",
        &server.mp,
        &server.mp,
    );
    let nobody = |script: &str| {
        run(
            "setpriv",
            &[
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                script,
            ],
            &server.mp,
        )
    };
    let w = nobody("printf XY | dd of=wo/f bs=1 seek=5 conv=notrunc status=none");
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    assert!(
        !nobody("cat wo/f").status.success(),
        "read without permission"
    );
    assert_eq!(
        std::fs::read(server.mp.join("wo/f")).unwrap(),
        b"01234XY789"
    );
    // 2. Written and closed, then a clean unmount: all there on a mount without it.
    let w = python(&script, &["2".into(), "exit".into()], &server.mp);
    let want: Vec<String> = lines_of(w).into_iter().filter(|l| l != "done").collect();
    server.umount();
    let server = Server::start(&image, &s.0.join("mnt"), &[]);
    assert_eq!(sums(&server.mp, &["synced", "closed"]), want);
    server.umount();
    let fsck = easyio(&["fsck", "--image", image.to_str().unwrap()]);
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
}

#[test]
fn a_user_who_cannot_open_dev_fuse_is_told_why_in_one_line() {
    if testkit::fuse_missing() {
        return;
    }
    need("setpriv", "util-linux");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let s = Scratch::new("nonroot");
    // Where /dev/fuse is open to every user (mode 0666, as on many machines), the user
    // runs in a mount namespace of its own whose /dev/fuse is a node of the same
    // device that only root may open.
    let mode = std::fs::metadata("/dev/fuse").unwrap().mode();
    let mut wrap: Vec<String> = Vec::new();
    if mode & 0o006 == 0o006 {
        if testkit::not_root(&format!(
            "/dev/fuse is mode {:04o}: a private one of mode 0600 is bound over it",
            mode & 0o7777
        )) {
            return;
        }
        need("unshare", "util-linux");
        let node = s.0.join("fuse");
        let out = run(
            "mknod",
            &["-m", "600", node.to_str().unwrap(), "c", "10", "229"],
            Path::new("/"),
        );
        assert!(out.status.success(), "mknod: {out:?}");
        wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
            .map(String::from)
            .into();
        wrap.push(r#"mount --bind "$0" /dev/fuse && exec "$@""#.into());
        wrap.push(node.to_str().unwrap().into());
    }
    let image = mkfs(&s.0, "16M");
    let mp = s.0.join("mnt");
    std::fs::create_dir(&mp).unwrap();
    // A copy of the binary any user may run, wherever the build tree lives.
    let bin = s.0.join("easyio");
    std::fs::copy(EASYIO, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The copy's write descriptor may live on for a moment in a child another test
    // forked meanwhile (until that child's exec closes it): exec then fails with
    // ETXTBSY, which is this test's race, not the refusal it checks.
    let t0 = Instant::now();
    let user = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        bin.to_str().unwrap(),
        "mount",
        image.to_str().unwrap(),
        mp.to_str().unwrap(),
    ];
    let args: Vec<&str> = wrap.iter().map(String::as_str).chain(user).collect();
    let out = loop {
        let out = run(args[0], &args[1..], Path::new("/"));
        let busy = String::from_utf8_lossy(&out.stderr).contains("Text file busy");
        if !busy || t0.elapsed() > Duration::from_secs(10) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    one_line_error(
        &out,
        13,
        "only a user who may read and write it can mount, through fusermount3 too",
    );
    assert!(mount_free(&mp), "nothing may be mounted");
}

/// Whether nothing is mounted on `mp`.
fn mount_free(mp: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let mps = mp.to_str().unwrap();
    !mounts.lines().any(|l| l.split(' ').nth(1) == Some(mps))
}
