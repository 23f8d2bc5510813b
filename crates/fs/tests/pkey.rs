//! Protection keys for a region mounted in the process (`pmem::pkey`): with the
//! region protected, the file system works in every mode — its own threads, the copy
//! engine's workers and the device model's included — while a store, or a load,
//! through a stray pointer into the region faults.
//!
//! These machines' CPUs may lack `pku`. Where it is missing, the tests check that the
//! region says so and stays usable unprotected; CI also runs this binary in a virtual
//! machine whose emulated CPU has keys (`.ci/run-in-vm.sh`), where every check runs.

mod common;

use std::sync::Arc;

use fs::{FileSystem, FormatOptions, Mode, MountOptions, OpenFlags};
use pmem::{Pmem, Region};

/// A fresh region in /dev/shm, protected if this CPU has keys: the key, or why not.
fn protected_region(size: u64) -> (Region, Result<u32, String>) {
    let mut r = Region::create_temp(size).unwrap();
    let key = r.protect();
    (r, key)
}

/// Whether keys are there, checked against what CPUID says.
fn has_keys(key: &Result<u32, String>) -> bool {
    match key {
        Ok(k) => {
            assert!(pmem::persist::features().pku);
            assert!((1..16).contains(k), "key {k}");
            true
        }
        Err(why) => {
            assert!(!pmem::persist::features().pku, "pku is there, yet: {why}");
            eprintln!("no protection keys here ({why}): checking the unprotected path");
            false
        }
    }
}

/// Runs `f` in a forked child and returns the signal that ended it (0: it exited).
fn in_child(f: impl FnOnce()) -> i32 {
    // SAFETY: the child only runs `f` (a plain load or store) and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        f();
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFSIGNALED(status) {
        libc::WTERMSIG(status)
    } else {
        0
    }
}

#[test]
fn a_stray_store_or_load_faults_and_the_regions_own_operations_do_not() {
    let (r, key) = protected_region(4 << 20);
    let keys = has_keys(&key);
    assert_eq!(r.protection(), key.clone().ok());
    // The region's own operations, from this thread and from a new one.
    let check = |r: &Region, at: u64| {
        r.write(at, b"own store");
        r.store_u64(at + 64, 0x5eed);
        r.copy_nt(at + 128, &[7u8; 4096]);
        r.persist(at, 4096 + 128);
        let mut back = [0u8; 9];
        r.read(at, &mut back);
        assert_eq!(&back, b"own store");
        assert_eq!(r.load_u64(at + 64), 0x5eed);
    };
    check(&r, 0);
    std::thread::scope(|s| {
        s.spawn(|| check(&r, 8192));
    });
    let stray = r.device_base().unwrap() as usize;
    // SAFETY: the child stores into the region by a pointer of its own, as a wild
    // pointer of the application would; it dies of it if the region is protected.
    let store = in_child(|| unsafe { (stray as *mut u64).write_volatile(1) });
    // SAFETY: as above, a load.
    let load = in_child(|| unsafe {
        std::hint::black_box((stray as *const u64).read_volatile());
    });
    if keys {
        assert_eq!((store, load), (libc::SIGSEGV, libc::SIGSEGV));
    } else {
        assert_eq!((store, load), (0, 0));
    }
    // The region's own operations still work after the faults (in other processes).
    check(&r, 16384);
}

#[test]
fn the_file_system_works_on_a_protected_region_in_every_mode() {
    for mode in Mode::ALL {
        let (r, key) = protected_region(64 << 20);
        let keys = has_keys(&key);
        let stray = r.device_base().unwrap() as usize;
        let pm: Arc<dyn Pmem> = Arc::new(r);
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let options = MountOptions {
            mode,
            ..MountOptions::default()
        };
        let (fs, _) = FileSystem::mount(pm.clone(), options).unwrap();
        // Writes large enough to go to the engine in the modes that use one, from
        // this thread and from threads started after the mount.
        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        std::thread::scope(|s| {
            for t in 0..3 {
                let (fs, data) = (&fs, &data);
                s.spawn(move || {
                    let path = format!("/f{t}");
                    let fd = fs
                        .open(&path, OpenFlags::CREAT | OpenFlags::RDWR, 0o644)
                        .unwrap();
                    for k in 0..4u64 {
                        assert_eq!(fs.pwrite(fd, data, k << 20).unwrap(), data.len());
                    }
                    let mut back = vec![0u8; data.len()];
                    assert_eq!(fs.pread(fd, &mut back, 3 << 20).unwrap(), back.len());
                    assert!(back == *data, "{mode:?}: read back other bytes");
                    fs.close(fd).unwrap();
                });
            }
        });
        let fd = fs.open("/f0", OpenFlags::RDWR, 0).unwrap();
        let token = fs.submit_pwrite(fd, data.clone(), 0).unwrap();
        token.wait().unwrap();
        fs.close(fd).unwrap();
        if keys {
            // SAFETY: a wild store by the application into the mounted region.
            let died = in_child(|| unsafe { (stray as *mut u8).add(8192).write_volatile(0xff) });
            assert_eq!(died, libc::SIGSEGV, "{mode:?}");
        }
        fs.unmount().unwrap();
        common::assert_fsck_clean(&pm);
    }
}
