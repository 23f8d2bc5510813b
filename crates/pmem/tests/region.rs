//! Region lifecycle: create/open/reopen keep bytes, exclusive use across opens and
//! processes, and a typed error for every kind of bad input.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use pmem::{Durability, Error, Pmem, Region, HEADER_LEN, PAGE_SIZE};

const MIB: u64 = 1 << 20;

/// A scratch directory in /dev/shm, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = Path::new("/dev/shm").join(format!("easyio-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn create_open_reopen_keeps_bytes() {
    let dir = Scratch::new("reopen");
    let path = dir.path("r");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    {
        let r = Region::create(&path, 4 * MIB).unwrap();
        assert_eq!(r.len(), 4 * MIB - HEADER_LEN);
        assert_eq!(r.durability(), Durability::Dram);
        r.copy_persist(12_345, &data);
        r.write_persist(3 * MIB, b"metadata");
        r.store_u64_persist(2 * MIB, 0xDEAD_BEEF_CAFE);
    }
    for _ in 0..2 {
        let r = Region::open(&path).unwrap();
        let mut back = vec![0u8; data.len()];
        r.read(12_345, &mut back);
        assert_eq!(back, data);
        let mut meta = [0u8; 8];
        r.read(3 * MIB, &mut meta);
        assert_eq!(&meta, b"metadata");
        assert_eq!(r.load_u64(2 * MIB), 0xDEAD_BEEF_CAFE);
    }
}

#[test]
fn temp_region_is_removed_on_drop() {
    let r = Region::create_temp(MIB).unwrap();
    let path = r.path().to_path_buf();
    assert!(path.exists());
    drop(r);
    assert!(!path.exists());
}

#[test]
fn second_open_in_same_process_is_busy() {
    let dir = Scratch::new("busy");
    let path = dir.path("r");
    let first = Region::create(&path, MIB).unwrap();
    let err = Region::open(&path).unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err}");
    assert_eq!(err.errno(), libc::EBUSY);
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "holder not named: {msg}"
    );
    drop(first);
    Region::open(&path).unwrap();
}

/// Child half of `other_process_holder_is_named_and_released_on_kill`.
/// Runs the child half `half` on the region at `path` and returns once it holds it
/// (killed on drop: a failing test leaves no child running).
fn held_by_child(half: &str, path: &Path) -> testkit::Running {
    let mut child = testkit::Running(
        testkit::child_half(half)
            .env("EASYIO_TEST_HOLD", path)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().contains("held")),
        "child never held the region"
    );
    // The rest of its output is drained, so that it never writes to a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    child
}

#[test]
#[ignore = "child half of other_process_holder_is_named_and_released_on_kill: run by it"]
fn child_hold_region() {
    let path = std::env::var("EASYIO_TEST_HOLD")
        .expect("child half of other_process_holder_is_named_and_released_on_kill");
    let _r = Region::open(&path).unwrap();
    println!("held");
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn other_process_holder_is_named_and_released_on_kill() {
    let dir = Scratch::new("proc");
    let path = dir.path("r");
    drop(Region::create(&path, MIB).unwrap());
    let mut child = held_by_child("child_hold_region", &path);
    let err = Region::open(&path).unwrap_err();
    assert!(
        err.to_string().contains(&format!("pid {}", child.id())),
        "holder not named: {err}"
    );
    // SIGKILL: the kernel must release the lock with the dead holder.
    child.kill().unwrap();
    child.wait().unwrap();
    Region::open(&path).unwrap();
}

#[test]
#[ignore = "child half of a_server_the_shim_started_is_waited_for: run by it"]
fn child_auto_server() {
    let path = std::env::var("EASYIO_TEST_HOLD")
        .expect("child half of a_server_the_shim_started_is_waited_for");
    // The process's name (its main thread's), as the shim names the server it forks;
    // this half runs on a thread of the test harness, so prctl would name only that.
    std::fs::write("/proc/self/comm", "easyio-serve").unwrap();
    let r = Region::open(&path).unwrap();
    println!("held");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    drop(r);
}

/// A server the shim starts on demand (its process named `easyio-serve`) lets the image
/// go a moment after its last client: an open in that moment waits for it rather than
/// failing as busy, so a command that follows a shimmed one finds the image.
#[test]
fn a_server_the_shim_started_is_waited_for() {
    let dir = Scratch::new("auto");
    let path = dir.path("r");
    drop(Region::create(&path, MIB).unwrap());
    let mut child = held_by_child("child_auto_server", &path);
    let start = std::time::Instant::now();
    Region::open(&path).expect("the open waits for the server to let the image go");
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(500),
        "opened while the server still held the image"
    );
    child.wait().unwrap();
}

