//! The POSIX-shaped calls: open, read, write, seek, stat, truncate, sync, and the
//! namespace calls (unlink, mkdir, rename, link, symlink, chmod, chown, utimens).
//! Paths are absolute within the image or relative to its root; the `*at` forms take
//! a directory descriptor of the same mount or [`EASYIO_AT_ROOT`].

use std::ffi::{c_char, c_int, c_void};

use fs::{OpenFlags, Stat, Time, Whence};

use crate::args::{
    bytes, bytes_mut, count, dirfd, offset, out, slice, string, Out, EASYIO_AT_ROOT,
};
use crate::error::{call, CResult, Failure};
use crate::mount::{as_caller, easyio_fs, mount_of, Mount};

/// A call that answers 0 or -1.
fn status(fs: *mut easyio_fs, body: impl FnOnce(&Mount) -> CResult<()>) -> c_int {
    call(-1, || {
        let m = mount_of(fs)?;
        body(&m).map(|()| 0)
    })
}

/// A call that answers a count or -1.
fn sized(fs: *mut easyio_fs, body: impl FnOnce(&Mount) -> CResult<usize>) -> libc::ssize_t {
    call(-1, || {
        let m = mount_of(fs)?;
        body(&m).map(count)
    })
}

/// Opens (and with `O_CREAT` creates, with `mode`) the file at `path`; returns the
/// lowest free descriptor of the mount. Flags are Linux's `O_*`: `O_RDONLY`,
/// `O_WRONLY`, `O_RDWR`, `O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_APPEND`, `O_NOFOLLOW`,
/// `O_DIRECTORY`, `O_PATH`, `O_TMPFILE` (`O_CLOEXEC`, `O_LARGEFILE`, `O_NOCTTY` have
/// no effect); any other flag is EINVAL.
#[no_mangle]
pub extern "C" fn easyio_open(
    fs: *mut easyio_fs,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    easyio_openat(fs, EASYIO_AT_ROOT, path, flags, mode)
}

/// `openat`: `path` relative to the directory descriptor `dirfd` (or
/// [`EASYIO_AT_ROOT`]).
#[no_mangle]
pub extern "C" fn easyio_openat(
    fs: *mut easyio_fs,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    call(-1, || {
        let m = mount_of(fs)?;
        let (d, p) = (crate::args::dirfd(dirfd)?, string(path, "path")?);
        let f = as_caller!(m, openat(d, p, OpenFlags(flags), mode))?;
        c_int::try_from(f.0).map_err(|_| Failure::new(libc::EMFILE, "too many descriptors"))
    })
}

/// Closes a descriptor (EBADF if it is not open).
#[no_mangle]
pub extern "C" fn easyio_close(fs: *mut easyio_fs, fd: c_int) -> c_int {
    status(fs, |m| Ok(m.fs.close(crate::args::fd(fd)?)?))
}

/// Reads up to `len` bytes at the descriptor's position into `buf` and advances it;
/// returns the bytes read (0 at the end of the file).
#[no_mangle]
pub extern "C" fn easyio_read(
    fs: *mut easyio_fs,
    fd: c_int,
    buf: *mut c_void,
    len: usize,
) -> libc::ssize_t {
    sized(fs, |m| {
        let f = crate::args::fd(fd)?;
        Ok(m.fs.read_into(f, bytes_mut(buf, len, "buf")?, None)?)
    })
}

/// Writes `len` bytes from `buf` at the descriptor's position (the end with
/// `O_APPEND`) and advances it; durable when it returns. Returns `len`.
#[no_mangle]
pub extern "C" fn easyio_write(
    fs: *mut easyio_fs,
    fd: c_int,
    buf: *const c_void,
    len: usize,
) -> libc::ssize_t {
    sized(fs, |m| {
        let f = crate::args::fd(fd)?;
        Ok(m.fs.write_from(f, bytes(buf, len, "buf")?, None)?)
    })
}

