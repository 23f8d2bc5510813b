//! Multithreaded stress: concurrent namespace and data operations in one shared
//! directory and in private ones, readers and writers on one shared file, then a clean
//! fsck and a remount that verifies everything that survived.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use fs::{Error, FileSystem, OpenFlags};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

const THREADS: usize = 4;
const RUN_FOR: Duration = Duration::from_millis(2500);
/// Far beyond any plausible run: reaching it means the workers are stuck.
const STUCK_AFTER: Duration = Duration::from_secs(90);
const PAGE: usize = 4096;
const HOT_PAGES: u64 = 16;
const SHARED_NAMES: u32 = 6;

/// A self-describing file: length, seed, then a pattern derived from both.
fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 16);
    v.extend_from_slice(&(len as u64).to_le_bytes());
    v.extend_from_slice(&seed.to_le_bytes());
    v.extend((0..len).map(|i| (seed as usize).wrapping_mul(131).wrapping_add(i * 7) as u8));
    v
}

fn check_content(what: &str, data: &[u8]) {
    assert!(
        data.len() >= 16,
        "{what}: {} bytes, shorter than its header",
        data.len()
    );
    let len = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
    let seed = u64::from_le_bytes(data[8..16].try_into().unwrap());
    assert!(
        data == content(seed, len),
        "{what}: torn or foreign content"
    );
}

/// One page of the hot file, stamped by (writer, seq) in every word.
fn hot_page(stamp: u64) -> Vec<u8> {
    (0..PAGE / 8)
        .flat_map(|i| (stamp ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes())
        .collect()
}

fn check_hot_page(what: &str, page: &[u8], seqs: &[AtomicU64]) {
    let stamp = u64::from_le_bytes(page[..8].try_into().unwrap());
    assert!(
        page == hot_page(stamp),
        "{what}: torn page (stamp {stamp:#x})"
    );
    let (writer, seq) = ((stamp >> 32) as usize, stamp & 0xFFFF_FFFF);
    assert!(writer < seqs.len(), "{what}: garbage stamp {stamp:#x}");
    assert!(
        seq <= seqs[writer].load(Ordering::SeqCst),
        "{what}: stamp {stamp:#x} never written"
    );
}

/// Errors a racing namespace operation may legitimately get.
fn expected(e: &Error) -> bool {
    matches!(
        e,
        Error::NotFound
            | Error::Exists
            | Error::NotEmpty
            | Error::IsDir
            | Error::NotDir
            | Error::Invalid(_)
    )
}

fn tolerate<T>(what: &str, r: fs::Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if expected(&e) => None,
        Err(e) => panic!("{what}: unexpected error {e}"),
    }
}

fn read_all(fs: &FileSystem, path: &str) -> fs::Result<Vec<u8>> {
    let fd = fs.open(path, OpenFlags::RDONLY, 0)?;
    let size = fs.fstat(fd)?.size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.pread(fd, &mut buf, 0);
    fs.close(fd)?;
    buf.truncate(n?);
    Ok(buf)
}

struct Shared {
    fs: FileSystem,
    stop: AtomicBool,
    /// Highest stamp sequence each writer has started writing (index THREADS: initial).
    seqs: Vec<AtomicU64>,
}

