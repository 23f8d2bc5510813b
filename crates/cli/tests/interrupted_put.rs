//! Ctrl-C during `easyio put - /f` while it waits on standard input: the command ends
//! promptly by the signal (a shell shows 130), unmounts cleanly, and the image holds
//! the old `/f` (or none) and no half-written file.

mod common;

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::easyio;

/// How long the command may take to end after the signal.
const PROMPT: Duration = Duration::from_secs(5);

/// An image in /dev/shm, removed when the test ends.
struct Image(std::path::PathBuf);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn run(image: &Image, args: &[&str]) -> std::process::Output {
    let out = easyio()
        .args(args)
        .arg("--image")
        .arg(&image.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "easyio {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Starts `easyio put - DEST` with a pipe on its standard input, writes `partial`
/// into the pipe (keeping it open) and waits until the command has mounted and holds
/// the image, so that it is waiting for more input.
fn start_put(image: &Image, dest: &str, partial: &[u8]) -> (Child, std::process::ChildStdin) {
    let mut child = easyio()
        .args(["put", "-", dest, "--image"])
        .arg(&image.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(partial).unwrap();
    stdin.flush().unwrap();
    // Wait until the command has the image open, then for the mount to finish and the
    // read of the rest of the input to start.
    let start = Instant::now();
    while !has_open(child.id(), &image.0) {
        assert!(start.elapsed() < PROMPT, "put never opened the image");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    (child, stdin)
}

/// Whether process `pid` has the file `path` open.
fn has_open(pid: u32, path: &std::path::Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path))
}

/// Sends SIGINT and waits for the end, which must come within [`PROMPT`] although the
/// pipe stays open; returns the command's stderr.
fn interrupt(mut child: Child, stdin: std::process::ChildStdin) -> String {
    // SAFETY: kill(2) on the child's pid, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    // Past PROMPT the put is killed and the test fails: it still waited on its input.
    let status = testkit::wait(&mut child, PROMPT);
    drop(stdin);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}: {err}");
    err
}

#[test]
fn sigint_ends_a_put_waiting_on_stdin_and_leaves_the_image_clean() {
    let image = Image(std::path::PathBuf::from(format!(
        "/dev/shm/easyio-test-interrupted-put-{}",
        std::process::id()
    )));
    run(&image, &["mkfs", "--size", "16M"]);
    let old = std::env::temp_dir().join(format!("easyio-put-old-{}", std::process::id()));
    std::fs::write(&old, b"the old content\n").unwrap();
    run(&image, &["put", old.to_str().unwrap(), "/f"]);
    let _ = std::fs::remove_file(&old);

    // Over an existing file: the old content stays.
    let (child, stdin) = start_put(&image, "/f", b"half of a new content");
    let err = interrupt(child, stdin);
    assert!(err.contains("stopped by SIGINT"), "{err}");
    // Into a new name: nothing is created.
    let (child, stdin) = start_put(&image, "/g", &[0x5a; 3 << 20]);
    interrupt(child, stdin);

    let fsck = run(&image, &["fsck"]);
    let report = String::from_utf8_lossy(&fsck.stdout);
    assert!(
        report.contains("cleanly unmounted") && !report.contains("not cleanly"),
        "{report}"
    );
    assert!(report.contains("no problems found"), "{report}");
    let cat = run(&image, &["cat", "/f"]);
    assert_eq!(cat.stdout, b"the old content\n");
    let ls = run(&image, &["ls", "/"]);
    assert_eq!(
        String::from_utf8_lossy(&ls.stdout),
        "f\n",
        "no /g, no leftovers"
    );
}
