//! The stat family: `stat`, `lstat`, `fstat`, `fstatat`, `statx`, glibc's older
//! `__xstat` entry points, and `statfs`/`statvfs`.

use std::ffi::{c_char, c_int, c_uint};

use fs::Stat;

use crate::call::{fd_call, path_at};
use crate::guard::{errno_of, export, Answer};
use crate::live::Live;
use crate::real::put;

/// The device number every inode of the mount reports (`st_dev`): one made-up
/// device, so that programs comparing devices see one file system.
const DEV_MAJOR: u32 = 0xe5;
const DEV_MINOR: u32 = 0x10;
/// `f_type` of `statfs`: "EASY".
const FS_MAGIC: i64 = 0x4541_5359;

fn dev() -> u64 {
    libc::makedev(DEV_MAJOR, DEV_MINOR)
}

/// `struct stat` of an inode.
pub(crate) fn to_stat(s: &Stat) -> libc::stat {
    // SAFETY: `struct stat` is plain integers, for which all zeros is a value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_dev = dev();
    st.st_ino = s.ino;
    st.st_nlink = s.nlink.into();
    st.st_mode = s.mode;
    st.st_uid = s.uid;
    st.st_gid = s.gid;
    st.st_rdev = s.rdev;
    st.st_size = s.size as i64;
    st.st_blksize = s.blksize.into();
    st.st_blocks = s.blocks as i64;
    (st.st_atime, st.st_atime_nsec) = split(s.atime_ns);
    (st.st_mtime, st.st_mtime_nsec) = split(s.mtime_ns);
    (st.st_ctime, st.st_ctime_nsec) = split(s.ctime_ns);
    st
}

fn split(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

/// `struct statx` of an inode: the basic fields (no birth time, no mount id).
fn to_statx(s: &Stat) -> libc::statx {
    // SAFETY: `struct statx` is plain integers, for which all zeros is a value.
    let mut x: libc::statx = unsafe { std::mem::zeroed() };
    x.stx_mask = libc::STATX_BASIC_STATS;
    x.stx_blksize = s.blksize;
    x.stx_nlink = s.nlink;
    x.stx_uid = s.uid;
    x.stx_gid = s.gid;
    x.stx_mode = s.mode as u16;
    x.stx_ino = s.ino;
    x.stx_size = s.size;
    x.stx_blocks = s.blocks;
    let t = |ns: i64| {
        let (sec, nsec) = split(ns);
        // SAFETY: plain integers, for which all zeros is a value.
        let mut ts: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        ts.tv_sec = sec;
        ts.tv_nsec = nsec as u32;
        ts
    };
    x.stx_atime = t(s.atime_ns);
    x.stx_mtime = t(s.mtime_ns);
    x.stx_ctime = t(s.ctime_ns);
    x.stx_rdev_major = libc::major(s.rdev);
    x.stx_rdev_minor = libc::minor(s.rdev);
    x.stx_dev_major = DEV_MAJOR;
    x.stx_dev_minor = DEV_MINOR;
    x
}

/// Flags of `fstatat` the file system takes; `AT_NO_AUTOMOUNT` means nothing here.
const AT_FLAGS: c_int = libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH;

/// `fstatat` of the mount; a symbolic link's size is the length of the target the
/// program reads (an absolute target is stored from the image root, and read back
/// with the mount's prefix).
fn link_sized(
    s: &crate::backend::Backend,
    dir: Option<fs::Fd>,
    p: &str,
    flags: c_int,
) -> fs::Result<Stat> {
    let mut st = s.fstatat(dir, p, flags & AT_FLAGS)?;
    if st.mode & libc::S_IFMT == libc::S_IFLNK {
        if let Ok(t) = s.readlinkat(dir, p) {
            if t.starts_with('/') {
                st.size = crate::path::outer(&t).len() as u64;
            }
        }
    }
    Ok(st)
}

fn stat_at(dirfd: c_int, path: *const c_char, out: *mut libc::stat, flags: c_int) -> Answer<c_int> {
    if flags & !(AT_FLAGS | libc::AT_NO_AUTOMOUNT) != 0 {
        return crate::path::classify(dirfd, path)
            .map(|t| matches!(t, crate::path::Target::Easy { .. }))
            .unwrap_or(true)
            .then_some(Err(libc::EINVAL));
    }
    if flags & libc::AT_SYMLINK_NOFOLLOW != 0 && crate::path::is_alias(path) {
        // `/proc/self/fd/N` itself is the kernel's link.
        return None;
    }
    let st = path_at(dirfd, path, |s, dir, p| link_sized(s, dir, p, flags))?;
    Some(st.and_then(|st| put(out, to_stat(&st)).map(|_| 0)))
}

fn easy_fstat(fd: c_int, out: *mut libc::stat) -> Answer<c_int> {
    fd_call(fd, |d, l: &Live| {
        let st = l.fs.fstat(d.fd).map_err(errno_of)?;
        put(out, to_stat(&st)).map(|_| 0)
    })
}

fn easy_statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    out: *mut libc::statx,
) -> Answer<c_int> {
    if flags & libc::AT_SYMLINK_NOFOLLOW != 0 && crate::path::is_alias(path) {
        return None;
    }
    let st = path_at(dirfd, path, |s, dir, p| link_sized(s, dir, p, flags))?;
    Some(st.and_then(|st| put(out, to_statx(&st)).map(|_| 0)))
}