/// Reads up to `len` bytes at offset `off` without moving the position.
#[no_mangle]
pub extern "C" fn easyio_pread(
    fs: *mut easyio_fs,
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    off: libc::off_t,
) -> libc::ssize_t {
    sized(fs, |m| {
        let (f, off) = (crate::args::fd(fd)?, offset(off, "offset")?);
        Ok(m.fs.read_into(f, bytes_mut(buf, len, "buf")?, Some(off))?)
    })
}

/// Writes `len` bytes at offset `off` without moving the position (at the end with
/// `O_APPEND`, as Linux does).
#[no_mangle]
pub extern "C" fn easyio_pwrite(
    fs: *mut easyio_fs,
    fd: c_int,
    buf: *const c_void,
    len: usize,
    off: libc::off_t,
) -> libc::ssize_t {
    sized(fs, |m| {
        let (f, off) = (crate::args::fd(fd)?, offset(off, "offset")?);
        Ok(m.fs.write_from(f, bytes(buf, len, "buf")?, Some(off))?)
    })
}

/// The buffers of an iovec array, checked.
fn iovecs(iov: *const libc::iovec, n: c_int) -> CResult<Vec<Out>> {
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n <= libc::UIO_MAXIOV as usize)
        .ok_or_else(|| Failure::new(libc::EINVAL, "iovcnt out of range"))?;
    slice(iov, n, "iov")?
        .iter()
        .map(|v| bytes_mut(v.iov_base, v.iov_len, "iov_base"))
        .collect()
}

/// Reads into the buffers in turn from `at` (`None`: the position), stopping at a
/// short read.
fn scatter(m: &Mount, f: fs::Fd, bufs: Vec<Out>, at: Option<u64>) -> CResult<usize> {
    let mut total = 0usize;
    for b in bufs {
        let n = m.fs.read_into(f, b, at.map(|off| off + total as u64))?;
        total += n;
        if n < b.len() {
            break;
        }
    }
    Ok(total)
}

/// Writes the buffers as one write (atomic, as `writev` is) at `at` (`None`: the
/// position).
fn gather(m: &Mount, f: fs::Fd, bufs: Vec<Out>, at: Option<u64>) -> CResult<usize> {
    let mut all = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
    for b in bufs {
        all.extend_from_slice(&b.readable().view());
    }
    Ok(match at {
        Some(off) => m.fs.pwrite(f, &all, off)?,
        None => m.fs.write(f, &all)?,
    })
}

/// `readv`: fills the `iovcnt` buffers in turn from the position.
#[no_mangle]
pub extern "C" fn easyio_readv(
    fs: *mut easyio_fs,
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
) -> libc::ssize_t {
    sized(fs, |m| {
        scatter(m, crate::args::fd(fd)?, iovecs(iov, iovcnt)?, None)
    })
}

/// `writev`: writes the `iovcnt` buffers, in order, as one write at the position.
#[no_mangle]
pub extern "C" fn easyio_writev(
    fs: *mut easyio_fs,
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
) -> libc::ssize_t {
    sized(fs, |m| {
        gather(m, crate::args::fd(fd)?, iovecs(iov, iovcnt)?, None)
    })
}

/// `preadv`: [`easyio_readv`] at offset `off`, the position unchanged.
#[no_mangle]
pub extern "C" fn easyio_preadv(
    fs: *mut easyio_fs,
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: libc::off_t,
) -> libc::ssize_t {
    sized(fs, |m| {
        let off = offset(off, "offset")?;
        scatter(m, crate::args::fd(fd)?, iovecs(iov, iovcnt)?, Some(off))
    })
}

/// `pwritev`: [`easyio_writev`] at offset `off`, the position unchanged.
#[no_mangle]
pub extern "C" fn easyio_pwritev(
    fs: *mut easyio_fs,
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: libc::off_t,
) -> libc::ssize_t {
    sized(fs, |m| {
        let off = offset(off, "offset")?;
        gather(m, crate::args::fd(fd)?, iovecs(iov, iovcnt)?, Some(off))
    })
}

