//! Reads, writes, seeks and syncs of easyio descriptors.

use std::ffi::{c_int, c_void};

use fs::{Fd, Whence};
use libc::{iovec, off_t, size_t, ssize_t};

use crate::call::fd_call;
use crate::guard::{errno_of, export, Answer};
use crate::live::Live;
use crate::real::{buf, buf_mut, iovecs};

/// Reads at the position (`None`) or at an offset.
pub(crate) fn read_at(l: &Live, fd: Fd, b: &mut [u8], off: Option<u64>) -> Result<usize, i32> {
    match off {
        None => l.fs.read(fd, b),
        Some(o) => l.fs.pread(fd, b, o),
    }
    .map_err(errno_of)
}

/// Writes at the position (`None`) or at an offset.
pub(crate) fn write_at(l: &Live, fd: Fd, b: &[u8], off: Option<u64>) -> Result<usize, i32> {
    match off {
        None => l.fs.write(fd, b),
        Some(o) => l.fs.pwrite(fd, b, o),
    }
    .map_err(errno_of)
}

fn offset(off: off_t) -> Result<u64, i32> {
    u64::try_from(off).map_err(|_| libc::EINVAL)
}

fn easy_read(kfd: c_int, p: *mut c_void, n: size_t, off: Option<off_t>) -> Answer<ssize_t> {
    fd_call(kfd, |d, l| {
        let off = off.map(offset).transpose()?;
        read_at(l, d.fd, &mut buf_mut(p, n), off)
            .map(|k| crate::mmap::read_done(kfd, p, k, off) as ssize_t)
    })
}

fn easy_write(kfd: c_int, p: *const c_void, n: size_t, off: Option<off_t>) -> Answer<ssize_t> {
    fd_call(kfd, |d, l| {
        let off = off.map(offset).transpose()?;
        write_at(l, d.fd, &buf(p, n), off)
            .map(|k| crate::mmap::write_done(kfd, p, k, off) as ssize_t)
    })
}

/// `readv`: one read into a staging buffer, scattered (one call, so one offset).
fn easy_readv(kfd: c_int, iov: *const iovec, cnt: c_int, off: Option<off_t>) -> Answer<ssize_t> {
    fd_call(kfd, |d, l| {
        let v = iovecs(iov, cnt)?;
        let off = off.map(offset).transpose()?;
        let total: usize = v.iter().map(|i| i.iov_len).sum();
        let mut stage = vec![0u8; total];
        let n = read_at(l, d.fd, &mut stage, off)?;
        let n = crate::mmap::read_done(kfd, stage.as_mut_ptr().cast(), n, off);
        let mut rest = &stage[..n];
        for i in v.iter() {
            let k = rest.len().min(i.iov_len);
            buf_mut(i.iov_base, k).copy_from_slice(&rest[..k]);
            rest = &rest[k..];
        }
        Ok(n as ssize_t)
    })
}

/// `writev`: gathered into one write, so that `O_APPEND` writes stay whole.
fn easy_writev(kfd: c_int, iov: *const iovec, cnt: c_int, off: Option<off_t>) -> Answer<ssize_t> {
    fd_call(kfd, |d, l| {
        let v = iovecs(iov, cnt)?;
        let off = off.map(offset).transpose()?;
        let mut stage = Vec::with_capacity(v.iter().map(|i| i.iov_len).sum());
        for i in v.iter() {
            stage.extend_from_slice(&buf(i.iov_base, i.iov_len));
        }
        write_at(l, d.fd, &stage, off)
            .map(|n| crate::mmap::write_done(kfd, stage.as_ptr().cast(), n, off) as ssize_t)
    })
}

/// `preadv2`/`pwritev2`: offset -1 is the position; flags (`RWF_*`) are hints the
/// file system has nothing to do with, but unknown bits are EOPNOTSUPP as in Linux.
fn off2(off: off_t, flags: c_int) -> Result<Option<off_t>, i32> {
    const KNOWN: c_int = 0x1f; // RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_NOWAIT | RWF_APPEND
    if flags & !KNOWN != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(if off == -1 { None } else { Some(off) })
}

/// `lseek`.
pub(crate) fn seek(kfd: c_int, off: off_t, whence: c_int) -> Answer<off_t> {
    fd_call(kfd, |d, l| {
        let w = match whence {
            libc::SEEK_SET => Whence::Set,
            libc::SEEK_CUR => Whence::Cur,
            libc::SEEK_END => Whence::End,
            libc::SEEK_DATA => Whence::Data,
            libc::SEEK_HOLE => Whence::Hole,
            _ => return Err(libc::EINVAL),
        };
        l.fs.lseek(d.fd, off, w)
            .map(|p| p as off_t)
            .map_err(errno_of)
    })
}

