//! C programs built with `cc` against the freshly built library, installed by
//! `install.sh` into a temporary prefix and found through `pkg-config easyio`:
//! `examples/demo.c` (mount, write, uthreads overlapping asynchronous reads with
//! computation, unmount), the same demo linked with the static library, and
//! `tests/c/posix_compare.c` (each call's result and errno against the kernel's on
//! a tmpfs directory), also through a server; and a server's staging buffers handed
//! to the library's other calls. Every run has a watchdog; everything made is
//! removed on drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use easyio::*;
use testkit::need;
use testkit::run_ok as ok;

/// A scratch directory in /dev/shm, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = PathBuf::from(format!("/dev/shm/easyio-capi-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where this test's build put `libeasyio.so` and `libeasyio.a`: beside the test
/// binary (the library is built with all its crate types for the tests).
fn lib_dir() -> PathBuf {
    let dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    for f in ["libeasyio.so", "libeasyio.a"] {
        assert!(dir.join(f).exists(), "{f} not built in {}", dir.display());
    }
    dir
}

/// Installs into `prefix` with install.sh from this build's libraries; returns the
/// `PKG_CONFIG_PATH` to find it.
fn install(prefix: &Path) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    ok(
        Command::new("sh")
            .arg(crate_dir.join("install.sh"))
            .arg(prefix)
            .env("EASYIO_LIB_DIR", lib_dir()),
        Duration::from_secs(60),
    );
    prefix.join("lib/pkgconfig")
}

fn pkg_config(pc_path: &Path, args: &[&str]) -> Vec<String> {
    let out = ok(
        Command::new("pkg-config")
            .args(args)
            .arg("easyio")
            .env("PKG_CONFIG_PATH", pc_path),
        Duration::from_secs(10),
    );
    out.split_whitespace().map(str::to_owned).collect()
}

/// Compiles `source` into `exe` with `flags`.
fn cc(source: &Path, exe: &Path, flags: &[String]) {
    ok(
        Command::new("cc")
            .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1"])
            .arg(source)
            .arg("-o")
            .arg(exe)
            .args(flags),
        Duration::from_secs(120),
    );
}

#[test]
fn demo_builds_with_pkg_config_and_runs() {
    need("cc", "gcc");
    need("pkg-config", "pkg-config");
    let s = Scratch::new("demo");
    let pc = install(&s.0.join("prefix"));
    let version = pkg_config(&pc, &["--modversion"]);
    assert_eq!(version, [env!("CARGO_PKG_VERSION")]);
    let mut flags = pkg_config(&pc, &["--cflags"]);
    flags.extend(pkg_config(&pc, &["--libs"]));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo.c");
    cc(&src, &s.0.join("demo"), &flags);
    let out = ok(
        Command::new(s.0.join("demo"))
            .arg(s.0.join("demo.img"))
            .env("LD_LIBRARY_PATH", s.0.join("prefix/lib")),
        Duration::from_secs(120),
    );
    assert!(out.contains("demo: ok"), "{out}");

    // The same program linked with the static library runs without the shared one.
    let mut flags = pkg_config(&pc, &["--cflags"]);
    for f in pkg_config(&pc, &["--static", "--libs"]) {
        if f == "-leasyio" {
            flags.extend(["-Wl,-Bstatic", "-leasyio", "-Wl,-Bdynamic"].map(String::from));
        } else {
            flags.push(f);
        }
    }
    cc(&src, &s.0.join("demo-static"), &flags);
    std::fs::remove_file(s.0.join("prefix/lib/libeasyio.so")).unwrap();
    let out = ok(
        Command::new(s.0.join("demo-static")).arg(s.0.join("static.img")),
        Duration::from_secs(120),
    );
    assert!(out.contains("demo: ok"), "{out}");
}

#[test]
fn c_calls_answer_as_the_kernel_does() {
    let s = Scratch::new("posix");
    let out = posix_compare(&s, None);
    assert!(out.contains("each with the kernel's result"), "{out}");
}

/// The same calls through `easyio_connect` to a server (this test's thread) of the
/// image, mounted in `async` mode; the image is consistent after the server stops.
#[test]
fn c_calls_answer_as_the_kernel_does_through_a_server() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let s = Scratch::new("posix-served");
    // In `async` mode: writes from staging buffers submitted through the server
    // complete while the engine's copies run.
    let options = fs::MountOptions {
        mode: fs::Mode::Async,
        ..fs::MountOptions::default()
    };
    let served = Served::start(&s, options, || STOP.load(Ordering::SeqCst));
    let out = posix_compare(&s, Some(&served.socket));
    assert!(out.contains("each with the kernel's result"), "{out}");
    STOP.store(true, Ordering::SeqCst);
    served.stop();
}