#[test]
fn missing_path_is_not_found() {
    let err = Region::open("/dev/shm/easyio-no-such-region").unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert_eq!(err.errno(), libc::ENOENT);
    let err = Region::create("/dev/shm/easyio-no-such-dir/r", MIB).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
}

#[test]
fn bad_sizes_are_rejected_and_leave_nothing() {
    let dir = Scratch::new("size");
    for size in [0, PAGE_SIZE + 1, 1000, PAGE_SIZE] {
        let path = dir.path(&format!("r{size}"));
        let err = Region::create(&path, size).unwrap_err();
        assert!(matches!(err, Error::BadSize { .. }), "{size}: {err}");
        assert_eq!(err.errno(), libc::EINVAL);
        assert!(!path.exists(), "failed create left {path:?}");
    }
    // An existing file whose size is not page-aligned.
    let path = dir.path("odd");
    std::fs::write(&path, vec![0u8; 3 * PAGE_SIZE as usize + 10]).unwrap();
    let err = Region::open(&path).unwrap_err();
    assert!(matches!(err, Error::BadSize { .. }), "{err}");
    // An empty file.
    let path = dir.path("empty");
    std::fs::write(&path, b"").unwrap();
    assert!(Region::open(&path).is_err());
}

#[test]
fn create_over_existing_is_refused() {
    let dir = Scratch::new("exists");
    let path = dir.path("r");
    drop(Region::create(&path, MIB).unwrap());
    let err = Region::create(&path, MIB).unwrap_err();
    assert!(matches!(err, Error::Exists { .. }), "{err}");
    assert_eq!(err.errno(), libc::EEXIST);
}

#[test]
fn truncated_region_is_detected() {
    let dir = Scratch::new("trunc");
    let path = dir.path("r");
    drop(Region::create(&path, 4 * MIB).unwrap());
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(2 * MIB).unwrap();
    let err = Region::open(&path).unwrap_err();
    match &err {
        Error::Truncated {
            claimed, actual, ..
        } => {
            assert_eq!((*claimed, *actual), (4 * MIB, 2 * MIB));
        }
        other => panic!("expected Truncated, got {other}"),
    }
    assert_eq!(err.errno(), libc::EUCLEAN);
}