/// Moves the position: `whence` is `SEEK_SET`, `SEEK_CUR`, `SEEK_END`, `SEEK_DATA`
/// or `SEEK_HOLE`. Returns the new position (ENXIO for `SEEK_DATA`/`SEEK_HOLE` at or
/// past the end).
#[no_mangle]
pub extern "C" fn easyio_lseek(
    fs: *mut easyio_fs,
    fd: c_int,
    off: libc::off_t,
    whence: c_int,
) -> libc::off_t {
    call(-1, || {
        let m = mount_of(fs)?;
        let w = match whence {
            libc::SEEK_SET => Whence::Set,
            libc::SEEK_CUR => Whence::Cur,
            libc::SEEK_END => Whence::End,
            libc::SEEK_DATA => Whence::Data,
            libc::SEEK_HOLE => Whence::Hole,
            _ => return Err(Failure::new(libc::EINVAL, format!("bad whence {whence}"))),
        };
        let pos = m.fs.lseek(crate::args::fd(fd)?, off, w)?;
        libc::off_t::try_from(pos).map_err(|_| Failure::new(libc::EOVERFLOW, "offset too large"))
    })
}

/// Fills `st` as the kernel's `stat` does.
fn fill(st: &mut libc::stat, s: &Stat) {
    // SAFETY: `libc::stat` is plain integers; all zeros is a valid value.
    *st = unsafe { std::mem::zeroed() };
    st.st_dev = 0;
    st.st_ino = s.ino;
    st.st_mode = s.mode;
    st.st_nlink = s.nlink.into();
    st.st_uid = s.uid;
    st.st_gid = s.gid;
    st.st_rdev = s.rdev;
    st.st_size = s.size as libc::off_t;
    st.st_blksize = s.blksize.into();
    st.st_blocks = s.blocks as libc::blkcnt_t;
    let split = |ns: i64| (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000));
    (st.st_atime, st.st_atime_nsec) = split(s.atime_ns);
    (st.st_mtime, st.st_mtime_nsec) = split(s.mtime_ns);
    (st.st_ctime, st.st_ctime_nsec) = split(s.ctime_ns);
}

/// `fstat`: the attributes of an open file (unlinked or not) into `st`.
#[no_mangle]
pub extern "C" fn easyio_fstat(fs: *mut easyio_fs, fd: c_int, st: *mut libc::stat) -> c_int {
    status(fs, |m| {
        let mut st = out(st, "st")?;
        fill(&mut st, &m.fs.fstat(crate::args::fd(fd)?)?);
        Ok(())
    })
}

/// `stat`: the attributes of the file at `path`, a final symbolic link followed.
#[no_mangle]
pub extern "C" fn easyio_stat(
    fs: *mut easyio_fs,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    easyio_fstatat(fs, EASYIO_AT_ROOT, path, st, 0)
}

/// `lstat`: as [`easyio_stat`], a final symbolic link described itself.
#[no_mangle]
pub extern "C" fn easyio_lstat(
    fs: *mut easyio_fs,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    easyio_fstatat(fs, EASYIO_AT_ROOT, path, st, libc::AT_SYMLINK_NOFOLLOW)
}

/// `fstatat` with `AT_SYMLINK_NOFOLLOW` and `AT_EMPTY_PATH`.
#[no_mangle]
pub extern "C" fn easyio_fstatat(
    fs: *mut easyio_fs,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    status(fs, |m| {
        let (d, p, mut st) = (
            crate::args::dirfd(dirfd)?,
            string(path, "path")?,
            out(st, "st")?,
        );
        fill(&mut st, &as_caller!(m, fstatat(d, p, flags))?);
        Ok(())
    })
}

/// `ftruncate`: sets the size of a file open for writing (EINVAL otherwise).
#[no_mangle]
pub extern "C" fn easyio_ftruncate(fs: *mut easyio_fs, fd: c_int, len: libc::off_t) -> c_int {
    status(fs, |m| {
        let len = offset(len, "length")?;
        Ok(m.fs.ftruncate(crate::args::fd(fd)?, len)?)
    })
}

