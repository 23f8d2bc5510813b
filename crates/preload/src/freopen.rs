//! `freopen` (and `freopen64`) of a path of the mount: a standard stream gets the
//! file's descriptor moved under it with the shim's own `dup2` and `close`, which swap
//! the stream (`stdio::after_std_change`).

use std::ffi::c_char;

use libc::FILE;

use crate::call::open;
use crate::guard::{export, Answer};
use crate::path::{classify, Target};
use crate::stdio::{easy_fopen, flags_of, std_slot};

export! {
    fn freopen(path: *const c_char, mode: *const c_char, old: *mut FILE) -> *mut FILE { easy_freopen(path, mode, old) }
    fn freopen64(path: *const c_char, mode: *const c_char, old: *mut FILE) -> *mut FILE { easy_freopen(path, mode, old) }
}

/// `freopen` of a path of the mount. A standard stream stays the program's
/// `stdin`/`stdout`/`stderr` as the kernel's `freopen` keeps it: the file's descriptor
/// is moved onto 0, 1 or 2 and the variable becomes the shim's stream for it (what
/// `uniq FILE` and `sort -o` do). Another stream cannot become a cookie stream in
/// place: it is closed and a new one returned (a program that keeps using `old` is
/// not served).
fn easy_freopen(path: *const c_char, mode: *const c_char, old: *mut FILE) -> Answer<*mut FILE> {
    let t = classify(libc::AT_FDCWD, path);
    if let Ok(Target::Kernel) = t {
        return None;
    }
    let std = (0..3).find(|&k| {
        // SAFETY: reading the standard stream variable, as the program would.
        std_slot(k).is_some_and(|(slot, _)| !old.is_null() && unsafe { *slot } == old)
    });
    let Some(k) = std else {
        let new = easy_fopen(path, mode)?;
        if !old.is_null() {
            // SAFETY: the program's stream, closed as freopen closes it.
            unsafe { libc::fclose(old) };
        }
        return Some(new);
    };
    let flags = match flags_of(mode) {
        Ok(f) => f & !libc::O_CLOEXEC,
        Err(e) => return Some(Err(e)),
    };
    let fd = match open(t, flags, 0o666)? {
        Ok(fd) => fd,
        Err(e) => return Some(Err(e)),
    };
    // SAFETY: the program's stream: what it buffered goes out first, as freopen's
    // close of the old file would.
    unsafe { libc::fflush(old) };
    // The shim's own `dup2` and `close`: they swap the standard stream (see
    // `after_std_change`).
    let r = crate::open::easy_dup3(fd, k, 0, true);
    let _ = crate::open::easy_close(fd);
    if let Some(Err(e)) = r {
        return Some(Err(e));
    }
    // SAFETY: the variable now holds the shim's stream for `k`.
    Some(Ok(unsafe { *std_slot(k).map(|(slot, _)| slot)? }))
}
