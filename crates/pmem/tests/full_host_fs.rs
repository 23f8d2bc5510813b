//! A region whose host file system is too small for it: a real tmpfs mounted with
//! `size=8m` (which needs root; skipped with a message otherwise,
//! failing when `CI` is set) and a 16 MiB region.
//! Creating it fails with ENOSPC and leaves no file behind; a sparse image that would
//! not fit is refused at open; a region that fits is reserved whole at create, so every
//! page of it can be written (no SIGBUS, which would kill this test process).

use std::path::Path;

use pmem::{Error, Pmem, Region};
use testkit::SmallTmpfs;

/// The size of the small file system.
const SMALL: &str = "8m";
const BIG: u64 = 16 << 20;

fn errno(e: &Error) -> i32 {
    e.errno()
}

#[test]
fn creating_a_region_larger_than_its_file_system_is_enospc_and_leaves_nothing() {
    let Some(fs) = SmallTmpfs::mount("create", SMALL) else {
        return;
    };
    let path = fs.path("image");
    let err = Region::create(&path, BIG).map(|_| ()).unwrap_err();
    assert_eq!(errno(&err), libc::ENOSPC, "{err}");
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(
        msg.contains(path.to_str().unwrap()),
        "names the image: {msg}"
    );
    assert!(
        !Path::new(&path).exists(),
        "a failed create left {}",
        path.display()
    );
    assert_eq!(fs.used(), 0, "the reserved blocks were not given back");
}

#[test]
fn a_sparse_image_too_large_for_its_file_system_is_refused_at_open() {
    let Some(fs) = SmallTmpfs::mount("open", SMALL) else {
        return;
    };
    let path = fs.path("image");
    drop(Region::create_sparse(&path, BIG).unwrap());
    match Region::open(&path) {
        Err(e @ Error::Holes { .. }) => {
            assert_eq!(errno(&e), libc::ENOSPC);
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a 16 MiB sparse image opened on an 8 MiB file system"),
    }
}

#[test]
fn a_region_that_fits_is_reserved_whole_so_every_page_can_be_written() {
    let Some(fs) = SmallTmpfs::mount("fits", SMALL) else {
        return;
    };
    let path = fs.path("image");
    let r = Region::create(&path, 6 << 20).unwrap();
    // Its blocks are taken now: what is left cannot hold another such region.
    assert!(fs.used() >= 6 << 20, "{} bytes used", fs.used());
    let err = Region::create(fs.path("second"), 6 << 20)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(errno(&err), libc::ENOSPC, "{err}");
    // Every page of the first takes a store and keeps it.
    let len = r.len();
    for off in (0..len).step_by(4096) {
        r.store_u64(off, off ^ 0x5A5A);
    }
    r.fence();
    for off in (0..len).step_by(4096) {
        assert_eq!(r.load_u64(off), off ^ 0x5A5A);
    }
}
