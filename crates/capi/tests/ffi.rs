//! The exported functions called as C calls them: NULL pointers, handles that are not
//! live, bad and closed descriptors, and the errno of every failure, on real images
//! in /dev/shm with real engine threads and a real runtime.

use std::ffi::{c_int, c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicU32, Ordering};

use easyio::*;

fn errno() -> i32 {
    errno::errno().0
}

fn last_error() -> String {
    // SAFETY: easyio_last_error returns a NUL-terminated string valid until the next
    // failing call on this thread.
    unsafe { CStr::from_ptr(easyio_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts a call failed with `-1` and errno `e`.
#[track_caller]
fn fails<T: PartialEq + std::fmt::Debug + From<i8>>(r: T, e: i32) {
    assert_eq!(r, T::from(-1), "expected a failure with errno {e}");
    assert_eq!(errno(), e, "errno; last error: {}", last_error());
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// A fresh image in /dev/shm, mounted; unmounted and removed on drop, even when the
/// test panics.
struct Image {
    path: String,
    fs: *mut easyio_fs,
}

impl Image {
    fn new(mode: &str) -> Image {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = format!(
            "/dev/shm/easyio-capi-{}-{}.img",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            easyio_mkfs(c(&path).as_ptr(), 32 << 20),
            0,
            "{}",
            last_error()
        );
        let mode = c(mode);
        let opts = easyio_mount_options {
            mode: mode.as_ptr(),
            ..Default::default()
        };
        let fs = easyio_mount(c(&path).as_ptr(), &opts);
        assert!(!fs.is_null(), "mount: {}", last_error());
        Image { path, fs }
    }

    fn remount(&mut self) {
        assert_eq!(easyio_unmount(self.fs), 0, "{}", last_error());
        self.fs = easyio_mount(c(&self.path).as_ptr(), null());
        assert!(!self.fs.is_null(), "mount: {}", last_error());
    }

    fn open(&self, path: &str, flags: c_int, mode: u32) -> c_int {
        easyio_open(self.fs, c(path).as_ptr(), flags, mode)
    }

    fn write_file(&self, path: &str, data: &[u8]) {
        let fd = self.open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644);
        assert!(fd >= 0, "{}", last_error());
        assert_eq!(
            easyio_write(self.fs, fd, data.as_ptr().cast(), data.len()),
            data.len() as isize
        );
        assert_eq!(easyio_close(self.fs, fd), 0);
    }

    fn stat(&self, path: &str) -> libc::stat {
        // SAFETY: all zeros is a valid `stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        assert_eq!(
            easyio_stat(self.fs, c(path).as_ptr(), &mut st),
            0,
            "{}",
            last_error()
        );
        st
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        if !self.fs.is_null() {
            let _ = easyio_unmount(self.fs);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Asserts a call that answers a handle failed with NULL and errno `e`.
#[track_caller]
fn fails_null<T>(p: *mut T, e: i32) {
    assert!(p.is_null(), "expected NULL with errno {e}");
    assert_eq!(errno(), e, "errno; last error: {}", last_error());
}

#[test]
fn null_pointers_are_einval() {
    let img = Image::new("cpu");
    let fs = img.fs;
    fails_null(easyio_mount(null(), null()), libc::EINVAL);
    assert!(last_error().contains("NULL"), "{}", last_error());
    fails(easyio_mkfs(null(), 1 << 20), libc::EINVAL);
    fails(
        easyio_open(null_mut(), c("/f").as_ptr(), libc::O_RDONLY, 0),
        libc::EINVAL,
    );
    fails(easyio_open(fs, null(), libc::O_RDONLY, 0), libc::EINVAL);
    let fd = img.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644);
    assert!(fd >= 0);
    fails(
        easyio_read(fs, fd, null_mut(), 10),
        libc::EINVAL as isize as i32,
    );
    fails(easyio_write(fs, fd, null(), 10), libc::EINVAL);
    // A NULL buffer of length 0 is a read or write of nothing, as in the kernel.
    assert_eq!(easyio_read(fs, fd, null_mut(), 0), 0);
    assert_eq!(easyio_write(fs, fd, null(), 0), 0);
    fails(easyio_fstat(fs, fd, null_mut()), libc::EINVAL);
    fails(easyio_stat(fs, c("/f").as_ptr(), null_mut()), libc::EINVAL);
    fails(easyio_readv(fs, fd, null(), 2), libc::EINVAL);
    fails(easyio_rename(fs, null(), c("/g").as_ptr()), libc::EINVAL);
    fails(easyio_symlink(fs, c("/f").as_ptr(), null()), libc::EINVAL);
    fails(
        easyio_readlink(fs, c("/f").as_ptr(), null_mut(), 10),
        libc::EINVAL,
    );
    fails(
        easyio_getxattr(fs, c("/f").as_ptr(), null(), null_mut(), 0),
        libc::EINVAL,
    );
    fails_null(easyio_opendir(fs, null()), libc::EINVAL);
    fails(easyio_readdir(null_mut(), null_mut()), libc::EINVAL);
    let d = easyio_opendir(fs, c("/").as_ptr());
    assert!(!d.is_null());
    fails(easyio_readdir(d, null_mut()), libc::EINVAL);
    assert_eq!(easyio_closedir(d), 0);
    let buf = [0u8; 16];
    let id = easyio_submit_pwrite(fs, fd, buf.as_ptr().cast(), buf.len(), 0);
    assert!(id >= 1);
    fails(easyio_poll(fs, id as u64, null_mut()), libc::EINVAL);
    fails(easyio_wait(fs, id as u64, null_mut()), libc::EINVAL);
    fails(easyio_wait_many(fs, null(), 1, 1, null_mut()), libc::EINVAL);
    let mut done = easyio_completion::default();
    assert_eq!(easyio_wait(fs, id as u64, &mut done), 0);
    assert_eq!(done.res, 16);
    fails(easyio_submit_pread(fs, fd, null_mut(), 16, 0), libc::EINVAL);
    fails_null(easyio_spawn(null_mut(), None, null_mut()), libc::EINVAL);
    fails(easyio_join(null_mut(), null_mut()), libc::EINVAL);
    fails(easyio_set_cred(fs, 1, 1, null(), 3, 0o22), libc::EINVAL);
    fails(easyio_unmount(null_mut()), libc::EINVAL);
}

#[test]
fn handles_that_are_not_live_are_ebadf() {
    let mut img = Image::new("cpu");
    let mut junk = [0u64; 8];
    let made_up = junk.as_mut_ptr();
    fails(
        easyio_open(made_up.cast(), c("/").as_ptr(), libc::O_RDONLY, 0),
        libc::EBADF,
    );
    fails(easyio_readdir(made_up.cast(), null_mut()), libc::EBADF);
    fails(easyio_closedir(made_up.cast()), libc::EBADF);
    fails(easyio_rt_stop(made_up.cast()), libc::EBADF);
    fails(easyio_join(made_up.cast(), null_mut()), libc::EBADF);
    assert_eq!(junk, [0; 8], "a made-up handle is never written through");
    // A directory closed twice, and one whose file system was unmounted.
    let d = easyio_opendir(img.fs, c("/").as_ptr());
    assert_eq!(easyio_closedir(d), 0);
    fails(easyio_closedir(d), libc::EBADF);
    let d = easyio_opendir(img.fs, c("/").as_ptr());
    let old = img.fs;
    img.remount();
    fails(
        easyio_open(old, c("/").as_ptr(), libc::O_RDONLY, 0),
        libc::EBADF,
    );
    fails(easyio_unmount(old), libc::EBADF);
    let mut e = std::mem::MaybeUninit::<easyio_dirent>::zeroed();
    fails(easyio_readdir(d, e.as_mut_ptr()), libc::EBADF);
    assert_eq!(
        easyio_closedir(d),
        0,
        "closing a handle of an unmounted fs only ends it"
    );
    // A runtime stopped, a uthread joined.
    let rt = easyio_rt_start(1);
    assert!(!rt.is_null());
    let t = easyio_spawn(rt, Some(identity), 7 as *mut c_void);
    let mut ret = null_mut();
    assert_eq!(easyio_join(t, &mut ret), 0);
    assert_eq!(ret as usize, 7);
    fails(easyio_join(t, &mut ret), libc::EBADF);
    assert_eq!(easyio_rt_stop(rt), 0);
    fails(easyio_rt_stop(rt), libc::EBADF);
    fails_null(easyio_spawn(rt, Some(identity), null_mut()), libc::EBADF);
}

extern "C" fn identity(arg: *mut c_void) -> *mut c_void {
    arg
}

#[test]
fn bad_and_closed_descriptors_are_ebadf() {
    let img = Image::new("cpu");
    let fs = img.fs;
    let mut b = [0u8; 8];
    for fd in [-1, -100, 12345] {
        fails(easyio_read(fs, fd, b.as_mut_ptr().cast(), 8), libc::EBADF);
        fails(easyio_close(fs, fd), libc::EBADF);
    }
    let fd = img.open("/f", libc::O_CREAT | libc::O_WRONLY, 0o644);
    fails(easyio_read(fs, fd, b.as_mut_ptr().cast(), 8), libc::EBADF);
    fails(
        easyio_submit_pread(fs, fd, b.as_mut_ptr().cast(), 8, 0),
        libc::EBADF,
    );
    assert_eq!(easyio_close(fs, fd), 0);
    fails(easyio_close(fs, fd), libc::EBADF);
    fails(easyio_write(fs, fd, b.as_ptr().cast(), 8), libc::EBADF);
    fails(easyio_lseek(fs, fd, 0, libc::SEEK_SET), libc::EBADF);
    fails(easyio_fsync(fs, fd), libc::EBADF);
    fails(easyio_ftruncate(fs, fd, 0), libc::EBADF);
    // SAFETY: all zeros is a valid `stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    fails(easyio_fstat(fs, fd, &mut st), libc::EBADF);
    let fd = img.open("/f", libc::O_RDONLY, 0);
    fails(easyio_write(fs, fd, b.as_ptr().cast(), 8), libc::EBADF);
    fails(
        easyio_submit_pwrite(fs, fd, b.as_ptr().cast(), 8, 0),
        libc::EBADF,
    );
    fails(
        easyio_openat(fs, 999, c("x").as_ptr(), libc::O_RDONLY, 0),
        libc::EBADF,
    );
}

#[test]
fn errno_of_each_failure() {
    let img = Image::new("cpu");
    let fs = img.fs;
    let p = |s: &str| c(s);
    fails(img.open("/nope", libc::O_RDONLY, 0), libc::ENOENT);
    assert_eq!(easyio_mkdir(fs, p("/d").as_ptr(), 0o755), 0);
    fails(easyio_mkdir(fs, p("/d").as_ptr(), 0o755), libc::EEXIST);
    fails(img.open("/d", libc::O_WRONLY, 0), libc::EISDIR);
    img.write_file("/d/f", b"0123456789");
    fails(img.open("/d/f/x", libc::O_RDONLY, 0), libc::ENOTDIR);
    fails(easyio_rmdir(fs, p("/d").as_ptr()), libc::ENOTEMPTY);
    fails(easyio_unlink(fs, p("/d").as_ptr()), libc::EISDIR);
    fails(
        img.open(
            &format!("/{}", "n".repeat(256)),
            libc::O_CREAT | libc::O_RDWR,
            0o644,
        ),
        libc::ENAMETOOLONG,
    );
    fails(
        img.open("/d/f", libc::O_RDONLY | libc::O_DIRECT, 0),
        libc::EINVAL,
    );
    let fd = img.open("/d/f", libc::O_RDWR, 0);
    fails(easyio_lseek(fs, fd, 0, 99), libc::EINVAL);
    fails(easyio_lseek(fs, fd, -1, libc::SEEK_SET), libc::EINVAL);
    fails(easyio_lseek(fs, fd, 10, libc::SEEK_DATA), libc::ENXIO);
    assert_eq!(easyio_lseek(fs, fd, 0, libc::SEEK_HOLE), 10);
    let mut b = [0u8; 4];
    fails(
        easyio_pread(fs, fd, b.as_mut_ptr().cast(), 4, -5),
        libc::EINVAL,
    );
    fails(
        easyio_getxattr(
            fs,
            p("/d/f").as_ptr(),
            p("user.none").as_ptr(),
            b.as_mut_ptr().cast(),
            4,
        ),
        libc::ENODATA,
    );
    let v = b"a value";
    assert_eq!(
        easyio_setxattr(
            fs,
            p("/d/f").as_ptr(),
            p("user.k").as_ptr(),
            v.as_ptr().cast(),
            v.len(),
            0
        ),
        0
    );
    fails(
        easyio_getxattr(
            fs,
            p("/d/f").as_ptr(),
            p("user.k").as_ptr(),
            b.as_mut_ptr().cast(),
            4,
        ),
        libc::ERANGE,
    );
    fails(
        easyio_setxattr(
            fs,
            p("/d/f").as_ptr(),
            p("user.k").as_ptr(),
            v.as_ptr().cast(),
            v.len(),
            libc::XATTR_CREATE,
        ),
        libc::EEXIST,
    );
    fails(
        easyio_renameat2(
            fs,
            EASYIO_AT_ROOT,
            p("/d/f").as_ptr(),
            EASYIO_AT_ROOT,
            p("/d").as_ptr(),
            libc::RENAME_NOREPLACE,
        ),
        libc::EEXIST,
    );
    fails(
        easyio_readlink(fs, p("/d/f").as_ptr(), b.as_mut_ptr().cast(), 4),
        libc::EINVAL,
    );
    fails(
        easyio_link(fs, p("/d").as_ptr(), p("/e").as_ptr()),
        libc::EPERM,
    );
    let bad_time = [libc::timespec {
        tv_sec: 0,
        tv_nsec: 2_000_000_000,
    }; 2];
    fails(
        easyio_utimensat(fs, EASYIO_AT_ROOT, p("/d/f").as_ptr(), bad_time.as_ptr(), 0),
        libc::EINVAL,
    );
    // Not UTF-8.
    fails(
        easyio_open(fs, c"/\xff".as_ptr(), libc::O_RDONLY, 0),
        libc::EINVAL,
    );
    let mut done = easyio_completion::default();
    fails(easyio_wait(fs, 424242, &mut done), libc::EINVAL);
    fails(easyio_poll(fs, 424242, &mut done), libc::EINVAL);
    // Credentials: a user may not read root's private file.
    img.write_file("/secret", b"s");
    assert_eq!(easyio_chmod(fs, p("/secret").as_ptr(), 0o600), 0);
    assert_eq!(easyio_set_cred(fs, 1000, 1000, null(), 0, 0o22), 0);
    fails(img.open("/secret", libc::O_RDONLY, 0), libc::EACCES);
    fails(easyio_chmod(fs, p("/secret").as_ptr(), 0o644), libc::EPERM);
    assert_eq!(easyio_clear_cred(fs), 0);
    let fd = img.open("/secret", libc::O_RDONLY, 0);
    assert!(fd >= 0, "{}", last_error());
}

#[test]
fn posix_calls_round_trip() {
    let img = Image::new("async");
    let fs = img.fs;
    let p = |s: &str| c(s);
    assert_eq!(easyio_mkdir(fs, p("/d").as_ptr(), 0o755), 0);
    let dfd = img.open("/d", libc::O_RDONLY | libc::O_DIRECTORY, 0);
    assert!(dfd >= 0);
    let fd = easyio_openat(
        fs,
        dfd,
        p("f").as_ptr(),
        libc::O_CREAT | libc::O_RDWR,
        0o640,
    );
    assert!(fd >= 0, "{}", last_error());
    let parts: [&[u8]; 3] = [b"hello", b", ", b"world"];
    let iov: Vec<libc::iovec> = parts
        .iter()
        .map(|b| libc::iovec {
            iov_base: b.as_ptr() as *mut c_void,
            iov_len: b.len(),
        })
        .collect();
    assert_eq!(easyio_writev(fs, fd, iov.as_ptr(), 3), 12);
    assert_eq!(easyio_lseek(fs, fd, 0, libc::SEEK_CUR), 12);
    assert_eq!(easyio_pwrite(fs, fd, b"!".as_ptr().cast(), 1, 12), 1);
    assert_eq!(easyio_lseek(fs, fd, 0, libc::SEEK_SET), 0);
    let (mut a, mut b) = ([0u8; 5], [0u8; 20]);
    let iov = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: 5,
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: 20,
        },
    ];
    assert_eq!(easyio_readv(fs, fd, iov.as_ptr(), 2), 13);
    assert_eq!((&a, &b[..8]), (b"hello", &b", world!"[..]));
    let mut r = [0u8; 5];
    assert_eq!(easyio_pread(fs, fd, r.as_mut_ptr().cast(), 5, 7), 5);
    assert_eq!(&r, b"world");
    assert_eq!(easyio_ftruncate(fs, fd, 5), 0);
    assert_eq!(easyio_fsync(fs, fd), 0);
    // SAFETY: all zeros is a valid `stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(easyio_fstat(fs, fd, &mut st), 0);
    assert_eq!((st.st_size, st.st_mode), (5, libc::S_IFREG | 0o640));
    assert_eq!(easyio_truncate(fs, p("/d/f").as_ptr(), 8192), 0);
    assert_eq!(img.stat("/d/f").st_size, 8192);
    assert_eq!(easyio_fallocate(fs, fd, 0, 0, 4096), 0);
    assert_eq!(easyio_symlink(fs, p("f").as_ptr(), p("/d/l").as_ptr()), 0);
    let mut t = [0u8; 8];
    assert_eq!(
        easyio_readlink(fs, p("/d/l").as_ptr(), t.as_mut_ptr().cast(), 8),
        1
    );
    assert_eq!(t[0], b'f');
    // SAFETY: all zeros is a valid `stat`.
    let mut lst: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(easyio_lstat(fs, p("/d/l").as_ptr(), &mut lst), 0);
    assert_eq!(lst.st_mode & libc::S_IFMT, libc::S_IFLNK);
    assert_eq!(img.stat("/d/l").st_ino, st.st_ino);
    assert_eq!(easyio_link(fs, p("/d/f").as_ptr(), p("/d/h").as_ptr()), 0);
    assert_eq!(img.stat("/d/f").st_nlink, 2);
    assert_eq!(easyio_rename(fs, p("/d/h").as_ptr(), p("/g").as_ptr()), 0);
    assert_eq!(easyio_chmod(fs, p("/g").as_ptr(), 0o600), 0);
    assert_eq!(easyio_chown(fs, p("/g").as_ptr(), 1234, u32::MAX), 0);
    let g = img.stat("/d/f");
    assert_eq!((g.st_mode & 0o7777, g.st_uid), (0o600, 1234));
    let times = [
        libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: 5,
        },
        libc::timespec {
            tv_sec: 2_000_000,
            tv_nsec: 7,
        },
    ];
    assert_eq!(
        easyio_utimensat(fs, EASYIO_AT_ROOT, p("/g").as_ptr(), times.as_ptr(), 0),
        0
    );
    let g = img.stat("/g");
    assert_eq!(
        (g.st_atime, g.st_atime_nsec, g.st_mtime, g.st_mtime_nsec),
        (1_000_000, 5, 2_000_000, 7)
    );
    // Extended attributes.
    let v = b"v1";
    assert_eq!(
        easyio_fsetxattr(fs, fd, p("user.a").as_ptr(), v.as_ptr().cast(), 2, 0),
        0
    );
    assert_eq!(
        easyio_setxattr(
            fs,
            p("/g").as_ptr(),
            p("user.b").as_ptr(),
            v.as_ptr().cast(),
            2,
            0
        ),
        0
    );
    assert_eq!(easyio_listxattr(fs, p("/d/f").as_ptr(), null_mut(), 0), 14);
    let mut names = [0u8; 14];
    assert_eq!(easyio_flistxattr(fs, fd, names.as_mut_ptr().cast(), 14), 14);
    let mut listed: Vec<&[u8]> = names.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    listed.sort();
    assert_eq!(listed, [&b"user.a"[..], b"user.b"]);
    let mut got = [0u8; 2];
    assert_eq!(
        easyio_getxattr(
            fs,
            p("/d/l").as_ptr(),
            p("user.b").as_ptr(),
            got.as_mut_ptr().cast(),
            2
        ),
        2
    );
    assert_eq!(&got, v);
    fails(
        easyio_lgetxattr(
            fs,
            p("/d/l").as_ptr(),
            p("user.b").as_ptr(),
            got.as_mut_ptr().cast(),
            2,
        ),
        libc::ENODATA,
    );
    assert_eq!(
        easyio_removexattr(fs, p("/g").as_ptr(), p("user.a").as_ptr()),
        0
    );
    fails(
        easyio_fremovexattr(fs, fd, p("user.a").as_ptr()),
        libc::ENODATA,
    );
    // The listing: `.`, `..`, then every name once, with its kind.
    let d = easyio_opendir(fs, p("/d").as_ptr());
    assert!(!d.is_null());
    let mut seen = Vec::new();
    let mut e = std::mem::MaybeUninit::<easyio_dirent>::zeroed();
    while easyio_readdir(d, e.as_mut_ptr()) == 1 {
        // SAFETY: readdir filled the entry.
        let e = unsafe { e.assume_init_ref() };
        // SAFETY: the name is NUL-terminated within the array.
        let name = unsafe { CStr::from_ptr(e.name.as_ptr()) }
            .to_str()
            .unwrap()
            .to_owned();
        seen.push((name, e.kind));
    }
    seen.sort();
    let want = [
        (".", libc::DT_DIR),
        ("..", libc::DT_DIR),
        ("f", libc::DT_REG),
        ("l", libc::DT_LNK),
    ];
    assert_eq!(seen, want.map(|(n, k)| (n.to_owned(), k)));
    assert_eq!(easyio_rewinddir(d), 0);
    assert_eq!(easyio_readdir(d, e.as_mut_ptr()), 1);
    assert_eq!(easyio_closedir(d), 0);
    // Removal.
    assert_eq!(easyio_unlink(fs, p("/g").as_ptr()), 0);
    assert_eq!(easyio_unlinkat(fs, dfd, p("l").as_ptr(), 0), 0);
    assert_eq!(easyio_unlink(fs, p("/d/f").as_ptr()), 0);
    assert_eq!(
        easyio_fstat(fs, fd, &mut st),
        0,
        "an unlinked file stays open"
    );
    assert_eq!(easyio_close(fs, fd), 0);
    assert_eq!(easyio_close(fs, dfd), 0);
    assert_eq!(easyio_rmdir(fs, p("/d").as_ptr()), 0);
    fails(easyio_rmdir(fs, p("/d").as_ptr()), libc::ENOENT);
}

#[test]
fn async_requests_complete_with_bytes_or_errno() {
    let mut img = Image::new("async");
    let fs = img.fs;
    let fd = img.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644);
    let chunk = 256 << 10;
    let data: Vec<Vec<u8>> = (0..4u8)
        .map(|i| vec![i.wrapping_mul(37) + 1; chunk])
        .collect();
    let ids: Vec<u64> = data
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let id = easyio_submit_pwrite(fs, fd, d.as_ptr().cast(), chunk, (i * chunk) as i64);
            assert!(id >= 1, "{}", last_error());
            id as u64
        })
        .collect();
    let mut done = vec![easyio_completion::default(); 4];
    assert_eq!(
        easyio_wait_many(fs, ids.as_ptr(), 4, 4, done.as_mut_ptr()),
        4
    );
    let mut got: Vec<u64> = done.iter().map(|c| c.id).collect();
    got.sort();
    assert_eq!(got, ids);
    assert!(done.iter().all(|c| c.res == chunk as i64));
    // Reads: one past the end comes back short, each is retired once.
    let mut bufs = vec![vec![0u8; chunk]; 4];
    let ids: Vec<u64> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| {
            easyio_submit_pread(
                fs,
                fd,
                b.as_mut_ptr().cast(),
                chunk,
                (i * chunk + chunk / 2) as i64,
            ) as u64
        })
        .collect();
    let mut c = easyio_completion::default();
    loop {
        match easyio_poll(fs, ids[0], &mut c) {
            1 => break,
            0 => std::thread::yield_now(),
            _ => panic!("poll: {}", last_error()),
        }
    }
    assert_eq!((c.id, c.res), (ids[0], chunk as i64));
    fails(easyio_poll(fs, ids[0], &mut c), libc::EINVAL);
    let n = easyio_wait_many(fs, ids[1..].as_ptr(), 3, 1, done.as_mut_ptr());
    assert!((1..=3).contains(&n), "{n}");
    for c in &done[..n as usize] {
        let want = if c.id == ids[3] { chunk / 2 } else { chunk };
        assert_eq!(c.res, want as i64, "request {}", c.id);
    }
    for &id in &ids[1..] {
        if !done[..n as usize].iter().any(|c| c.id == id) {
            assert_eq!(easyio_wait(fs, id, &mut c), 0);
            let want = if id == ids[3] { chunk / 2 } else { chunk };
            assert_eq!(c.res, want as i64);
        }
    }
    for (i, b) in bufs.iter().enumerate() {
        let at = i * chunk + chunk / 2;
        let end = (at + chunk).min(4 * chunk);
        for (k, &byte) in b[..end - at].iter().enumerate() {
            assert_eq!(byte, data[(at + k) / chunk][0], "read {i}, byte {k}");
        }
    }
    // Unmounting with a write in flight waits for it: the data is there after.
    let last = vec![0xabu8; chunk];
    assert!(easyio_submit_pwrite(fs, fd, last.as_ptr().cast(), chunk, 0) >= 1);
    img.remount();
    let fd = img.open("/f", libc::O_RDONLY, 0);
    let mut back = vec![0u8; chunk];
    assert_eq!(
        easyio_read(img.fs, fd, back.as_mut_ptr().cast(), chunk),
        chunk as isize
    );
    assert_eq!(back, last);
}