/// Private directory: the thread is the only one touching it and keeps an exact model.
fn private_op(s: &Shared, t: usize, rng: &mut Pcg64Mcg, model: &mut HashMap<String, Vec<u8>>) {
    let fs = &s.fs;
    let name = format!("/p{t}/f{}", rng.random_range(0..8));
    match rng.random_range(0..6) {
        0 | 1 => {
            let fd = fs
                .open(&name, OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
                .unwrap();
            let m = model.entry(name.clone()).or_default();
            let off = rng.random_range(0..3 * PAGE + 100);
            let len = rng.random_range(1..2 * PAGE + 300);
            let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            assert_eq!(fs.pwrite(fd, &data, off as u64).unwrap(), len);
            if m.len() < off + len {
                m.resize(off + len, 0);
            }
            m[off..off + len].copy_from_slice(&data);
            fs.close(fd).unwrap();
        }
        2 => match model.get(&name) {
            Some(m) => assert!(
                read_all(fs, &name).unwrap() == *m,
                "{name}: contents differ"
            ),
            None => assert!(matches!(read_all(fs, &name), Err(Error::NotFound))),
        },
        3 => {
            let r = fs.unlink(&name);
            assert_eq!(
                r.is_ok(),
                model.remove(&name).is_some(),
                "{name}: unlink {r:?}"
            );
        }
        4 => {
            let to = format!("/p{t}/f{}", rng.random_range(0..8));
            let r = fs.rename(&name, &to);
            match model.remove(&name) {
                Some(m) => {
                    r.unwrap();
                    model.insert(to, m);
                }
                None => assert!(matches!(r, Err(Error::NotFound))),
            }
        }
        _ => {
            if let Some(m) = model.get_mut(&name) {
                let len = rng.random_range(0..m.len() + PAGE);
                fs.truncate(&name, len as u64).unwrap();
                m.resize(len, 0);
            }
        }
    }
}

/// The shared directory: every thread races on the same few names.
fn shared_op(s: &Shared, t: usize, i: u64, rng: &mut Pcg64Mcg) {
    let fs = &s.fs;
    let n = |rng: &mut Pcg64Mcg| rng.random_range(0..SHARED_NAMES);
    match rng.random_range(0..10) {
        0 | 1 => {
            // Build a file privately, then rename it over a shared name (atomic replace).
            let tmp = format!("/p{t}/tmp");
            let fd = fs
                .open(
                    &tmp,
                    OpenFlags::WRONLY | OpenFlags::CREAT | OpenFlags::EXCL,
                    0o644,
                )
                .unwrap();
            let data = content(((t as u64) << 32) | i, rng.random_range(0..3 * PAGE));
            fs.write(fd, &data).unwrap();
            fs.close(fd).unwrap();
            let to = match rng.random_range(0..3) {
                0 => format!("/s/d{}/n{}", n(rng), n(rng)),
                _ => format!("/s/n{}", n(rng)),
            };
            if tolerate("rename tmp", fs.rename(&tmp, &to)).is_none() {
                fs.unlink(&tmp).unwrap();
            }
        }
        2 => {
            let p = format!("/s/n{}", n(rng));
            if let Some(data) = tolerate("read", read_all(fs, &p)) {
                check_content(&p, &data);
            }
        }
        3 => {
            tolerate("unlink", fs.unlink(&format!("/s/n{}", n(rng))));
            tolerate(
                "unlink nested",
                fs.unlink(&format!("/s/d{}/n{}", n(rng), n(rng))),
            );
        }
        4 => {
            tolerate("mkdir", fs.mkdir(&format!("/s/d{}", n(rng)), 0o755));
        }
        5 => {
            let d = format!("/s/d{}/d{}", n(rng), n(rng));
            for f in 0..SHARED_NAMES {
                tolerate("unlink deep", fs.unlink(&format!("{d}/n{f}")));
                tolerate("rmdir deep", fs.rmdir(&format!("{d}/d{f}")));
            }
            tolerate("rmdir nested", fs.rmdir(&d));
            tolerate("rmdir", fs.rmdir(&format!("/s/d{}", n(rng))));
        }
        6 => {
            // Files across directories, both ways.
            let (a, b) = (
                format!("/s/n{}", n(rng)),
                format!("/s/d{}/n{}", n(rng), n(rng)),
            );
            let (from, to) = if rng.random() { (a, b) } else { (b, a) };
            tolerate("rename file", fs.rename(&from, &to));
        }
        7 => {
            // Directories into a sibling and back out: parent and child directories
            // locked together, in either inode order.
            let (a, b) = (n(rng), n(rng));
            let (from, to) = if rng.random() {
                (format!("/s/d{a}"), format!("/s/d{b}/d{a}"))
            } else {
                (format!("/s/d{b}/d{a}"), format!("/s/d{a}"))
            };
            tolerate("rename dir", fs.rename(&from, &to));
        }
        8 if rng.random() => {
            // Between a directory and its subdirectory, both ways: the two locked
            // directories are parent and child, in either inode order, while other
            // threads lock the same parent and then that child (unlink, rmdir).
            let (a, b, f) = (n(rng), n(rng), n(rng));
            let (up, down) = (format!("/s/d{a}/n{f}"), format!("/s/d{a}/d{b}/n{f}"));
            let (from, to) = if rng.random() { (up, down) } else { (down, up) };
            tolerate("rename parent/child", fs.rename(&from, &to));
            tolerate("unlink subdir", fs.unlink(&format!("/s/d{a}/d{b}")));
        }
        8 => {
            // Operations that lock a directory and then a child directory.
            let p = format!("/s/d{}", n(rng));
            match rng.random_range(0..3) {
                0 => tolerate("unlink dir", fs.unlink(&p)),
                1 => match fs.link(&p, &format!("/s/d{}/l", n(rng))) {
                    Err(Error::NotPermitted(_)) => None,
                    r => tolerate("link dir", r),
                },
                _ => tolerate("rmdir nested", fs.rmdir(&format!("{p}/d{}", n(rng)))),
            };
            let _ = fs.rename(&p, &p);
        }
        _ => {
            if let Some(list) = tolerate("readdir", fs.readdir("/s")) {
                let mut names: Vec<&str> = list.iter().map(|e| e.name.as_str()).collect();
                names.dedup();
                assert_eq!(names.len(), list.len(), "duplicate names in a listing");
            }
        }
    }
}

/// Removes everything under `dir` that it can, tolerating races.
fn prune(fs: &FileSystem, dir: &str) {
    let Some(list) = tolerate("prune readdir", fs.readdir(dir)) else {
        return;
    };
    for e in list {
        let p = format!("{dir}/{}", e.name);
        if e.kind == Some(fs::FileKind::Dir) {
            prune(fs, &p);
            tolerate("prune rmdir", fs.rmdir(&p));
        } else {
            tolerate("prune unlink", fs.unlink(&p));
        }
    }
}

fn hot_op(s: &Shared, t: usize, hot: fs::Fd, rng: &mut Pcg64Mcg) {
    let fs = &s.fs;
    let pg = rng.random_range(0..HOT_PAGES);
    if rng.random_range(0..2) == 0 {
        // Write one or two whole pages, each stamped on its own.
        let count = rng.random_range(1..=2).min(HOT_PAGES - pg);
        let mut buf = Vec::new();
        for _ in 0..count {
            let seq = s.seqs[t].fetch_add(1, Ordering::SeqCst) + 1;
            buf.extend(hot_page(((t as u64) << 32) | seq));
        }
        fs.pwrite(hot, &buf, pg * PAGE as u64).unwrap();
    } else {
        let count = rng.random_range(1..=4).min(HOT_PAGES - pg) as usize;
        let mut buf = vec![0u8; count * PAGE];
        assert_eq!(
            fs.pread(hot, &mut buf, pg * PAGE as u64).unwrap(),
            buf.len()
        );
        for (k, page) in buf.chunks(PAGE).enumerate() {
            check_hot_page(&format!("hot page {}", pg + k as u64), page, &s.seqs);
        }
    }
}

#[test]
fn concurrent_operations_then_clean_fsck_and_remount() {
    let pm = fresh(64 * MIB);
    let fs = mount(&pm);
    fs.mkdir("/s", 0o755).unwrap();
    for t in 0..THREADS {
        fs.mkdir(&format!("/p{t}"), 0o755).unwrap();
    }
    // Initial hot file: every page stamped by the pseudo-writer THREADS, seq 0.
    let hot = fs.open("/hot", rw_create(), 0o644).unwrap();
    for pg in 0..HOT_PAGES {
        fs.pwrite(hot, &hot_page((THREADS as u64) << 32), pg * PAGE as u64)
            .unwrap();
    }
    let s = Arc::new(Shared {
        fs,
        stop: AtomicBool::new(false),
        seqs: (0..=THREADS).map(|_| AtomicU64::new(0)).collect(),
    });
    let (done_tx, done_rx) = mpsc::channel();
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let s = s.clone();
        let done = done_tx.clone();
        handles.push(std::thread::spawn(move || {
            let mut rng = Pcg64Mcg::seed_from_u64(0xE5 + t as u64);
            let mut model = HashMap::new();
            let mut ops = 0u64;
            while !s.stop.load(Ordering::Relaxed) {
                // Keep the shared tree bounded: directories moved into one another
                // nest without limit. Pruning races with everything else.
                if ops.is_multiple_of(64) && s.fs.usage().inodes_used > 1000 {
                    prune(&s.fs, "/s");
                }
                match rng.random_range(0..3) {
                    0 => private_op(&s, t, &mut rng, &mut model),
                    1 => shared_op(&s, t, ops, &mut rng),
                    _ => hot_op(&s, t, hot, &mut rng),
                }
                ops += 1;
            }
            let _ = done.send(());
            (model, ops)
        }));
    }
    drop(done_tx);
    std::thread::sleep(RUN_FOR);
    s.stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + STUCK_AFTER;
    for _ in 0..THREADS {
        let left = deadline.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok(()) => {}
            // A worker that panicked dropped its sender; join reports why below.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("workers made no progress for {STUCK_AFTER:?}: deadlock")
            }
        }
    }
    let mut models = Vec::new();
    let mut total = 0;
    for h in handles {
        let (m, ops) = h.join().expect("worker panicked");
        total += ops;
        models.push(m);
    }
    assert!(total > 0);
    let s = Arc::into_inner(s).unwrap();
    s.fs.close(hot).unwrap();
    let seqs = s.seqs;
    s.fs.unmount().unwrap();
    assert_fsck_clean(&pm);

    let fs = mount(&pm);
    for (t, model) in models.iter().enumerate() {
        let mut names: Vec<String> = fs
            .readdir(&format!("/p{t}"))
            .unwrap()
            .into_iter()
            .map(|e| format!("/p{t}/{}", e.name))
            .collect();
        names.sort();
        let mut want: Vec<String> = model.keys().cloned().collect();
        want.sort();
        assert_eq!(names, want, "private directory {t}");
        for (name, data) in model {
            assert!(
                read_file(&fs, name) == *data,
                "{name}: contents after remount"
            );
        }
    }
    // Everything left in the shared tree is a whole file some thread wrote.
    let mut dirs = vec!["/s".to_string()];
    while let Some(d) = dirs.pop() {
        for e in fs.readdir(&d).unwrap() {
            let p = format!("{d}/{}", e.name);
            match e.kind {
                Some(fs::FileKind::Dir) => dirs.push(p),
                _ => check_content(&p, &read_file(&fs, &p)),
            }
        }
    }
    let hot = read_file(&fs, "/hot");
    assert_eq!(hot.len(), HOT_PAGES as usize * PAGE);
    for (k, page) in hot.chunks(PAGE).enumerate() {
        check_hot_page(&format!("hot page {k} after remount"), page, &seqs);
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}