/// Buffers of `easyio_buffer_alloc` on a server's connection (staging buffers, which
/// the server maps too) handed to calls other than the connection's data calls: the
/// library copies them through raw pointers and never refers to them, so each call
/// answers as with plain memory; a path inside one is EINVAL.
#[test]
fn staging_buffers_given_to_other_calls_are_copied_and_paths_in_them_refused() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let s = Scratch::new("staging");
    let served = Served::start(&s, fs::MountOptions::default(), || {
        STOP.load(Ordering::SeqCst)
    });
    let remote = easyio_connect(c(served.socket.to_str().unwrap()).as_ptr());
    assert!(!remote.is_null());
    let here_path = c(s.0.join("here.img").to_str().unwrap());
    assert_eq!(easyio_mkfs(here_path.as_ptr(), 16 << 20), 0);
    let here = easyio_mount(here_path.as_ptr(), std::ptr::null());
    assert!(!here.is_null());
    let b = easyio_buffer_alloc(remote, 8192).cast::<u8>();
    assert!(!b.is_null());
    let data: Vec<u8> = (0..100u8).collect();
    let (name, back) = (b.wrapping_add(4096), b.wrapping_add(1000));
    // SAFETY: inside the buffer (8192 bytes), which only this thread uses.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), b, data.len());
        std::ptr::copy_nonoverlapping(c"f".as_ptr().cast(), name, 2);
    }
    // A path inside the buffer: EINVAL, on either handle.
    for fs in [remote, here] {
        let fd = easyio_open(fs, name.cast(), libc::O_CREAT | libc::O_RDWR, 0o644);
        assert_eq!((fd, errno::errno().0), (-1, libc::EINVAL));
    }
    let got = |n: usize| {
        let mut v = vec![0u8; n];
        // SAFETY: inside the buffer, as above.
        unsafe { std::ptr::copy_nonoverlapping(back, v.as_mut_ptr(), n) };
        v
    };
    // The data calls of another handle (an image mounted here), a stat and a
    // submitted read, given the buffer: through a private copy.
    let fd = easyio_open(here, c("f").as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o644);
    assert_eq!(easyio_pwrite(here, fd, b.cast(), 100, 0), 100);
    assert_eq!(easyio_pread(here, fd, back.cast(), 100, 0), 100);
    assert_eq!(got(100), data);
    let st = b.wrapping_add(2048).cast::<libc::stat>();
    assert_eq!(easyio_fstat(here, fd, st), 0);
    // SAFETY: the stat just written there, read through a raw pointer.
    assert_eq!(unsafe { std::ptr::read_unaligned(st) }.st_size, 100);
    let id = easyio_submit_pread(here, fd, back.cast(), 50, 10);
    let mut done = easyio_completion::default();
    assert_eq!(easyio_wait(here, id as u64, &mut done), 0, "request {id}");
    assert_eq!((done.res, got(50)), (50, data[10..60].to_vec()));
    assert_eq!(easyio_close(here, fd), 0);
    // The connection's own data calls take the buffer by its address.
    let fd = easyio_open(remote, c("g").as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o644);
    assert_eq!(easyio_pwrite(remote, fd, b.cast(), 100, 0), 100);
    assert_eq!(easyio_pread(remote, fd, back.cast(), 100, 0), 100);
    assert_eq!(got(100), data);
    assert_eq!(easyio_close(remote, fd), 0);
    assert_eq!(easyio_buffer_free(remote, b.cast()), 0);
    assert_eq!(easyio_unmount(here), 0);
    assert_eq!(easyio_unmount(remote), 0);
    STOP.store(true, Ordering::SeqCst);
    served.stop();
}

fn c(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap()
}

/// A server (a thread of this test) of a new image in a scratch directory.
struct Served {
    img: PathBuf,
    socket: PathBuf,
    thread: std::thread::JoinHandle<easyio_serve::Result<Arc<fs::FileSystem>>>,
}

impl Served {
    /// Serves a new image in `s`, mounted with `options`, until `stop` says so.
    fn start(s: &Scratch, options: fs::MountOptions, stop: fn() -> bool) -> Served {
        let img = s.0.join("served.img");
        let region = pmem::Region::create(&img, 16 << 20).unwrap();
        fs::FileSystem::format(&region, &fs::FormatOptions::default()).unwrap();
        let (fs, _) = fs::FileSystem::mount(Arc::new(region), options).unwrap();
        let socket = s.0.join("sock");
        let server = easyio_serve::Server::bind(Arc::new(fs), &img, &socket, false, true).unwrap();
        let thread = std::thread::spawn(move || server.run(stop));
        Served {
            img,
            socket,
            thread,
        }
    }

    /// Waits for the server (told to stop) and checks the image it leaves.
    fn stop(self) {
        let fs = self.thread.join().unwrap().unwrap();
        let fs = Arc::try_unwrap(fs)
            .ok()
            .expect("the server let the file system go");
        fs.unmount().unwrap();
        let report = fs::fsck::check(&pmem::Region::open(&self.img).unwrap()).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}

/// Builds `tests/c/posix_compare.c` against the installed library and runs it (on
/// a new image, or through the server on `socket`); its output.
fn posix_compare(s: &Scratch, socket: Option<&Path>) -> String {
    need("cc", "gcc");
    need("pkg-config", "pkg-config");
    let pc = install(&s.0.join("prefix"));
    let mut flags = pkg_config(&pc, &["--cflags"]);
    flags.extend(pkg_config(&pc, &["--libs"]));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/posix_compare.c");
    cc(&src, &s.0.join("posix_compare"), &flags);
    let kernel_dir = s.0.join("kernel");
    std::fs::create_dir(&kernel_dir).unwrap();
    let mut cmd = Command::new(s.0.join("posix_compare"));
    // The library just installed, not another build's that `cargo test`'s
    // LD_LIBRARY_PATH may name first.
    cmd.env("LD_LIBRARY_PATH", s.0.join("prefix/lib"));
    cmd.arg(s.0.join("posix.img")).arg(&kernel_dir).args(socket);
    ok(&mut cmd, Duration::from_secs(120))
}
