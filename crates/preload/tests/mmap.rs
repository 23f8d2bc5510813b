//! Shared memory maps of files of the mount (`crates/preload/src/mmap.rs`):
//! `tests/c/mmap.c` maps a file shared and writable in every way the kernel allows
//! and logs what it sees, the same under the mount (an image the process mounts, or
//! a server) as on tmpfs, and the image holds what it wrote; what a process stored
//! reaches the file before it execs; two processes joined to one server see each
//! other's stores through their mappings at once; `sqlite3` in WAL mode (which maps
//! its `-shm` file shared) commits rows while other `sqlite3` processes of the same
//! server count them, and in one process with an image, with the results of tmpfs;
//! Python's `mmap` module works as on tmpfs. No shared-memory object is left behind.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use common::{fsck_clean, need, ok, read_image, run, serve, World};

/// `program args` under the shim, joined to the server on `socket` if given, else
/// mounting the image itself (`EASYIO_PRIVATE`: not a server started on demand).
fn shim(w: &World, socket: Option<&Path>, program: &str, args: &[&str]) -> Command {
    let mut c = w.shim_cmd(program, args);
    match socket {
        Some(s) => c.env("EASYIO_SERVER", s),
        None => c.env("EASYIO_PRIVATE", "1"),
    };
    c
}

/// Runs `program args` under the shim and on tmpfs: both succeed and print the same
/// (each side's root written `{R}`). Returns the common output.
fn same(w: &World, socket: Option<&Path>, program: &str, args: &[&str]) -> String {
    let mine = ok(&mut shim(w, socket, program, args)).replace(&w.mount, "{R}");
    let theirs = ok(&mut w.ref_cmd(program, args)).replace(w.reference.to_str().unwrap(), "{R}");
    assert_eq!(
        mine, theirs,
        "{program} {args:?}: under the shim (left) and on tmpfs (right) differ"
    );
    mine
}

/// Fails if a shared-memory object of a mapping of the file system reached through
/// `path` (the image, or the server's socket) is left in /dev/shm.
fn no_object_left(path: &Path) {
    let left = objects(path);
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

/// `mmap.c basic`: the same log under the mount as on tmpfs, and the same file.
fn basic(w: &World, socket: Option<&Path>) {
    let exe = common::build_c(w, "mmap");
    let log = same(w, socket, exe.to_str().unwrap(), &["basic", "{R}"]);
    for step in [
        "pread sees stores: 1",
        "mapping sees pwrite: 1",
        "mapping sees write: 1",
        "read sees the grown part: 1",
        "second map sees the first: 1",
        "private map sees the shared stores: 1",
        "child's store seen: 1 (exit 0)",
        "writable shared map of a read-only descriptor: 0 errno 13",
    ] {
        assert!(log.contains(step), "{step:?} not in\n{log}");
    }
    // What a process stored reaches the file before it execs.
    let exec = same(w, socket, exe.to_str().unwrap(), &["exec", "{R}/e"]);
    assert_eq!(exec, "before exec\n");
    no_object_left(socket.unwrap_or(&w.img));
}

#[test]
fn a_shared_writable_map_of_an_image_file_behaves_as_on_tmpfs() {
    let w = World::new("mmap-basic", 32);
    basic(&w, None);
    let kernel = std::fs::read(w.reference.join("f")).unwrap();
    assert_eq!(read_image(&w.img, "/f"), kernel);
    fsck_clean(&w.img);
}

#[test]
fn a_shared_writable_map_through_a_server_behaves_as_on_tmpfs() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let w = World::new("mmap-basic-served", 32);
    let served = serve(&w, || STOP.load(Ordering::SeqCst));
    basic(&w, Some(&served.socket));
    STOP.store(true, Ordering::SeqCst);
    served.end(&w);
    let kernel = std::fs::read(w.reference.join("f")).unwrap();
    assert_eq!(read_image(&w.img, "/f"), kernel);
}