struct Shared {
    fs: *mut easyio_fs,
    fd: c_int,
    ok: AtomicU32,
}

/// A uthread: checks it is one, reads the file asynchronously, and spawns a child on
/// its own runtime (rt NULL) that it joins.
extern "C" fn reader(arg: *mut c_void) -> *mut c_void {
    // SAFETY: the test passes a `Shared` that outlives every uthread.
    let s = unsafe { &*(arg as *const Shared) };
    assert_eq!(easyio_in_uthread(), 1);
    let mut buf = vec![0u8; 4096];
    let id = easyio_submit_pread(s.fs, s.fd, buf.as_mut_ptr().cast(), 4096, 0);
    assert_eq!(easyio_yield(), 0);
    let mut c = easyio_completion::default();
    assert_eq!(easyio_wait(s.fs, id as u64, &mut c), 0);
    let child = easyio_spawn(null_mut(), Some(identity), 5 as *mut c_void);
    assert!(!child.is_null(), "{}", last_error());
    let mut ret = null_mut();
    assert_eq!(easyio_join(child, &mut ret), 0);
    assert_eq!(easyio_rt_stop(11 as *mut easyio_rt), -1);
    assert_eq!(errno(), libc::EDEADLK, "stopping a runtime from a uthread");
    if c.res == 4096 && buf.iter().all(|&b| b == 9) && ret as usize == 5 {
        s.ok.fetch_add(1, Ordering::SeqCst);
    }
    arg
}