fn to_statfs(l: &Live) -> Result<libc::statfs, i32> {
    let f = l.fs.statfs().map_err(errno_of)?;
    // SAFETY: `struct statfs` is plain integers, for which all zeros is a value.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    s.f_type = FS_MAGIC;
    s.f_bsize = f.bsize as i64;
    s.f_frsize = f.bsize as i64;
    s.f_blocks = f.blocks;
    s.f_bfree = f.bfree;
    s.f_bavail = f.bavail;
    s.f_files = f.files;
    s.f_ffree = f.ffree;
    s.f_namelen = f.namelen as i64;
    Ok(s)
}

fn to_statvfs(l: &Live) -> Result<libc::statvfs, i32> {
    let f = to_statfs(l)?;
    // SAFETY: `struct statvfs` is plain integers, for which all zeros is a value.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    v.f_bsize = f.f_bsize as u64;
    v.f_frsize = f.f_frsize as u64;
    v.f_blocks = f.f_blocks;
    v.f_bfree = f.f_bfree;
    v.f_bavail = f.f_bavail;
    v.f_files = f.f_files;
    v.f_ffree = f.f_ffree;
    v.f_favail = f.f_ffree;
    v.f_namemax = f.f_namelen as u64;
    v.f_fsid = dev();
    v.f_flag = if l.fs.is_read_only() {
        libc::ST_RDONLY
    } else {
        0
    };
    Ok(v)
}

fn statfs_path<T>(
    path: *const c_char,
    out: *mut T,
    f: fn(&Live) -> Result<T, i32>,
) -> Answer<c_int> {
    // The target must exist, as for the kernel.
    let st = path_at(libc::AT_FDCWD, path, |s, dir, p| s.fstatat(dir, p, 0))?;
    Some(st.and_then(|_| {
        let l = crate::mount::live()?;
        put(out, f(&l)?).map(|_| 0)
    }))
}

fn statfs_fd<T>(fd: c_int, out: *mut T, f: fn(&Live) -> Result<T, i32>) -> Answer<c_int> {
    fd_call(fd, |_, l| put(out, f(l)?).map(|_| 0))
}

type Buf = *mut libc::stat;
const NOFOLLOW: c_int = libc::AT_SYMLINK_NOFOLLOW;

export! {
    fn stat(p: *const c_char, b: Buf) -> c_int { stat_at(libc::AT_FDCWD, p, b, 0) }
    fn stat64(p: *const c_char, b: Buf) -> c_int { stat_at(libc::AT_FDCWD, p, b, 0) }
    fn lstat(p: *const c_char, b: Buf) -> c_int { stat_at(libc::AT_FDCWD, p, b, NOFOLLOW) }
    fn lstat64(p: *const c_char, b: Buf) -> c_int { stat_at(libc::AT_FDCWD, p, b, NOFOLLOW) }
    fn fstat(fd: c_int, b: Buf) -> c_int { easy_fstat(fd, b) }
    fn fstat64(fd: c_int, b: Buf) -> c_int { easy_fstat(fd, b) }
    fn fstatat(d: c_int, p: *const c_char, b: Buf, f: c_int) -> c_int { stat_at(d, p, b, f) }
    fn fstatat64(d: c_int, p: *const c_char, b: Buf, f: c_int) -> c_int { stat_at(d, p, b, f) }
    fn __xstat(v: c_int, p: *const c_char, b: Buf) -> c_int { let _ = v; stat_at(libc::AT_FDCWD, p, b, 0) }
    fn __xstat64(v: c_int, p: *const c_char, b: Buf) -> c_int { let _ = v; stat_at(libc::AT_FDCWD, p, b, 0) }
    fn __lxstat(v: c_int, p: *const c_char, b: Buf) -> c_int { let _ = v; stat_at(libc::AT_FDCWD, p, b, NOFOLLOW) }
    fn __lxstat64(v: c_int, p: *const c_char, b: Buf) -> c_int { let _ = v; stat_at(libc::AT_FDCWD, p, b, NOFOLLOW) }
    fn __fxstat(v: c_int, fd: c_int, b: Buf) -> c_int { let _ = v; easy_fstat(fd, b) }
    fn __fxstat64(v: c_int, fd: c_int, b: Buf) -> c_int { let _ = v; easy_fstat(fd, b) }
    fn __fxstatat(v: c_int, d: c_int, p: *const c_char, b: Buf, f: c_int) -> c_int { let _ = v; stat_at(d, p, b, f) }
    fn __fxstatat64(v: c_int, d: c_int, p: *const c_char, b: Buf, f: c_int) -> c_int { let _ = v; stat_at(d, p, b, f) }
    fn statx(d: c_int, p: *const c_char, f: c_int, mask: c_uint, b: *mut libc::statx) -> c_int { let _ = mask; easy_statx(d, p, f, b) }
    fn statfs(p: *const c_char, b: *mut libc::statfs) -> c_int { statfs_path(p, b, to_statfs) }
    fn statfs64(p: *const c_char, b: *mut libc::statfs) -> c_int { statfs_path(p, b, to_statfs) }
    fn fstatfs(fd: c_int, b: *mut libc::statfs) -> c_int { statfs_fd(fd, b, to_statfs) }
    fn fstatfs64(fd: c_int, b: *mut libc::statfs) -> c_int { statfs_fd(fd, b, to_statfs) }
    fn statvfs(p: *const c_char, b: *mut libc::statvfs) -> c_int { statfs_path(p, b, to_statvfs) }
    fn statvfs64(p: *const c_char, b: *mut libc::statvfs) -> c_int { statfs_path(p, b, to_statvfs) }
    fn fstatvfs(fd: c_int, b: *mut libc::statvfs) -> c_int { statfs_fd(fd, b, to_statvfs) }
    fn fstatvfs64(fd: c_int, b: *mut libc::statvfs) -> c_int { statfs_fd(fd, b, to_statvfs) }
}