#[test]
fn foreign_or_corrupted_header_is_detected() {
    let dir = Scratch::new("hdr");
    let path = dir.path("zeros");
    std::fs::write(&path, vec![0u8; MIB as usize]).unwrap();
    let err = Region::open(&path).unwrap_err();
    assert!(matches!(err, Error::BadHeader { .. }), "{err}");

    let path = dir.path("flipped");
    drop(Region::create(&path, MIB).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[17] ^= 0x40; // inside the recorded region length
    std::fs::write(&path, &bytes).unwrap();
    let err = Region::open(&path).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
}

#[test]
fn directory_is_not_a_region() {
    let dir = Scratch::new("dir");
    let err = Region::open(&dir.0).unwrap_err();
    assert!(matches!(err, Error::BadHeader { .. }), "{err}");
}

#[test]
#[should_panic(expected = "out of bounds")]
fn out_of_bounds_access_panics() {
    let r = Region::create_temp(MIB).unwrap();
    r.write(r.len() - 4, &[0u8; 8]);
}

#[test]
fn remove_refuses_non_regions() {
    let dir = Scratch::new("rm");
    let path = dir.path("plain");
    std::fs::write(&path, vec![1u8; MIB as usize]).unwrap();
    assert!(pmem::remove(&path).is_err());
    assert!(path.exists());
    let path = dir.path("r");
    drop(Region::create(&path, MIB).unwrap());
    pmem::remove(&path).unwrap();
    assert!(!path.exists());
}

#[test]
fn temporary_regions_of_killed_processes_are_reclaimed_unless_held() {
    let dir = Scratch::new("reclaim");
    // No process has this id (above the kernel's largest pid_max).
    let dead = 4_200_000_000u32;
    let abandoned = dir.path(&format!("easyio-{dead}-0.region"));
    drop(Region::create(&abandoned, MIB).unwrap());
    let held_path = dir.path(&format!("easyio-{dead}-1.region"));
    drop(Region::create(&held_path, MIB).unwrap());
    let held = Region::open(&held_path).unwrap();
    let other = dir.path("easyio-notatemp.region");
    std::fs::write(&other, b"x").unwrap();
    let fresh = Region::create_temp_in(&dir.0, MIB).unwrap();
    assert!(
        !abandoned.exists(),
        "an abandoned temporary region was left"
    );
    assert!(held_path.exists(), "a held region was removed");
    assert!(
        other.exists(),
        "a file not named like a temporary region was removed"
    );
    drop((fresh, held));
}

#[test]
fn a_leftover_name_of_this_process_is_skipped() {
    let dir = Scratch::new("leftover");
    // Names this process would pick next, already taken (as by a killed process
    // whose id this one reuses): creation moves on to a free name.
    let pid = std::process::id();
    let taken: Vec<_> = (0..256)
        .map(|n| dir.path(&format!("easyio-{pid}-{n}.region")))
        .collect();
    for p in &taken {
        std::fs::write(p, b"x").unwrap();
    }
    let r = Region::create_temp_in(&dir.0, MIB).unwrap();
    assert_eq!(r.len(), MIB - pmem::HEADER_LEN);
    assert!(taken.iter().all(|p| p.exists()));
}

/// A directory on a disk file system for region files (the build's scratch directory),
/// or `None` with a note when it turns out to be in memory too.
fn disk_dir(test: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("easyio-disk-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    if is_tmpfs(&dir) {
        testkit::skip(format_args!(
            "{test}: {} is not on a disk file system",
            dir.display()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        return None;
    }
    Some(dir)
}

fn is_tmpfs(path: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: statfs fills the struct on success, and it is read only then.
    unsafe {
        assert_eq!(libc::statfs(c.as_ptr(), st.as_mut_ptr()), 0);
        st.assume_init().f_type == TMPFS_MAGIC
    }
}

#[test]
fn fences_on_a_disk_file_reach_the_disk() {
    let Some(dir) = disk_dir("fence") else { return };
    let path = dir.join("r");
    let r = Region::create(&path, 8 * MIB).unwrap();
    assert_eq!(r.durability(), Durability::PageCache);
    let data: Vec<u8> = (0..MIB as u32).map(|i| (i * 13) as u8).collect();
    r.copy_nt(4096, &data);
    r.write(3 * MIB, b"entry");
    r.flush(3 * MIB, 5);
    let before = r.syncs();
    if let Some(dirty) = testkit::unwritten_pages(&path) {
        assert!(
            dirty > 0,
            "the page cache holds the stores before the fence"
        );
    }
    r.fence();
    assert_eq!(
        r.syncs(),
        before + 1,
        "one sync covers everything before the fence"
    );
    match testkit::unwritten_pages(&path) {
        Some(n) => assert_eq!(n, 0, "pages left unwritten after the fence"),
        None => eprintln!("note: no cachestat here; checked only that the fence synced"),
    }
    // Nothing written since: fences and loads cost no sync.
    r.fence();
    r.persist(3 * MIB, 0);
    assert_eq!(r.load_u64(3 * MIB) as u8, b'e');
    assert_eq!(
        r.syncs(),
        before + 2,
        "persist() flushed (nothing) then fenced"
    );
    r.fence();
    assert_eq!(r.syncs(), before + 2);
    assert!(r.take_sync_error().is_none());
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fences_in_dram_never_sync() {
    let r = Region::create_temp(8 * MIB).unwrap();
    assert_eq!(r.durability(), Durability::Dram);
    r.copy_persist(0, &[7u8; 65536]);
    r.write_persist(MIB, b"x");
    r.store_u64_persist(2 * MIB, 1);
    assert_eq!(r.syncs(), 0);
}

#[test]
fn sparse_image_on_disk_is_reserved_at_open() {
    let Some(dir) = disk_dir("sparse") else {
        return;
    };
    let path = dir.join("r");
    drop(Region::create(&path, 16 * MIB).unwrap());
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    // SAFETY: punching a hole in a file this test owns; no mapping of it exists.
    let rc = unsafe {
        use std::os::fd::AsRawFd;
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            MIB as i64,
            12 * MIB as i64,
        )
    };
    assert_eq!(rc, 0);
    drop(f);
    let blocks = |p: &Path| std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(p).unwrap());
    assert!(blocks(&path) * 512 < 16 * MIB, "the hole was punched");
    let r = Region::open(&path).unwrap();
    assert!(
        blocks(&path) * 512 >= 16 * MIB,
        "open reserves the holes, so no later touch can find the disk full"
    );
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sparse_image_in_dram_that_fits_opens_and_stays_sparse() {
    let dir = Scratch::new("sparse-dram");
    let path = dir.path("r");
    drop(Region::create(&path, 4 * MIB).unwrap());
    // Grown without allocating: the header's length still fits, so this is a region
    // whose tail is one hole.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    let r = Region::open(&path).unwrap();
    assert_eq!(r.mapped_len(), 64 * MIB);
    drop(r);
    let allocated =
        std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&path).unwrap()) * 512;
    assert!(
        allocated < 64 * MIB,
        "a DRAM image is checked, not reserved"
    );
}

#[test]
fn read_only_open_reads_shares_and_excludes_writers() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Scratch::new("ro");
    let path = dir.path("r");
    Region::create(&path, 4 * MIB)
        .unwrap()
        .write_persist(MIB, b"kept");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let a = Region::open_read_only(&path).unwrap();
    let b = Region::open_read_only(&path).unwrap();
    let mut got = [0u8; 4];
    b.read(MIB, &mut got);
    assert_eq!(&got, b"kept");
    assert_eq!(a.len(), 4 * MIB - HEADER_LEN);
    assert!(matches!(Region::open(&path), Err(Error::Busy { .. })));
    drop((a, b));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let w = Region::open(&path).unwrap();
    assert!(matches!(
        Region::open_read_only(&path),
        Err(Error::Busy { .. })
    ));
    drop(w);
}

