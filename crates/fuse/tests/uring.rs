//! FUSE over io_uring on a real mount: the kernel's requests come through the rings
//! of the server's queues (one per CPU), and the file calls of this process give the
//! results they give through `/dev/fuse`. The kernel offers the transport only with
//! the `fuse` module's `enable_uring` on; as root, the tests turn it on for their
//! duration and put back what it was.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use easyio_fuse::{unmount, Mount, Options, TransportChoice};
use fs::{FileSystem, FormatOptions, MountOptions};
use pmem::{Pmem, Region};

/// The `fuse` module's switch.
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
/// Longest a test's mount may live before the watchdog unmounts it.
const LIMIT: Duration = Duration::from_secs(60);

/// The tests of this file take turns with the module's switch.
static SWITCH: Mutex<()> = Mutex::new(());

/// `enable_uring` on while it lives; what it was, back on drop.
struct UringOn(String);

impl UringOn {
    /// Turns the switch on, or says why the test cannot run (`None`).
    fn new() -> Option<UringOn> {
        if testkit::fuse_missing() || testkit::not_root("to turn on FUSE over io_uring") {
            return None;
        }
        let Ok(was) = std::fs::read_to_string(ENABLE_URING) else {
            testkit::skip(
                "the kernel has no FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING)",
            );
            return None;
        };
        std::fs::write(ENABLE_URING, "Y").unwrap();
        Some(UringOn(was.trim().to_string()))
    }
}

impl Drop for UringOn {
    fn drop(&mut self) {
        let _ = std::fs::write(ENABLE_URING, &self.0);
    }
}

/// Unmounts (lazily) on drop, however the test ends, and stops the watchdog.
struct Guard(PathBuf, Arc<AtomicBool>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.1.store(true, Ordering::SeqCst);
        let _ = unmount(&self.0, true);
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Mounts a fresh image with the io_uring transport and `opts`, runs the file calls
/// through it once the rings are ready, and checks they were served through them.
fn calls_through_the_ring(tag: &str, opts: Options) {
    let _turn = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_on) = UringOn::new() else {
        return;
    };
    let region = Region::create_temp(64 << 20).unwrap();
    FileSystem::format(&region, &FormatOptions::default()).unwrap();
    let pm: Arc<dyn Pmem> = Arc::new(region);
    let fs = Arc::new(FileSystem::mount(pm, MountOptions::default()).unwrap().0);
    let dir = std::env::temp_dir().join(format!("easyio-fuse-uring-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let opts = Options {
        transport: TransportChoice::Uring,
        ..opts
    };
    let m = Mount::new(fs.clone(), &dir, &opts).unwrap();
    assert!(m.transport().contains("io_uring"), "{}", m.transport());
    let stats = m
        .ring_stats()
        .expect("the kernel granted FUSE over io_uring");
    let server = std::thread::spawn(move || m.run());
    let done = Arc::new(AtomicBool::new(false));
    let guard = Guard(dir.clone(), done.clone());
    watchdog(&dir, done);
    let t0 = Instant::now();
    while !stats.ready() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the rings never got ready"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = stats.requests();
    file_calls(&dir);
    let served = stats.requests() - before;
    assert!(
        served >= 20,
        "only {served} requests came through the rings"
    );
    // The reads of the file written through the handle `create` gave (not through
    // the page cache) reached the server, whose handler read into the ring's buffer.
    assert!(
        stats.replies_in_place() > 0,
        "no read was answered from the ring's own buffer"
    );
    unmount(&dir, false).unwrap();
    server.join().unwrap().unwrap();
    drop(guard);
    let fs = Arc::try_unwrap(fs)
        .ok()
        .expect("the server dropped its reference");
    fs.unmount().unwrap();
}

/// Unmounts `dir` lazily if the test is not done within [`LIMIT`].
fn watchdog(dir: &Path, done: Arc<AtomicBool>) {
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        while !done.load(Ordering::SeqCst) {
            if t0.elapsed() > LIMIT {
                eprintln!("watchdog: unmounting {} after {LIMIT:?}", d.display());
                let _ = unmount(&d, true);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
}

/// `ls`, create, small and 1 MiB writes and reads (a write's data is read in place
/// from the ring's payload buffer), append, rename, unlink, `mkdir`, `rmdir`.
fn file_calls(dir: &Path) {
    std::fs::create_dir(dir.join("d")).unwrap();
    for i in 0..8 {
        std::fs::write(dir.join(format!("d/f{i}")), format!("file {i}")).unwrap();
    }
    let mut names: Vec<String> = std::fs::read_dir(dir.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, (0..8).map(|i| format!("f{i}")).collect::<Vec<_>>());
    for i in 0..8 {
        let got = std::fs::read_to_string(dir.join(format!("d/f{i}"))).unwrap();
        assert_eq!(got, format!("file {i}"));
    }
    let big = testkit::pattern(7, 3 << 20);
    let p = dir.join("big");
    let mut f = std::fs::File::create(&p).unwrap();
    for chunk in big.chunks(1 << 20) {
        f.write_all(chunk).unwrap();
    }
    f.write_all(b"tail").unwrap();
    drop(f);
    let mut back = Vec::new();
    std::fs::File::open(&p)
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back.len(), big.len() + 4);
    assert!(back[..big.len()] == big[..], "the data read back differs");
    let mut f = std::fs::File::open(&p).unwrap();
    f.seek(SeekFrom::Start((1 << 20) - 3)).unwrap();
    let mut six = [0u8; 6];
    f.read_exact(&mut six).unwrap();
    assert_eq!(six[..], big[(1 << 20) - 3..(1 << 20) + 3]);
    std::fs::rename(dir.join("d/f0"), dir.join("moved")).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("moved")).unwrap(),
        "file 0"
    );
    assert_eq!(
        std::fs::metadata(dir.join("d/f0")).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    for i in 1..8 {
        std::fs::remove_file(dir.join(format!("d/f{i}"))).unwrap();
    }
    std::fs::remove_dir(dir.join("d")).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), big.len() as u64 + 4);
}

#[test]
fn file_calls_through_the_ring() {
    calls_through_the_ring("sync", Options::default());
}

#[test]
fn file_calls_through_the_ring_with_uthread_handlers() {
    // Reads, writes and fsyncs answered later from the runtime's workers: their
    // replies are committed from other threads than the queue's.
    let opts = Options {
        uthread_workers: 2,
        ..Options::default()
    };
    calls_through_the_ring("uthreads", opts);
}
