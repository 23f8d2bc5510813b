//! Unmodified programs in several processes on one image: `easyio serve` (the built
//! binary) and the LD_PRELOAD shim joining it (`EASYIO_SERVER`). Each program runs
//! twice — under the shim on the mount, and plainly on a tmpfs directory — and the
//! two must print the same and leave the same tree.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use testkit::need;

use common::server::{Scratch, Server, LIMIT};

/// Where the shim serves the image in these tests (the kernel has no such path).
fn mount() -> String {
    format!("/easyio-served-{}", std::process::id())
}

/// `sh -c script` with `$R` the root it works in: under the shim joined to `server`
/// (`R` the mount), or plainly (`R` a tmpfs directory).
fn sh(script: &str, root: &str, server: Option<&Server>) -> Output {
    let mut c = Command::new("sh");
    c.args(["-c", script])
        .env("R", root)
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .stdin(Stdio::null());
    if let Some(s) = server {
        c.env("LD_PRELOAD", testkit::preload_shim())
            .env("EASYIO_SERVER", &s.socket)
            .env("EASYIO_MOUNT", mount());
    }
    common::run_bounded(&mut c, LIMIT).0
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `script` both ways; both must succeed and print the same.
fn same_both_ways(script: &str, reference: &Path, server: &Server) -> String {
    let plain = sh(script, reference.to_str().unwrap(), None);
    assert!(plain.status.success(), "on tmpfs: {}", text(&plain.stderr));
    let shimmed = sh(script, &mount(), Some(server));
    assert!(
        shimmed.status.success(),
        "under the shim: {}{}\nserver: {}",
        text(&shimmed.stdout),
        text(&shimmed.stderr),
        server.log_text()
    );
    assert_eq!(text(&shimmed.stdout), text(&plain.stdout));
    text(&shimmed.stdout)
}

/// Every file under `$R` with its bytes and mode bits (`find` and `od` under the
/// shim for the mount).
fn tree(root: &str, server: Option<&Server>) -> String {
    let script = r#"cd "$R" && find . -mindepth 1 | sort | while read -r p; do
        if [ -d "$p" ]; then echo "dir $p"; else echo "file $p $(wc -c < "$p") $(cksum < "$p")"; fi
    done"#;
    let out = sh(script, root, server);
    assert!(out.status.success(), "tree: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Descriptors the server holds for all clients, asked as a client of its own.
fn open_on_server(server: &Server) -> u32 {
    let c = easyio_serve::Client::connect(&server.socket).unwrap();
    c.status().unwrap().open_total
}

/// Waits (bounded) until the server holds no descriptor: what exited processes left
/// open, or handed to children that are gone, is closed.
fn assert_nothing_left_open(server: &Server) {
    let t0 = std::time::Instant::now();
    while open_on_server(server) != 0 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the server still holds {} descriptors of exited processes",
            open_on_server(server)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn shell_pipelines_and_redirections_in_several_processes_match_tmpfs() {
    let dir = Scratch::new("shim-sh");
    let server = Server::start(&dir.0, &[]);
    let reference = dir.0.join("ref");
    std::fs::create_dir(&reference).unwrap();
    // Redirections are opened by the shell and used by the programs it runs (inherited
    // through fork and exec); pipes join processes that each reach the mount.
    let script = r#"set -e
        mkdir -p "$R/d/e"
        printf 'one\ntwo\nthree\nfour\n' > "$R/d/lines"
        tr a-z A-Z < "$R/d/lines" > "$R/d/upper"
        cat "$R/d/lines" | sort -r | head -3 > "$R/d/e/top"
        echo appended >> "$R/d/upper"
        seq 1 2000 | awk '{ print $1 * $1 }' > "$R/d/squares"
        wc -l < "$R/d/squares"
        ( cd "$R/d" && cat upper e/top && ls )
        { echo first; echo second; } > "$R/d/group"
        exec 3> "$R/d/fd3"
        echo via-fd3 >&3
        sh -c 'echo from-a-child >&3'
        exec 3>&-
        cat "$R/d/fd3" "$R/d/group"
        ls "$R/d" | xargs -I{} sh -c 'if [ -f "$R/d/{}" ]; then wc -c < "$R/d/{}"; fi'
        mv "$R/d/group" "$R/d/e/moved"
        cp "$R/d/squares" "$R/d/copy" && cmp "$R/d/squares" "$R/d/copy"
        rm "$R/d/copy"
        find "$R/d" -name '*o*' | sed "s|$R||" | sort
    "#;
    let out = same_both_ways(script, &reference, &server);
    assert!(out.contains("from-a-child"), "{out}");
    assert_eq!(
        tree(&mount(), Some(&server)),
        tree(reference.to_str().unwrap(), None)
    );
    assert_nothing_left_open(&server);
    server.stop();
}

#[test]
fn make_builds_a_c_project_in_the_mount() {
    need("make", "make");
    need("cc", "gcc");
    let dir = Scratch::new("shim-make");
    let server = Server::start(&dir.0, &[]);
    let reference = dir.0.join("ref");
    let files = BTreeMap::from([
        ("main.c", "#include <stdio.h>\n#include \"lib.h\"\nint main(void) { printf(\"%d\\n\", add(40, 2)); return 0; }\n"),
        ("lib.c", "#include \"lib.h\"\nint add(int a, int b) { return a + b; }\n"),
        ("lib.h", "int add(int a, int b);\n"),
        ("Makefile", "prog: main.o lib.o\n\tcc -o prog main.o lib.o\n%.o: %.c lib.h\n\tcc -c $< -o $@\n"),
    ]);
    let src = dir.0.join("src");
    std::fs::create_dir(&src).unwrap();
    for (name, body) in &files {
        std::fs::write(src.join(name), body).unwrap();
    }
    // Built by make's children (cc, cc1, as, ld) in a directory only the shim knows;
    // run, then found up to date by a second make.
    let script = format!(
        r#"set -e
        mkdir -p "$R/proj" && cp {}/* "$R/proj/"
        make -s -C "$R/proj"
        cat "$R/proj/prog" > "{}/prog-$$" && chmod +x "{}/prog-$$" && "{}/prog-$$" && rm "{}/prog-$$"
        cd "$R/proj" && make -q && echo up-to-date
        ls"#,
        src.display(),
        dir.0.display(),
        dir.0.display(),
        dir.0.display(),
        dir.0.display()
    );
    std::fs::create_dir(&reference).unwrap();
    let out = same_both_ways(&script, &reference, &server);
    assert!(out.starts_with("42\nup-to-date\n"), "{out}");
    assert_nothing_left_open(&server);
    server.stop();
}

#[test]
fn sqlite3_writes_while_a_second_process_reads_consistent_snapshots() {
    need("sqlite3", "sqlite3");
    let dir = Scratch::new("shim-sqlite");
    let server = Server::start(&dir.0, &[]);
    let reference = dir.0.join("ref");
    std::fs::create_dir(&reference).unwrap();
    // The writer adds rows two at a time in transactions; the reader, another
    // process, counts them all along: with locks between the processes it never
    // sees a transaction half done (an odd count) nor a damaged file.
    let script = r#"set -e
        sqlite3 "$R/db" "create table t(k integer primary key, v text);"
        ( for i in $(seq 1 300); do
            echo "begin; insert into t(v) values ('a$i'); insert into t(v) values (hex(randomblob(300))); commit;"
          done | sqlite3 -cmd ".timeout 20000" "$R/db" ) &
        for i in $(seq 1 300); do echo "select count(*) % 2 from t;"; done \
          | sqlite3 -cmd ".timeout 20000" "$R/db" | sort | uniq -c | awk '{ print "odd=" $2 }' | sort -u > "$R/seen"
        wait
        cat "$R/seen"
        sqlite3 "$R/db" "select count(*) from t; pragma integrity_check;"
        sqlite3 "$R/db" "select v from t where k % 2 = 1 order by k;" | md5sum
    "#;
    let out = same_both_ways(script, &reference, &server);
    assert!(out.starts_with("odd=0\n600\nok\n"), "{out}");
    assert_nothing_left_open(&server);
    server.stop();
}

#[test]
fn a_forked_child_shares_open_files_and_its_parents_offsets() {
    need("python3", "python3");
    let dir = Scratch::new("shim-fork");
    let server = Server::start(&dir.0, &[]);
    let reference = dir.0.join("ref");
    std::fs::create_dir(&reference).unwrap();
    // The child writes through the parent's descriptor (one offset between them),
    // closes it (the parent's stays open), and the file it unlinked stays readable
    // through the parent's descriptor until the parent closes it.
    let script = r#"python3 - <<'EOF'
import os, sys
R = os.environ["R"]
fd = os.open(R + "/f", os.O_CREAT | os.O_RDWR, 0o644)
gone = os.open(R + "/gone", os.O_CREAT | os.O_RDWR, 0o644)
os.write(gone, b"still here")
os.unlink(R + "/gone")
os.write(fd, b"parent-1;")
pid = os.fork()
if pid == 0:
    os.write(fd, b"child;")
    print("child reads", os.pread(gone, 100, 0).decode(), flush=True)
    os.close(fd)
    os._exit(0)
os.waitpid(pid, 0)
os.write(fd, b"parent-2")
print(os.pread(fd, 100, 0).decode())
print("offset", os.lseek(fd, 0, os.SEEK_CUR))
print("parent reads", os.pread(gone, 100, 0).decode())
os.close(gone)
os.close(fd)
print(sorted(os.listdir(R)))
EOF"#;
    let out = same_both_ways(script, &reference, &server);
    assert!(
        out.contains("parent-1;child;parent-2\noffset 23\n"),
        "{out}"
    );
    assert_nothing_left_open(&server);
    server.stop();
}

#[test]
fn a_lock_holds_against_another_process_across_its_exec_until_it_is_killed() {
    need("python3", "python3");
    let dir = Scratch::new("shim-lock");
    let server = Server::start(&dir.0, &[]);
    let shim_python = |code: &str| {
        let mut c = Command::new("python3");
        c.args(["-c", code])
            .env("R", mount())
            .env("LD_PRELOAD", testkit::preload_shim())
            .env("EASYIO_SERVER", &server.socket)
            .env("EASYIO_MOUNT", mount())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    // The holder takes the lock, then execs another program with the descriptor
    // kept open: as in Linux, the process keeps its lock across the exec.
    let holder_code = r#"
import fcntl, os, sys, time
fd = os.open(os.environ["R"] + "/locked", os.O_CREAT | os.O_RDWR, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
os.set_inheritable(fd, True)
os.execvp("python3", ["python3", "-c", "import time; print('held', flush=True); time.sleep(600)"])
"#;
    let tester_code = r#"
import fcntl, os, sys
fd = os.open(os.environ["R"] + "/locked", os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 5)
    print("granted")
except OSError as e:
    print("refused", e.errno)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 100)
print("elsewhere granted")
"#;
    let mut holder = shim_python(holder_code).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "held\n", "holder: {}", server.log_text());
    let out = common::run_bounded(&mut shim_python(tester_code), LIMIT).0;
    assert_eq!(
        text(&out.stdout),
        format!("refused {}\nelsewhere granted\n", libc::EAGAIN),
        "{}",
        text(&out.stderr)
    );
    // The holder dies without unlocking: its connection ends, and its locks with it.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let out = common::run_bounded(&mut shim_python(tester_code), LIMIT).0;
        if text(&out.stdout).starts_with("granted") {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the killed holder's lock stayed: {}",
            text(&out.stdout)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_nothing_left_open(&server);
    server.stop();
}
