//! What `easyio mount` and `easyio umount` tell a user when something is in the way,
//! on real images in /dev/shm: a busy mount names who holds it, a stale mount point
//! says how to clear it, and the server's log is gone after a clean end and kept,
//! named, after a failed mount; a mount that had to recover the image says so.
//! Without /dev/fuse the tests are skipped, saying so (and fail when `CI` is set).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const EASYIO: &str = env!("CARGO_BIN_EXE_easyio");

fn easyio(args: &[&str]) -> Output {
    Command::new(EASYIO).args(args).output().unwrap()
}

/// A directory in /dev/shm with a fresh image and an empty mount point; on drop, the
/// server (if one was started) is killed, the mount lazily unmounted and all removed.
struct Scratch {
    dir: PathBuf,
    server: Option<u32>,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = PathBuf::from(format!("/dev/shm/easyio-msg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        let s = Scratch { dir, server: None };
        let out = easyio(&["mkfs", "--image", s.image(), "--size", "16M"]);
        assert!(out.status.success(), "{out:?}");
        s
    }
    fn image(&self) -> &str {
        self.dir.join("img").to_str().unwrap().to_owned().leak()
    }
    fn mp(&self) -> &str {
        self.dir.join("mnt").to_str().unwrap().to_owned().leak()
    }
    /// Mounts in the background; the server's log file.
    fn mount(&mut self) -> PathBuf {
        let out = easyio(&["mount", self.image(), self.mp()]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{out:?}");
        let after = |key: &str, end: char| {
            text.split(key)
                .nth(1)
                .unwrap()
                .split(end)
                .next()
                .unwrap()
                .to_string()
        };
        self.server = Some(after("server pid ", ',').parse().unwrap());
        PathBuf::from(after(", log ", ')'))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.mp()).output();
        if let Some(pid) = self.server {
            // SAFETY: kill(2) of a pid this test started; no memory is involved.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits (bounded) until process `pid` is gone.
fn wait_gone(pid: u32) {
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "pid {pid} lives on");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_busy_umount_names_the_holder_and_a_clean_end_removes_the_log() {
    if testkit::fuse_missing() {
        return;
    }
    let mut s = Scratch::new("busy");
    let log = s.mount();
    assert!(log.exists(), "{}", log.display());
    let mut sleeper = Command::new("sleep")
        .arg("60")
        .current_dir(s.mp())
        .spawn()
        .unwrap();
    let busy = easyio(&["umount", s.mp()]);
    let err = String::from_utf8_lossy(&busy.stderr);
    assert_eq!(busy.status.code(), Some(libc::EBUSY), "{err}");
    let holder = format!("{} (sleep, current directory)", sleeper.id());
    assert!(err.contains(&holder), "{err}");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let out = easyio(&["umount", s.mp()]);
    assert!(out.status.success(), "{out:?}");
    s.server = None;
    assert!(
        !log.exists(),
        "{} is left after a clean unmount",
        log.display()
    );
}

#[test]
fn a_failed_mount_keeps_its_log_and_says_where() {
    if testkit::fuse_missing() {
        return;
    }
    let s = Scratch::new("failed");
    std::fs::remove_file(s.image()).unwrap();
    let out = easyio(&["mount", s.image(), s.mp()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(libc::ENOENT), "{err}");
    let log = err
        .split("(server log: ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no log named: {err}"));
    let text = std::fs::read_to_string(log).unwrap();
    assert!(text.contains("no such file"), "{text}");
    std::fs::remove_file(log).unwrap();
}

#[test]
fn a_stale_mount_point_says_how_to_clear_it() {
    if testkit::fuse_missing() {
        return;
    }
    let mut s = Scratch::new("stale");
    let log = s.mount();
    let pid = s.server.unwrap();
    // SAFETY: kill(2) of the server this test started; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    wait_gone(pid);
    let clear = format!(
        "is a stale FUSE mount (its server is gone): run fusermount3 -uz {}",
        s.mp()
    );
    let out = easyio(&["mount", s.image(), s.mp()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(libc::ENOTCONN), "{err}");
    assert!(err.contains(&clear), "{err}");
    // `easyio umount` clears it too.
    let out = easyio(&["umount", s.mp()]);
    assert!(out.status.success(), "{out:?}");
    assert!(std::fs::read_dir(s.mp()).is_ok());
    // A server that died keeps its log.
    assert!(log.exists());
    std::fs::remove_file(&log).unwrap();
    // The next mount recovers the image, and says so to the user, not only in its log.
    let out = easyio(&["mount", s.image(), s.mp()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        err.contains("was not cleanly unmounted; recovered"),
        "{err}"
    );
    let out = easyio(&["umount", s.mp()]);
    assert!(out.status.success(), "{out:?}");
}
