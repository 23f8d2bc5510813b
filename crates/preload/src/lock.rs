//! Advisory locks (`fcntl`'s `F_SETLK`, `F_SETLKW`, `F_GETLK` and their `F_OFD_*`
//! forms, `flock`) on descriptors of the mount. A client of a server has them kept
//! by the server between processes, as the kernel keeps them; an image mounted in
//! this process has no other process to conflict with, so every lock is granted.
//! Waiting is asking again, every millisecond or so, until the lock is granted.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::time::Duration;

use easyio_serve::{LockKind, LockOwner};
use fs::Whence;

use crate::guard::errno_of;
use crate::live::Live;
use crate::table::Desc;

/// Longest pause between two tries of a waiting lock.
const MOST_WAIT: Duration = Duration::from_millis(10);

/// `fcntl(fd, cmd, arg)` for a lock command.
pub(crate) fn fcntl(d: &Desc, l: &Live, cmd: c_int, arg: *mut c_void) -> Result<c_int, i32> {
    let fl = arg.cast::<libc::flock>();
    if fl.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: a lock command's argument is the program's `struct flock`.
    let f = unsafe { &mut *fl };
    let kind = match f.l_type as c_int {
        libc::F_RDLCK => LockKind::Read,
        libc::F_WRLCK => LockKind::Write,
        libc::F_UNLCK => LockKind::Unlock,
        _ => return Err(libc::EINVAL),
    };
    let owner = match cmd {
        libc::F_OFD_SETLK | libc::F_OFD_SETLKW | libc::F_OFD_GETLK => LockOwner::OpenFile,
        _ => LockOwner::Process,
    };
    let open_file = matches!(
        cmd,
        libc::F_OFD_SETLK | libc::F_OFD_SETLKW | libc::F_OFD_GETLK
    );
    if open_file && f.l_pid != 0 {
        return Err(libc::EINVAL);
    }
    let range = range(d, l, f)?;
    if matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        if kind == LockKind::Unlock {
            return Err(libc::EINVAL);
        }
        match l
            .fs
            .lock(d.fd, (owner, true), kind, range)
            .map_err(errno_of)?
        {
            None => f.l_type = libc::F_UNLCK as i16,
            Some(h) => {
                f.l_type = if h.kind == LockKind::Write {
                    libc::F_WRLCK
                } else {
                    libc::F_RDLCK
                } as i16;
                f.l_whence = libc::SEEK_SET as i16;
                f.l_start = h.start as i64;
                f.l_len = h.len as i64;
                f.l_pid = h.pid;
            }
        }
        return Ok(0);
    }
    may_lock(d, kind)?;
    let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
    set(l, d, (owner, wait), kind, range)
}

/// `flock(fd, op)`: a lock of the open file on the whole file.
pub(crate) fn flock(d: &Desc, l: &Live, op: c_int) -> Result<c_int, i32> {
    let kind = match op & !libc::LOCK_NB {
        libc::LOCK_SH => LockKind::Read,
        libc::LOCK_EX => LockKind::Write,
        libc::LOCK_UN => LockKind::Unlock,
        _ => return Err(libc::EINVAL),
    };
    set(
        l,
        d,
        (LockOwner::Flock, op & libc::LOCK_NB == 0),
        kind,
        (0, 0),
    )
}

/// Sets a lock, asking again while it conflicts if `wait`.
fn set(
    l: &Live,
    d: &Desc,
    (owner, wait): (LockOwner, bool),
    kind: LockKind,
    range: (u64, u64),
) -> Result<c_int, i32> {
    let mut pause = Duration::from_micros(100);
    loop {
        match l.fs.lock(d.fd, (owner, false), kind, range) {
            Ok(_) => return Ok(0),
            Err(e) if wait && e.errno() == libc::EAGAIN => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(MOST_WAIT);
            }
            Err(e) => return Err(errno_of(e)),
        }
    }
}

/// A read lock needs the descriptor open for reading, a write lock for writing.
fn may_lock(d: &Desc, kind: LockKind) -> Result<(), i32> {
    let access = d.status.load(Ordering::Relaxed) & libc::O_ACCMODE;
    match kind {
        LockKind::Read if access == libc::O_WRONLY => Err(libc::EBADF),
        LockKind::Write if access == libc::O_RDONLY => Err(libc::EBADF),
        _ => Ok(()),
    }
}

/// The lock's `(start, len)` from the file's start (`len` 0: to the end of any
/// file), as `l_whence`, `l_start` and a possibly negative `l_len` say.
fn range(d: &Desc, l: &Live, f: &libc::flock) -> Result<(u64, u64), i32> {
    let base = match f.l_whence as c_int {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => l.fs.lseek(d.fd, 0, Whence::Cur).map_err(errno_of)? as i64,
        libc::SEEK_END => l.fs.fstat(d.fd).map_err(errno_of)?.size as i64,
        _ => return Err(libc::EINVAL),
    };
    let start = base.checked_add(f.l_start).ok_or(libc::EOVERFLOW)?;
    let (start, len) = if f.l_len < 0 {
        let back = f.l_len.checked_neg().ok_or(libc::EINVAL)?;
        (start - back, back)
    } else {
        (start, f.l_len)
    };
    if start < 0 {
        return Err(libc::EINVAL);
    }
    Ok((start as u64, len as u64))
}
