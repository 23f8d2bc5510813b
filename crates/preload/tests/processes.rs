//! How processes behave under the shim: a forked child and a second process get
//! EBUSY with one line naming the holder; bad settings fail calls under the prefix
//! with one line and leave every other call alone; a process killed mid-write leaves
//! an image that recovers with every write that returned.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{fsck_clean, host_file, need, run, Running, World};

/// Lines the shim wrote on stderr.
fn shim_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.starts_with("easyio preload:"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_forked_child_gets_ebusy_while_the_parent_holds_the_image() {
    need("python3", "python3");
    let w = World::new("fork", 32);
    let script = r#"
import errno, os, sys
root = sys.argv[1]
fd = os.open(root + '/f', os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b'parent')
pid = os.fork()
if pid == 0:
    codes = []
    for call in (lambda: os.open(root + '/g', os.O_CREAT | os.O_WRONLY),
                 lambda: os.stat(root + '/f'),
                 lambda: os.pread(fd, 6, 0)):
        try:
            call()
            codes.append(0)
        except OSError as e:
            codes.append(e.errno)
    os._exit(0 if codes == [errno.EBUSY] * 3 else 1)
_, status = os.waitpid(pid, 0)
print('child', os.waitstatus_to_exitcode(status))
print('parent', os.pread(fd, 6, 0), os.path.exists(root + '/g'))
os.close(fd)
"#;
    let out = run(&mut w.private_cmd("python3", &["-c", script, "{R}"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "child 0\nparent b'parent' False\n");
    let lines = shim_lines(&out.stderr);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("held by process") && lines[0].contains("EBUSY"),
        "{lines:?}"
    );
    fsck_clean(&w.img);
}

#[test]
fn a_second_process_gets_ebusy_naming_the_holder() {
    let w = World::new("second", 32);
    let holder = r#"
import os, sys
fd = os.open(sys.argv[1] + '/f', os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b'held')
print('ready', flush=True)
sys.stdin.read()
"#;
    let mut cmd = w.private_cmd("python3", &["-c", holder, "{R}"]);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut first = Running(cmd.spawn().unwrap());
    let pid = first.0.id();
    let mut line = String::new();
    BufReader::new(first.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");

    let out = run(&mut w.private_cmd("cat", &["{R}/f"]));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Device or resource busy"), "{err}");
    let lines = shim_lines(&out.stderr);
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(&pid.to_string()),
        "the holder {pid} is not named: {err}"
    );

    drop(first.0.stdin.take());
    first.wait_for(Duration::from_secs(60));
    assert_eq!(w.ok("cat", &["{R}/f"]), "held");
    fsck_clean(&w.img);
}

#[test]
fn bad_settings_fail_calls_under_the_prefix_with_one_line_and_leave_the_rest() {
    let w = World::new("badenv", 32);
    let host = host_file(&w.dir, "host.txt", b"outside\n");
    let junk = host_file(&w.dir, "junk.img", &vec![0x5a; 1 << 20]);
    let cases: [(&str, Option<&str>, &str); 5] = [
        ("EASYIO_IMAGE", None, "No such file or directory"),
        (
            "EASYIO_IMAGE",
            Some("/nonexistent/easyio.img"),
            "No such file or directory",
        ),
        ("EASYIO_IMAGE", Some(junk.to_str().unwrap()), ""),
        ("EASYIO_MODE", Some("warp"), "Invalid argument"),
        ("EASYIO_MOUNT", Some("relative/path"), "Invalid argument"),
    ];
    for (var, value, errtext) in cases {
        let mount = if var == "EASYIO_MOUNT" {
            "/easyio"
        } else {
            w.mount.as_str()
        };
        let mut cmd = w.private_cmd(
            "cat",
            &[
                host.to_str().unwrap(),
                &format!("{mount}/a"),
                &format!("{mount}/b"),
            ],
        );
        match value {
            Some(v) => cmd.env(var, v),
            None => cmd.env_remove(var),
        };
        let out = run(&mut cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.stdout, b"outside\n", "{var}={value:?}: {err}");
        assert!(!out.status.success(), "{var}={value:?}");
        assert!(err.contains(errtext), "{var}={value:?}: {err}");
        assert_eq!(shim_lines(&out.stderr).len(), 1, "{var}={value:?}: {err}");
    }
}

#[test]
fn a_process_killed_mid_write_leaves_every_returned_write_after_recovery() {
    let w = World::new("kill", 64);
    let writer = r#"
import os, sys
fd = os.open(sys.argv[1] + '/log', os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
i = 0
while True:
    os.write(fd, bytes([i % 251]) * 65536)
    os.write(1, b'%d\n' % i)
    i += 1
"#;
    let mut cmd = w.private_cmd("python3", &["-c", writer, "{R}"]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = Running(cmd.spawn().unwrap());
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let mut returned = 0;
    let start = Instant::now();
    while returned < 200 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the writer stalled"
        );
        let l = lines.next().expect("the writer died").unwrap();
        returned = l.parse::<usize>().unwrap() + 1;
    }
    child.0.kill().unwrap(); // SIGKILL

    child.0.wait().unwrap();

    let region = pmem::Region::open_read_only(&w.img).unwrap();
    let report = fs::fsck::check(&region).unwrap();
    assert!(report.ok(), "{report:?}");
    assert!(
        !report.clean_unmount,
        "a killed process cannot have unmounted"
    );
    drop(region);
    let data = common::read_image(&w.img, "/log");
    assert!(
        data.len() >= returned * 65536,
        "{} bytes for {returned} writes",
        data.len()
    );
    assert_eq!(data.len() % 65536, 0, "a write was torn");
    for (i, chunk) in data.chunks(65536).enumerate() {
        assert!(
            chunk.iter().all(|&b| b == (i % 251) as u8),
            "write {i} is wrong"
        );
    }
    // The mount above recovered the image and unmounted it cleanly.
    fsck_clean(&w.img);
}

#[test]
fn a_process_that_execs_lets_the_new_program_mount_the_image() {
    let w = World::new("exec", 32);
    let script = r#"
import os, sys
open(sys.argv[1] + '/x', 'w').write('written before exec\n')
os.execvp('cat', ['cat', sys.argv[1] + '/x'])
"#;
    assert_eq!(
        w.ok("python3", &["-c", script, "{R}"]),
        "written before exec\n"
    );
    fsck_clean(&w.img);
}