#[test]
fn uthreads_run_c_functions_and_yield_in_calls() {
    let img = Image::new("async");
    img.write_file("/f", &[9u8; 4096]);
    let fd = img.open("/f", libc::O_RDONLY, 0);
    let shared = Shared {
        fs: img.fs,
        fd,
        ok: AtomicU32::new(0),
    };
    fails_null(
        easyio_spawn(null_mut(), Some(identity), null_mut()),
        libc::EINVAL,
    );
    fails_null(easyio_rt_start(0), libc::EINVAL);
    assert_eq!(easyio_in_uthread(), 0);
    assert_eq!(easyio_yield(), 0);
    let rt = easyio_rt_start(2);
    assert!(!rt.is_null(), "{}", last_error());
    let arg = &shared as *const Shared as *mut c_void;
    let ts: Vec<_> = (0..6)
        .map(|_| easyio_spawn(rt, Some(reader), arg))
        .collect();
    for t in ts {
        let mut ret = null_mut();
        assert_eq!(easyio_join(t, &mut ret), 0, "{}", last_error());
        assert_eq!(ret, arg);
    }
    assert_eq!(shared.ok.load(Ordering::SeqCst), 6);
    assert_eq!(easyio_rt_stop(rt), 0);
}

#[test]
fn mount_options_are_checked() {
    let img = Image::new("cpu");
    let path = c(&img.path);
    let bad = c("warp");
    for opts in [
        easyio_mount_options {
            mode: bad.as_ptr(),
            ..Default::default()
        },
        easyio_mount_options {
            engine: bad.as_ptr(),
            ..Default::default()
        },
        easyio_mount_options {
            emulate: bad.as_ptr(),
            ..Default::default()
        },
    ] {
        fails_null(easyio_mount(path.as_ptr(), &opts), libc::EINVAL);
        assert!(last_error().contains("warp"), "{}", last_error());
    }
    let missing = c("/nonexistent/profile.toml");
    let opts = easyio_mount_options {
        profile: missing.as_ptr(),
        ..Default::default()
    };
    assert!(easyio_mount(path.as_ptr(), &opts).is_null());
    fails_null(
        easyio_mount(c("/dev/shm/easyio-capi-no-such.img").as_ptr(), null()),
        libc::ENOENT,
    );
    // The image is held by `img`'s mount.
    fails_null(easyio_mount(path.as_ptr(), null()), libc::EBUSY);
    assert!(last_error().contains("in use"), "{}", last_error());
    fails(easyio_mkfs(path.as_ptr(), 32 << 20), libc::EEXIST);
}

