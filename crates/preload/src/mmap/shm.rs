//! Objects found, opened and let go: their names, the sweep of objects no process
//! holds, and this process's share of one.

use std::ffi::{c_int, CString};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::file::{file_size, fill, flush_locked, grow, report, writable};
use super::object::{Key, Object};
use crate::call::mount_of;
use crate::live::Live;
use crate::real::{errno, real};
use crate::table::Desc;

/// The object's name: the file system this process reaches and the file. The
/// image or socket is looked at once per name (a relative name would follow the
/// kernel's current directory); the first time, the objects of that file system no
/// process holds are removed (see [`sweep`]).
fn object_name(l: &Live, key: Key) -> Result<CString, i32> {
    static SEEN: Mutex<Vec<(String, (u64, u64))>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock();
    let id = match seen.iter().find(|(n, _)| *n == l.image) {
        Some((_, id)) => *id,
        None => {
            let m =
                std::fs::metadata(&l.image).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            seen.push((l.image.clone(), (m.dev(), m.ino())));
            sweep(&format!("easyio.{:x}.{:x}.", m.dev(), m.ino()));
            (m.dev(), m.ino())
        }
    };
    let name = format!("/easyio.{:x}.{:x}.{:x}.{:x}", id.0, id.1, key.0, key.1);
    CString::new(name).map_err(|_| libc::EINVAL)
}

/// Removes the objects named `prefix...` that no process holds: left by processes
/// that were killed while they mapped a file (what they stored since their last
/// write back is lost, as it would be when the next process that maps the file
/// fills the object again). Each is looked at in its turn, as a last process out
/// does; one whose turn is taken is left alone.
fn sweep(prefix: &str) {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    let fcntl = real!(fcntl: fn(c_int, c_int, *mut libc::flock) -> c_int);
    let flock = real!(flock: fn(c_int, c_int) -> c_int);
    let fstat = real!(fstat64: fn(c_int, *mut libc::stat64) -> c_int);
    let close = real!(close: fn(c_int) -> c_int);
    for e in dir.flatten() {
        let Some(name) = e
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix(prefix).map(|_| n.to_owned()))
        else {
            continue;
        };
        let Ok(name) = CString::new(format!("/{name}")) else {
            continue;
        };
        // SAFETY: a NUL-terminated name; the descriptor is ours, the structs plain
        // (zero is a valid value of every field) and of the types the calls take.
        unsafe {
            let fd = libc::shm_open(name.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0);
            if fd < 0 {
                continue;
            }
            let mut l: libc::flock = std::mem::zeroed();
            l.l_type = libc::F_WRLCK as libc::c_short;
            let mut st: libc::stat64 = std::mem::zeroed();
            if fcntl(fd, libc::F_OFD_SETLK, &mut l) == 0
                && fstat(fd, &mut st) == 0
                && st.st_nlink > 0
                && flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0
            {
                libc::shm_unlink(name.as_ptr());
            }
            close(fd);
        }
    }
}

/// Moves descriptor `fd` out of the way of numbers a program names itself.
fn out_of_the_way(fd: c_int) -> c_int {
    let fcntl = real!(fcntl: fn(c_int, c_int, c_int) -> c_int);
    let close = real!(close: fn(c_int) -> c_int);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    let floor = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        (lim.rlim_cur / 2).clamp(3, 512) as c_int
    } else {
        3
    };
    // SAFETY: duplicating and closing our own descriptor.
    unsafe {
        let high = fcntl(fd, libc::F_DUPFD_CLOEXEC, floor);
        if high < 0 {
            return fd;
        }
        close(fd);
        high
    }
}

/// Opens (creating it if need be) the object of file `key`, which `d` is open on,
/// and takes this process's share of it: filled from the file if no process held
/// it, grown to the file's length if it is shorter.
pub(super) fn open_object(l: &Live, d: &Arc<Desc>, key: Key) -> Result<Arc<Object>, i32> {
    let name = object_name(l, key)?;
    loop {
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated name.
        let fd = unsafe { libc::shm_open(name.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(errno());
        }
        let obj = Arc::new(Object {
            key,
            name: name.clone(),
            fd: out_of_the_way(fd),
            desc: Mutex::new(d.clone()),
            turn: Mutex::new(()),
            inherited: AtomicBool::new(false),
        });
        if obj.locked(|| take_share(&obj, l, d))? {
            return Ok(obj);
        }
        // The last process let it go (and removed the name) meanwhile: again.
    }
}

/// In the object's turn: takes this process's `LOCK_SH`, filling the object first if
/// no process held it. False when the object was removed since it was opened.
fn take_share(obj: &Object, l: &Live, d: &Desc) -> Result<bool, i32> {
    if obj.stat()?.st_nlink == 0 {
        return Ok(false);
    }
    let size = file_size(l, d)?;
    if obj.flock(libc::LOCK_EX | libc::LOCK_NB) {
        // No process holds it: new, or left by a process that was killed.
        let filled = obj
            .resize(0)
            .and_then(|_| obj.resize(size))
            .and_then(|_| fill(obj, l, d, 0, size, true));
        if let Err(e) = filled {
            // SAFETY: a NUL-terminated name.
            unsafe { libc::shm_unlink(obj.name.as_ptr()) };
            return Err(e);
        }
        obj.flock(libc::LOCK_SH);
    } else {
        // Only a process in its turn holds LOCK_EX, and this is ours.
        if !obj.flock(libc::LOCK_SH | libc::LOCK_NB) {
            return Err(libc::EAGAIN);
        }
        grow(obj, l, d, size)?;
    }
    Ok(true)
}

/// This process's last mapping of the object went: if no other process maps it,
/// the object is written back whole and removed.
pub(super) fn release(obj: Arc<Object>) {
    if obj.inherited.load(Ordering::Relaxed) {
        return;
    }
    let d = obj.desc();
    let r = obj.locked(|| {
        // A failed conversion drops this process's LOCK_SH: it was leaving anyway.
        if !obj.flock(libc::LOCK_EX | libc::LOCK_NB) {
            return Ok(());
        }
        let r = if writable(&d) {
            mount_of(&d).and_then(|l| flush_locked(&obj, &l, &d, 0, u64::MAX))
        } else {
            Ok(())
        };
        // SAFETY: a NUL-terminated name.
        unsafe { libc::shm_unlink(obj.name.as_ptr()) };
        r
    });
    obj.flock(libc::LOCK_UN);
    let _ = report(r);
}
