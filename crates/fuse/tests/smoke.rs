//! The server through the library on a real mount: calls of this process through the
//! kernel, the kernel's lookup counts given back at `forget`, and a clean unmount.
//! A watchdog kills the mount if a test hangs; a guard unmounts however it ends.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use easyio_fuse::{unmount, HandlerStats, LookupCounts, Mount, Options};
use fs::{FileSystem, FormatOptions, MountOptions};
use pmem::{Pmem, Region};

/// Longest a test's mount may live before the watchdog unmounts it.
const LIMIT: Duration = Duration::from_secs(60);

/// A mounted image served by a thread of this process.
struct Served {
    fs: Option<Arc<FileSystem>>,
    dir: PathBuf,
    lookups: LookupCounts,
    handlers: Option<HandlerStats>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    done: Arc<AtomicBool>,
}

impl Served {
    fn new(name: &str) -> Option<Served> {
        Served::with(name, MountOptions::default(), &Options::default())
    }

    /// A mount of a fresh image in the file system mode and with the options given.
    fn with(name: &str, fs_opts: MountOptions, opts: &Options) -> Option<Served> {
        if !Path::new("/dev/fuse").exists() {
            eprintln!("skipped: no /dev/fuse on this machine");
            return None;
        }
        let region = Region::create_temp(64 << 20).unwrap();
        FileSystem::format(&region, &FormatOptions::default()).unwrap();
        let pm: Arc<dyn Pmem> = Arc::new(region);
        let fs = Arc::new(FileSystem::mount(pm, fs_opts).unwrap().0);
        let dir = std::env::temp_dir().join(format!("easyio-fuse-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = Mount::new(fs.clone(), &dir, opts).unwrap();
        let lookups = m.lookups();
        let handlers = m.handler_stats();
        let thread = Some(std::thread::spawn(move || m.run()));
        let done = Arc::new(AtomicBool::new(false));
        let (d, stop) = (dir.clone(), done.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if t0.elapsed() > LIMIT {
                    eprintln!("watchdog: unmounting {} after {LIMIT:?}", d.display());
                    let _ = unmount(&d, true);
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Some(Served {
            fs: Some(fs),
            dir,
            lookups,
            handlers,
            thread,
            done,
        })
    }

    /// Unmounts, waits for the server, and hands back the file system.
    fn finish(mut self) -> FileSystem {
        unmount(&self.dir, false).unwrap();
        self.thread.take().unwrap().join().unwrap().unwrap();
        let fs = self.fs.take().unwrap();
        Arc::try_unwrap(fs)
            .ok()
            .expect("the server dropped its reference")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = unmount(&self.dir, true);
            let _ = t.join();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn basic_calls_through_a_mount() {
    let Some(s) = Served::new("basic") else {
        return;
    };
    let dir = s.dir.clone();
    let p = dir.join("a");
    std::fs::write(&p, b"hello world").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"hello world");
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"!").unwrap();
    drop(f);
    let mut f = std::fs::File::open(&p).unwrap();
    f.seek(SeekFrom::Start(6)).unwrap();
    let mut s2 = String::new();
    f.read_to_string(&mut s2).unwrap();
    assert_eq!(s2, "world!");
    std::fs::create_dir(dir.join("d")).unwrap();
    std::fs::rename(&p, dir.join("d/b")).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["b"]);
    // The handle stays valid across the rename.
    f.seek(SeekFrom::Start(0)).unwrap();
    s2.clear();
    f.read_to_string(&mut s2).unwrap();
    assert_eq!(s2, "hello world!");
    drop(f);
    let fs = s.finish();
    assert_eq!(fs.stat("/d/b").unwrap().size, 12);
    fs.unmount().unwrap();
}

#[test]
fn lookups_are_given_back_at_forget() {
    let Some(s) = Served::new("forget") else {
        return;
    };
    const FILES: usize = 2000;
    std::fs::create_dir(s.dir.join("d")).unwrap();
    for i in 0..FILES {
        std::fs::write(s.dir.join(format!("d/f{i}")), b"x").unwrap();
    }
    for i in 0..FILES {
        std::fs::metadata(s.dir.join(format!("d/f{i}"))).unwrap();
    }
    let held = s.lookups.inodes();
    assert!(
        held > FILES / 2,
        "the kernel holds {held} inodes after {FILES} lookups"
    );
    // The kernel forgets the inodes it no longer caches: make it drop them all.
    if std::fs::write("/proc/sys/vm/drop_caches", "2").is_err() {
        eprintln!("skipped the forget half: /proc/sys/vm/drop_caches is not writable (not root)");
        return;
    }
    let t0 = Instant::now();
    while s.lookups.inodes() > 10 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{} inodes still looked up after the kernel dropped its caches",
            s.lookups.inodes()
        );
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "2");
        std::thread::sleep(Duration::from_millis(100));
    }
    s.finish().unmount().unwrap();
}

#[test]
fn async_mode_handlers_run_as_uthreads_that_wait_for_their_copies() {
    let opts = Options {
        threads: 2,
        uthread_workers: 2,
        ..Options::default()
    };
    let fs_opts = MountOptions::with_mode(fs::Mode::Async);
    let Some(s) = Served::with("uthreads", fs_opts, &opts) else {
        return;
    };
    let handlers = s.handlers.clone().expect("handlers as uthreads");
    // 16 files of 1 MiB written then read back by 4 threads at once (each open drops
    // the kernel's cached pages, so the reads reach the server).
    let data = |i: usize| -> Vec<u8> { (0..1 << 20).map(|b| (b * 31 + i * 7) as u8).collect() };
    std::thread::scope(|sc| {
        for t in 0..4 {
            let dir = &s.dir;
            sc.spawn(move || {
                for i in (t..16).step_by(4) {
                    let p = dir.join(format!("f{i}"));
                    std::fs::write(&p, data(i)).unwrap();
                    let f = std::fs::File::open(&p).unwrap();
                    f.sync_all().unwrap();
                    assert!(
                        std::fs::read(&p).unwrap() == data(i),
                        "f{i} read back wrong"
                    );
                }
            });
        }
    });
    let fs = s.finish();
    // Each file: at least one write, one fsync and one read, each a uthread.
    assert!(handlers.requests() >= 48, "{}", handlers.summary());
    assert_eq!(handlers.workers(), 2);
    assert!(handlers.copy_waits() > 0, "{}", handlers.summary());
    fs.unmount().unwrap();
}
