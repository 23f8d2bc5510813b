//! The `easyio` command run as a user would, on the mistakes users make: every failing
//! command leaves the image passing `fsck` with every earlier file reading back, and no
//! file outside the image changed (checksums before and after). Signals (SIGPIPE,
//! SIGINT, SIGTERM) are real signals sent to the real process.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Exit status of a usage error (bad argument), as documented in `--help`.
const USAGE: i32 = 64;
/// No command here should take longer than this; a hang fails instead of blocking CI.
const LIMIT: Duration = Duration::from_secs(120);

/// A scratch directory in /dev/shm holding an image and the user's local files.
struct Scratch {
    dir: PathBuf,
    image: PathBuf,
    /// Files of the image written so far and their contents.
    files: BTreeMap<String, Vec<u8>>,
}

impl Scratch {
    /// A directory with a 16 MiB image holding two files.
    fn new(tag: &str) -> Scratch {
        let dir = PathBuf::from(format!(
            "/dev/shm/easyio-cli-user-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let image = dir.join("image");
        let mut s = Scratch {
            dir,
            image,
            files: BTreeMap::new(),
        };
        s.ok(&["mkfs", "--size", "16M"]);
        s.ok(&["mkdir", "/keep"]);
        s.put("/keep/a", text_lines(100_000, 3));
        s.put("/b", text_lines(5_000, 7));
        s
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = common::easyio();
        c.args(args)
            .env("EASYIO_IMAGE", &self.image)
            .current_dir(&self.dir);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        common::run_bounded(&mut self.cmd(args), LIMIT).0
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A local file in the scratch directory.
    fn local(&self, name: &str, data: &[u8]) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    }

    /// Puts `data` at `path` in the image and remembers it.
    fn put(&mut self, path: &str, data: Vec<u8>) {
        let local = self.local("put-source", &data);
        self.ok(&["put", local.to_str().unwrap(), path]);
        std::fs::remove_file(local).unwrap();
        self.files.insert(path.into(), data);
    }

    /// Checksums of every file in the scratch directory but the image.
    fn outside(&self) -> BTreeMap<String, u32> {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| *p != self.image)
            .map(|p| {
                let sum = if p.is_dir() {
                    0
                } else {
                    crc32c::crc32c(&std::fs::read(&p).unwrap())
                };
                (p.file_name().unwrap().to_string_lossy().into_owned(), sum)
            })
            .collect()
    }

    /// The image passes fsck, was cleanly unmounted, and every file written so far reads
    /// back; no temporary file is left in its root or in /keep.
    fn intact(&self) {
        let fsck: serde_json::Value = serde_json::from_str(&self.ok(&["fsck", "--json"])).unwrap();
        assert_eq!(fsck["problems"], serde_json::json!([]), "{fsck}");
        assert_eq!(fsck["clean_unmount"], true, "{fsck}");
        for (path, data) in &self.files {
            let out = self.run(&["cat", path]);
            assert!(out.status.success(), "cat {path}: {out:?}");
            assert!(out.stdout == *data, "{path} reads back different data");
        }
        let mut names: Vec<String> = self.ok(&["ls", "/"]).lines().map(String::from).collect();
        names.extend(
            self.ok(&["ls", "/keep"])
                .lines()
                .map(|n| format!("keep/{n}")),
        );
        for n in names {
            let full = format!("/{n}");
            assert!(
                self.files.contains_key(&full) || full == "/keep",
                "unexpected entry {full} left in the image"
            );
        }
    }

    /// Runs a command that must fail with `code`, leaving everything intact.
    fn fails(&self, args: &[&str], code: i32) -> String {
        let before = self.outside();
        let out = self.run(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(self.outside(), before, "{args:?} changed a local file");
        self.intact();
        err
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `len` bytes of text lines, different per `seed`.
fn text_lines(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            if i % 64 == 63 {
                b'\n'
            } else {
                b'a' + ((i / 7 + seed as usize) % 26) as u8
            }
        })
        .collect()
}

#[test]
fn get_never_writes_onto_the_image() {
    let s = Scratch::new("get-image");
    let image = s.image.to_str().unwrap();
    let err = s.fails(&["get", "/b", image], 1);
    assert!(err.contains("image"), "{err}");
    // A hard link to the image is the image too.
    let link = s.dir.join("link");
    std::fs::hard_link(&s.image, &link).unwrap();
    s.fails(&["get", "/b", link.to_str().unwrap()], 1);
    // Nor through standard output appending to it.
    for args in [&["cat", "/b"][..], &["get", "/b", "-"]] {
        let before = std::fs::metadata(&s.image).unwrap().len();
        let append = std::fs::OpenOptions::new()
            .append(true)
            .open(&s.image)
            .unwrap();
        let out = s.cmd(args).stdout(append).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert_eq!(std::fs::metadata(&s.image).unwrap().len(), before);
        s.intact();
    }
}

#[test]
fn get_of_a_missing_file_leaves_the_target_alone() {
    let mut s = Scratch::new("get-missing");
    let local = s.local("local.txt", b"the user's own file\n");
    let err = s.fails(
        &["get", "/nonexistent", local.to_str().unwrap()],
        libc::ENOENT,
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // A good get replaces the file whole and leaves no temporary file beside it.
    s.ok(&["get", "/b", local.to_str().unwrap()]);
    assert_eq!(std::fs::read(&local).unwrap(), s.files["/b"]);
    // Into a directory, either way: the file keeps its name there.
    s.ok(&["put", "local.txt", "/keep"]);
    s.files
        .insert("/keep/local.txt".into(), s.files["/b"].clone());
    std::fs::create_dir(s.dir.join("sub")).unwrap();
    s.ok(&["get", "/keep/a", s.dir.join("sub").to_str().unwrap()]);
    assert_eq!(
        std::fs::read(s.dir.join("sub/a")).unwrap(),
        s.files["/keep/a"]
    );
    let names: Vec<_> = s.outside().into_keys().collect();
    assert_eq!(names, ["local.txt", "sub"]);
    s.put("/c", text_lines(10, 1));
    s.intact();
}

#[test]
fn put_that_fills_the_image_keeps_the_old_content() {
    let mut s = Scratch::new("put-full");
    s.put("/f", text_lines(20_000, 5));
    let big = s.local("big.bin", &text_lines(32 << 20, 9));
    let err = s.fails(&["put", big.to_str().unwrap(), "/f"], libc::ENOSPC);
    assert!(err.contains("space"), "{err}");
    // A new file that does not fit is not left behind half-written either.
    s.fails(&["put", big.to_str().unwrap(), "/keep/new"], libc::ENOSPC);
}

#[test]
fn put_of_a_directory_changes_nothing() {
    let s = Scratch::new("put-dir");
    std::fs::create_dir(s.dir.join("somedir")).unwrap();
    let err = s.fails(&["put", "somedir", "/b"], libc::EISDIR);
    assert!(err.contains("somedir"), "{err}");
    s.fails(&["put", "no-such-file", "/b"], libc::ENOENT);
    let local = s.local("local", b"data");
    s.fails(&["put", "local", "/no-such-dir/f"], libc::ENOENT);
    s.fails(&["put", "local", "/b/f"], libc::ENOTDIR);
    std::fs::remove_file(local).unwrap();
}

/// Waits for a child, failing the test if it does not end within [`LIMIT`].
fn wait_bounded(child: &mut Child) -> ExitStatus {
    testkit::wait(child, LIMIT)
}

#[test]
fn sigpipe_ends_cat_with_a_clean_unmount() {
    let mut s = Scratch::new("sigpipe");
    s.put("/big", text_lines(8 << 20, 2));
    let mut cat = s
        .cmd(&["cat", "/big"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let head = Command::new("head")
        .arg("-1")
        .stdin(cat.stdout.take().unwrap())
        .output()
        .unwrap();
    assert_eq!(head.stdout, &s.files["/big"][..64]);
    let status = wait_bounded(&mut cat);
    let mut err = String::new();
    cat.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    // It ends as a closed pipe ends a command (by SIGPIPE, quietly), but only after
    // unmounting: the next command finds nothing to recover.
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}: {err}");
    assert_eq!(err, "");
    let next = s.run(&["ls", "/"]);
    assert_eq!(String::from_utf8_lossy(&next.stderr), "");
    s.intact();
    // A listing cut short by its reader ends the same way.
    let mut ls = s
        .cmd(&["ls", "-l", "/keep"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(ls.stdout.take());
    let status = wait_bounded(&mut ls);
    assert!(
        status.success() || status.signal() == Some(libc::SIGPIPE),
        "{status:?}"
    );
    s.intact();
    // A table printed to a closed pipe ends the same way, without a panic message. The
    // pipe's reading end is closed before the command starts, so its first write fails
    // whatever the timing.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut engines = s
        .cmd(&["engines"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut engines);
    let mut err = String::new();
    engines
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}: {err}");
    assert_eq!(err, "");
}

/// A `put - DEST` fed from a thread that writes 1 MiB chunks until the pipe closes or
/// `cap` bytes are written, then holds the pipe open until the feed is dropped.
struct Feed {
    child: Child,
    _hold: std::sync::mpsc::Sender<()>,
}

/// Starts a [`Feed`]; returns once `after` bytes have gone in.
fn feeding_put(s: &Scratch, dest: &str, after: usize, cap: usize) -> Feed {
    let mut child = s
        .cmd(&["put", "-", dest])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (hold, held) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let chunk = text_lines(1 << 20, 4);
        let mut sent = 0;
        let mut told = false;
        while sent < cap && stdin.write_all(&chunk).is_ok() {
            sent += chunk.len();
            if sent >= after && !told {
                told = true;
                let _ = tx.send(());
            }
        }
        let _ = tx.send(());
        let _ = held.recv();
    });
    rx.recv_timeout(LIMIT).unwrap();
    Feed { child, _hold: hold }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a child we started and have not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// `info --json` of the image: whether the last unmount was clean.
fn mount_was_clean(s: &Scratch) -> bool {
    let v: serde_json::Value = serde_json::from_str(&s.ok(&["info", "--json"])).unwrap();
    v["mount"]["clean"].as_bool().unwrap()
}

#[test]
fn sigint_and_sigterm_end_a_put_through_a_clean_unmount() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let s = Scratch::new(&format!("sig{sig}"));
        // The old /b stays: the put is stopped before its rename.
        let mut feed = feeding_put(&s, "/b", 4 << 20, usize::MAX);
        let put = &mut feed.child;
        signal(put, sig);
        let status = wait_bounded(put);
        let mut err = String::new();
        put.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert_eq!(status.signal(), Some(sig), "{status:?}: {err}");
        assert!(mount_was_clean(&s), "signal {sig}: {err}");
        s.intact();
    }
}

#[test]
fn a_second_sigint_exits_at_once_and_the_next_open_recovers() {
    let mut s = Scratch::new("sigint2");
    s.put("/big", text_lines(8 << 20, 2));
    // Its output goes to a pipe nobody reads: the write it blocks in is restarted after
    // the first SIGINT, which therefore cannot finish it.
    let mut cat = s
        .cmd(&["cat", "/big"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    signal(&cat, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        cat.try_wait().unwrap().is_none(),
        "the first SIGINT ended it"
    );
    signal(&cat, libc::SIGINT);
    let status = wait_bounded(&mut cat);
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    assert!(!mount_was_clean(&s));
    s.intact();
}

/// Files in /dev/shm a process `pid` made: its temporary regions and kernel-mode
/// directories.
fn shm_files_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with(&format!("easyio-{pid}-")) || n.ends_with(&format!("-kernel-{pid}"))
        })
        .collect()
}

#[test]
fn a_signal_ends_a_benchmark_and_removes_its_temporary_region() {
    let s = Scratch::new("sig-bench");
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut bench = s
            .cmd(&[
                "bench",
                "micro",
                "--duration",
                "600",
                "--workload",
                "DWAL",
                "--mode",
                "cpu",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while shm_files_of(bench.id()).is_empty() {
            assert!(start.elapsed() < LIMIT, "no temporary region appeared");
            std::thread::sleep(Duration::from_millis(10));
        }
        signal(&bench, sig);
        let status = wait_bounded(&mut bench);
        assert_eq!(status.signal(), Some(sig), "{status:?}");
        assert_eq!(shm_files_of(bench.id()), Vec::<String>::new());
    }
}

#[test]
fn rm_r_root_refuses_without_no_preserve_root() {
    let s = Scratch::new("rm-root");
    let err = s.fails(&["rm", "-r", "/"], 1);
    assert!(err.contains("--no-preserve-root"), "{err}");
    let out = s.ok(&["rm", "-r", "--no-preserve-root", "/"]);
    assert!(out.contains("removed"), "{out}");
    assert_eq!(s.ok(&["ls", "/"]), "");
    let fsck: serde_json::Value = serde_json::from_str(&s.ok(&["fsck", "--json"])).unwrap();
    assert_eq!(fsck["problems"], serde_json::json!([]));
}

#[test]
fn bad_numbers_are_usage_errors_before_any_work() {
    let s = Scratch::new("args");
    let cases: &[&[&str]] = &[
        &["bench", "app", "--scale", "inf"],
        &["bench", "app", "--scale", "nan"],
        &["bench", "app", "--scale", "0"],
        &["bench", "app", "--duration=-1"],
        &["bench", "app", "--threads", "0"],
        &["bench", "qos", "--rate", "0"],
        &["bench", "qos", "--seconds", "nan"],
        &["bench", "qos", "--seconds", "inf"],
        &["bench", "qos", "--window-ms", "0"],
        &["bench", "micro", "--duration", "inf"],
        &["bench", "micro", "--compute-us", "nan"],
        &["bench", "micro", "--io-size", "0"],
        &["bench", "raw", "--round-ms", "0"],
        &["bench", "engine", "--round-ms", "0"],
        &["bench", "rt", "--round-ms", "0"],
        &["calibrate", "--round-ms", "0"],
        &["crashtest", "--points", "0"],
        &["mkfs", "--inodes", "0"],
        &["mkfs", "--size", "12Q"],
        &["no-such-command"],
    ];
    for args in cases {
        let err = s.fails(args, USAGE);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        let flag = args.iter().find(|a| a.starts_with("--"));
        if let Some(flag) = flag.and_then(|f| f.split('=').next()) {
            assert!(err.contains(flag), "{args:?}: {err}");
        }
    }
    // A missing file is not a usage error.
    let missing = s.run(&["cat", "/nope"]);
    assert_eq!(missing.status.code(), Some(libc::ENOENT));
    // The exit codes are in --help.
    let help = s.ok(&["--help"]);
    assert!(help.contains("Exit status"), "{help}");
    assert!(help.contains("64"), "{help}");
}

#[test]
fn output_paths_are_checked_before_any_work() {
    let s = Scratch::new("outpaths");
    let before = Instant::now();
    for args in [
        &["bench", "app", "--plot", "no-such-dir/x.svg"][..],
        &["bench", "qos", "--svg", "no-such-dir/x.svg"],
        &["demo", "--plot", "no-such-dir/x.svg"],
        &["calibrate", "--out", "no-such-dir/p.toml"],
    ] {
        let err = s.fails(args, libc::ENOENT);
        assert!(err.contains("no-such-dir"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    // Refused up front, not after minutes of measuring.
    assert!(before.elapsed() < LIMIT);
}

#[test]
fn a_saved_trace_is_put_in_place_whole() {
    let s = Scratch::new("trace");
    let crash = ["crashtest", "--workload", "generic_056", "--points", "4"];
    s.ok(&[&crash[..], &["--save-trace", "t.trace", "--json"]].concat());
    let names: Vec<_> = s.outside().into_keys().collect();
    assert_eq!(names, ["t.trace"]);
    s.ok(&[&crash[..], &["--trace", "t.trace", "--json"]].concat());
}

#[test]
fn json_runs_write_no_files_unasked() {
    let s = Scratch::new("json-files");
    let before = s.outside();
    let out = s.run(&[
        "bench",
        "qos",
        "--seconds",
        "0.05",
        "--medium",
        "none",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap();
    assert_eq!(s.outside(), before);
}

#[test]
fn mkfs_that_fails_leaves_nothing_and_force_takes_the_size() {
    let s = Scratch::new("mkfs");
    let new = s.dir.join("new-image");
    let new_s = new.to_str().unwrap();
    let out = s.run(&[
        "mkfs", "--image", new_s, "--size", "16M", "--inodes", "99999999",
    ]);
    assert!(!out.status.success());
    assert!(!new.exists(), "a failed mkfs left {new_s} behind");
    let out = s.run(&["mkfs", "--image", new_s, "--size", "1K"]);
    assert!(!out.status.success());
    assert!(!new.exists(), "a failed mkfs left {new_s} behind");
    // A failed reformat keeps the old image and its files.
    let err = s.fails(&["mkfs", "--force", "--inodes", "99999999"], USAGE);
    assert!(err.contains("99999999 inodes"), "{err}");
    // --force with --size makes the image that size.
    s.ok(&["mkfs", "--force", "--size", "32M"]);
    assert_eq!(std::fs::metadata(&s.image).unwrap().len(), 32 << 20);
    assert_eq!(s.ok(&["ls", "/"]), "");
    s.ok(&["mkfs", "--force"]);
    assert_eq!(std::fs::metadata(&s.image).unwrap().len(), 32 << 20);
}

#[test]
fn mkdir_p_over_a_file_is_enotdir() {
    let s = Scratch::new("mkdir-p");
    s.fails(&["mkdir", "-p", "/b"], libc::ENOTDIR);
    s.fails(&["mkdir", "-p", "/b/sub"], libc::ENOTDIR);
    s.ok(&["mkdir", "-p", "/keep"]);
    s.intact();
}

#[test]
fn path_length_errors_name_the_right_limit() {
    let s = Scratch::new("long");
    let long_path = "/d".repeat(2100);
    let err = s.fails(&["stat", &long_path], libc::ENAMETOOLONG);
    assert!(err.contains("4096"), "{err}");
    let long_name = format!("/{}", "n".repeat(300));
    let err = s.fails(&["mkdir", &long_name], libc::ENAMETOOLONG);
    assert!(err.contains("255"), "{err}");
}

#[test]
fn ls_of_a_file_lists_it_and_mv_moves_into_a_directory() {
    let mut s = Scratch::new("ls-mv");
    assert_eq!(s.ok(&["ls", "/b"]), "/b\n");
    let long = s.ok(&["ls", "-l", "/b"]);
    assert!(long.ends_with(" /b\n") && long.contains(" 5000 "), "{long}");
    s.ok(&["mv", "/b", "/keep/"]);
    let b = s.files.remove("/b").unwrap();
    s.files.insert("/keep/b".into(), b);
    s.ok(&["mkdir", "/sub"]);
    s.ok(&["mv", "/keep/b", "/sub"]);
    let b = s.files.remove("/keep/b").unwrap();
    s.files.insert("/sub/b".into(), b);
    assert_eq!(s.ok(&["ls", "/sub"]), "b\n");
    s.ok(&["rm", "-r", "/sub"]);
    s.files.remove("/sub/b");
    s.intact();
}

/// Runs `easyio ARGS` with its stdout and stderr on a terminal, through script(1);
/// `None` (the test skips) where script(1) is missing.
fn on_terminal(s: &Scratch, args: &[&str]) -> Option<String> {
    let line = format!("{} {}", env!("CARGO_BIN_EXE_easyio"), args.join(" "));
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("EASYIO_IMAGE", &s.image)
        .current_dir(&s.dir)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    assert!(out.status.success(), "{line}: {out:?}");
    Some(String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"))
}

#[test]
fn progress_shows_on_a_terminal_and_nowhere_else() {
    let s = Scratch::new("progress");
    let crash = ["crashtest", "--workload", "generic_056", "--points", "8"];
    let qos = ["bench", "qos", "--seconds", "0.05", "--medium", "none"];
    let Some(text) = on_terminal(&s, &crash) else {
        testkit::skip("script(1) is not installed (Debian's bsdutils)");
        return;
    };
    assert!(text.contains("0/1 cpu generic_056"), "{text}");
    let text = on_terminal(&s, &[&qos[..], &["--svg", "q.svg"]].concat()).unwrap();
    assert!(text.contains("0/5 L alone"), "{text}");
    // With --json the terminal gets the JSON only.
    for args in [&crash[..], &qos[..]] {
        let text = on_terminal(&s, &[args, &["--json"]].concat()).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    }
    // stderr is a pipe here: no bar or spinner reaches it.
    for args in [&crash[..], &["fsck"]] {
        let out = s.run(args);
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    }
}