/// `truncate`: sets the size of the file at `path`; holes read as zeros.
#[no_mangle]
pub extern "C" fn easyio_truncate(
    fs: *mut easyio_fs,
    path: *const c_char,
    len: libc::off_t,
) -> c_int {
    status(fs, |m| {
        let (p, len) = (string(path, "path")?, offset(len, "length")?);
        Ok(as_caller!(m, truncate(p, len))?)
    })
}

/// `fsync`: every call is durable when it returns, so this only checks the
/// descriptor and reports a failure of the disk under a page-cache region.
#[no_mangle]
pub extern "C" fn easyio_fsync(fs: *mut easyio_fs, fd: c_int) -> c_int {
    status(fs, |m| Ok(m.fs.fsync(crate::args::fd(fd)?)?))
}

/// `fallocate`: mode 0, `FALLOC_FL_KEEP_SIZE`, or `FALLOC_FL_PUNCH_HOLE |
/// FALLOC_FL_KEEP_SIZE`.
#[no_mangle]
pub extern "C" fn easyio_fallocate(
    fs: *mut easyio_fs,
    fd: c_int,
    mode: c_int,
    off: libc::off_t,
    len: libc::off_t,
) -> c_int {
    status(fs, |m| {
        let (off, len) = (offset(off, "offset")?, offset(len, "length")?);
        Ok(m.fs.fallocate(crate::args::fd(fd)?, mode, off, len)?)
    })
}

/// Removes a name that is not a directory.
#[no_mangle]
pub extern "C" fn easyio_unlink(fs: *mut easyio_fs, path: *const c_char) -> c_int {
    easyio_unlinkat(fs, EASYIO_AT_ROOT, path, 0)
}

/// `unlinkat`, with `AT_REMOVEDIR` for an empty directory.
#[no_mangle]
pub extern "C" fn easyio_unlinkat(
    fs: *mut easyio_fs,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    status(fs, |m| {
        let (d, p) = (crate::args::dirfd(dirfd)?, string(path, "path")?);
        Ok(as_caller!(m, unlinkat(d, p, flags))?)
    })
}

/// Creates a directory with `mode` (less the umask of [`crate::easyio_set_cred`]).
#[no_mangle]
pub extern "C" fn easyio_mkdir(
    fs: *mut easyio_fs,
    path: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    easyio_mkdirat(fs, EASYIO_AT_ROOT, path, mode)
}

/// `mkdirat`.
#[no_mangle]
pub extern "C" fn easyio_mkdirat(
    fs: *mut easyio_fs,
    dirfd: c_int,
    path: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    status(fs, |m| {
        let (d, p) = (crate::args::dirfd(dirfd)?, string(path, "path")?);
        Ok(as_caller!(m, mkdirat(d, p, mode))?)
    })
}

/// `mknod`: a FIFO, socket, regular file, or (root only) a device, from `mode`'s
/// `S_IF*` bits.
#[no_mangle]
pub extern "C" fn easyio_mknod(
    fs: *mut easyio_fs,
    path: *const c_char,
    mode: libc::mode_t,
    dev: libc::dev_t,
) -> c_int {
    status(fs, |m| {
        let p = string(path, "path")?;
        Ok(as_caller!(m, mknod(p, mode, dev))?)
    })
}

/// Removes an empty directory.
#[no_mangle]
pub extern "C" fn easyio_rmdir(fs: *mut easyio_fs, path: *const c_char) -> c_int {
    easyio_unlinkat(fs, EASYIO_AT_ROOT, path, libc::AT_REMOVEDIR)
}

/// Renames `old` to `new` atomically, replacing `new` if it exists.
#[no_mangle]
pub extern "C" fn easyio_rename(
    fs: *mut easyio_fs,
    old: *const c_char,
    new: *const c_char,
) -> c_int {
    easyio_renameat2(fs, EASYIO_AT_ROOT, old, EASYIO_AT_ROOT, new, 0)
}