fn sync(kfd: c_int) -> Answer<c_int> {
    crate::mmap::before_sync(kfd);
    fd_call(kfd, |d, l| l.fs.fsync(d.fd).map(|_| 0).map_err(errno_of))
}

fn ftrunc(kfd: c_int, len: off_t) -> Answer<c_int> {
    fd_call(kfd, |d, l| {
        let len = u64::try_from(len).map_err(|_| libc::EINVAL)?;
        l.fs.ftruncate(d.fd, len)
            .map(|_| crate::mmap::truncated(kfd, len))
            .map_err(errno_of)
    })
}

fn alloc(kfd: c_int, mode: c_int, off: off_t, len: off_t) -> Answer<c_int> {
    fd_call(kfd, |d, l| {
        let (off, len) = (offset(off)?, offset(len)?);
        l.fs.fallocate(d.fd, mode, off, len)
            .map(|_| crate::mmap::allocated(kfd, mode, off, len))
            .map_err(errno_of)
    })
}

/// `posix_fallocate` answers the error number itself (not -1 and errno), as libc.
fn posix_alloc(kfd: c_int, off: off_t, len: off_t) -> Answer<c_int> {
    alloc(kfd, 0, off, len).map(|r| Ok(r.unwrap_or_else(|e| e)))
}

export! {
    fn read(fd: c_int, p: *mut c_void, n: size_t) -> ssize_t { easy_read(fd, p, n, None) }
    fn write(fd: c_int, p: *const c_void, n: size_t) -> ssize_t { easy_write(fd, p, n, None) }
    fn pread(fd: c_int, p: *mut c_void, n: size_t, off: off_t) -> ssize_t { easy_read(fd, p, n, Some(off)) }
    fn pread64(fd: c_int, p: *mut c_void, n: size_t, off: off_t) -> ssize_t { easy_read(fd, p, n, Some(off)) }
    fn pwrite(fd: c_int, p: *const c_void, n: size_t, off: off_t) -> ssize_t { easy_write(fd, p, n, Some(off)) }
    fn pwrite64(fd: c_int, p: *const c_void, n: size_t, off: off_t) -> ssize_t { easy_write(fd, p, n, Some(off)) }
    fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t { easy_readv(fd, iov, cnt, None) }
    fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t { easy_writev(fd, iov, cnt, None) }
    fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t { easy_readv(fd, iov, cnt, Some(off)) }
    fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t { easy_readv(fd, iov, cnt, Some(off)) }
    fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t { easy_writev(fd, iov, cnt, Some(off)) }
    fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t { easy_writev(fd, iov, cnt, Some(off)) }
    fn preadv2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t {
        crate::table::is_ours(fd).then(|| off2(off, flags)).and_then(|o| match o {
            Ok(o) => easy_readv(fd, iov, cnt, o),
            Err(e) => Some(Err(e)),
        })
    }
    fn pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t {
        crate::table::is_ours(fd).then(|| off2(off, flags)).and_then(|o| match o {
            Ok(o) => easy_writev(fd, iov, cnt, o),
            Err(e) => Some(Err(e)),
        })
    }
    fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t { seek(fd, off, whence) }
    fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t { seek(fd, off, whence) }
    fn fsync(fd: c_int) -> c_int { sync(fd) }
    fn fdatasync(fd: c_int) -> c_int { sync(fd) }
    fn syncfs(fd: c_int) -> c_int { sync(fd) }
    fn ftruncate(fd: c_int, len: off_t) -> c_int { ftrunc(fd, len) }
    fn ftruncate64(fd: c_int, len: off_t) -> c_int { ftrunc(fd, len) }
    fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
        // Advice only: nothing to do (returns the error number, not -1, as libc).
        let _ = (off, len, advice);
        crate::table::is_ours(fd).then_some(Ok(0))
    }
    fn posix_fadvise64(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
        let _ = (off, len, advice);
        crate::table::is_ours(fd).then_some(Ok(0))
    }
    fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int { alloc(fd, mode, off, len) }
    fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int { alloc(fd, mode, off, len) }
    fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int { posix_alloc(fd, off, len) }
    fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int { posix_alloc(fd, off, len) }
}
