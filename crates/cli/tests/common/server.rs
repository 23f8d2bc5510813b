//! `easyio serve` in the tests: a scratch directory, a server process of a fresh
//! image, and the checks made of it when it stops.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest a server or a client may take to finish before the test fails.
pub const LIMIT: Duration = Duration::from_secs(120);

/// A scratch directory, removed at the end of the test.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("easyio-serve-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `easyio serve` of a fresh image, in the foreground as a child process.
pub struct Server {
    pub child: Child,
    pub image: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Server {
    /// Formats an image in `dir` and serves it.
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        let image = dir.join("image");
        let out = easyio(&["mkfs", "--image", image.to_str().unwrap(), "--size", "64M"]);
        assert!(out.status.success(), "mkfs: {}", stderr(&out));
        Server::restart(image, dir.join("sock"), extra)
    }

    /// Serves `image` (formatted) on `socket`; returns once it listens.
    pub fn restart(image: PathBuf, socket: PathBuf, extra: &[&str]) -> Server {
        let log = socket.with_extension(format!("log{}", Instant::now().elapsed().as_nanos()));
        let mut child = super::easyio()
            .args([
                "serve",
                image.to_str().unwrap(),
                "--socket",
                socket.to_str().unwrap(),
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let s = Server {
            child,
            image,
            socket,
            log,
        };
        assert!(
            line.contains("serving"),
            "server did not start: {}",
            s.log_text()
        );
        s
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then requires a clean unmount and a clean fsck.
    pub fn stop(mut self) -> PathBuf {
        signal(self.child.id(), libc::SIGTERM);
        let st = wait_exit(&mut self.child);
        let log = self.log_text();
        assert_eq!(st.signal(), Some(libc::SIGTERM), "server: {log}");
        assert!(log.contains("unmounted cleanly"), "server log: {log}");
        assert!(!self.socket.exists(), "the socket is left behind");
        fsck_clean(&self.image);
        self.image.clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn easyio(args: &[&str]) -> Output {
    super::run_bounded(super::easyio().args(args), LIMIT).0
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn fsck_clean(image: &Path) {
    let out = easyio(&["fsck", "--image", image.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
}

pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child of this test; no memory is touched.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

pub fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    testkit::wait(child, LIMIT)
}