/// `renameat2` with flags 0, `RENAME_NOREPLACE` or `RENAME_EXCHANGE`.
#[no_mangle]
pub extern "C" fn easyio_renameat2(
    fs: *mut easyio_fs,
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: libc::c_uint,
) -> c_int {
    status(fs, |m| {
        let (od, o) = (dirfd(olddirfd)?, string(old, "old")?);
        let (nd, n) = (dirfd(newdirfd)?, string(new, "new")?);
        Ok(as_caller!(m, renameat2(od, o, nd, n, flags))?)
    })
}

/// Adds the hard link `new` to the file at `old`.
#[no_mangle]
pub extern "C" fn easyio_link(fs: *mut easyio_fs, old: *const c_char, new: *const c_char) -> c_int {
    easyio_linkat(fs, EASYIO_AT_ROOT, old, EASYIO_AT_ROOT, new, 0)
}

/// `linkat` with `AT_SYMLINK_FOLLOW` and `AT_EMPTY_PATH`.
#[no_mangle]
pub extern "C" fn easyio_linkat(
    fs: *mut easyio_fs,
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    status(fs, |m| {
        let (od, o) = (dirfd(olddirfd)?, string(old, "old")?);
        let (nd, n) = (dirfd(newdirfd)?, string(new, "new")?);
        Ok(as_caller!(m, linkat(od, o, nd, n, flags))?)
    })
}

/// Creates the symbolic link `path` pointing to `target`.
#[no_mangle]
pub extern "C" fn easyio_symlink(
    fs: *mut easyio_fs,
    target: *const c_char,
    path: *const c_char,
) -> c_int {
    easyio_symlinkat(fs, target, EASYIO_AT_ROOT, path)
}

/// `symlinkat`.
#[no_mangle]
pub extern "C" fn easyio_symlinkat(
    fs: *mut easyio_fs,
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    status(fs, |m| {
        let (t, d, p) = (
            string(target, "target")?,
            crate::args::dirfd(dirfd)?,
            string(path, "path")?,
        );
        Ok(as_caller!(m, symlinkat(t, d, p))?)
    })
}

