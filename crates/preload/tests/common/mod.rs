//! What the shim's tests share: a fresh image and a tmpfs twin directory in
//! /dev/shm (removed on drop), the built shim, and runs of unmodified programs under
//! it with a watchdog.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long one program may run before it is killed and the test fails.
pub const LIMIT: Duration = Duration::from_secs(120);

pub use testkit::need;

/// The shim this test's build made: beside the test binary.
pub fn shim() -> PathBuf {
    testkit::preload_shim()
}

/// A scratch world: `dir` in /dev/shm holding the image `img` and the twin tmpfs
/// directory `ref`; `mount` is the prefix the shim serves the image at (a path the
/// kernel does not have).
pub struct World {
    pub dir: PathBuf,
    pub img: PathBuf,
    pub reference: PathBuf,
    pub mount: String,
}

impl World {
    /// A fresh world with a formatted image of `mib` MiB.
    pub fn new(tag: &str, mib: u64) -> World {
        let pid = std::process::id();
        let dir = PathBuf::from(format!("/dev/shm/easyio-preload-{tag}-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ref")).unwrap();
        let img = dir.join("img");
        let region = pmem::Region::create(&img, mib << 20).unwrap();
        fs::FileSystem::format(&region, &fs::FormatOptions::default()).unwrap();
        drop(region);
        World {
            reference: dir.join("ref"),
            img,
            mount: format!("/easyio-test-{tag}-{pid}"),
            dir,
        }
    }

    /// `program args` under the shim, `{R}` in an argument standing for the mount.
    pub fn shim_cmd(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args.iter().map(|a| a.replace("{R}", &self.mount)))
            .env("LD_PRELOAD", shim())
            .env("EASYIO_IMAGE", &self.img)
            .env("EASYIO_MOUNT", &self.mount)
            .env("LC_ALL", "C")
            .env("TZ", "UTC");
        c
    }

    /// [`World::shim_cmd`] with the image mounted in the process alone
    /// (`EASYIO_PRIVATE=1`): no server; children and other processes get EBUSY.
    pub fn private_cmd(&self, program: &str, args: &[&str]) -> Command {
        let mut c = self.shim_cmd(program, args);
        c.env("EASYIO_PRIVATE", "1");
        c
    }

    /// The same program on the tmpfs twin, without the shim.
    pub fn ref_cmd(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(
            args.iter()
                .map(|a| a.replace("{R}", self.reference.to_str().unwrap())),
        )
        .env_remove("LD_PRELOAD")
        .env("LC_ALL", "C")
        .env("TZ", "UTC");
        c
    }

    /// Runs `program args` on both sides; fails unless both exit alike and print
    /// the same (each side's root written `{R}`). Returns the common stdout.
    pub fn same(&self, program: &str, args: &[&str]) -> String {
        self.same_in(program, args, None)
    }

    /// [`World::same`] from a working directory (`{R}` allowed) of each side.
    pub fn same_in(&self, program: &str, args: &[&str], cwd: Option<&str>) -> String {
        let mut a = self.shim_cmd(program, args);
        let mut b = self.ref_cmd(program, args);
        if let Some(d) = cwd {
            a.current_dir(d.replace("{R}", &self.reference_parent_for_shim()));
            b.current_dir(d.replace("{R}", self.reference.to_str().unwrap()));
        }
        let (x, y) = (run(&mut a), run(&mut b));
        let norm = |o: &Output, root: &str| {
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).replace(root, "{R}"),
                String::from_utf8_lossy(&o.stderr).replace(root, "{R}"),
            )
        };
        let xs = norm(&x, &self.mount);
        let ys = norm(&y, self.reference.to_str().unwrap());
        assert_eq!(
            (xs.0, &xs.1),
            (ys.0, &ys.1),
            "{program} {args:?}: under the shim (left) and on tmpfs (right) differ\nshim stderr: {}\ntmpfs stderr: {}",
            xs.2,
            ys.2
        );
        xs.1
    }

    /// [`World::same`] where the order of the lines does not matter (a directory's
    /// entries come in cookie order on easyio, in creation order on tmpfs).
    pub fn same_sorted(&self, program: &str, args: &[&str]) {
        let mut a = self.shim_cmd(program, args);
        let mut b = self.ref_cmd(program, args);
        let (x, y) = (run(&mut a), run(&mut b));
        let lines = |o: &Output, root: &str| {
            let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
                .replace(root, "{R}")
                .lines()
                .map(str::to_owned)
                .collect();
            v.sort();
            (o.status.code(), v)
        };
        assert_eq!(
            lines(&x, &self.mount),
            lines(&y, self.reference.to_str().unwrap()),
            "{program} {args:?}: under the shim (left) and on tmpfs (right) differ\nshim stderr: {}",
            String::from_utf8_lossy(&x.stderr)
        );
    }

    fn reference_parent_for_shim(&self) -> String {
        self.mount.clone()
    }

    /// Runs under the shim and fails unless it exits 0; returns stdout.
    pub fn ok(&self, program: &str, args: &[&str]) -> String {
        ok(&mut self.shim_cmd(program, args))
    }

    /// Every file of both trees, with kind, mode, size (files) and contents digest,
    /// as a shimmed Python sees the mount and a plain one the twin: equal or fail.
    pub fn same_tree(&self) {
        let script = r#"
import hashlib, os, stat, sys
root = sys.argv[1]
for d, dirs, files in sorted(os.walk(root)):
    dirs.sort()
    for n in sorted(dirs + files):
        p = os.path.join(d, n)
        st = os.lstat(p)
        rel = os.path.relpath(p, root)
        if stat.S_ISREG(st.st_mode):
            h = hashlib.sha256(open(p, 'rb').read()).hexdigest()
            print(rel, oct(st.st_mode), st.st_nlink, st.st_size, h)
        elif stat.S_ISLNK(st.st_mode):
            print(rel, 'link', os.readlink(p))
        else:
            print(rel, oct(st.st_mode), st.st_nlink)
"#;
        self.same("python3", &["-c", script, "{R}"]);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[allow(unused_imports)]
pub use testkit::Running;

/// Runs `cmd` to completion within [`LIMIT`] ([`testkit::run`]).
pub fn run(cmd: &mut Command) -> Output {
    testkit::run(cmd, LIMIT)
}

/// Runs `cmd` within [`LIMIT`], failing with its output unless it exits with 0;
/// returns its stdout.
pub fn ok(cmd: &mut Command) -> String {
    testkit::run_ok(cmd, LIMIT)
}

/// The contents of `path` (from the image root) read with the file system itself,
/// not through the shim: proof that the programs wrote to the image.
pub fn read_image(img: &Path, path: &str) -> Vec<u8> {
    let region = open_when_free(img);
    let (fs, _) =
        fs::FileSystem::mount(std::sync::Arc::new(region), fs::MountOptions::default()).unwrap();
    let fd = fs.open(path, fs::OpenFlags::RDONLY, 0).unwrap();
    let size = fs.fstat(fd).unwrap().size as usize;
    let mut buf = vec![0; size];
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), size);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    buf
}