#[test]
fn emulated_slow_memory_and_read_only_mounts() {
    let mut img = Image::new("cpu");
    img.write_file("/f", b"data");
    assert_eq!(easyio_unmount(img.fs), 0);
    let (path, cxl) = (c(&img.path), c("cxl"));
    let mode = c("dma-sync");
    let opts = easyio_mount_options {
        mode: mode.as_ptr(),
        emulate: cxl.as_ptr(),
        engine_channels: 2,
        ..Default::default()
    };
    img.fs = easyio_mount(path.as_ptr(), &opts);
    assert!(!img.fs.is_null(), "{}", last_error());
    let mut b = [0u8; 4];
    let fd = img.open("/f", libc::O_RDONLY, 0);
    assert_eq!(easyio_read(img.fs, fd, b.as_mut_ptr().cast(), 4), 4);
    assert_eq!(&b, b"data");
    assert_eq!(easyio_unmount(img.fs), 0);
    let opts = easyio_mount_options {
        read_only: 1,
        ..Default::default()
    };
    img.fs = easyio_mount(path.as_ptr(), &opts);
    assert!(!img.fs.is_null(), "{}", last_error());
    fails(
        img.open("/g", libc::O_CREAT | libc::O_WRONLY, 0o644),
        libc::EROFS,
    );
    assert!(img.open("/f", libc::O_RDONLY, 0) >= 0);
}

