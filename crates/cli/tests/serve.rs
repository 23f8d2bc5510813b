//! `easyio serve` with real processes: the server is the built `easyio` binary, each
//! client is this test program run again in a role (`role_entry`), talking to the
//! server through `easyio_serve::Client`.

mod common;

use common::server::{easyio, stderr, wait_exit, Scratch, Server, LIMIT};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use easyio_serve::wire::{self, Answer, Hello, Request, Welcome};
use easyio_serve::Client;

/// The role a run of this program plays (absent: the tests themselves).
const ROLE: &str = "EASYIO_SERVE_TEST_ROLE";
/// The socket a role connects to.
const SOCKET: &str = "EASYIO_SERVE_TEST_SOCKET";
/// The role's argument.
const ARG: &str = "EASYIO_SERVE_TEST_ARG";
/// Blocks of the file readers and writers share.
const SHARED_BLOCKS: u64 = 16;
/// Bytes of one block of that file.
const BLOCK: usize = 4096;

/// This program run again as `role` with `arg`, a client of the server on `socket`.
fn client_process(role: &str, socket: &Path, arg: &str) -> Child {
    testkit::child_half("role_entry")
        .arg("-q")
        .env(ROLE, role)
        .env(SOCKET, socket)
        .env(ARG, arg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a client process (reading what it prints meanwhile); its status, the
/// lines it printed and its standard error.
fn finish(child: Child) -> (std::process::ExitStatus, Vec<String>, String) {
    let out = testkit::Running(child).output(LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = text.lines().map(str::to_string).collect();
    (
        out.status,
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The contents a worker writes to its `k`-th file.
fn contents(worker: u32, k: u32) -> Vec<u8> {
    let len = 1 + (worker as usize * 7919 + k as usize * 104_729) % 70_000;
    (0..len)
        .map(|i| (i as u32 ^ worker.wrapping_mul(31) ^ k) as u8)
        .collect()
}

/// One 4 KiB block of the shared file as writer `seq` leaves it: the sequence number,
/// the block number, bytes derived from both, and a CRC-32C of all that before it.
fn stamped(seq: u64, block: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[..8].copy_from_slice(&seq.to_le_bytes());
    b[8..16].copy_from_slice(&block.to_le_bytes());
    for (i, x) in b[16..BLOCK - 4].iter_mut().enumerate() {
        *x = (seq as usize * 13 + block as usize * 7 + i) as u8;
    }
    let crc = crc32c::crc32c(&b[..BLOCK - 4]);
    b[BLOCK - 4..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The sequence number of an intact block; `None` for a torn one.
fn intact(b: &[u8], block: u64) -> Option<u64> {
    let crc = u32::from_le_bytes(b[BLOCK - 4..].try_into().unwrap());
    let seq = u64::from_le_bytes(b[..8].try_into().unwrap());
    (crc32c::crc32c(&b[..BLOCK - 4]) == crc && b == stamped(seq, block).as_slice()).then_some(seq)
}

/// The entry of the client processes, which the tests start with the role to play.
#[test]
#[ignore = "a client process's half: run by the tests, in a role they set"]
fn role_entry() {
    let role = std::env::var(ROLE).expect("a client process's half, run by the tests");
    let socket = PathBuf::from(std::env::var(SOCKET).unwrap());
    let arg = std::env::var(ARG).unwrap();
    let c = Client::connect(&socket).unwrap();
    match role.as_str() {
        "worker" => worker(&c, arg.parse().unwrap()),
        "rewriter" => rewriter(&c, arg.parse().unwrap()),
        "reader" => reader(&c, arg.parse().unwrap()),
        "store" => store(&c),
        "holder" => holder(&c),
        "nobody" => nobody(&c),
        "acker" => acker(&c, arg.parse().unwrap()),
        "forker" => forker(&c),
        "changer" => changer(&c),
        other => panic!("unknown role {other}"),
    }
    std::io::stdout().flush().unwrap();
}

/// Creates, writes, renames and unlinks files in a shared and a private directory;
/// prints `HAS path crc` for each file it leaves and `NOT path` for each it removed.
fn worker(c: &Client, me: u32) {
    let private = format!("/p{me}");
    for dir in ["/shared", private.as_str()] {
        match c.mkdir(dir, 0o755) {
            Ok(()) => {}
            Err(e) => assert_eq!(e.errno(), libc::EEXIST, "mkdir {dir}: {e}"),
        }
    }
    let mut state = BTreeMap::new();
    for k in 0..40u32 {
        let dir = if k % 2 == 0 {
            "/shared"
        } else {
            private.as_str()
        };
        let path = format!("{dir}/w{me}-{k}");
        let data = contents(me, k);
        let fd = c
            .open(&path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644)
            .unwrap();
        assert_eq!(c.pwrite(fd, &data, 0).unwrap(), data.len());
        if k % 5 == 0 {
            c.fsync(fd).unwrap();
        }
        c.close(fd).unwrap();
        let crc = crc32c::crc32c(&data);
        match k % 4 {
            0 => {
                let new = format!("{dir}/r{me}-{k}");
                c.rename(&path, &new).unwrap();
                state.insert(path, None);
                state.insert(new, Some(crc));
            }
            1 => {
                c.unlink(&path).unwrap();
                state.insert(path, None);
            }
            _ => {
                state.insert(path, Some(crc));
            }
        }
    }
    for (path, crc) in state {
        match crc {
            Some(crc) => println!("HAS {path} {crc}"),
            None => println!("NOT {path}"),
        }
    }
}

/// Rewrites every block of `/shared.dat` with ever larger sequence numbers for `ms`.
fn rewriter(c: &Client, ms: u64) {
    let fd = c.open("/shared.dat", libc::O_WRONLY, 0).unwrap();
    let t0 = Instant::now();
    let mut seq = 1;
    while t0.elapsed() < Duration::from_millis(ms) {
        for b in 0..SHARED_BLOCKS {
            c.pwrite(fd, &stamped(seq, b), b * BLOCK as u64).unwrap();
        }
        seq += 1;
    }
    println!("WROTE {seq}");
}

/// Reads `/shared.dat` block by block for `ms`; prints what it saw.
fn reader(c: &Client, ms: u64) {
    let fd = c.open("/shared.dat", libc::O_RDONLY, 0).unwrap();
    let mut last = vec![0u64; SHARED_BLOCKS as usize];
    let (mut reads, mut torn, mut backwards) = (0u64, 0u64, 0u64);
    let mut buf = vec![0u8; BLOCK];
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(ms) {
        for b in 0..SHARED_BLOCKS {
            assert_eq!(c.pread(fd, &mut buf, b * BLOCK as u64).unwrap(), BLOCK);
            reads += 1;
            match intact(&buf, b) {
                Some(seq) if seq < last[b as usize] => backwards += 1,
                Some(seq) => last[b as usize] = seq,
                None => torn += 1,
            }
        }
    }
    let (direct, asked) = c.direct_stats().expect("root reads directly");
    println!("READ {reads} TORN {torn} BACKWARDS {backwards} DIRECT {direct} ASKED {asked}");
}

/// Stores into the read-only mapping of the image: the kernel must kill this process.
fn store(c: &Client) {
    let region = c.region().expect("root may read the image: it is mapped");
    let mut magic = [0u8; 8];
    assert!(region.read_image(0, &mut magic));
    println!("MAPPED {}", String::from_utf8_lossy(&magic));
    std::io::stdout().flush().unwrap();
    let p = region.as_ptr().wrapping_add(region.region_offset()) as *mut u8;
    // SAFETY: deliberately unsound — a stray store into the region, which the kernel
    // must refuse (PROT_READ) by SIGSEGV before it lands.
    unsafe { p.write_volatile(0xAB) };
    println!("STORED");
}

/// Opens a 1 MiB file, unlinks it, and waits to be killed.
fn holder(c: &Client) {
    let fd = c
        .open("/held", libc::O_CREAT | libc::O_RDWR, 0o600)
        .unwrap();
    c.pwrite(fd, &vec![5u8; 1 << 20], 0).unwrap();
    c.unlink("/held").unwrap();
    println!("HOLDING");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(LIMIT);
}

/// Creates files by writing a temporary name and renaming it, and now and then
/// removes one it made; says each step before it (`TRY`) and once acknowledged
/// (`HAS path crc`, `GONE path`), until killed.
fn acker(c: &Client, me: u32) {
    let dir = format!("/w{me}");
    c.mkdir(&dir, 0o755).unwrap();
    let mut out = std::io::stdout().lock();
    for k in 0u32.. {
        let (tmp, path) = (format!("{dir}/t{k}"), format!("{dir}/f{k}"));
        let data = contents(me, k);
        let fd = c
            .open(&tmp, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644)
            .unwrap();
        c.pwrite(fd, &data, 0).unwrap();
        c.close(fd).unwrap();
        writeln!(out, "TRY {path}").unwrap();
        out.flush().unwrap();
        c.rename(&tmp, &path).unwrap();
        writeln!(out, "HAS {path} {}", crc32c::crc32c(&data)).unwrap();
        if k % 3 == 2 {
            let victim = format!("{dir}/f{}", k - 2);
            writeln!(out, "TRY {victim}").unwrap();
            out.flush().unwrap();
            c.unlink(&victim).unwrap();
            writeln!(out, "GONE {victim}").unwrap();
        }
        out.flush().unwrap();
    }
}

/// Forks: the child's calls on its parent's connection fail with ENOTCONN (the
/// socket and the mailbox are the parent's), a connection of its own works, and the
/// parent's goes on. Prints `child <errno> <errno> <size>` and `parent <size>`.
fn forker(c: &Client) {
    let fd = c
        .open("/forked", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    c.pwrite(fd, b"before fork", 0).unwrap();
    // SAFETY: the child only makes calls of this crate and exits with `_exit`.
    match unsafe { libc::fork() } {
        0 => {
            let mut buf = [0u8; 32];
            let read = c.pread(fd, &mut buf, 0).unwrap_err().errno();
            let stat = c.stat("/forked").unwrap_err().errno();
            let own = Client::connect(std::env::var(SOCKET).unwrap()).unwrap();
            let size = own.stat("/forked").unwrap().size;
            println!("child {read} {stat} {size}");
            std::io::stdout().flush().unwrap();
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        pid => {
            let mut status = 0;
            // SAFETY: waits for the child just made.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            c.pwrite(fd, b"after fork!", 0).unwrap();
            println!("parent {}", c.fstat(fd).unwrap().size);
        }
    }
}

/// What an unprivileged user may and may not do; prints `name errno` (0: done).
fn nobody(c: &Client) {
    let say = |what: &str, r: easyio_serve::Result<()>| {
        println!("{what} {}", r.err().map_or(0, |e| e.errno()));
    };
    println!("mapped {}", c.region().is_some());
    say(
        "write-roots",
        c.open("/rootfile", libc::O_WRONLY, 0).map(drop),
    );
    say(
        "read-roots",
        c.open("/rootfile", libc::O_RDONLY, 0).map(drop),
    );
    say("mkdir-in-root", c.mkdir("/mine", 0o755));
    say(
        "create-in-pub",
        c.open("/pub/mine", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .map(drop),
    );
    say("give-to-root", c.chown("/pub/mine", Some(0), None));
    say("unlink-roots", c.unlink("/rootfile"));
    // With no mapping of the image, no page table and no SN to poll: a submitted
    // write is waited for by the server before it answers.
    let fd = c.open("/pub/mine", libc::O_RDWR, 0).unwrap();
    let table = c.call(&Request::Table { fd }).unwrap();
    println!("table {}", matches!(table, Answer::Error(libc::EOPNOTSUPP)));
    // Nor a version table: it resolves no path itself.
    let lookup = c.call(&Request::Lookup {
        dir: 1,
        name: "pub".into(),
    });
    println!(
        "lookup {}",
        matches!(lookup, Ok(Answer::Error(libc::EOPNOTSUPP)))
    );
    let mut buf = c.staging_buffer(SUBMITTED).unwrap();
    buf.fill(0..SUBMITTED, 9);
    let sub = buf.submit_pwrite(fd, 0..SUBMITTED, 0).unwrap();
    println!("submitted-sn {} {}", sub.sn(), sub.is_done());
    println!("submitted-wait {}", sub.wait().unwrap());
}

/// Changes the namespace as each line on its standard input says, printing `OK`
/// once the call returned: `chmod P MODE`, `write P LEN`, `rename A B`, `create P`,
/// `unlink P`, `rmdir P`, `mkdir P`, `symlink TARGET P`.
fn changer(c: &Client) {
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split(' ').collect();
        match w[..] {
            ["chmod", p, mode] => c.chmod(p, u32::from_str_radix(mode, 8).unwrap()).unwrap(),
            ["write", p, len] => {
                let fd = c.open(p, libc::O_WRONLY, 0).unwrap();
                c.pwrite(fd, &vec![7; len.parse().unwrap()], 0).unwrap();
                c.close(fd).unwrap();
            }
            ["rename", a, b] => c.rename(a, b).unwrap(),
            ["create", p] => {
                let fd = c.open(p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644);
                c.close(fd.unwrap()).unwrap();
            }
            ["unlink", p] => c.unlink(p).unwrap(),
            ["rmdir", p] => c.rmdir(p).unwrap(),
            ["mkdir", p] => c.mkdir(p, 0o755).unwrap(),
            ["symlink", target, p] => c.symlink(target, p).unwrap(),
            _ => panic!("a changer cannot {line:?}"),
        }
        println!("OK");
        std::io::stdout().flush().unwrap();
    }
}

#[test]
fn a_client_resolves_paths_itself_and_sees_each_change_of_another_process_at_once() {
    let dir = Scratch::new("index");
    let server = Server::start(&dir.0, &[]);
    let c = Client::connect(&server.socket).unwrap();
    c.mkdir("/d", 0o755).unwrap();
    c.mkdir("/d/e", 0o755).unwrap();
    let fd = c.open("/d/e/f", libc::O_CREAT | libc::O_WRONLY, 0o644);
    c.close(fd.unwrap()).unwrap();
    // The changer, another client process, takes its orders on its input.
    let mut kid = testkit::child_half("role_entry")
        .arg("-q")
        .env(ROLE, "changer")
        .env(SOCKET, &server.socket)
        .env(ARG, "")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_kid = kid.stdin.take().unwrap();
    let mut from_kid = BufReader::new(kid.stdout.take().unwrap()).lines();
    let mut change = |line: &str| {
        writeln!(to_kid, "{line}").unwrap();
        to_kid.flush().unwrap();
        // (The test harness of the child prints its own lines too.)
        let said = from_kid.by_ref().map(Result::unwrap).find(|l| l == "OK");
        assert!(said.is_some(), "the changer ended before {line:?}");
    };
    // Each path looked at twice before each change (the second time from what the
    // client kept), then right after it: the change must show.
    let look = |p: &str| {
        let first = c.stat(p).map_err(|e| e.errno());
        assert_eq!(c.stat(p).map_err(|e| e.errno()), first, "{p} twice");
        first
    };
    let f = look("/d/e/f").unwrap();
    assert_eq!(f.mode & 0o777, 0o644);
    let local = c.resolved_locally();
    assert!(local >= 2, "stat resolved by the client: {local}");
    change("chmod /d/e/f 600");
    assert_eq!(look("/d/e/f").unwrap().mode & 0o777, 0o600);
    change("write /d/e/f 1000");
    assert_eq!(look("/d/e/f").unwrap().size, 1000);
    assert_eq!(look("/d/e/g").unwrap_err(), libc::ENOENT);
    change("rename /d/e/f /d/e/g");
    assert_eq!(look("/d/e/f").unwrap_err(), libc::ENOENT);
    assert_eq!(look("/d/e/g").unwrap().ino, f.ino);
    // A read-only open of a path that is not there fails with no request, until it is.
    let open = |p: &str| {
        c.open(p, libc::O_RDONLY | libc::O_CLOEXEC, 0)
            .map_err(|e| e.errno())
    };
    let before = c.resolved_locally();
    assert_eq!(open("/d/e/f"), Err(libc::ENOENT));
    assert_eq!(c.resolved_locally(), before + 1);
    change("create /d/e/f");
    c.close(open("/d/e/f").unwrap()).unwrap();
    let again = look("/d/e/f").unwrap();
    assert_ne!(again.ino, f.ino, "a new file under the old name");
    assert_eq!(again.size, 0);
    // A symbolic link on the way: resolved by the server, as before.
    change("symlink e /d/l");
    assert_eq!(look("/d/l/g").unwrap().ino, f.ino);
    assert_eq!(c.lstat("/d/l").unwrap().kind, fs::FileKind::Symlink);
    // A directory replaced by a file: below it is ENOTDIR.
    for line in [
        "unlink /d/e/f",
        "unlink /d/e/g",
        "unlink /d/l",
        "rmdir /d/e",
    ] {
        change(line);
    }
    assert_eq!(look("/d/e/g").unwrap_err(), libc::ENOENT);
    change("create /d/e");
    assert_eq!(look("/d/e/g").unwrap_err(), libc::ENOTDIR);
    assert_eq!(look("/d/e").unwrap().kind, fs::FileKind::File);
    // Whether a path exists, the same way.
    let exists = |p: &str| c.faccessat(None, p, libc::F_OK, 0).map_err(|e| e.errno());
    assert_eq!(exists("/d/e"), Ok(()));
    assert_eq!(exists("/d/e/g"), Err(libc::ENOTDIR));
    assert_eq!(exists("/d/nothing"), Err(libc::ENOENT));
    drop(to_kid);
    assert!(wait_exit(&mut kid).success());
    // What the client kept answers with no request: with the server stopped, a
    // stat it resolved before still returns.
    let before = c.resolved_locally();
    common::server::signal(server.child.id(), libc::SIGSTOP);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| tx.send(c.stat("/d/e").map(|st| st.kind)).unwrap());
        let got = rx.recv_timeout(Duration::from_secs(10));
        common::server::signal(server.child.id(), libc::SIGCONT);
        assert_eq!(got.unwrap().unwrap(), fs::FileKind::File, "no request made");
    });
    assert_eq!(c.resolved_locally(), before + 1);
    drop(c);
    server.stop();
}

#[test]
fn a_client_reading_all_the_time_does_not_make_anothers_overwrites_run_out_of_space() {
    let dir = Scratch::new("reclaim");
    let server = Server::start(&dir.0, &[]);
    let writer = Client::connect(&server.socket).unwrap();
    let data = vec![6u8; 16 << 20];
    let fd = writer
        .open("/w", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    writer.pwrite(fd, &data, 0).unwrap();
    let rfd = writer
        .open("/r", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    writer.pwrite(rfd, &[5u8; 1 << 20], 0).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let reader = Client::connect(&server.socket).unwrap();
            let fd = reader.open("/r", libc::O_RDONLY, 0).unwrap();
            let mut buf = vec![0u8; 4096];
            let mut off = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(reader.pread(fd, &mut buf, off).unwrap(), 4096);
                off = (off + 4096) % (1 << 20);
            }
            assert!(reader.direct_stats().unwrap().0 > 0, "read directly");
        });
        // The 64 MiB image holds three copies of the file at most: each overwrite
        // needs the blocks the one before it displaced.
        let r = (0..30).try_for_each(|i| {
            writer
                .pwrite(fd, &data, 0)
                .map(drop)
                .map_err(|e| format!("overwrite {i}: {e}"))
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r.unwrap();
    });
    drop(writer);
    server.stop();
}

/// A copy of this test program that any user may run, wherever the build tree is.
fn runnable_copy(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("serve-test");
    std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

#[test]
fn each_client_is_checked_as_the_user_the_socket_says() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if testkit::not_root("to run a client as another user") {
        return;
    }
    let dir = Scratch::new("users");
    let bin = runnable_copy(&dir.0);
    let image = dir.0.join("image");
    assert!(
        easyio(&["mkfs", "--image", image.to_str().unwrap(), "--size", "16M"])
            .status
            .success()
    );
    std::fs::set_permissions(&image, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = Server::restart(
        image,
        dir.0.join("sock"),
        &["--allow-other", "--mode", "async"],
    );
    let root = Client::connect(&server.socket).unwrap();
    assert!(
        root.region().is_some(),
        "root may read the image: it is mapped"
    );
    let fd = root
        .open("/rootfile", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    root.close(fd).unwrap();
    root.mkdir("/pub", 0o777).unwrap();
    root.chmod("/pub", 0o777).unwrap();
    // The program is copied just now: another test's child may hold the copy's write
    // descriptor between its fork and exec (ETXTBSY) for a moment.
    let t0 = Instant::now();
    let kid = loop {
        match Command::new(&bin)
            .args([
                "--ignored",
                "--exact",
                "role_entry",
                "--nocapture",
                "--test-threads",
                "1",
                "-q",
            ])
            .env(ROLE, "nobody")
            .env(SOCKET, &server.socket)
            .env(ARG, "")
            .uid(65534)
            .gid(65534)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Err(e)
                if e.raw_os_error() == Some(libc::ETXTBSY)
                    && t0.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(50))
            }
            r => break r.unwrap(),
        }
    };
    let (st, lines, err) = finish(kid);
    assert!(st.success(), "{err}");
    let said = |what: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{what} ")))
            .unwrap_or_else(|| panic!("{what}: {lines:?} {err}"))
            .to_string()
    };
    assert_eq!(
        said("mapped"),
        "false",
        "nobody may not read the image file: no mapping"
    );
    assert_eq!(said("write-roots"), libc::EACCES.to_string());
    assert_eq!(said("read-roots"), "0");
    assert_eq!(said("mkdir-in-root"), libc::EACCES.to_string());
    assert_eq!(said("create-in-pub"), "0");
    assert_eq!(said("give-to-root"), libc::EPERM.to_string());
    assert_eq!(said("unlink-roots"), libc::EACCES.to_string());
    assert_eq!(said("table"), "true");
    assert_eq!(said("lookup"), "true");
    assert_eq!(said("submitted-sn"), "0 true");
    assert_eq!(said("submitted-wait"), SUBMITTED.to_string());
    let st = root.stat("/pub/mine").unwrap();
    assert_eq!(
        (st.uid, st.gid),
        (65534, 65534),
        "owned by the socket's user"
    );
    drop(root);
    server.stop();
}

#[test]
fn without_allow_other_only_the_servers_user_may_connect() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Scratch::new("private");
    let server = Server::start(&dir.0, &[]);
    let mode = std::fs::metadata(&server.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    server.stop();
}

#[test]
fn clients_in_several_processes_create_rename_and_unlink_at_once() {
    workers_then_check("workers", &[]);
}

#[test]
fn the_async_mode_and_emulated_slow_memory_serve_clients_too() {
    workers_then_check("workers-async", &["--mode", "async"]);
    // Direct reads are off under emulation: every read pays for the slow medium.
    workers_then_check("workers-slow", &["--slowmem", "optane"]);
}

/// Four worker processes on a server started with `extra`, then every acknowledged
/// result read back by the library.
fn workers_then_check(name: &str, extra: &[&str]) {
    let dir = Scratch::new(name);
    let server = Server::start(&dir.0, extra);
    let c = Client::connect(&server.socket).unwrap();
    assert_eq!(c.direct_stats().is_some(), !extra.contains(&"--slowmem"));
    drop(c);
    let kids: Vec<Child> = (0..4)
        .map(|i| client_process("worker", &server.socket, &i.to_string()))
        .collect();
    let mut expect = BTreeMap::new();
    for kid in kids {
        let (st, lines, err) = finish(kid);
        assert!(st.success(), "worker failed: {err}");
        for l in lines {
            let w: Vec<&str> = l.split(' ').collect();
            match w[..] {
                ["HAS", path, crc] => expect.insert(path.to_string(), Some(crc.to_string())),
                ["NOT", path] => expect.insert(path.to_string(), None),
                _ => None,
            };
        }
    }
    assert_eq!(
        expect.len(),
        4 * (40 + 10),
        "every worker reported its files"
    );
    let image = server.stop();
    // Every acknowledged operation is in the image, read by the library itself.
    let region = pmem::Region::open(&image).unwrap();
    let (fs, _) =
        fs::FileSystem::mount(std::sync::Arc::new(region), fs::MountOptions::default()).unwrap();
    for (path, want) in &expect {
        match want {
            Some(crc) => {
                let fd = fs.open(path, fs::OpenFlags::RDONLY, 0).unwrap();
                let size = fs.fstat(fd).unwrap().size as usize;
                let mut buf = vec![0u8; size];
                assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), size);
                fs.close(fd).unwrap();
                assert_eq!(crc32c::crc32c(&buf).to_string(), *crc, "{path}");
            }
            None => assert!(fs.stat(path).is_err(), "{path} should be gone"),
        }
    }
    let shared = fs.readdir("/shared").unwrap().len();
    assert_eq!(
        shared,
        expect
            .iter()
            .filter(|(p, v)| p.starts_with("/shared/") && v.is_some())
            .count()
    );
    fs.unmount().unwrap();
}

#[test]
fn a_reader_process_never_sees_a_torn_or_older_block_while_another_writes() {
    let dir = Scratch::new("torn");
    let server = Server::start(&dir.0, &[]);
    let c = Client::connect(&server.socket).unwrap();
    let fd = c
        .open("/shared.dat", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    for b in 0..SHARED_BLOCKS {
        c.pwrite(fd, &stamped(0, b), b * BLOCK as u64).unwrap();
    }
    // A map of the file cached here before the writes: a later read must not use it.
    let mut buf = vec![0u8; BLOCK];
    assert_eq!(c.pread(fd, &mut buf, 0).unwrap(), BLOCK);
    assert_eq!(intact(&buf, 0), Some(0));
    let writer = client_process("rewriter", &server.socket, "1500");
    let reader = client_process("reader", &server.socket, "1500");
    let (wst, wout, werr) = finish(writer);
    let (rst, rout, rerr) = finish(reader);
    assert!(
        wst.success() && rst.success(),
        "writer: {werr}\nreader: {rerr}"
    );
    let wrote: u64 = wout
        .iter()
        .find_map(|l| l.strip_prefix("WROTE "))
        .unwrap()
        .parse()
        .unwrap();
    let seen = rout
        .iter()
        .find_map(|l| l.strip_prefix("READ "))
        .unwrap()
        .to_string();
    let n: Vec<u64> = seen.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert!(
        wrote > 2 && n[0] > SHARED_BLOCKS,
        "the two overlapped: wrote {wrote}, {seen}"
    );
    assert_eq!((n[1], n[2]), (0, 0), "torn and backwards reads: {seen}");
    assert_eq!(n[3] + n[4], n[0], "every read was direct or asked: {seen}");
    assert!(n[3] > 0, "no read was direct: {seen}");
    eprintln!("{seen}");
    for b in 0..SHARED_BLOCKS {
        assert_eq!(c.pread(fd, &mut buf, b * BLOCK as u64).unwrap(), BLOCK);
        // The writer's last pass wrote sequence number `wrote - 1` everywhere.
        assert_eq!(
            intact(&buf, b),
            Some(wrote - 1),
            "block {b}: not the last write"
        );
    }
    drop(c);
    server.stop();
}

#[test]
fn staging_buffers_carry_writes_and_reads_and_a_scribbling_client_harms_nothing() {
    let dir = Scratch::new("staging");
    let server = Server::start(&dir.0, &[]);
    let c = Client::connect(&server.socket).unwrap();
    let fd = c
        .open("/staged.dat", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let mut buf = c.staging_buffer(64 << 10).unwrap();
    assert!(buf.len() >= 64 << 10);
    let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7 % 251) as u8).collect();
    buf.copy_from(1000, &data);
    // From inside the buffer, at an offset and at the position.
    assert_eq!(buf.pwrite(fd, 1000..41_000, 5).unwrap(), 40_000);
    assert_eq!(buf.write(fd, 1000..1005).unwrap(), 5);
    let mut plain = vec![0u8; 40_005];
    assert_eq!(c.pread(fd, &mut plain, 0).unwrap(), 40_005);
    assert_eq!(&plain[..5], &data[..5]);
    assert_eq!(&plain[5..], &data[..]);
    // Into the buffer: at the position (a request) and at an offset.
    assert_eq!(c.lseek(fd, 5, libc::SEEK_SET).unwrap(), 5);
    buf.fill(0..100, 0);
    assert_eq!(buf.read(fd, 0..100).unwrap(), 100);
    assert_eq!(buf.to_vec(0..100), &data[..100]);
    assert_eq!(buf.pread(fd, 200..300, 39_955).unwrap(), 50);
    assert_eq!(buf.to_vec(200..250), &data[39_950..]);
    // A range outside the buffer is refused.
    let past = buf.len() + 1;
    assert!(buf.pwrite(fd, 0..past, 0).is_err());
    // A thread that keeps changing the buffer while it is written from: the writes
    // carry whatever bytes were there, and the server and the image are unharmed.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let base = buf.as_ptr() as usize;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut k = 0u8;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                k = k.wrapping_add(1);
                // SAFETY: the test's own staging buffer, 64 KiB long; the scribbles
                // race the server's copies on purpose (plain bytes either way).
                unsafe { std::ptr::write_bytes(base as *mut u8, k, 64 << 10) };
            }
        });
        for i in 0..2000u64 {
            assert_eq!(buf.pwrite(fd, 0..4096, (i % 16) * 4096).unwrap(), 4096);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(c.fstat(fd).unwrap().size, 16 * 4096);
    // The `pwrite`, the `write`, the `read`, the `pread` and the 2000 `pwrite`s went
    // as staged calls (a read into a staging buffer is the server's copy, never this
    // process's through a reference into shared memory); the refused one did not.
    assert_eq!(c.staged_calls(), 4 + 2000);
    drop(buf);
    // Given back: another buffer can be had, and the connection still works.
    let again = c.staging_buffer(4096).unwrap();
    assert!(again.len() >= 4096);
    drop(again);
    // A buffer given back by its address (as the C ABI does) goes once; a handle
    // made after it, maybe at the same address, is not given back in its place.
    let (p, _) = c.map_staging(4096).unwrap();
    // SAFETY: nothing uses the buffer afterwards.
    unsafe { c.release_staging(p.as_ptr()) }.unwrap();
    // SAFETY: as above (it is gone already: EINVAL).
    assert!(unsafe { c.release_staging(p.as_ptr()) }.is_err());
    let mut next = c.staging_buffer(4096).unwrap();
    next.copy_from(0, b"still");
    assert_eq!(next.pwrite(fd, 0..5, 0).unwrap(), 5);
    drop(next);
    c.close(fd).unwrap();
    assert_eq!(c.status().unwrap().open_here, 0);
    drop(c);
    server.stop();
}

