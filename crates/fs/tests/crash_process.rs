//! kill -9 of a real writer process: a child process mounts a region file and loops
//! creating, writing, appending, renaming and unlinking files, reporting each completed
//! operation on stdout; the parent SIGKILLs it at a random point, recovers the image,
//! and checks fsck and that every write the child reported complete is there exactly.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use common::*;
use fs::{FileSystem, FormatOptions, MountOptions, OpenFlags};
use pmem::{Pmem, Region};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

const CHILD_ENV: &str = "EASYIO_TEST_CRASH_CHILD";
const DIRS: [&str; 2] = ["/w", "/v"];
const NAMES: usize = 6;

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// What the child says a path holds: `(length, checksum)`, or gone.
fn state_line(path: &str, data: Option<&Vec<u8>>) -> String {
    match data {
        Some(d) => format!("state {path} {} {:x}", d.len(), fnv(d)),
        None => format!("state {path} gone"),
    }
}

/// Child half of `kill_9_of_a_writer_keeps_every_reported_write`, run by it with the
/// region's path in the environment.
#[test]
#[ignore = "child half of kill_9_of_a_writer_keeps_every_reported_write: run by it"]
fn child_writer() {
    let path = std::env::var(CHILD_ENV)
        .expect("child half of kill_9_of_a_writer_keeps_every_reported_write");
    let pm: Arc<dyn Pmem> = Arc::new(Region::open(&path).unwrap());
    let (fs, _) = FileSystem::mount(pm, MountOptions::default()).unwrap();
    // Start from what the image holds (earlier rounds were killed too).
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for d in DIRS {
        for e in fs.readdir(d).unwrap() {
            let p = format!("{d}/{}", e.name);
            model.insert(p.clone(), read_file(&fs, &p));
        }
    }
    let mut rng = Pcg64Mcg::seed_from_u64(std::process::id() as u64);
    let pick = |rng: &mut Pcg64Mcg| {
        format!(
            "{}/f{}",
            DIRS[rng.random_range(0..2)],
            rng.random_range(0..NAMES)
        )
    };
    for seq in 0u64.. {
        let a = pick(&mut rng);
        let b = pick(&mut rng);
        let op = rng.random_range(0..6);
        println!("start {seq} {a} {b}");
        let mut touched = vec![a.clone()];
        match op {
            0 | 1 => {
                // Create or replace, several pages, unaligned length.
                let len = rng.random_range(1..40_000);
                let data: Vec<u8> = (0..len).map(|i| (i as u64 ^ seq) as u8).collect();
                write_file(&fs, &a, &data);
                model.insert(a.clone(), data);
            }
            2 => {
                if let Some(m) = model.get_mut(&a) {
                    let chunk: Vec<u8> = (0..rng.random_range(1..9000))
                        .map(|_| rng.random())
                        .collect();
                    let fd = fs
                        .open(&a, OpenFlags::WRONLY | OpenFlags::APPEND, 0)
                        .unwrap();
                    fs.write(fd, &chunk).unwrap();
                    fs.close(fd).unwrap();
                    m.extend_from_slice(&chunk);
                }
            }
            3 => {
                if let Some(m) = model.get_mut(&a) {
                    let off = rng.random_range(0..m.len() + 5000);
                    let chunk: Vec<u8> = (0..rng.random_range(1..12_000))
                        .map(|_| rng.random())
                        .collect();
                    let fd = fs.open(&a, OpenFlags::RDWR, 0).unwrap();
                    fs.pwrite(fd, &chunk, off as u64).unwrap();
                    fs.close(fd).unwrap();
                    if m.len() < off + chunk.len() {
                        m.resize(off + chunk.len(), 0);
                    }
                    m[off..off + chunk.len()].copy_from_slice(&chunk);
                }
            }
            4 => {
                if a != b && model.contains_key(&a) {
                    fs.rename(&a, &b).unwrap();
                    let m = model.remove(&a).unwrap();
                    model.insert(b.clone(), m);
                    touched.push(b);
                }
            }
            _ => {
                if model.remove(&a).is_some() {
                    fs.unlink(&a).unwrap();
                }
            }
        }
        for p in &touched {
            println!("{}", state_line(p, model.get(p)));
        }
        println!("done {seq}");
    }
}

/// The parent's view of what the child reported.
#[derive(Default)]
struct Reported {
    states: HashMap<String, Option<(u64, u64)>>,
    done: u64,
    /// Paths of the operation the child started and never reported done.
    in_flight: Vec<String>,
}

impl Reported {
    fn line(&mut self, l: &str) {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["start", _, a, b] => self.in_flight = vec![a.to_string(), b.to_string()],
            ["state", p, "gone"] => {
                self.states.insert(p.to_string(), None);
            }
            ["state", p, len, sum] => {
                let v = (len.parse().unwrap(), u64::from_str_radix(sum, 16).unwrap());
                self.states.insert(p.to_string(), Some(v));
            }
            ["done", _] => {
                self.done += 1;
                self.in_flight.clear();
            }
            _ => {}
        }
    }
}

struct RegionFile(PathBuf);

