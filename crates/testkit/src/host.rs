//! What tests ask the host for: the LD_PRELOAD shim the build made beside the test
//! program, and how much of a file the page cache has not written back.

use std::path::{Path, PathBuf};

/// The shim (`libeasyio_preload.so`) this test's build made: beside the test program
/// or one directory up (a crate that has `preload` as a dev-dependency builds it).
pub fn preload_shim() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of this test program");
    let dir = exe.parent().expect("the test program's directory");
    let found = [Some(dir), dir.parent()]
        .into_iter()
        .flatten()
        .map(|d| d.join("libeasyio_preload.so"))
        .find(|p| p.exists());
    found.unwrap_or_else(|| panic!("libeasyio_preload.so not built beside {}", dir.display()))
}

/// Pages of `path` dirty or under write-back in the page cache, from the kernel's
/// `cachestat` (Linux 6.5); `None` where the kernel lacks it.
pub fn unwritten_pages(path: &Path) -> Option<u64> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct CacheStat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let f = std::fs::File::open(path).expect("the file to look at");
    let range = Range { off: 0, len: 0 };
    let mut cs = CacheStat::default();
    // SAFETY: cachestat reads `range` and writes `cs`, both live and of the kernel's
    // layout; len 0 means "to the end of the file".
    let rc = unsafe {
        use std::os::fd::AsRawFd;
        libc::syscall(SYS_CACHESTAT, f.as_raw_fd(), &range, &mut cs, 0)
    };
    (rc == 0).then_some(cs.nr_dirty + cs.nr_writeback)
}