/// Bytes of each submitted write in the tests below: long enough that the engine
/// still copies when the server answers.
const SUBMITTED: usize = 4 << 20;

/// The bytes of the `k`-th submitted write.
fn submitted_bytes(k: u64) -> Vec<u8> {
    (0..SUBMITTED as u64)
        .map(|i| ((i / 4096 * 31 + i * 7 + k * 13) % 251) as u8)
        .collect()
}

#[test]
fn submitted_writes_answer_before_their_copies_and_the_client_polls_the_record() {
    let dir = Scratch::new("submitted");
    let server = Server::start(&dir.0, &["--mode", "async"]);
    let c = Client::connect(&server.socket).unwrap();
    let reader = Client::connect(&server.socket).unwrap();
    let fd = c
        .open("/submitted.dat", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let rfd = reader.open("/submitted.dat", libc::O_RDONLY, 0).unwrap();
    let mut buf = c.staging_buffer(SUBMITTED).unwrap();
    let mut running = 0;
    for k in 0..8u64 {
        buf.copy_from(0, &submitted_bytes(k));
        let sub = buf.submit_pwrite(fd, 0..SUBMITTED, 0).unwrap();
        if sub.sn() != 0 {
            running += 1;
        }
        // Committed when answered: another process reads the new bytes at once
        // (through a request while the pages say "ask": the server's read waits
        // for the copy), never the old ones.
        let mut got = vec![0u8; SUBMITTED];
        assert_eq!(reader.pread(rfd, &mut got, 0).unwrap(), SUBMITTED);
        assert!(
            got == submitted_bytes(k),
            "write {k}: another process read other bytes"
        );
        assert_eq!(sub.wait().unwrap(), SUBMITTED);
    }
    // In `async` mode the engine copies: the server answered before the copy ended.
    assert!(
        running > 0,
        "no submitted write was answered while its copy ran"
    );
    // Once done, the pages are published again: the reader copies them directly.
    let settled = buf.submit_pwrite(fd, 0..4096, 0).unwrap();
    let sn = settled.sn();
    drop(settled);
    let (direct_before, _) = reader.direct_stats().unwrap();
    let mut got = vec![0u8; 4096];
    for _ in 0..2 {
        assert_eq!(reader.pread(rfd, &mut got, 0).unwrap(), 4096);
    }
    assert_eq!(got, buf.to_vec(0..4096));
    assert!(
        reader.direct_stats().unwrap().0 > direct_before,
        "no direct read after the copy"
    );
    // Asking for an SN settled already, or one never submitted, is done.
    assert_eq!(
        c.call(&Request::Settle { sn, wait: true }).unwrap(),
        Answer::Done
    );
    assert_eq!(
        c.call(&Request::Settle {
            sn: 12345,
            wait: true
        })
        .unwrap(),
        Answer::Done
    );
    // A buffer given back while a copy from it runs: the server waits for the copy
    // before it lets the buffer go.
    buf.copy_from(0, &submitted_bytes(99));
    std::mem::forget(buf.submit_pwrite(fd, 0..SUBMITTED, 0).unwrap());
    drop(buf);
    assert_eq!(reader.pread(rfd, &mut got, 0).unwrap(), 4096);
    assert_eq!(&got[..], &submitted_bytes(99)[..4096]);
    // A buffer outside any staging buffer is written before the call returns.
    let plain = c.submit_pwrite(fd, b"plain", 1).unwrap();
    assert_eq!((plain.sn(), plain.is_done()), (0, true));
    assert_eq!(plain.wait().unwrap(), 5);
    c.close(fd).unwrap();
    reader.close(rfd).unwrap();
    drop((c, reader));
    server.stop();
}

#[test]
fn a_uthread_waiting_for_a_submitted_write_lets_the_other_uthreads_run() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let dir = Scratch::new("submitted-uthread");
    let server = Server::start(&dir.0, &["--mode", "async"]);
    let runtime = rt::Runtime::new(1).unwrap();
    let (ticks, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let ticker = {
        let (ticks, stop) = (ticks.clone(), stop.clone());
        runtime.spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                ticks.fetch_add(1, Ordering::SeqCst);
                rt::yield_now();
            }
        })
    };
    let socket = server.socket.clone();
    let (running, ticked) = runtime.block_on(move || {
        let c = Client::connect(&socket).unwrap();
        let fd = c
            .open("/uthread.dat", libc::O_CREAT | libc::O_RDWR, 0o644)
            .unwrap();
        let mut buf = c.staging_buffer(SUBMITTED).unwrap();
        buf.copy_from(0, &submitted_bytes(3));
        let (mut running, mut ticked) = (0, 0);
        for _ in 0..8 {
            let sub = buf.submit_pwrite(fd, 0..SUBMITTED, 0).unwrap();
            if sub.sn() == 0 || sub.is_done() {
                assert_eq!(sub.wait().unwrap(), SUBMITTED);
                continue;
            }
            running += 1;
            let before = ticks.load(Ordering::SeqCst);
            assert_eq!(sub.wait().unwrap(), SUBMITTED);
            if ticks.load(Ordering::SeqCst) > before {
                ticked += 1;
            }
        }
        drop(buf);
        c.close(fd).unwrap();
        stop.store(true, Ordering::SeqCst);
        (running, ticked)
    });
    ticker.join().unwrap();
    drop(runtime);
    assert!(running > 0, "no write was answered while its copy ran");
    // The one worker ran the other uthread while this one waited for its copy.
    assert!(
        ticked > 0,
        "the other uthread never ran during {running} waits"
    );
    server.stop();
}