/// Writes a file on the host (input of the programs).
pub fn host_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Checks the image as `easyio fsck` does: no problems, and cleanly unmounted (every
/// shimmed program has exited, each unmounting at exit).
pub fn fsck_clean(img: &Path) {
    drop(open_when_free(img));
    let region = pmem::Region::open_read_only(img).unwrap();
    let report = fs::fsck::check(&region).unwrap();
    assert!(report.ok(), "fsck of {}: {report:?}", img.display());
    assert!(
        report.clean_unmount,
        "{} was not cleanly unmounted: {report:?}",
        img.display()
    );
}

/// How long the server the shim started on demand may take to end after its last
/// client (it lingers a moment for the next command, then unmounts).
pub const SERVER_END: Duration = Duration::from_secs(10);

/// The image opened for writing once whoever held it (the shim's on-demand server,
/// ending after its last client) has let it go.
pub fn open_when_free(img: &Path) -> pmem::Region {
    let start = Instant::now();
    loop {
        match pmem::Region::open(img) {
            Err(pmem::Error::Busy { .. }) if start.elapsed() < SERVER_END => {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r.unwrap(),
        }
    }
}

/// A server of a world's image on a thread of the test (`EASYIO_SERVER` runs).
pub struct Served {
    pub socket: PathBuf,
    thread: std::thread::JoinHandle<easyio_serve::Result<std::sync::Arc<fs::FileSystem>>>,
}

/// Serves the world's image on `w.dir/sock` until `stop` says so.
pub fn serve(w: &World, stop: fn() -> bool) -> Served {
    let region = open_when_free(&w.img);
    let (fs, _) =
        fs::FileSystem::mount(std::sync::Arc::new(region), fs::MountOptions::default()).unwrap();
    let socket = w.dir.join("sock");
    let server =
        easyio_serve::Server::bind(std::sync::Arc::new(fs), &w.img, &socket, false, true).unwrap();
    Served {
        socket,
        thread: std::thread::spawn(move || server.run(stop)),
    }
}

impl Served {
    /// Joins the server (after `stop` said so), unmounts the image and checks it.
    pub fn end(self, w: &World) {
        let fs = self.thread.join().unwrap().unwrap();
        std::sync::Arc::try_unwrap(fs)
            .ok()
            .expect("the server holds the file system no more")
            .unmount()
            .unwrap();
        fsck_clean(&w.img);
    }
}

/// Builds `tests/c/NAME.c` (with `-ldl`) into the world's directory.
pub fn build_c(w: &World, name: &str) -> PathBuf {
    need("cc", "gcc");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = w.dir.join(name);
    ok(Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-ldl"));
    exe
}