static RAN: AtomicU32 = AtomicU32::new(0);

extern "C" fn mark(_: *mut c_void) -> *mut c_void {
    RAN.fetch_add(1, Ordering::SeqCst);
    null_mut()
}

/// On a runtime of one worker: spawns `mark` (queued behind the caller on the same
/// worker), makes one blocking 8 MiB read, and answers whether `mark` ran during it.
extern "C" fn read_while_other_runs(arg: *mut c_void) -> *mut c_void {
    // SAFETY: the test passes a `Shared` that outlives the uthread.
    let s = unsafe { &*(arg as *const Shared) };
    let other = easyio_spawn(null_mut(), Some(mark), null_mut());
    assert!(!other.is_null());
    let before = RAN.load(Ordering::SeqCst);
    let mut buf = vec![0u8; 8 << 20];
    let n = easyio_pread(s.fs, s.fd, buf.as_mut_ptr().cast(), buf.len(), 0);
    let after = RAN.load(Ordering::SeqCst);
    assert_eq!(easyio_join(other, null_mut()), 0);
    let data = n == buf.len() as isize && buf.iter().all(|&b| b == 3);
    // Bits: 1 the data read back, 2 the other had not run before, 4 it ran during.
    let bits = u32::from(data) | u32::from(before == 0) << 1 | u32::from(after == 1) << 2;
    s.ok.store(bits, Ordering::SeqCst);
    null_mut()
}

