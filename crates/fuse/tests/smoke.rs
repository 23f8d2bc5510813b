//! The server through the library on a real mount: calls of this process through the
//! kernel, the kernel's lookup counts given back at `forget`, and a clean unmount.
//! A watchdog kills the mount if a test hangs; a guard unmounts however it ends.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use easyio_fuse::{unmount, Flushes, HandlerStats, Invalidator, LookupCounts, Mount, Options};
use fs::{FileSystem, FormatOptions, MountOptions};
use pmem::{Pmem, Region};
use testkit::Watchdog;

/// Longest a test's mount may live before the watchdog unmounts it.
const LIMIT: Duration = Duration::from_secs(60);

/// A mounted image served by a thread of this process.
struct Served {
    fs: Option<Arc<FileSystem>>,
    dir: PathBuf,
    lookups: LookupCounts,
    handlers: Option<HandlerStats>,
    inval: Arc<Invalidator>,
    flushes: Flushes,
    /// The mount's line on the kernel's dirty-page limit (writeback cache only).
    dirty_limit: Option<String>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    watchdog: Watchdog,
}

impl Served {
    fn new(name: &str) -> Option<Served> {
        Served::with(name, MountOptions::default(), &Options::default())
    }

    /// A mount of a fresh image in the file system mode and with the options given.
    fn with(name: &str, fs_opts: MountOptions, opts: &Options) -> Option<Served> {
        if testkit::fuse_missing() {
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
        let inval = m.invalidator();
        let flushes = m.flushes();
        let dirty_limit = m.dirty_limit().map(String::from);
        let thread = Some(std::thread::spawn(move || m.run()));
        let d = dir.clone();
        let watchdog = Watchdog::arm(LIMIT, format!("unmounting {}", dir.display()), move || {
            let _ = unmount(&d, true);
        });
        Some(Served {
            fs: Some(fs),
            dir,
            lookups,
            handlers,
            inval,
            flushes,
            dirty_limit,
            thread,
            watchdog,
        })
    }

    /// Unmounts, waits for the server, and hands back the file system.
    fn finish(mut self) -> FileSystem {
        // A sibling test of this process that spawns a program forks it with a copy of
        // this process's mappings of files on the mount, which keep the mount busy until
        // the child execs: that is EBUSY for a moment, not a leak.
        let mut tries = 0;
        while let Err(e) = unmount(&self.dir, false) {
            tries += 1;
            assert!(
                e.raw_os_error() == Some(libc::EBUSY) && tries < 200,
                "unmount: {e}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.thread.take().unwrap().join().unwrap().unwrap();
        let fs = self.fs.take().unwrap();
        Arc::try_unwrap(fs)
            .ok()
            .expect("the server dropped its reference")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.watchdog.disarm();
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

/// `stat` of `p` through the mount: its size and permission bits, or the errno.
fn size_and_mode(p: &Path) -> Result<(u64, u32), i32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| (m.len(), m.permissions().mode() & 0o7777))
        .map_err(|e| e.raw_os_error().unwrap())
}

#[test]
fn changes_through_the_library_are_seen_through_the_mount_at_once() {
    library_changes_seen("inval", &Options::default());
}

#[test]
fn changes_through_the_library_are_seen_without_the_page_cache() {
    let opts = Options {
        page_cache: false,
        ..Options::default()
    };
    library_changes_seen("inval-direct", &opts);
}

/// 64 KiB of `fill`, but for `b"through"` at 8 KiB.
fn pages(fill: u8) -> Vec<u8> {
    let mut v = vec![fill; 64 << 10];
    v[8192..8199].copy_from_slice(b"through");
    v
}

#[test]
fn bytes_the_kernel_keeps_are_replaced_by_a_librarys_overwrite_at_once() {
    // A file read through the mount, so its pages are in the kernel's cache, then
    // overwritten in place through the library (same size, same times to the second:
    // nothing but the pages tells), and read again through the mount at once: through
    // a handle opened before the change and through a new one.
    let Some(s) = Served::new("pages") else {
        return;
    };
    let fs = s.fs.clone().unwrap();
    let p = s.dir.join("kept");
    std::fs::write(&p, pages(b'a')).unwrap();
    let held = std::fs::File::open(&p).unwrap();
    for _ in 0..3 {
        assert_eq!(std::fs::read(&p).unwrap(), pages(b'a'));
    }
    for round in 0..20u8 {
        let fill = b'b' + round;
        let f = fs.open("/kept", fs::OpenFlags::WRONLY, 0).unwrap();
        assert_eq!(fs.pwrite(f, &pages(fill), 0).unwrap(), 64 << 10);
        fs.close(f).unwrap();
        fs.settle_changes();
        let mut got = vec![0; 64 << 10];
        assert_eq!(read_at(&held, &mut got, 0), 64 << 10);
        assert!(got == pages(fill), "round {round}: the held handle's read");
        assert_eq!(std::fs::read(&p).unwrap(), pages(fill), "round {round}");
        // Cached again for the next round.
        assert_eq!(std::fs::read(&p).unwrap(), pages(fill));
    }
    drop((held, fs));
    s.finish().unmount().unwrap();
}

#[test]
fn an_append_through_the_mount_after_the_librarys_lands_after_it_in_every_view() {
    // The kernel places an appending write at the size it holds, the file system at
    // the file's end: when the library appended in between, the pages the kernel kept
    // of what it wrote are dropped.
    let Some(s) = Served::new("append") else {
        return;
    };
    let fs = s.fs.clone().unwrap();
    let p = s.dir.join("log");
    std::fs::write(&p, b"one\n").unwrap();
    let mut log = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    let mut want = b"one\n".to_vec();
    for round in 0..10u8 {
        assert!(std::fs::read(&p).unwrap() == want, "round {round}");
        let f = fs
            .open("/log", fs::OpenFlags::WRONLY | fs::OpenFlags::APPEND, 0)
            .unwrap();
        fs.write(f, b"library\n").unwrap();
        fs.close(f).unwrap();
        fs.settle_changes();
        // Long enough to fill whole pages, which the kernel then keeps.
        let line: Vec<u8> = (0..9000u32)
            .map(|i| b'a' + (i % 23) as u8 + round)
            .collect();
        log.write_all(&line).unwrap();
        want.extend_from_slice(b"library\n");
        want.extend_from_slice(&line);
        assert!(std::fs::read(&p).unwrap() == want, "round {round}");
    }
    drop((log, fs));
    s.finish().unmount().unwrap();
}

/// `pread` of `f` at `off` into `buf`, the bytes read.
fn read_at(f: &std::fs::File, buf: &mut [u8], off: u64) -> usize {
    use std::os::unix::fs::FileExt;
    f.read_at(buf, off).unwrap()
}

#[test]
fn a_shared_writable_mapping_of_a_file_on_the_mount_writes_to_the_image() {
    use std::os::fd::AsRawFd;
    let Some(s) = Served::new("mmap") else {
        return;
    };
    let fs = s.fs.clone().unwrap();
    // A handle `open` gave (served through the page cache) and one `create` gave
    // (served straight to the server).
    std::fs::write(s.dir.join("opened"), vec![0u8; 16384]).unwrap();
    for (name, create) in [("opened", false), ("created", true)] {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(create)
            .open(s.dir.join(name))
            .unwrap();
        file.set_len(16384).unwrap();
        let lib = format!("/{name}");
        let len = 16384;
        // SAFETY: a fresh shared mapping of `len` bytes of an open file, unmapped below
        // and used only in between.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        // SAFETY: `at` maps `len` bytes, readable and writable, until the munmap below.
        let map = unsafe { std::slice::from_raw_parts_mut(at as *mut u8, len) };
        map[4096..4101].copy_from_slice(b"mmap!");
        // SAFETY: the mapping made above.
        assert_eq!(unsafe { libc::msync(at, len, libc::MS_SYNC) }, 0);
        let mut got = [0u8; 5];
        let f = fs.open(&lib, fs::OpenFlags::RDONLY, 0).unwrap();
        assert_eq!(fs.pread(f, &mut got, 4096).unwrap(), 5);
        fs.close(f).unwrap();
        assert_eq!(&got, b"mmap!", "{name}: the mapping's store in the image");
        // A change through the library reaches the mapping at once.
        let f = fs.open(&lib, fs::OpenFlags::WRONLY, 0).unwrap();
        fs.pwrite(f, b"lib", 8192).unwrap();
        fs.close(f).unwrap();
        fs.settle_changes();
        let seen = map[8192..8195].to_vec();
        map[8192..8195].fill(0);
        // SAFETY: the mapping made above, not used after this. (Unmapped before the
        // check: a mapping left behind would keep the mount from ending.)
        assert_eq!(unsafe { libc::munmap(at, len) }, 0);
        assert_eq!(seen, b"lib", "{name}: the library's write in the mapping");
    }
    drop(fs);
    s.finish().unmount().unwrap();
}

/// Changes through the library, each seen through a mount with `opts` at once after
/// the kernel cached what they replace (and kept the file's pages, with the page cache).
fn library_changes_seen(name: &str, opts: &Options) {
    let Some(s) = Served::with(name, MountOptions::default(), opts) else {
        return;
    };
    let dir = s.dir.clone();
    let fs = s.fs.clone().unwrap();
    std::fs::write(dir.join("a"), b"one").unwrap();
    std::fs::write(dir.join("b"), b"bee").unwrap();
    std::fs::create_dir(dir.join("d")).unwrap();
    std::fs::write(dir.join("d/c"), b"sea").unwrap();
    // The kernel caches all of it: entries, attributes, a negative entry, a listing.
    for _ in 0..2 {
        assert_eq!(size_and_mode(&dir.join("a")), Ok((3, 0o644)));
        assert_eq!(std::fs::read(dir.join("a")).unwrap(), b"one");
        assert_eq!(size_and_mode(&dir.join("missing")), Err(libc::ENOENT));
        assert_eq!(size_and_mode(&dir.join("d/c")), Ok((3, 0o644)));
        assert!(std::fs::read_dir(dir.join("d")).unwrap().count() == 1);
    }
    let before = s.inval.stats();
    // The same changes through the library, from this thread (another door).
    let f = fs
        .open("/a", fs::OpenFlags::WRONLY | fs::OpenFlags::TRUNC, 0)
        .unwrap();
    fs.write(f, b"changed through the library").unwrap();
    fs.close(f).unwrap();
    let f = fs
        .open(
            "/missing",
            fs::OpenFlags::WRONLY | fs::OpenFlags::CREAT,
            0o640,
        )
        .unwrap();
    fs.close(f).unwrap();
    fs.unlink("/b").unwrap();
    fs.rename("/d/c", "/d/e").unwrap();
    fs.mkdir("/d/f", 0o755).unwrap();
    fs.settle_changes();
    // Seen through the mount on the next call.
    assert_eq!(size_and_mode(&dir.join("a")), Ok((27, 0o644)));
    assert_eq!(
        std::fs::read(dir.join("a")).unwrap(),
        b"changed through the library"
    );
    fs.chmod("/a", 0o600).unwrap();
    fs.settle_changes();
    assert_eq!(size_and_mode(&dir.join("a")), Ok((27, 0o600)));
    assert_eq!(size_and_mode(&dir.join("missing")), Ok((0, 0o640)));
    assert_eq!(size_and_mode(&dir.join("b")), Err(libc::ENOENT));
    assert_eq!(size_and_mode(&dir.join("d/c")), Err(libc::ENOENT));
    assert_eq!(size_and_mode(&dir.join("d/e")), Ok((3, 0o644)));
    let mut names: Vec<_> = std::fs::read_dir(dir.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["e", "f"]);
    let after = s.inval.stats();
    assert!(after.inodes > before.inodes && after.entries > before.entries);
    // Changes through the mount are the kernel's own: none is sent back to it.
    std::fs::write(dir.join("g"), b"through the mount").unwrap();
    std::fs::remove_file(dir.join("missing")).unwrap();
    std::fs::rename(dir.join("d/e"), dir.join("h")).unwrap();
    fs.settle_changes();
    assert_eq!(s.inval.stats(), after);
    drop(fs);
    s.finish().unmount().unwrap();
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
        testkit::skip("the forget half: /proc/sys/vm/drop_caches is not writable (not root)");
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

#[test]
fn changes_through_the_library_are_seen_with_the_writeback_cache() {
    let opts = Options {
        writeback_cache: true,
        ..Options::default()
    };
    library_changes_seen("inval-wb", &opts);
}

/// Files written through the mount in pieces and closed, each read back through the
/// library while still mounted: what `close` must have written to the server.
fn write_and_close_files(s: &Served, n: usize) {
    let fs = s.fs.clone().unwrap();
    for i in 0..n {
        let data: Vec<u8> = (0..10_000u32).map(|b| (b * 7 + i as u32) as u8).collect();
        let mut f = std::fs::File::create(s.dir.join(format!("f{i}"))).unwrap();
        for piece in data.chunks(3000) {
            f.write_all(piece).unwrap();
        }
        drop(f);
        let fd = fs
            .open(&format!("/f{i}"), fs::OpenFlags::RDONLY, 0)
            .unwrap();
        let mut got = vec![0; data.len() + 1];
        let n = fs.pread(fd, &mut got, 0).unwrap();
        fs.close(fd).unwrap();
        assert_eq!(&got[..n], &data[..], "file {i} after close");
    }
}

#[test]
fn the_kernel_sends_flush_once_with_the_writeback_cache_and_never_without() {
    // With the writeback cache `close` writes the dirty pages back, waits for them, and
    // then sends `FLUSH`; the server answers the first with ENOSYS, so the kernel sends
    // no more, and every closed file is still whole in the image at once.
    let opts = Options {
        writeback_cache: true,
        ..Options::default()
    };
    let Some(s) = Served::with("flush-wb", MountOptions::default(), &opts) else {
        return;
    };
    write_and_close_files(&s, 6);
    assert_eq!(
        s.flushes.count(),
        1,
        "FLUSH requests with the writeback cache"
    );
    s.finish().unmount().unwrap();
    // Without it, no `FLUSH` at all (`FOPEN_NOFLUSH`): every write reached the server
    // when it returned.
    let Some(s) = Served::new("flush-direct") else {
        return;
    };
    write_and_close_files(&s, 6);
    assert_eq!(
        s.flushes.count(),
        0,
        "FLUSH requests without the writeback cache"
    );
    s.finish().unmount().unwrap();
}

/// The knobs `strict_limit` and `max_ratio` of the kernel's backing device of the
/// mount on `dir` (its device number, from `/proc/self/mountinfo`), or `None` where
/// this kernel has no such knob.
fn dirty_knobs_of(dir: &Path) -> Option<(String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    let line = info
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(dir));
    let bdi = Path::new("/sys/class/bdi").join(line.unwrap().split(' ').nth(2).unwrap());
    let knob = |k| std::fs::read_to_string(bdi.join(k)).map(|v| v.trim().to_string());
    Some((knob("strict_limit").ok()?, knob("max_ratio").ok()?))
}

#[test]
fn the_writeback_cache_lifts_the_kernels_strict_dirty_limit_of_the_mount() {
    // Without the writeback cache nothing is changed: the kernel's limits of a FUSE
    // mount (1 % of the dirty limit, enforced strictly) stay.
    let Some(s) = Served::new("bdi-plain") else {
        return;
    };
    let Some(plain) = dirty_knobs_of(&s.dir) else {
        return testkit::skip("this kernel has no strict_limit knob in /sys/class/bdi");
    };
    assert_eq!(plain, ("1".to_string(), "1".to_string()));
    assert_eq!(s.dirty_limit, None);
    s.finish().unmount().unwrap();
    let opts = Options {
        writeback_cache: true,
        extra: easyio_fuse::parse_options("bdi_max_ratio=40"),
        ..Options::default()
    };
    let Some(s) = Served::with("bdi-wb", MountOptions::default(), &opts) else {
        return;
    };
    let line = s.dirty_limit.clone().expect("a line for the log");
    let knobs = dirty_knobs_of(&s.dir).unwrap();
    if rustix::process::geteuid().is_root() {
        assert_eq!(knobs, ("0".to_string(), "40".to_string()), "{line}");
        assert!(
            line.contains("relaxed to strict_limit 0, max_ratio 40"),
            "{line}"
        );
    } else {
        assert_eq!(knobs, plain, "{line}");
        assert!(line.contains("left as it is"), "{line}");
    }
    // Written and closed, every file is whole in the image at once.
    write_and_close_files(&s, 4);
    s.finish().unmount().unwrap();
}

/// The options of the mount on `dir`, as `/proc/self/mountinfo` lists them.
fn mount_options_of(dir: &Path) -> String {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(dir))
        .expect("the mount is listed");
    line.split(" - ").nth(1).unwrap().to_string()
}

#[test]
fn a_mount_only_root_reaches_is_checked_by_the_server_as_root_is_by_linux() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::getuid().is_root() {
        return testkit::skip("the mount is root's only when root makes it");
    }
    let Some(s) = Served::new("rootonly") else {
        return;
    };
    // No `default_permissions`: the kernel leaves every check to the server.
    assert!(!mount_options_of(&s.dir).contains("default_permissions"));
    let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    let (d, f) = (s.dir.join("closed"), s.dir.join("closed/f"));
    std::fs::create_dir(&d).unwrap();
    std::fs::write(&f, b"#!/bin/sh\nexit 0\n").unwrap();
    mode(&f, 0o444).unwrap();
    mode(&d, 0o000).unwrap();
    // Root searches, reads and writes whatever the mode bits say, as on any file system.
    assert_eq!(std::fs::read(&f).unwrap(), b"#!/bin/sh\nexit 0\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b"# more\n")
        .unwrap();
    let access = |p: &Path, how| rustix::fs::access(p, how).map_err(|e| e.raw_os_error());
    assert_eq!(access(&f, rustix::fs::Access::WRITE_OK), Ok(()));
    // But not execute a file without an `x` bit (the kernel checks it), nor may
    // `access` say it could.
    let run = std::process::Command::new(&f).status();
    assert_eq!(run.unwrap_err().raw_os_error(), Some(libc::EACCES));
    assert_eq!(access(&f, rustix::fs::Access::EXEC_OK), Err(libc::EACCES));
    mode(&f, 0o755).unwrap();
    assert!(std::process::Command::new(&f).status().unwrap().success());
    mode(&d, 0o755).unwrap();
    s.finish().unmount().unwrap();
}

/// Free inodes as `statfs` through the mount says, which the kernel never caches.
fn free_inodes(dir: &Path) -> u64 {
    rustix::fs::statvfs(dir).unwrap().f_ffree
}

#[test]
fn statfs_counts_inodes_made_and_freed_through_every_door() {
    let Some(s) = Served::new("statfs") else {
        return;
    };
    let fs = s.fs.clone().unwrap();
    let start = free_inodes(&s.dir);
    assert_eq!(start, fs.statfs().unwrap().ffree);
    for i in 0..10 {
        std::fs::write(s.dir.join(format!("m{i}")), b"x").unwrap();
    }
    std::fs::create_dir(s.dir.join("d")).unwrap();
    assert_eq!(free_inodes(&s.dir), start - 11);
    // Made and removed through the library: seen on the mount's next call.
    for i in 0..3 {
        let fd = fs
            .open(
                &format!("/l{i}"),
                fs::OpenFlags::WRONLY | fs::OpenFlags::CREAT,
                0o644,
            )
            .unwrap();
        fs.close(fd).unwrap();
    }
    assert_eq!(free_inodes(&s.dir), start - 14);
    fs.unlink("/l0").unwrap();
    for i in 0..5 {
        std::fs::remove_file(s.dir.join(format!("m{i}"))).unwrap();
    }
    assert_eq!(free_inodes(&s.dir), start - 8);
    // A file unlinked while open is freed at its last close.
    let open = std::fs::File::open(s.dir.join("m5")).unwrap();
    std::fs::remove_file(s.dir.join("m5")).unwrap();
    assert_eq!(free_inodes(&s.dir), start - 8);
    drop(open);
    let deadline = Instant::now() + Duration::from_secs(10);
    // The kernel sends `release` after `close` returns.
    while free_inodes(&s.dir) != start - 7 {
        assert!(Instant::now() < deadline, "the unlinked file was not freed");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(fs);
    let fs = s.finish();
    assert_eq!(fs.statfs().unwrap().ffree, start - 7);
    fs.unmount().unwrap();
}

#[test]
fn a_write_through_the_mount_removes_security_capability() {
    if !rustix::process::getuid().is_root() {
        return testkit::skip("setting security.capability needs CAP_SETFCAP");
    }
    let Some(s) = Served::new("killcap") else {
        return;
    };
    let f = s.dir.join("f");
    std::fs::write(&f, b"#!/bin/sh\n").unwrap();
    // `cap_net_raw=ep`, as `setcap` writes it (VFS_CAP_REVISION_2, effective).
    let mut cap = Vec::new();
    for word in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
        cap.extend_from_slice(&word.to_le_bytes());
    }
    let name = "security.capability";
    rustix::fs::setxattr(&f, name, &cap, rustix::fs::XattrFlags::empty()).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(rustix::fs::getxattr(&f, name, &mut buf).unwrap(), cap.len());
    std::fs::OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b"exit 0\n")
        .unwrap();
    let gone = rustix::fs::getxattr(&f, name, &mut buf).map_err(|e| e.raw_os_error());
    assert_eq!(gone, Err(libc::ENODATA));
    let fs = s.finish();
    let ino = fs.stat("/f").unwrap().ino;
    let left = fs.getxattr_ino(ino, name, &mut buf).map_err(|e| e.errno());
    assert_eq!(left, Err(libc::ENODATA));
    fs.unmount().unwrap();
}