impl Drop for RegionFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn kill_9_of_a_writer_keeps_every_reported_write() {
    let file = RegionFile(PathBuf::from(format!(
        "/dev/shm/easyio-test-crash-{}.region",
        std::process::id()
    )));
    {
        let pm: Arc<dyn Pmem> = Arc::new(Region::create(&file.0, 32 * MIB).unwrap());
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let fs = mount(&pm);
        for d in DIRS {
            fs.mkdir(d, 0o755).unwrap();
        }
        fs.unmount().unwrap();
    }
    let mut rng = Pcg64Mcg::seed_from_u64(0x9);
    let mut reported = Reported::default();
    for round in 0..4 {
        // Killed on drop: a failing test leaves no child running.
        let mut child = testkit::Running(
            testkit::child_half("child_writer")
                .env(CHILD_ENV, &file.0)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Kill after a random number of completed operations, mid-way through the next.
        let target = reported.done + rng.random_range(20..250);
        let mut skip = rng.random_range(0..3);
        while reported.done < target || skip > 0 {
            let l = lines
                .next()
                .unwrap_or_else(|| {
                    panic!(
                        "round {round}: child exited early (status {:?})",
                        child.wait()
                    )
                })
                .unwrap();
            if reported.done >= target && l.starts_with("start") {
                skip -= 1;
            }
            reported.line(&l);
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Lines already in the pipe were written before the kill: those operations
        // completed.
        for l in lines {
            reported.line(&l.unwrap());
        }

        let pm: Arc<dyn Pmem> = Arc::new(Region::open(&file.0).unwrap());
        let pre = fs::fsck::check(&*pm).unwrap();
        assert!(
            pre.ok(),
            "round {round}: fsck of the killed image: {:?} (notes {:?})",
            pre.problems,
            pre.notes
        );
        assert!(!pre.clean_unmount);
        let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
        assert!(
            !report.clean,
            "round {round}: a killed writer looked clean: {report:?}"
        );
        assert!(report.inodes >= 3, "{report:?}");
        let observe = |path: &str| match fs.stat(path) {
            Ok(_) => {
                let d = read_file(&fs, path);
                Some((d.len() as u64, fnv(&d)))
            }
            Err(fs::Error::NotFound) => None,
            Err(e) => panic!("{path}: {e}"),
        };
        for (path, want) in &reported.states {
            if reported.in_flight.contains(path) {
                continue; // The interrupted operation: old or new state, fsck decides.
            }
            assert_eq!(
                observe(path),
                *want,
                "round {round}: {path} (len, checksum) after recovery"
            );
        }
        // What the interrupted operation left is the truth the next child starts from.
        for path in std::mem::take(&mut reported.in_flight) {
            reported.states.insert(path.clone(), observe(&path));
        }
        fs.unmount().unwrap();
        assert_fsck_clean(&pm);
    }
    assert!(reported.done > 80);
}

/// The image a kill leaves inside a journaled commit — journal active, some words
/// changed, others not — is one fsck accepts (noting the interrupted operation) and
/// mount rolls back.
#[test]
fn kill_inside_a_journaled_commit_is_accepted_and_rolled_back() {
    let pm = fresh(8 * MIB);
    let geo = {
        let fs = mount(&pm);
        write_file(&fs, "/keep", b"kept");
        let g = *fs.geometry();
        fs.unmount().unwrap();
        g
    };
    let table = geo.inode_off(0)..geo.inode_off(0) + geo.inodes * fs::layout::INODE_SIZE;
    let words = |pm: &Arc<dyn Pmem>| -> Vec<u64> {
        table.clone().step_by(8).map(|o| pm.load_u64(o)).collect()
    };
    let before = words(&pm);
    {
        let fs = mount(&pm);
        fs.mkdir("/new", 0o755).unwrap();
        fs.abandon();
    }
    let after = words(&pm);
    // The words the mkdir changed (parent tail, new inode's valid word, its record).
    let changed: Vec<(u64, u64, u64)> = (0..before.len())
        .filter(|&i| before[i] != after[i])
        .map(|i| (table.start + 8 * i as u64, before[i], after[i]))
        .collect();
    assert!(changed.len() >= 2, "{changed:?}");
    // Journal 0 records the old values of the words that commits change in place.
    let journaled: Vec<&(u64, u64, u64)> = changed
        .iter()
        .filter(|(o, ..)| (o - table.start) % 128 <= 16)
        .collect();
    let mut rec = Vec::new();
    for (off, old, _) in &journaled {
        rec.extend_from_slice(&off.to_le_bytes());
        rec.extend_from_slice(&old.to_le_bytes());
    }
    let j = geo.journal_start * fs::layout::BLOCK_SIZE;
    let mut head = Vec::new();
    head.extend_from_slice(&(journaled.len() as u32).to_le_bytes());
    head.extend_from_slice(&crc32c::crc32c(&rec).to_le_bytes());
    pm.write_persist(j + 8, &head);
    pm.write_persist(j + 16, &rec);
    pm.store_u64_persist(j, 0x4A52_4E4C_4143_5456);
    // Killed after the first journaled store: the rest still hold their old values.
    for (off, old, _) in journaled.iter().skip(1) {
        pm.store_u64_persist(*off, *old);
    }
    let r = fs::fsck::check(&*pm).unwrap();
    assert!(
        r.ok(),
        "fsck of an interrupted commit: {:?} (notes {:?})",
        r.problems,
        r.notes
    );
    assert!(
        r.notes.iter().any(|n| n.contains("interrupted")),
        "{:?}",
        r.notes
    );
    let (fs, report) = FileSystem::mount(pm.clone(), MountOptions::default()).unwrap();
    assert_eq!(report.journals_rolled_back, 1, "{report:?}");
    assert!(
        matches!(fs.stat("/new"), Err(fs::Error::NotFound)),
        "rolled-back mkdir is visible"
    );
    assert_eq!(read_file(&fs, "/keep"), b"kept");
    fs.mkdir("/new", 0o755).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&pm);
}