#[test]
#[should_panic(expected = "open read-only")]
fn store_into_a_read_only_region_panics() {
    let dir = Scratch::new("ro-store");
    let path = dir.path("r");
    drop(Region::create(&path, 4 * MIB).unwrap());
    Region::open_read_only(&path).unwrap().store_u64(64, 1);
}

#[test]
fn overwrite_makes_any_file_a_region() {
    let dir = Scratch::new("overwrite");
    let path = dir.path("r");
    drop(Region::create(&path, 4 * MIB).unwrap());
    // A damaged header: open refuses, overwrite does not.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[9] ^= 0xFF;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(Region::open(&path), Err(Error::BadHeader { .. })));
    let r = Region::overwrite(&path, 0).unwrap();
    assert_eq!(r.mapped_len(), 4 * MIB, "size 0 keeps the file's size");
    drop(r);
    Region::open(&path).unwrap();
    // A file that never was a region, resized on the way.
    let other = dir.path("text");
    std::fs::write(&other, vec![b'x'; 3 * PAGE_SIZE as usize]).unwrap();
    let r = Region::overwrite(&other, 2 * MIB).unwrap();
    assert_eq!(r.mapped_len(), 2 * MIB);
    drop(r);
    assert_eq!(Region::open(&other).unwrap().mapped_len(), 2 * MIB);
    // Nothing there, or held by another open: refused.
    assert!(matches!(
        Region::overwrite(dir.path("none"), 0),
        Err(Error::NotFound { .. })
    ));
    let held = Region::open(&other).unwrap();
    assert!(matches!(
        Region::overwrite(&other, 0),
        Err(Error::Busy { .. })
    ));
    drop(held);
}