#[test]
fn a_submitted_write_whose_server_dies_fails_its_wait_and_does_not_hang() {
    let dir = Scratch::new("submitted-kill");
    let image = dir.0.join("image");
    let out = easyio(&["mkfs", "--image", image.to_str().unwrap(), "--size", "256M"]);
    assert!(out.status.success(), "mkfs: {}", stderr(&out));
    let server = Server::restart(image, dir.0.join("sock"), &["--mode", "async"]);
    let c = Client::connect(&server.socket).unwrap();
    let fd = c
        .open("/killed.dat", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let lost = c
        .open("/lost.dat", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    // 32 MiB: a copy of milliseconds, queued behind one of 48 MiB to another file.
    const LOST: usize = 32 << 20;
    const AHEAD: usize = 48 << 20;
    let mut buf = c.staging_buffer(SUBMITTED + LOST).unwrap();
    buf.copy_from(0, &submitted_bytes(1));
    buf.fill(SUBMITTED..SUBMITTED + LOST, 0x77);
    let first = buf.submit_pwrite(fd, 0..SUBMITTED, 0).unwrap();
    assert_eq!(first.wait().unwrap(), SUBMITTED);
    let ahead_fd = c
        .open("/ahead.dat", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let ahead_buf = c.staging_buffer(AHEAD).unwrap();
    // The server is stopped as soon as it answers, most likely before the copy
    // began, then killed; the write's result is asked for only after a new server
    // has handed out the same SNs again.
    let ahead = ahead_buf.submit_pwrite(ahead_fd, 0..AHEAD, 0).unwrap();
    let pending = buf
        .submit_pwrite(lost, SUBMITTED..SUBMITTED + LOST, 0)
        .unwrap();
    common::server::signal(server.child.id(), libc::SIGSTOP);
    common::server::signal(server.child.id(), libc::SIGKILL);
    let t0 = Instant::now();
    let went = buf
        .submit_pwrite(fd, 0..SUBMITTED, 0)
        .and_then(|sub| sub.wait());
    assert!(went.is_err(), "a call went on after the server was killed");
    let _ = ahead.wait();
    assert!(t0.elapsed() < LIMIT, "a wait hung");
    // A new server recovers the image and hands out the SNs of its channels again.
    let image = server.image.clone();
    let socket = server.socket.clone();
    drop(server);
    let again = Server::restart(image, socket, &["--mode", "async"]);
    let c2 = Client::connect(&again.socket).unwrap();
    let fd2 = c2.open("/killed.dat", libc::O_RDWR, 0).unwrap();
    let mut buf2 = c2.staging_buffer(SUBMITTED).unwrap();
    buf2.copy_from(0, &submitted_bytes(1));
    for _ in 0..8 {
        let sub = buf2.submit_pwrite(fd2, 0..SUBMITTED, 0).unwrap();
        assert_eq!(sub.wait().unwrap(), SUBMITTED);
    }
    // The write pending at the kill is said durable only if it is in the image.
    let running = pending.sn() != 0;
    let said = pending.wait();
    let lfd = c2.open("/lost.dat", libc::O_RDONLY, 0).unwrap();
    let mut there = vec![0u8; LOST];
    let kept = c2.pread(lfd, &mut there, 0).unwrap() == LOST && there.iter().all(|&b| b == 0x77);
    eprintln!("the write pending at the kill: running {running}, kept {kept}, wait {said:?}");
    assert!(
        kept || said.is_err(),
        "a write the restart lost was said durable"
    );
    assert!(buf.submit_pwrite(fd, 0..5, 0).is_err());
    // The first write, waited for before the kill, is there.
    let mut got = vec![0u8; 4096];
    assert_eq!(
        c2.pread(fd2, &mut got, SUBMITTED as u64 - 4096).unwrap(),
        4096
    );
    assert_eq!(&got[..], &submitted_bytes(1)[SUBMITTED - 4096..]);
    drop(ahead_buf);
    drop(buf);
    drop(c);
    drop(buf2);
    drop(c2);
    again.stop();
}

#[test]
fn a_client_that_stores_into_the_image_is_killed_and_the_image_is_intact() {
    let dir = Scratch::new("segv");
    let server = Server::start(&dir.0, &[]);
    let (st, lines, err) = finish(client_process("store", &server.socket, ""));
    assert!(
        lines.iter().any(|l| l.starts_with("MAPPED ")),
        "{lines:?} {err}"
    );
    assert!(!lines.iter().any(|l| l == "STORED"), "the store landed");
    assert_eq!(st.signal(), Some(libc::SIGSEGV), "{err}");
    let c = Client::connect(&server.socket).unwrap();
    c.mkdir("/still-serving", 0o755).unwrap();
    drop(c);
    server.stop();
}

#[test]
fn a_killed_client_leaves_nothing_open_and_its_unlinked_file_is_freed() {
    let dir = Scratch::new("kill-client");
    let server = Server::start(&dir.0, &[]);
    let c = Client::connect(&server.socket).unwrap();
    let free = c.statfs().unwrap().bfree;
    let mut holder = client_process("holder", &server.socket, "");
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("HOLDING") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "holder ended early");
    }
    let held = c.status().unwrap();
    assert_eq!((held.clients, held.open_total), (2, 1));
    assert!(
        c.statfs().unwrap().bfree + 256 <= free,
        "the file holds its blocks"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    let t0 = Instant::now();
    loop {
        let s = c.status().unwrap();
        // The 256 blocks of the file are back; the log may keep a block or two for
        // the entries of the create and the unlink.
        if s.clients == 1 && s.open_total == 0 && c.statfs().unwrap().bfree + 8 >= free {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "still held: {s:?}, free {} of {free}",
            c.statfs().unwrap().bfree
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(c);
    server.stop();
}

#[test]
fn a_killed_server_fails_calls_at_once_and_a_new_one_recovers_what_it_acknowledged() {
    let dir = Scratch::new("kill-server");
    let mut server = Server::start(&dir.0, &[]);
    let c = Client::connect(&server.socket).unwrap();
    let fd = c
        .open("/kept", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    let data = contents(9, 9);
    c.pwrite(fd, &data, 0).unwrap();
    // A reader in another client, with the file's page table in hand.
    let reader = Client::connect(&server.socket).unwrap();
    let rfd = reader.open("/kept", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; data.len()];
    assert_eq!(reader.pread(rfd, &mut buf, 0).unwrap(), data.len());
    assert_eq!(reader.direct_stats().unwrap().0, 1, "read directly");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    // Direct reads make no request, but look at their socket every millisecond.
    std::thread::sleep(Duration::from_millis(5));
    let e = reader.pread(rfd, &mut buf, 0).unwrap_err();
    assert_eq!(
        e.errno(),
        libc::ENOTCONN,
        "a direct read after the server died: {e}"
    );
    let t0 = Instant::now();
    let e = c.pwrite(fd, b"more", 0).unwrap_err();
    assert_eq!(e.errno(), libc::ENOTCONN, "{e}");
    assert_eq!(c.stat("/kept").unwrap_err().errno(), libc::ENOTCONN);
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(Client::connect(&server.socket).is_err(), "nobody listens");
    let (image, socket) = (server.image.clone(), server.socket.clone());
    drop(server);
    let server = Server::restart(image, socket, &[]);
    assert!(
        server.log_text().contains("recovered"),
        "{}",
        server.log_text()
    );
    let c = Client::connect(&server.socket).unwrap();
    let fd = c.open("/kept", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; data.len() + 10];
    assert_eq!(c.pread(fd, &mut buf, 0).unwrap(), data.len());
    assert_eq!(&buf[..data.len()], &data[..]);
    drop(c);
    server.stop();
}

/// Sends one raw frame of `payload` and returns the raw answer, decoded.
fn raw_call(s: &mut std::os::unix::net::UnixStream, payload: &[u8]) -> Answer {
    s.write_all(&(payload.len() as u32).to_le_bytes()).unwrap();
    s.write_all(payload).unwrap();
    let bytes = wire::receive(s).unwrap().unwrap();
    wire::decode(&bytes).unwrap()
}

#[test]
fn garbage_and_foreign_descriptors_get_errors_and_harm_nothing() {
    use rand::{Rng, SeedableRng};
    let dir = Scratch::new("garbage");
    let server = Server::start(&dir.0, &[]);
    let good = Client::connect(&server.socket).unwrap();
    let fd = good
        .open("/mine", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    good.pwrite(fd, b"precious", 0).unwrap();

    let mut s = std::os::unix::net::UnixStream::connect(&server.socket).unwrap();
    wire::send(
        &mut s,
        &Hello {
            version: wire::VERSION,
            umask: 0o022,
            mailbox: false,
        },
    )
    .unwrap();
    let w = wire::receive(&mut s).unwrap().unwrap();
    assert!(matches!(
        wire::decode::<Welcome>(&w),
        Some(Welcome::Accepted { .. })
    ));
    // Another connection's descriptor, descriptors never opened, offsets past any file.
    for req in [
        Request::Pwrite {
            fd,
            data: b"stolen".to_vec().into(),
            off: 0,
        },
        Request::Close { fd },
        Request::Read {
            fd: u32::MAX,
            len: u32::MAX,
        },
        Request::Fstat { fd: 7 },
    ] {
        assert_eq!(
            raw_call(&mut s, &wire::frame(&req).unwrap()[4..]),
            Answer::Error(libc::EBADF)
        );
    }
    let Answer::Fd(mine) = raw_call(
        &mut s,
        &wire::frame(&Request::Open {
            path: "/mine".into(),
            flags: libc::O_RDWR,
            mode: 0,
        })
        .unwrap()[4..],
    ) else {
        panic!("open")
    };
    let far = Request::Pwrite {
        fd: mine,
        data: vec![1; 10].into(),
        off: u64::MAX - 5,
    };
    assert!(matches!(
        raw_call(&mut s, &wire::frame(&far).unwrap()[4..]),
        Answer::Error(_)
    ));
    let bad_whence = Request::Lseek {
        fd: mine,
        off: 0,
        whence: 99,
    };
    assert_eq!(
        raw_call(&mut s, &wire::frame(&bad_whence).unwrap()[4..]),
        Answer::Error(libc::EINVAL)
    );
    // Random payloads: each gets an answer (most EBADMSG); none ends the server.
    let mut rng = rand_pcg::Pcg64::seed_from_u64(21);
    for _ in 0..2000 {
        let len = rng.random_range(0..64);
        let junk: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let _ = raw_call(&mut s, &junk);
    }
    // A frame too long to be one: the server ends that connection, no one else's.
    s.write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert!(wire::receive(&mut s).map(|a| a.is_none()).unwrap_or(true));
    let mut buf = [0u8; 8];
    assert_eq!(good.pread(fd, &mut buf, 0).unwrap(), 8);
    assert_eq!(&buf, b"precious");
    // A greeting of another version is refused.
    let mut old = std::os::unix::net::UnixStream::connect(&server.socket).unwrap();
    wire::send(
        &mut old,
        &Hello {
            version: 0,
            umask: 0,
            mailbox: false,
        },
    )
    .unwrap();
    let w = wire::receive(&mut old).unwrap().unwrap();
    assert_eq!(
        wire::decode::<Welcome>(&w),
        Some(Welcome::Refused(libc::EPROTO))
    );
    drop((good, s, old));
    server.stop();
}

#[test]
fn a_second_server_on_a_live_socket_or_a_held_image_is_refused() {
    let dir = Scratch::new("twice");
    let server = Server::start(&dir.0, &[]);
    let other = dir.0.join("other-sock");
    let out = easyio(&[
        "serve",
        server.image.to_str().unwrap(),
        "--socket",
        other.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(libc::EBUSY), "{}", stderr(&out));
    let image2 = dir.0.join("image2");
    assert!(
        easyio(&["mkfs", "--image", image2.to_str().unwrap(), "--size", "16M"])
            .status
            .success()
    );
    let out = easyio(&[
        "serve",
        image2.to_str().unwrap(),
        "--socket",
        server.socket.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(libc::EADDRINUSE),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("already listens"), "{}", stderr(&out));
    let plain = dir.0.join("plain");
    std::fs::write(&plain, b"not a socket").unwrap();
    let out = easyio(&[
        "serve",
        image2.to_str().unwrap(),
        "--socket",
        plain.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(libc::EEXIST), "{}", stderr(&out));
    assert_eq!(std::fs::read(&plain).unwrap(), b"not a socket");
    server.stop();
}

/// Whether `dir` is a mount point now.
fn mounted(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let dir = dir.to_str().unwrap();
    mounts.lines().any(|l| l.split(' ').nth(1) == Some(dir))
}

#[test]
fn a_forked_child_cannot_use_its_parents_connection() {
    let dir = Scratch::new("forker");
    let server = Server::start(&dir.0, &[]);
    let (st, lines, err) = finish(client_process("forker", &server.socket, ""));
    assert!(st.success(), "{err}");
    let child = format!("child {e} {e} 11", e = libc::ENOTCONN);
    let said: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("child") || l.starts_with("parent"))
        .collect();
    assert_eq!(said, [&child, "parent 11"], "{err}");
    server.stop();
}

#[test]
fn clients_and_programs_on_the_fuse_mount_share_one_file_system() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: install fuse3 (as .ci/run does) to run this test"
    );
    let dir = Scratch::new("mount");
    let mp = dir.0.join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let server = Server::start(&dir.0, &["--mount", mp.to_str().unwrap()]);
    assert!(mounted(&mp), "{}", server.log_text());
    let c = Client::connect(&server.socket).unwrap();
    assert!(
        c.direct_stats().is_some(),
        "FUSE writes keep the page tables: clients read directly"
    );
    let data = contents(1, 2);
    let fd = c
        .open("/from-client", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    c.pwrite(fd, &data, 0).unwrap();
    c.close(fd).unwrap();
    assert_eq!(std::fs::read(mp.join("from-client")).unwrap(), data);
    let more = contents(3, 4);
    std::fs::write(mp.join("from-program"), &more).unwrap();
    let fd = c.open("/from-program", libc::O_RDONLY, 0).unwrap();
    let read_all = |len: usize| {
        let mut buf = vec![0u8; len + 1];
        let n = c.pread(fd, &mut buf, 0).unwrap();
        buf.truncate(n);
        buf
    };
    assert_eq!(read_all(more.len()), more);
    // Programs change the file through FUSE while the client holds it open and reads
    // it directly: an overwrite in the middle, an append, a truncation. Each read
    // after sees the change, never the blocks the change replaced.
    let mut expect = more.clone();
    let patch = vec![0xa5u8; 5000];
    {
        use std::io::{Seek, SeekFrom, Write as _};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(mp.join("from-program"))
            .unwrap();
        f.seek(SeekFrom::Start(3000)).unwrap();
        f.write_all(&patch).unwrap();
    }
    expect[3000..8000].copy_from_slice(&patch);
    assert_eq!(
        read_all(expect.len()),
        expect,
        "after an overwrite through FUSE"
    );
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(mp.join("from-program"))
            .unwrap();
        f.write_all(b"appended").unwrap();
    }
    expect.extend_from_slice(b"appended");
    assert_eq!(
        read_all(expect.len()),
        expect,
        "after an append through FUSE"
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(mp.join("from-program"))
        .unwrap()
        .set_len(4100)
        .unwrap();
    expect.truncate(4100);
    assert_eq!(
        read_all(expect.len() + 10),
        expect,
        "after a truncation through FUSE"
    );
    std::fs::write(mp.join("from-program"), b"replaced").unwrap();
    assert_eq!(read_all(100), b"replaced", "after O_TRUNC through FUSE");
    let (direct, _) = c.direct_stats().unwrap();
    assert!(direct > 0, "the client's reads were direct");
    c.close(fd).unwrap();
    std::fs::rename(mp.join("from-client"), mp.join("renamed")).unwrap();
    assert_eq!(c.stat("/from-client").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(c.stat("/renamed").unwrap().size, data.len() as u64);
    drop(c);
    server.stop();
    assert!(!mounted(&mp), "the mount is gone with the server");
}

/// `stat` through a mount: size and permission bits, or the errno.
fn size_and_mode(p: &Path) -> Result<(u64, u32), i32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| (m.len(), m.permissions().mode() & 0o7777))
        .map_err(|e| e.raw_os_error().unwrap())
}

#[test]
fn a_change_by_a_client_is_seen_through_the_mount_at_once() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: install fuse3 (as .ci/run does) to run this test"
    );
    let dir = Scratch::new("inval");
    let mp = dir.0.join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let server = Server::start(&dir.0, &["--mount", mp.to_str().unwrap()]);
    assert!(mounted(&mp), "{}", server.log_text());
    let c = Client::connect(&server.socket).unwrap();
    std::fs::create_dir(mp.join("d")).unwrap();
    std::fs::write(mp.join("d/f"), b"first").unwrap();
    // Each round the mount first reads what the kernel then caches (entries,
    // attributes, a missing name, a listing), then a client changes it, and the
    // mount's next call sees the change.
    for round in 0..20u32 {
        let f = mp.join("d/f");
        let new = mp.join(format!("d/new{round}"));
        for _ in 0..2 {
            assert!(size_and_mode(&f).is_ok());
            assert_eq!(size_and_mode(&new), Err(libc::ENOENT));
            assert!(std::fs::read_dir(mp.join("d")).unwrap().count() >= 1);
        }
        let data = contents(round, 7);
        let fd = c.open("/d/f", libc::O_WRONLY | libc::O_TRUNC, 0).unwrap();
        c.pwrite(fd, &data, 0).unwrap();
        c.close(fd).unwrap();
        let len = data.len() as u64;
        assert_eq!(std::fs::metadata(&f).unwrap().len(), len, "round {round}");
        assert_eq!(std::fs::read(&f).unwrap(), data, "round {round}");
        let mode = 0o600 | (round & 0o7) << 3;
        c.chmod("/d/f", mode).unwrap();
        assert_eq!(size_and_mode(&f), Ok((len, mode)), "round {round}");
        let fd = c
            .open(
                &format!("/d/new{round}"),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
            .unwrap();
        c.close(fd).unwrap();
        assert_eq!(size_and_mode(&new), Ok((0, 0o644)), "round {round}");
        c.unlink(&format!("/d/new{round}")).unwrap();
        assert_eq!(size_and_mode(&new), Err(libc::ENOENT), "round {round}");
        c.rename("/d/f", "/d/g").unwrap();
        assert_eq!(size_and_mode(&f), Err(libc::ENOENT), "round {round}");
        assert_eq!(std::fs::read(mp.join("d/g")).unwrap(), data);
        c.rename("/d/g", "/d/f").unwrap();
        let mut names: Vec<String> = std::fs::read_dir(mp.join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["f"], "round {round}");
    }
    drop(c);
    server.stop();
}

/// What the lines of killed `acker` processes say must be in the image: for each
/// path, its contents' CRC or `None` for gone; paths whose last step was not
/// acknowledged may be either way and are left out.
fn acknowledged(lines: &[String]) -> BTreeMap<String, Option<String>> {
    let mut state = BTreeMap::new();
    let mut unsure = std::collections::BTreeSet::new();
    for l in lines {
        let w: Vec<&str> = l.split(' ').collect();
        match w[..] {
            ["TRY", path] => {
                unsure.insert(path.to_string());
            }
            ["HAS", path, crc] => {
                unsure.remove(path);
                state.insert(path.to_string(), Some(crc.to_string()));
            }
            ["GONE", path] => {
                unsure.remove(path);
                state.insert(path.to_string(), None);
            }
            _ => {}
        }
    }
    for p in unsure {
        state.remove(&p);
    }
    state
}

#[test]
fn clients_and_the_server_killed_at_random_moments_lose_nothing_acknowledged() {
    use rand::{Rng, SeedableRng};
    let dir = Scratch::new("random-kills");
    let mut server = Server::start(&dir.0, &[]);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let mut lines = Vec::new();
    let mut next = 0;
    let mut kids: Vec<Child> = (0..3)
        .map(|_| {
            next += 1;
            client_process("acker", &server.socket, &next.to_string())
        })
        .collect();
    // Kill a client now and then and start another in its place.
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(rng.random_range(20..150)));
        let i = rng.random_range(0..kids.len());
        let mut kid = kids.swap_remove(i);
        kid.kill().unwrap();
        let (_, out, _) = finish(kid);
        lines.extend(out);
        next += 1;
        kids.push(client_process("acker", &server.socket, &next.to_string()));
    }
    // Then the server, under the clients still running.
    std::thread::sleep(Duration::from_millis(rng.random_range(20..150)));
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    for kid in kids {
        let (st, out, err) = finish(kid);
        assert!(
            !st.success(),
            "a client outlived its server without an error"
        );
        assert!(
            err.contains("Disconnected") || st.signal().is_some(),
            "{err}"
        );
        lines.extend(out);
    }
    let expect = acknowledged(&lines);
    assert!(
        expect.len() > 10,
        "the clients acknowledged too little: {lines:?}"
    );
    let (image, socket) = (server.image.clone(), server.socket.clone());
    drop(server);
    let server = Server::restart(image, socket, &[]);
    let c = Client::connect(&server.socket).unwrap();
    for (path, want) in &expect {
        match want {
            Some(crc) => {
                let fd = c
                    .open(path, libc::O_RDONLY, 0)
                    .unwrap_or_else(|e| panic!("{path}: {e}"));
                let size = c.fstat(fd).unwrap().size as usize;
                let mut buf = vec![0u8; size];
                assert_eq!(c.pread(fd, &mut buf, 0).unwrap(), size);
                c.close(fd).unwrap();
                assert_eq!(crc32c::crc32c(&buf).to_string(), *crc, "{path}");
            }
            None => assert_eq!(c.stat(path).unwrap_err().errno(), libc::ENOENT, "{path}"),
        }
    }
    drop(c);
    server.stop();
}
