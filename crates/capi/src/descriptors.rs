//! Where a mount keeps its kernel descriptors: high, out of the way of the numbers a
//! program names itself (a shell's `exec 3>`, a loop that closes 3..N before an
//! exec). The C library's mount and the shim's both open what they keep above
//! [`floor`].

/// The lowest number a mount's descriptors take: 64 below the process's limit,
/// at most 1000.
pub fn floor() -> i32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 10;
    }
    lim.rlim_cur.saturating_sub(64).clamp(10, 1000) as i32
}

/// Runs `f` with every free descriptor number below [`floor`] taken, so that what
/// `f` opens and keeps (the region file, an engine's) lands above it.
pub fn above_floor<T>(f: impl FnOnce() -> T) -> T {
    let floor = floor();
    // SAFETY: opening /dev/null for a path only.
    let first = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    let mut taken = Vec::new();
    if first >= 0 {
        taken.push(first);
        loop {
            // SAFETY: a copy of our own descriptor.
            let d = unsafe { libc::fcntl(first, libc::F_DUPFD_CLOEXEC, 0) };
            if d < 0 {
                break;
            }
            taken.push(d);
            if d >= floor {
                break;
            }
        }
    }
    let r = f();
    for d in taken {
        // SAFETY: our own descriptors, taken above.
        unsafe { libc::close(d) };
    }
    r
}
