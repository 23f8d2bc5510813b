//! A user who is not root mounts an image with `easyio mount`, where `/dev/fuse` lets
//! every user open it (mode 0666) and `fusermount3` is setuid root (Debian's fuse3),
//! as most distributions ship them: the mount(2) that only root may make is then done
//! by `fusermount3`, which hands the opened device back.
//!
//! The test makes the device mode 0666 for its run (restored after, however it ends),
//! and runs everything as the unprivileged uid and gid 65534 (`nobody`) through
//! `setpriv`: `mkfs`, `mount`, programs writing and reading files on the mount,
//! `umount`; then, as root, the image holds what they wrote. It needs root (to change
//! the device and to become another user), /dev/fuse, a setuid `fusermount3` and
//! `setpriv`: without one it says so and is skipped, and fails when `CI` is set.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const EASYIO: &str = env!("CARGO_BIN_EXE_easyio");
/// The unprivileged user and group the mount runs as.
const NOBODY: u32 = 65534;

/// Why this test cannot run here, if it cannot.
fn missing() -> Option<String> {
    // `/proc/self` belongs to the effective uid.
    if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
        return Some("not root: cannot make /dev/fuse 0666 nor run as another user".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse (load the fuse module)".into());
    }
    if !on_path("setpriv") {
        return Some("no setpriv (Debian package util-linux)".into());
    }
    let Some(fm) = which("fusermount3") else {
        return Some("no fusermount3 (Debian package fuse3)".into());
    };
    let m = std::fs::metadata(&fm).ok()?;
    if m.uid() != 0 || m.mode() & 0o4000 == 0 {
        return Some(format!("{} is not setuid root", fm.display()));
    }
    None
}

fn on_path(prog: &str) -> bool {
    which(prog).is_some()
}

fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// `/dev/fuse` at mode 0666 while this lives, then back at its mode before.
struct DeviceOpen {
    mode: u32,
}

impl DeviceOpen {
    fn new() -> DeviceOpen {
        let mode = std::fs::metadata("/dev/fuse").unwrap().mode() & 0o7777;
        set_mode(0o666);
        DeviceOpen { mode }
    }
}

impl Drop for DeviceOpen {
    fn drop(&mut self) {
        set_mode(self.mode);
    }
}

fn set_mode(mode: u32) {
    std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(mode))
        .expect("chmod /dev/fuse");
}

/// A directory owned by the unprivileged user, removed (and its mount point lazily
/// unmounted) on drop.
struct Scratch {
    dir: PathBuf,
    mountpoint: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if mounted_type(&self.mountpoint).is_some() {
            let _ = rustix::mount::unmount(&self.mountpoint, rustix::mount::UnmountFlags::DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The file system type mounted at `mp`, if any.
fn mounted_type(mp: &Path) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let mp = mp.to_str().unwrap();
    mounts.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(1) == Some(&mp)).then(|| f.get(2).unwrap_or(&"").to_string())
    })
}

/// Runs `args` as the unprivileged user, from `/`.
fn as_nobody(args: &[&str]) -> Output {
    let uid = format!("--reuid={NOBODY}");
    let gid = format!("--regid={NOBODY}");
    let t0 = Instant::now();
    loop {
        let out = Command::new("timeout")
            .args(["90", "setpriv", &uid, &gid, "--clear-groups", "--"])
            .args(args)
            .current_dir("/")
            .env("TMPDIR", "/tmp")
            .output()
            .expect("running setpriv");
        // The copy of the binary may still be open for writing in a child another
        // test forked meanwhile (until its exec): exec then fails with ETXTBSY.
        let busy = String::from_utf8_lossy(&out.stderr).contains("Text file busy");
        if !busy || t0.elapsed() > Duration::from_secs(10) {
            return out;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_user_who_is_not_root_mounts_writes_reads_and_unmounts() {
    if let Some(why) = missing() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the non-root mount test cannot run: {why}"
        );
        eprintln!("skipped: {why}");
        return;
    }
    let _device = DeviceOpen::new();
    let dir = PathBuf::from(format!("/dev/shm/easyio-nonroot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let s = Scratch {
        mountpoint: dir.join("mnt"),
        dir,
    };
    std::fs::create_dir(&s.mountpoint).unwrap();
    std::os::unix::fs::chown(&s.dir, Some(NOBODY), Some(NOBODY)).unwrap();
    std::os::unix::fs::chown(&s.mountpoint, Some(NOBODY), Some(NOBODY)).unwrap();
    // A copy of the binary the user may run, wherever the build tree lives.
    let bin = s.dir.join("easyio");
    std::fs::copy(EASYIO, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (bin, mp) = (bin.to_str().unwrap(), s.mountpoint.to_str().unwrap());
    let image = s.dir.join("easyio.img");
    let img = image.to_str().unwrap();

    ok(
        &as_nobody(&[bin, "mkfs", "--image", img, "--size", "64M"]),
        "mkfs",
    );
    let said = ok(&as_nobody(&[bin, "mount", img, mp]), "easyio mount");
    assert!(said.contains("mounted on"), "{said}");
    // Mounted by fusermount3, which names the type with the subtype.
    assert_eq!(mounted_type(&s.mountpoint).as_deref(), Some("fuse.easyio"));

    let program = which("setpriv").unwrap();
    let program = program.to_str().unwrap();
    let script = format!(
        "set -e; cd {mp}; echo hello > a; mkdir d; cp {program} d/copy; cmp {program} d/copy; \
         mv a d/b; cat d/b; stat -c '%u %g %a' d/b; ls d"
    );
    let out = ok(&as_nobody(&["sh", "-c", &script]), "programs on the mount");
    assert_eq!(out, format!("hello\n{NOBODY} {NOBODY} 644\nb\ncopy\n"));

    ok(&as_nobody(&[bin, "umount", mp]), "easyio umount");
    assert_eq!(mounted_type(&s.mountpoint), None, "still mounted");
    // The server has saved the image: root reads what the user wrote.
    let cat = Command::new(EASYIO)
        .args(["cat", "--image", img, "/d/b"])
        .output()
        .unwrap();
    assert_eq!(ok(&cat, "easyio cat as root"), "hello\n");
    let fsck = Command::new(EASYIO)
        .args(["fsck", "--image", img])
        .output()
        .unwrap();
    ok(&fsck, "fsck");
}
