//! A copy that fails under the file system — a delegation thread dying under a write or
//! a read — is EIO with its cause kept, and leaves the file system consistent: the file
//! keeps its old content and size, fsck is clean, and later writes and reads work.
//! The fault hook is global to the process, so this file holds one test.

mod common;

use std::error::Error as _;

use common::*;
use fs::{Error, FileSystem, MountOptions, OpenFlags};
use mover::fault::{self, Fault};
use mover::Mode;
use testkit::pattern;

/// Delegation threads: each failure below kills one, and some must be left (with none
/// left the caller copies by itself).
const THREADS: usize = 8;

fn mount_delegate(pm: &std::sync::Arc<dyn pmem::Pmem>) -> FileSystem {
    let mut opts = MountOptions::with_mode(Mode::Delegate);
    opts.mover.delegation_threads = THREADS;
    FileSystem::mount(pm.clone(), opts).unwrap().0
}

fn assert_copy_failed(e: &Error, what: &str) {
    assert_eq!(e.errno(), libc::EIO, "{what}: {e}");
    assert!(matches!(e, Error::Io { .. }), "{what}: {e:?}");
    let source = e.source().expect("the cause is kept");
    assert!(
        matches!(
            source.downcast_ref::<mover::Error>(),
            Some(mover::Error::CopyFailed)
        ),
        "{what}: cause {source}"
    );
}

#[test]
fn a_failed_copy_is_eio_and_changes_nothing() {
    for fault in [Fault::DelegatePanic, Fault::DelegateExit] {
        fault::inject(Fault::None);
        let pm = fresh(64 * MIB);
        let old = pattern(1, 300_000);
        let mut expect = old.clone();
        {
            let fs = mount_delegate(&pm);
            write_file(&fs, "/f", &old);
            let fd = fs.open("/f", OpenFlags::RDWR, 0).unwrap();

            // An overwrite with partial pages at both ends, and one that would extend
            // the file: both fail whole.
            for (off, len) in [(1000u64, 200_000usize), (250_000, 120_000)] {
                fault::inject(fault);
                let e = fs
                    .pwrite(fd, &pattern(2, len), off)
                    .expect_err("the write's copy failed");
                assert_copy_failed(&e, &format!("{fault:?} pwrite at {off}"));
                assert_eq!(fs.fstat(fd).unwrap().size, old.len() as u64);
                assert!(read_file(&fs, "/f") == old, "{fault:?}: old content lost");
            }

            // The same through the asynchronous interface.
            fault::inject(fault);
            let e = fs
                .submit_pwrite(fd, pattern(3, 100_000), 0)
                .err()
                .expect("the write's copy failed");
            assert_copy_failed(&e, &format!("{fault:?} submit_pwrite"));
            assert!(read_file(&fs, "/f") == old, "{fault:?}: old content lost");

            // A read whose copy fails.
            fault::inject(fault);
            let mut buf = vec![0u8; 200_000];
            let e = fs
                .pread(fd, &mut buf, 0)
                .expect_err("the read's copy failed");
            assert_copy_failed(&e, &format!("{fault:?} pread"));

            // The thread left carries on.
            let new = pattern(4, 200_000);
            assert_eq!(fs.pwrite(fd, &new, 1000).unwrap(), new.len());
            expect[1000..201_000].copy_from_slice(&new);
            assert!(read_file(&fs, "/f") == expect, "{fault:?}: later write");
            fs.close(fd).unwrap();
            fs.unmount().unwrap();
        }
        assert_fsck_clean(&pm);
        let fs = mount_delegate(&pm);
        assert!(read_file(&fs, "/f") == expect, "{fault:?}: after remount");
        fs.unmount().unwrap();
    }
}
