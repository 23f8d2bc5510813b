//! Opening, closing and duplicating descriptors, and `fcntl`.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

use libc::mode_t;

use crate::call::{fd_call, open as open_target};
use crate::guard::{export, Answer};
use crate::path::classify;
use crate::real::libc_call;
use crate::table;

fn open_at(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> Answer<c_int> {
    open_target(classify(dirfd, path), flags, mode)
}

const CREAT: c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

export! {
    fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int { open_at(libc::AT_FDCWD, path, flags, mode) }
    fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int { open_at(libc::AT_FDCWD, path, flags, mode) }
    fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int { open_at(dirfd, path, flags, mode) }
    fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int { open_at(dirfd, path, flags, mode) }
    fn __open_2(path: *const c_char, flags: c_int) -> c_int { open_at(libc::AT_FDCWD, path, flags, 0) }
    fn __open64_2(path: *const c_char, flags: c_int) -> c_int { open_at(libc::AT_FDCWD, path, flags, 0) }
    fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int { open_at(dirfd, path, flags, 0) }
    fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int { open_at(dirfd, path, flags, 0) }
    fn creat(path: *const c_char, mode: mode_t) -> c_int { open_at(libc::AT_FDCWD, path, CREAT, mode) }
    fn creat64(path: *const c_char, mode: mode_t) -> c_int { open_at(libc::AT_FDCWD, path, CREAT, mode) }
    fn close(fd: c_int) -> c_int { easy_close(fd) }
    fn dup(fd: c_int) -> c_int {
        if crate::mount::is_internal(fd) {
            return Some(Err(libc::EBADF));
        }
        table::get(fd).map(|d| {
            let new = libc_call!(fcntl: fn(c_int, c_int, c_int) -> c_int, fd, libc::F_DUPFD_CLOEXEC, 0);
            if new < 0 {
                return Err(crate::real::errno());
            }
            table::insert(new, d, false);
            Ok(new)
        })
    }
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int { easy_close_range(first, last, flags) }
    fn dup2(old: c_int, new: c_int) -> c_int { easy_dup3(old, new, 0, true) }
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int { easy_dup3(old, new, flags, false) }
    fn fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int { easy_fcntl(fd, cmd, arg) }
    fn fcntl64(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int { easy_fcntl(fd, cmd, arg) }
    fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
        // No terminal, no clone, no file-system specific request: ENOTTY, as the
        // kernel answers a request a file does not know.
        let _ = (req, arg);
        table::is_ours(fd).then_some(Err(libc::ENOTTY))
    }
    fn flock(fd: c_int, op: c_int) -> c_int { fd_call(fd, |d, l| crate::lock::flock(d, l, op)) }
}

/// `close`: the description closes with its last descriptor; the placeholder goes.
/// A descriptor the mount itself holds stays open: a program that closes every
/// descriptor it did not open (before an exec, say) must not unmap the image; to the
/// program it is not open (EBADF).
pub(crate) fn easy_close(fd: c_int) -> Answer<c_int> {
    if crate::mount::is_internal(fd) {
        return Some(Err(libc::EBADF));
    }
    if !table::is_ours(fd) {
        return None;
    }
    crate::stdio::before_std_change(fd);
    table::remove(fd);
    table::close_placeholder(fd);
    crate::stdio::after_std_change(fd);
    Some(Ok(0))
}

/// `close_range` (what Python's `subprocess` and glibc's `closefrom` call before
/// an exec): the mount's own descriptors in the range stay open (the kernel's call
/// is made on the gaps between them); the mount's descriptors closed or marked
/// close-on-exec follow in the table.
fn easy_close_range(first: c_uint, last: c_uint, flags: c_int) -> Answer<c_int> {
    let inside = |k: i32| k >= 0 && (first..=last).contains(&(k as c_uint));
    let internal: Vec<i32> = crate::mount::internal_fds()
        .into_iter()
        .filter(|&k| inside(k))
        .collect();
    let ours: Vec<i32> = table::entries()
        .into_iter()
        .map(|(k, _, _)| k)
        .filter(|&k| inside(k))
        .collect();
    if internal.is_empty() && ours.is_empty() {
        return None;
    }
    let real = |a: c_uint, b: c_uint| libc_call!(close_range: fn(c_uint, c_uint, c_int) -> c_int, a, b, flags);
    let mut from = first;
    for k in internal {
        let k = k as c_uint;
        if k > from && real(from, k - 1) != 0 {
            return Some(Err(crate::real::errno()));
        }
        from = k.saturating_add(1);
    }
    if from <= last && real(from, last) != 0 {
        return Some(Err(crate::real::errno()));
    }
    for k in ours {
        if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 {
            table::set_cloexec(k, true);
        } else {
            table::remove(k);
        }
    }
    Some(Ok(0))
}

/// `dup2` and `dup3`: the kernel moves the placeholder (closing whatever `new` was);
/// the table follows.
pub(crate) fn easy_dup3(old: c_int, new: c_int, flags: c_int, is_dup2: bool) -> Answer<c_int> {
    let from = table::get(old);
    if crate::mount::is_internal(new) || crate::mount::is_internal(old) {
        return Some(Err(libc::EBADF));
    }
    if from.is_none() && !table::is_ours(new) {
        return None;
    }
    if old == new {
        return Some(if is_dup2 { Ok(new) } else { Err(libc::EINVAL) });
    }
    if !is_dup2 && flags & !libc::O_CLOEXEC != 0 {
        return Some(Err(libc::EINVAL));
    }
    crate::stdio::before_std_change(new);
    let r = libc_call!(dup3: fn(c_int, c_int, c_int) -> c_int, old, new, flags | if from.is_some() { libc::O_CLOEXEC } else { 0 });
    if r < 0 {
        return Some(Err(crate::real::errno()));
    }
    table::remove(new);
    if let Some(d) = from {
        table::insert(new, d, flags & libc::O_CLOEXEC != 0);
    }
    crate::stdio::after_std_change(new);
    Some(Ok(new))
}

/// Status flags `F_SETFL` may change (others are ignored, as by Linux). `O_APPEND`
/// is fixed at open by the file system: changing it is EINVAL.
const SETFL: c_int = libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME;

fn easy_fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> Answer<c_int> {
    use std::sync::atomic::Ordering;
    let int = arg as usize as c_int;
    fd_call(fd, |d, l| match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let new =
                libc_call!(fcntl: fn(c_int, c_int, c_int) -> c_int, fd, libc::F_DUPFD_CLOEXEC, int);
            if new < 0 {
                return Err(crate::real::errno());
            }
            let d = table::get(fd).ok_or(libc::EBADF)?;
            table::insert(new, d, cmd == libc::F_DUPFD_CLOEXEC);
            Ok(new)
        }
        libc::F_GETFD => Ok(table::cloexec(fd).unwrap_or(false) as c_int * libc::FD_CLOEXEC),
        libc::F_SETFD => {
            table::set_cloexec(fd, int & libc::FD_CLOEXEC != 0);
            Ok(0)
        }
        libc::F_GETFL => Ok(d.status.load(Ordering::Relaxed)),
        libc::F_SETFL => {
            let old = d.status.load(Ordering::Relaxed);
            if (old ^ int) & libc::O_APPEND != 0 {
                return Err(libc::EINVAL);
            }
            d.status
                .store((old & !SETFL) | (int & SETFL), Ordering::Relaxed);
            Ok(0)
        }
        libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW
        | libc::F_GETLK
        | libc::F_OFD_GETLK => crate::lock::fcntl(d, l, cmd, arg),
        _ => Err(libc::EINVAL),
    })
}