/// `readlink`: copies the target of the link at `path` into `buf` (at most `size`
/// bytes, no NUL added, cut if longer, as the kernel does); returns its length.
#[no_mangle]
pub extern "C" fn easyio_readlink(
    fs: *mut easyio_fs,
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> libc::ssize_t {
    easyio_readlinkat(fs, EASYIO_AT_ROOT, path, buf, size)
}

/// `readlinkat` (an empty path with an `O_PATH` descriptor of a link: its target).
#[no_mangle]
pub extern "C" fn easyio_readlinkat(
    fs: *mut easyio_fs,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> libc::ssize_t {
    sized(fs, |m| {
        let (d, p) = (crate::args::dirfd(dirfd)?, string(path, "path")?);
        if size == 0 {
            return Err(Failure::new(libc::EINVAL, "buffer size 0"));
        }
        let out = bytes_mut(buf.cast(), size, "buf")?;
        let target = as_caller!(m, readlinkat(d, p))?;
        let n = target.len().min(size);
        out.place()[..n].copy_from_slice(&target.as_bytes()[..n]);
        Ok(n)
    })
}

/// Changes the permission bits of the file at `path`.
#[no_mangle]
pub extern "C" fn easyio_chmod(
    fs: *mut easyio_fs,
    path: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    easyio_fchmodat(fs, EASYIO_AT_ROOT, path, mode, 0)
}

/// `fchmod`: of an open file.
#[no_mangle]
pub extern "C" fn easyio_fchmod(fs: *mut easyio_fs, fd: c_int, mode: libc::mode_t) -> c_int {
    status(fs, |m| {
        let f = crate::args::fd(fd)?;
        Ok(as_caller!(m, fchmod(f, mode))?)
    })
}

/// `fchmodat` (`AT_SYMLINK_NOFOLLOW` on a link is EOPNOTSUPP, as Linux).
#[no_mangle]
pub extern "C" fn easyio_fchmodat(
    fs: *mut easyio_fs,
    dirfd: c_int,
    path: *const c_char,
    mode: libc::mode_t,
    flags: c_int,
) -> c_int {
    status(fs, |m| {
        let (d, p) = (crate::args::dirfd(dirfd)?, string(path, "path")?);
        Ok(as_caller!(m, fchmodat(d, p, mode, flags))?)
    })
}

/// A `chown` id: -1 leaves it as it is.
fn id(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

/// Changes owner and group of the file at `path` (-1 leaves one as it is).
#[no_mangle]
pub extern "C" fn easyio_chown(
    fs: *mut easyio_fs,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
) -> c_int {
    easyio_fchownat(fs, EASYIO_AT_ROOT, path, uid, gid, 0)
}

/// `lchown`: a final symbolic link changes itself.
#[no_mangle]
pub extern "C" fn easyio_lchown(
    fs: *mut easyio_fs,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
) -> c_int {
    easyio_fchownat(
        fs,
        EASYIO_AT_ROOT,
        path,
        uid,
        gid,
        libc::AT_SYMLINK_NOFOLLOW,
    )
}

/// `fchown`: of an open file.
#[no_mangle]
pub extern "C" fn easyio_fchown(
    fs: *mut easyio_fs,
    fd: c_int,
    uid: libc::uid_t,
    gid: libc::gid_t,
) -> c_int {
    status(fs, |m| {
        let f = crate::args::fd(fd)?;
        Ok(as_caller!(m, fchown(f, id(uid), id(gid)))?)
    })
}

/// `fchownat` with `AT_SYMLINK_NOFOLLOW` and `AT_EMPTY_PATH`.
#[no_mangle]
pub extern "C" fn easyio_fchownat(
    fs: *mut easyio_fs,
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    status(fs, |m| {
        let (d, p) = (crate::args::dirfd(dirfd)?, string(path, "path")?);
        Ok(as_caller!(m, fchownat(d, p, id(uid), id(gid), flags))?)
    })
}

/// The two times of `utimensat`: NULL is both now; `UTIME_NOW` and `UTIME_OMIT` as
/// in Linux.
fn times(ts: *const libc::timespec) -> CResult<(Option<Time>, Option<Time>)> {
    if ts.is_null() {
        return Ok((Some(Time::Now), Some(Time::Now)));
    }
    let one = |t: &libc::timespec| match t.tv_nsec {
        libc::UTIME_NOW => Ok(Some(Time::Now)),
        libc::UTIME_OMIT => Ok(None),
        ns if (0..1_000_000_000).contains(&ns) => Ok(Some(Time::At(
            t.tv_sec
                .checked_mul(1_000_000_000)
                .and_then(|s| s.checked_add(ns))
                .ok_or_else(|| Failure::new(libc::EINVAL, "time out of range"))?,
        ))),
        _ => Err(Failure::new(libc::EINVAL, "tv_nsec out of range")),
    };
    let ts = slice(ts, 2, "times")?;
    Ok((one(&ts[0])?, one(&ts[1])?))
}

/// `utimensat`: access and modification times from `times[2]` (NULL: both now).
#[no_mangle]
pub extern "C" fn easyio_utimensat(
    fs: *mut easyio_fs,
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    status(fs, |m| {
        let (d, p) = (crate::args::dirfd(dirfd)?, string(path, "path")?);
        let (a, t) = self::times(times)?;
        Ok(as_caller!(m, utimensat(d, p, a, t, flags))?)
    })
}

/// `futimens`: of an open file.
#[no_mangle]
pub extern "C" fn easyio_futimens(
    fs: *mut easyio_fs,
    fd: c_int,
    times: *const libc::timespec,
) -> c_int {
    status(fs, |m| {
        let f = crate::args::fd(fd)?;
        let (a, t) = self::times(times)?;
        Ok(as_caller!(m, futimens(f, a, t))?)
    })
}

/// A call that answers 0 or -1, its body finding its own mount.
pub(crate) fn xstatus(body: impl FnOnce() -> CResult<()>) -> c_int {
    call(-1, || body().map(|()| 0))
}

/// A call that answers a count or -1, its body finding its own mount.
pub(crate) fn xsized(body: impl FnOnce() -> CResult<usize>) -> libc::ssize_t {
    call(-1, || body().map(count))
}