#[test]
fn a_blocking_read_in_a_uthread_yields_while_its_copy_runs() {
    let mut img = Image::new("cpu");
    img.write_file("/big", &vec![3u8; 8 << 20]);
    assert_eq!(easyio_unmount(img.fs), 0);
    // Slow memory emulated so that the engine's copy surely outlasts the first look.
    let (path, mode, cxl) = (c(&img.path), c("async"), c("cxl"));
    let opts = easyio_mount_options {
        mode: mode.as_ptr(),
        emulate: cxl.as_ptr(),
        ..Default::default()
    };
    img.fs = easyio_mount(path.as_ptr(), &opts);
    assert!(!img.fs.is_null(), "{}", last_error());
    let fd = img.open("/big", libc::O_RDONLY, 0);
    let shared = Shared {
        fs: img.fs,
        fd,
        ok: AtomicU32::new(0),
    };
    let rt = easyio_rt_start(1);
    // The wait spins briefly before it yields: a worker thread the kernel preempts
    // for longer than the whole copy comes back to a finished copy and need not
    // yield. So a few tries, each of which must read the data and keep the other
    // uthread queued until the first yields, and one of which must show the yield.
    let mut yielded = 0;
    for _ in 0..5 {
        RAN.store(0, Ordering::SeqCst);
        let arg = &shared as *const Shared as *mut c_void;
        let t = easyio_spawn(rt, Some(read_while_other_runs), arg);
        assert_eq!(easyio_join(t, null_mut()), 0);
        let bits = shared.ok.load(Ordering::SeqCst);
        assert!(bits & 1 != 0, "the read read the file back");
        assert!(
            bits & 2 != 0,
            "the other uthread waited for the first to yield"
        );
        yielded += u32::from(bits & 4 != 0);
    }
    assert_eq!(easyio_rt_stop(rt), 0);
    assert!(
        yielded > 0,
        "the other uthread of the worker ran while the read's copy ran"
    );
}

