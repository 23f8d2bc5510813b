//! The shared-memory object of one file as this process holds it, and the libc
//! calls made on its descriptor (size, read, write, `flock`, the OFD lock).

use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use libc::{off_t, size_t};
use parking_lot::Mutex;

use crate::real::{errno, real};
use crate::table::Desc;

/// Bytes moved per step between the file and the object.
pub(super) const CHUNK: usize = 1 << 20;

/// A file: its inode number and generation (a reused number has another).
pub(super) type Key = (u64, u64);

/// The shared-memory object of one file, as this process holds it.
pub(super) struct Object {
    pub(super) key: Key,
    pub(super) name: CString,
    /// This process's descriptor of it (close-on-exec), holding `LOCK_SH` while the
    /// process maps it.
    pub(super) fd: c_int,
    /// The open file written back to: one this process mapped the file by (a
    /// writable one if any was).
    pub(super) desc: Mutex<Arc<Desc>>,
    /// Takes turns between this process's threads (an OFD lock does not: they share
    /// the descriptor).
    pub(super) turn: Mutex<()>,
    /// In a child of `fork` that cannot write it back (its parent mounts the image
    /// itself, or did not hand the descriptor over): the parent's object, which the
    /// child neither writes back nor lets go.
    pub(super) inherited: AtomicBool,
}

impl Drop for Object {
    fn drop(&mut self) {
        let close = real!(close: fn(c_int) -> c_int);
        // SAFETY: our own descriptor, closed once.
        unsafe { close(self.fd) };
    }
}

pub(super) fn page() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf only reads a constant of the system.
    *PAGE.get_or_init(|| (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize)
}

pub(super) fn round_up(n: usize) -> usize {
    n.div_ceil(page()) * page()
}

impl Object {
    pub(super) fn desc(&self) -> Arc<Desc> {
        self.desc.lock().clone()
    }

    pub(super) fn stat(&self) -> Result<libc::stat64, i32> {
        let fstat = real!(fstat64: fn(c_int, *mut libc::stat64) -> c_int);
        // SAFETY: a plain struct filled by the call.
        let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
        // SAFETY: our descriptor and a struct of the right type.
        if unsafe { fstat(self.fd, &mut st) } != 0 {
            return Err(errno());
        }
        Ok(st)
    }

    pub(super) fn size(&self) -> Result<u64, i32> {
        self.stat().map(|s| s.st_size as u64)
    }

    pub(super) fn resize(&self, len: u64) -> Result<(), i32> {
        let ftruncate = real!(ftruncate64: fn(c_int, off_t) -> c_int);
        // SAFETY: our descriptor.
        if unsafe { ftruncate(self.fd, len as off_t) } != 0 {
            return Err(errno());
        }
        Ok(())
    }

    /// Reads at `off` until `b` is full or the object ends; returns the bytes read.
    pub(super) fn read(&self, b: &mut [u8], off: u64) -> Result<usize, i32> {
        let pread = real!(pread64: fn(c_int, *mut c_void, size_t, off_t) -> isize);
        let mut at = 0;
        while at < b.len() {
            let rest = &mut b[at..];
            // SAFETY: `rest` is a live buffer of that length.
            let n = unsafe {
                pread(
                    self.fd,
                    rest.as_mut_ptr().cast(),
                    rest.len(),
                    (off + at as u64) as off_t,
                )
            };
            match n {
                0 => break,
                n if n < 0 && errno() == libc::EINTR => continue,
                n if n < 0 => return Err(errno()),
                n => at += n as usize,
            }
        }
        Ok(at)
    }

    /// Writes all of `b` at `off`.
    pub(super) fn write(&self, b: &[u8], off: u64) -> Result<(), i32> {
        let pwrite = real!(pwrite64: fn(c_int, *const c_void, size_t, off_t) -> isize);
        let mut at = 0;
        while at < b.len() {
            let rest = &b[at..];
            // SAFETY: `rest` is a live buffer of that length.
            let n = unsafe {
                pwrite(
                    self.fd,
                    rest.as_ptr().cast(),
                    rest.len(),
                    (off + at as u64) as off_t,
                )
            };
            match n {
                n if n < 0 && errno() == libc::EINTR => continue,
                n if n <= 0 => return Err(if n == 0 { libc::EIO } else { errno() }),
                n => at += n as usize,
            }
        }
        Ok(())
    }

    /// `flock(op)`; whether it was granted.
    pub(super) fn flock(&self, op: c_int) -> bool {
        let flock = real!(flock: fn(c_int, c_int) -> c_int);
        loop {
            // SAFETY: our descriptor.
            if unsafe { flock(self.fd, op) } == 0 {
                return true;
            }
            if errno() != libc::EINTR {
                return false;
            }
        }
    }

    /// Sets (`F_WRLCK`) or clears (`F_UNLCK`) the OFD lock on the whole object.
    fn ofd_lock(&self, kind: c_int) -> Result<(), i32> {
        let fcntl = real!(fcntl: fn(c_int, c_int, *mut libc::flock) -> c_int);
        // SAFETY: a plain struct; zero is a valid value of every field.
        let mut l: libc::flock = unsafe { std::mem::zeroed() };
        l.l_type = kind as libc::c_short;
        l.l_whence = libc::SEEK_SET as libc::c_short;
        let cmd = if kind == libc::F_UNLCK {
            libc::F_OFD_SETLK
        } else {
            libc::F_OFD_SETLKW
        };
        loop {
            // SAFETY: our descriptor and a struct of the type the command takes.
            if unsafe { fcntl(self.fd, cmd, &mut l) } == 0 {
                return Ok(());
            }
            if errno() != libc::EINTR {
                return Err(errno());
            }
        }
    }

    /// Runs `f` in this object's turn: alone among the threads of this process and
    /// the processes that map the file.
    pub(super) fn locked<T>(&self, f: impl FnOnce() -> Result<T, i32>) -> Result<T, i32> {
        let _turn = self.turn.lock();
        self.ofd_lock(libc::F_WRLCK)?;
        let r = f();
        let _ = self.ofd_lock(libc::F_UNLCK);
        r
    }

    /// Bytes of the object laid over `b`, which holds the file's bytes at `off`.
    pub(super) fn overlay(&self, b: &mut [u8], off: u64) -> Result<(), i32> {
        let size = self.size()?;
        if off < size {
            let n = b.len().min((size - off) as usize);
            self.read(&mut b[..n], off)?;
        }
        Ok(())
    }
}