#[test]
fn two_processes_of_one_server_see_each_others_stores_at_once() {
    static STOP: AtomicBool = AtomicBool::new(false);
    const TURNS: &str = "2000";
    let w = World::new("mmap-pingpong", 32);
    let exe = common::build_c(&w, "mmap");
    let exe = exe.to_str().unwrap();
    let served = serve(&w, || STOP.load(Ordering::SeqCst));
    let socket = Some(served.socket.as_path());
    ok(&mut shim(&w, socket, exe, &["create", "{R}/pp"]));
    let players: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|role| {
            let mut cmd = shim(&w, socket, exe, &["pingpong", "{R}/pp", role, TURNS]);
            std::thread::spawn(move || run(&mut cmd))
        })
        .collect();
    for (p, role) in players.into_iter().zip(["a", "b"]) {
        let out = p.join().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout == format!("{role} took {TURNS} turns\n"),
            "{role}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    no_object_left(&served.socket);
    STOP.store(true, Ordering::SeqCst);
    served.end(&w);
    // The last turn reached the file when the last mapping went.
    let words: Vec<u64> = read_image(&w.img, "/pp")[..32]
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, [2000, 2000, 1, 1]);
}

const SETUP: &str = "PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);";
const CHECK: &str =
    "SELECT count(*), sum(length(v)), max(id) FROM t; PRAGMA integrity_check; PRAGMA journal_mode;";

/// The shared-memory objects of the file system reached through `path` in /dev/shm.
fn objects(path: &Path) -> Vec<String> {
    let m = std::fs::metadata(path).unwrap();
    let prefix = format!("easyio.{:x}.{:x}.", m.dev(), m.ino());
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[test]
fn a_killed_processs_object_goes_with_the_next_process_to_map() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let w = World::new("mmap-killed", 32);
    let exe = common::build_c(&w, "mmap");
    let exe = exe.to_str().unwrap();
    let served = serve(&w, || STOP.load(Ordering::SeqCst));
    let socket = Some(served.socket.as_path());
    ok(&mut shim(&w, socket, exe, &["create", "{R}/held"]));
    let mut holder = shim(&w, socket, exe, &["hold", "{R}/held"]);
    let mut holder = common::Running(holder.stdout(Stdio::piped()).spawn().unwrap());
    let mut line = String::new();
    BufReader::new(holder.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "held\n");
    drop(holder); // SIGKILL: no write back, no last look
    assert_eq!(objects(&served.socket).len(), 1);
    // The next process to map a file of the server removes it; what the killed
    // process stored and never wrote back is lost.
    ok(&mut shim(&w, socket, exe, &["create", "{R}/other"]));
    let out = ok(&mut shim(&w, socket, exe, &["exec", "{R}/other"]));
    assert_eq!(out, "before exec\n");
    assert_eq!(objects(&served.socket), Vec::<String>::new());
    let held = ok(&mut shim(
        &w,
        socket,
        "od",
        &["-An", "-c", "-N5", "{R}/held"],
    ));
    assert_eq!(held.split_whitespace().collect::<Vec<_>>(), ["\\0"; 5]);
    STOP.store(true, Ordering::SeqCst);
    served.end(&w);
}