#[test]
fn unmount_under_concurrent_calls_makes_them_ebadf_not_crash() {
    let mut img = Image::new("async");
    img.write_file("/f", &[1u8; 65536]);
    let fd = img.open("/f", libc::O_RDWR, 0);
    let fs = img.fs as usize;
    // The buffers belong to this thread and outlive the unmount: a request whose
    // wait found the handle dead is finished only once `easyio_unmount` returns.
    let mut bufs = vec![vec![0u8; 65536]; 3];
    let addrs: Vec<usize> = bufs.iter_mut().map(|b| b.as_mut_ptr() as usize).collect();
    let stop_seen: Vec<_> = addrs
        .into_iter()
        .enumerate()
        .map(|(i, buf)| {
            std::thread::spawn(move || {
                let (fs, buf) = (fs as *mut easyio_fs, buf as *mut c_void);
                loop {
                    let r = match i {
                        0 => easyio_pread(fs, fd, buf, 65536, 0),
                        1 => easyio_pwrite(fs, fd, buf, 4096, 0),
                        _ => {
                            let id = easyio_submit_pread(fs, fd, buf, 65536, 0);
                            let mut c = easyio_completion::default();
                            if id < 0 {
                                -1
                            } else {
                                easyio_wait(fs, id as u64, &mut c) as isize
                            }
                        }
                    };
                    if r < 0 {
                        return errno();
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(easyio_unmount(img.fs), 0, "{}", last_error());
    img.fs = null_mut();
    for t in stop_seen {
        assert_eq!(t.join().unwrap(), libc::EBADF);
    }
    drop(bufs);
}

/// What the mount keeps open sits at or above `descriptors::floor()`: a program
/// that opens, dup2s onto or closes low numbers (3, 4, ...) never touches the
/// image. Checked in `/proc/self/fd` for the image's own descriptors, with the
/// engine threads of the async mode running.
#[test]
fn a_mount_keeps_its_descriptors_above_the_programs() {
    let img = Image::new("async");
    let floor = easyio::descriptors::floor();
    let mut held = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap() {
        let e = e.unwrap();
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        if target.to_string_lossy() == img.path {
            held.push(e.file_name().to_string_lossy().parse::<i32>().unwrap());
        }
    }
    assert!(
        !held.is_empty() || floor < 64,
        "the mount holds no descriptor of its image"
    );
    for fd in held {
        assert!(fd >= floor, "the image is open at {fd}, below {floor}");
    }
}
