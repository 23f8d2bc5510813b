//! The program's umask: the shim's backends create with none, and the shim clears
//! the bits of the program's current mask itself, so that a `umask` the program
//! sets after the mount (a shell's `umask 077`) holds on the mount as on the kernel.

use std::sync::atomic::{AtomicU32, Ordering};

use libc::mode_t;

/// The program's umask; `u32::MAX` until first read.
static MASK: AtomicU32 = AtomicU32::new(u32::MAX);

/// The process's umask, read once without changing it.
fn current() -> u32 {
    let m = MASK.load(Ordering::Relaxed);
    if m != u32::MAX {
        return m;
    }
    let m = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022);
    MASK.store(m, Ordering::Relaxed);
    m
}

/// `mode` with the program's umask cleared (file type bits kept).
pub(crate) fn masked(mode: u32) -> u32 {
    mode & !(current() & 0o777)
}

/// `umask`: libc's, and the shim remembers it.
#[no_mangle]
extern "C" fn umask(mask: mode_t) -> mode_t {
    let old = crate::real::libc_call!(umask: fn(mode_t) -> mode_t, mask);
    MASK.store(mask & 0o777, Ordering::Relaxed);
    old
}