/// One racing thread's loop body, given the iteration number.
type Work = Box<dyn Fn(&FileSystem, u64) + Send>;

/// Runs `work` on several threads for a while; fails if they stop making progress.
fn race(fs: &Arc<FileSystem>, work: Vec<Work>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = work
        .into_iter()
        .map(|w| {
            let (fs, stop, tx) = (fs.clone(), stop.clone(), tx.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    w(&fs, i);
                    i += 1;
                }
                let _ = tx.send(());
            })
        })
        .collect();
    drop(tx);
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + STUCK_AFTER;
    for _ in 0..handles.len() {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("threads stuck for {STUCK_AFTER:?}: deadlock")
            }
        }
    }
    for h in handles {
        h.join().expect("worker panicked");
    }
}

/// A directory whose subdirectory has the smaller inode number: a rename between the
/// two locks both, while unlink/rmdir of the subdirectory lock parent then child.
#[test]
fn parent_and_child_directories_lock_without_deadlock() {
    let pm = fresh(16 * MIB);
    let fs = mount(&pm);
    fs.mkdir("/y", 0o755).unwrap();
    fs.mkdir("/x", 0o755).unwrap();
    fs.rename("/y", "/x/y").unwrap();
    assert!(fs.stat("/x/y").unwrap().ino < fs.stat("/x").unwrap().ino);
    fs.mkdir("/x/y/z", 0o755).unwrap();
    fs.mkdir("/w", 0o755).unwrap();
    write_file(&fs, "/x/f", b"f");
    let fs = Arc::new(fs);
    race(
        &fs,
        vec![
            Box::new(|fs: &FileSystem, i| {
                let (a, b) = ("/x/f", "/x/y/f");
                let (from, to) = if i % 2 == 0 { (a, b) } else { (b, a) };
                tolerate("rename", fs.rename(from, to));
            }),
            Box::new(|fs: &FileSystem, _| {
                assert!(matches!(
                    fs.unlink("/x/y"),
                    Err(Error::IsDir | Error::NotFound)
                ));
                tolerate("rmdir", fs.rmdir("/x/y"));
            }),
            Box::new(|fs: &FileSystem, i| {
                // A directory moved between unrelated parents: the check that it is
                // not moved into itself walks the destination's ancestors.
                let (a, b) = ("/x/y/z", "/w/z");
                let (from, to) = if i % 2 == 0 { (a, b) } else { (b, a) };
                tolerate("rename dir", fs.rename(from, to));
                tolerate("rename in y", fs.rename("/x/y", "/x/y"));
            }),
            Box::new(|fs: &FileSystem, _| {
                // Same-directory rename holding /x, reading its child /x/y.
                tolerate("rename same dir", fs.rename("/x/y", "/x/y2"));
                tolerate("rename back", fs.rename("/x/y2", "/x/y"));
            }),
        ],
    );
    let fs = Arc::into_inner(fs).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}