/// A `sqlite3` shell fed statements one batch at a time, answering each.
struct Shell {
    child: common::Running,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Shell {
    fn start(mut cmd: Command) -> Shell {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Shell {
            stdin: child.stdin.take(),
            child: common::Running(child),
            lines,
        }
    }

    /// Runs `sql`, which ends with a query of one line, and returns that line.
    fn ask(&mut self, sql: &str) -> String {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(sql.as_bytes()).unwrap();
        stdin.flush().unwrap();
        self.lines
            .recv_timeout(common::LIMIT)
            .expect("sqlite3 answers")
    }

    /// Ends the shell (end of input): it must exit with 0.
    fn end(mut self) {
        drop(self.stdin.take());
        let status = self.child.0.wait().unwrap();
        assert!(status.success(), "sqlite3: {status}");
    }
}

/// SQL that inserts rows `from..=to`, one transaction each.
fn inserts(from: u32, to: u32) -> String {
    (from..=to)
        .map(|i| format!("INSERT INTO t(v) VALUES ('row {i}');\n"))
        .collect()
}

const COUNT: &str = "SELECT count(*) FROM t;\n";

#[test]
fn sqlite3_in_wal_mode_writes_while_another_process_reads_through_a_server() {
    static STOP: AtomicBool = AtomicBool::new(false);
    need("sqlite3", "sqlite3");
    let w = World::new("mmap-sqlite-served", 64);
    let served = serve(&w, || STOP.load(Ordering::SeqCst));
    let socket = Some(served.socket.as_path());
    assert_eq!(same(&w, socket, "sqlite3", &["{R}/db", SETUP]), "wal\n");
    let shell = || {
        Shell::start(shim(
            &w,
            socket,
            "sqlite3",
            &["-cmd", ".timeout 20000", "{R}/db"],
        ))
    };
    // In turns: the writer commits 100 rows, then a reader that stays (its mapping of
    // -shm lives through all the writer's commits) and a new reader count them. In
    // WAL mode a reader finds the last commit in the -shm file's index: a mapping
    // that lagged the writer's would count fewer.
    let (mut writer, mut stays) = (shell(), shell());
    for turn in 1..=10 {
        let rows = (turn * 100).to_string();
        let sql = format!("{}{COUNT}", inserts(turn * 100 - 99, turn * 100));
        assert_eq!(writer.ask(&sql), rows);
        assert_eq!(stays.ask(COUNT), rows);
        let once = ["-cmd", ".timeout 20000", "{R}/db", COUNT];
        assert_eq!(
            ok(&mut shim(&w, socket, "sqlite3", &once)),
            format!("{rows}\n")
        );
    }
    // Then at full speed: 1000 more rows while readers come and go; each sees the
    // commits in order.
    let mut seen = Vec::new();
    let more = format!("{}{COUNT}", inserts(1001, 2000));
    let fast = std::thread::spawn(move || (writer.ask(&more), writer));
    while !fast.is_finished() {
        seen.push(stays.ask(COUNT).parse::<u32>().unwrap());
        let once = ["-cmd", ".timeout 20000", "{R}/db", COUNT];
        seen.push(
            ok(&mut shim(&w, socket, "sqlite3", &once))
                .trim()
                .parse()
                .unwrap(),
        );
    }
    let (done, writer) = fast.join().unwrap();
    assert_eq!(done, "2000");
    assert!(seen.iter().all(|&n| (1000..=2000).contains(&n)), "{seen:?}");
    writer.end();
    assert_eq!(stays.ask(COUNT), "2000");
    stays.end();
    // The same database as the same commands make on tmpfs.
    let all = format!("{}{}", inserts(1, 2000), CHECK);
    let theirs = ok(&mut w.ref_cmd("sqlite3", &["{R}/db", &all]));
    let mine = same(&w, socket, "sqlite3", &["{R}/db", CHECK]);
    assert!(
        theirs.ends_with(&mine) && mine.ends_with("|2000\nok\nwal\n"),
        "{mine}"
    );
    STOP.store(true, Ordering::SeqCst);
    no_object_left(&served.socket);
    served.end(&w);
}

#[test]
fn sqlite3_in_wal_mode_on_an_image_matches_tmpfs() {
    need("sqlite3", "sqlite3");
    let w = World::new("mmap-sqlite", 64);
    assert_eq!(same(&w, None, "sqlite3", &["{R}/db", SETUP]), "wal\n");
    // One process writes (its mapping of -shm lives through 1000 commits) and reads
    // in between; then other processes read what it left.
    let script = format!("{}{COUNT}{}{CHECK}", inserts(1, 1000), inserts(1001, 2000));
    let out = same(&w, None, "sqlite3", &["{R}/db", &script]);
    assert!(
        out.starts_with("1000\n2000|") && out.ends_with("|2000\nok\nwal\n"),
        "{out}"
    );
    let again = same(&w, None, "sqlite3", &["{R}/db", CHECK]);
    assert!(out.ends_with(&again), "{out} then {again}");
    no_object_left(&w.img);
    fsck_clean(&w.img);
}

/// Python's `mmap` module maps shared by default: writes, `flush`, `resize` (an
/// `ftruncate` and an `mremap`), a read-only map, as on tmpfs.
#[test]
fn python_mmap_module_matches_tmpfs() {
    need("python3", "python3");
    let w = World::new("mmap-python", 32);
    let script = r#"
import mmap, os, sys
p = sys.argv[1] + "/m"
with open(p, "wb") as f:
    f.write(b"a" * 10000)
with open(p, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[0:5] = b"hello"
    m.flush()
    print(open(p, "rb").read(8))
    m.resize(20000)
    m[15000:15005] = b"world"
    print(os.path.getsize(p), m[15000:15005])
    m.close()
print(open(p, "rb").read()[14998:15007], os.path.getsize(p))
with open(p, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    print(m[:5], m.find(b"world"))
    m.close()
"#;
    let out = same(&w, None, "python3", &["-c", script, "{R}"]);
    assert!(out.ends_with("b'hello' 15000\n"), "{out}");
    no_object_left(&w.img);
    fsck_clean(&w.img);
}
