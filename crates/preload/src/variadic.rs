//! The entries of C-variadic type (`execl`, `execle`, `execlp`, `dprintf`,
//! `__dprintf_chk`, `syscall`), written in C (`variadic.c`, built by `build.rs`:
//! stable Rust cannot define a C-variadic function), and what they need of the Rust
//! side: `vdprintf`, `getdents64`, the `mknod` family, and three helpers the C code
//! asks (`easyio_preload_*`).
//!
//! A Rust cdylib exports only Rust's own symbols (rustc's version script hides the
//! rest), so each C entry is exported by a Rust function of libc's name that is one
//! jump to the C function: a naked function, which leaves the registers and the
//! stack (every variadic argument) as the caller left them.
//!
//! The C entries call the libc functions of the same meaning by name (`execv`,
//! `vdprintf`, `open`, ...), which bind to the shim's exported wrappers: so `execl`
//! hands descriptors and the current directory over as `execv` does, and a
//! `syscall(SYS_openat, ...)` of a mount path is served by the image, never by the
//! kernel.

use std::ffi::{c_char, c_int, c_void};

use fs::Whence;
use libc::{dev_t, mode_t, size_t, ssize_t};

use crate::backend::Backend;
use crate::call::{fd_call, path_at};
use crate::guard::{errno_of, export, intercept, Answer};
use crate::path::{classify, Target};
use crate::real::{buf, buf_mut, set_errno};

extern "C" {
    fn easyio_c_execl();
    fn easyio_c_execle();
    fn easyio_c_execlp();
    fn easyio_c_dprintf();
    fn easyio_c_dprintf_chk();
    fn easyio_c_syscall();
    fn vasprintf(out: *mut *mut c_char, fmt: *const c_char, ap: *mut c_void) -> c_int;
    fn __vasprintf_chk(
        out: *mut *mut c_char,
        flag: c_int,
        fmt: *const c_char,
        ap: *mut c_void,
    ) -> c_int;
}

/// Exports each C entry under libc's name: a naked function that jumps to it.
macro_rules! c_entries {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {$(
        $(#[$doc])*
        #[unsafe(naked)]
        #[no_mangle]
        extern "C" fn $name() {
            // A tail jump: the C function finds the caller's arguments and returns
            // to the caller.
            core::arch::naked_asm!("jmp {f}", f = sym $c)
        }
    )*};
}

c_entries! {
    /// `execl`: `execv` of the arguments (`variadic.c`).
    execl => easyio_c_execl;
    /// `execle`: `execve` of the arguments and the environment after them.
    execle => easyio_c_execle;
    /// `execlp`: `execvp` of the arguments.
    execlp => easyio_c_execlp;
    /// `dprintf`: `vdprintf`.
    dprintf => easyio_c_dprintf;
    /// `__dprintf_chk` (`dprintf` under `_FORTIFY_SOURCE`): `__vdprintf_chk`.
    __dprintf_chk => easyio_c_dprintf_chk;
    /// `syscall`: the file system's system calls as the libc calls of the same
    /// meaning; any other to libc's `syscall`.
    syscall => easyio_c_syscall;
}

/// Whether `fd` is a descriptor of the mount (0 while this thread is inside the
/// shim): for `variadic.c`.
#[no_mangle]
extern "C" fn easyio_preload_fd_is_ours(fd: c_int) -> c_int {
    intercept(|| 0, || Some(Ok(crate::table::is_ours(fd) as c_int)))
}

/// Where a path leads (see [`crate::walk::place`]): for `variadic.c`.
#[no_mangle]
extern "C" fn easyio_preload_place(dirfd: c_int, path: *const c_char) -> c_int {
    crate::walk::place(dirfd, path)
}

/// The old `getdents` system call's records of an easyio directory: for
/// `variadic.c`, which asks only for descriptors of the mount.
#[no_mangle]
extern "C" fn easyio_preload_getdents(fd: c_int, out: *mut c_void, n: size_t) -> ssize_t {
    intercept(
        || {
            set_errno(libc::EBADF);
            -1
        },
        || dents(fd, out, n, true),
    )
}

/// `d_type` of an entry.
fn dtype(e: &fs::DirEntryAt) -> u8 {
    e.entry
        .kind
        .map_or(libc::DT_UNKNOWN, |k| match k.mode_bits() & libc::S_IFMT {
            libc::S_IFDIR => libc::DT_DIR,
            libc::S_IFREG => libc::DT_REG,
            libc::S_IFLNK => libc::DT_LNK,
            libc::S_IFIFO => libc::DT_FIFO,
            libc::S_IFSOCK => libc::DT_SOCK,
            libc::S_IFCHR => libc::DT_CHR,
            libc::S_IFBLK => libc::DT_BLK,
            _ => libc::DT_UNKNOWN,
        })
}

/// One record as the kernel writes it: `struct linux_dirent64` (`d_ino`, `d_off`,
/// `d_reclen`, `d_type`, name), or the old `struct linux_dirent` (`old`: the type in
/// the record's last byte), 8-byte aligned.
fn record(e: &fs::DirEntryAt, old: bool) -> Vec<u8> {
    let name = e.entry.name.as_bytes();
    let head = if old { 18 } else { 19 };
    let len = (head + name.len() + 1 + usize::from(old) + 7) & !7;
    let mut r = vec![0u8; len];
    r[0..8].copy_from_slice(&e.entry.ino.to_ne_bytes());
    r[8..16].copy_from_slice(&(e.offset as i64).to_ne_bytes());
    r[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
    if old {
        r[18..18 + name.len()].copy_from_slice(name);
        r[len - 1] = dtype(e);
    } else {
        r[18] = dtype(e);
        r[19..19 + name.len()].copy_from_slice(name);
    }
    r
}

/// `getdents64` (or the old `getdents`) of an easyio directory: the entries after
/// the descriptor's position, which is the cookie of the last one returned (so
/// `lseek(fd, 0, SEEK_SET)` starts again, as in the kernel).
fn dents(kfd: c_int, out: *mut c_void, n: size_t, old: bool) -> Answer<ssize_t> {
    fd_call(kfd, |d, l| {
        let pos = l.fs.lseek(d.fd, 0, Whence::Cur).map_err(errno_of)?;
        let batch = l.fs.readdir_fd(d.fd, pos).map_err(errno_of)?;
        let mut out = buf_mut(out, n);
        let (mut used, mut last) = (0, pos);
        for e in &batch {
            let rec = record(e, old);
            if used + rec.len() > out.len() {
                if used == 0 {
                    return Err(libc::EINVAL);
                }
                break;
            }
            out[used..used + rec.len()].copy_from_slice(&rec);
            used += rec.len();
            last = e.offset;
        }
        if last != pos {
            l.fs.lseek(d.fd, last as i64, Whence::Set)
                .map_err(errno_of)?;
        }
        Ok(used as ssize_t)
    })
}

/// `vdprintf` (`chk`: `__vdprintf_chk`'s flag) to an easyio descriptor: formatted by
/// libc into memory, written with the shim's write.
fn print(fd: c_int, fmt: *const c_char, ap: *mut c_void, chk: Option<c_int>) -> Answer<c_int> {
    fd_call(fd, |d, l| {
        let mut s: *mut c_char = std::ptr::null_mut();
        // SAFETY: the program's format and argument list, consumed here as
        // vdprintf would consume them; `s` receives a malloc'ed string.
        let n = unsafe {
            match chk {
                None => vasprintf(&mut s, fmt, ap),
                Some(flag) => __vasprintf_chk(&mut s, flag, fmt, ap),
            }
        };
        if n < 0 {
            return Err(crate::real::errno());
        }
        let bytes = buf(s.cast(), n as usize);
        let mut done = 0;
        let r = loop {
            if done == bytes.len() {
                break Ok(n);
            }
            match crate::io::write_at(l, d.fd, &bytes[done..], None) {
                Ok(0) => break Err(libc::EIO),
                Ok(k) => done += k,
                Err(e) => break Err(e),
            }
        };
        // SAFETY: vasprintf's string, not used again.
        unsafe { libc::free(s.cast()) };
        r
    })
}

/// `mknodat` on the mount: a FIFO, socket, device (root only, as Linux) or regular
/// file, made by the file system of either backend.
fn node(dirfd: c_int, path: *const c_char, mode: mode_t, dev: dev_t) -> Answer<c_int> {
    path_at(dirfd, path, |b, d, p| match b {
        Backend::Local { fs, cred } => {
            fs.as_user(&cred.read())
                .mknodat(d, p, crate::umask::masked(mode), dev)
        }
        Backend::Remote(r) => r.mknodat(d, p, crate::umask::masked(mode), dev),
    })
    .map(|r| r.map(|_| 0))
}

/// glibc's old `__xmknod(at)`: version 0 (`_MKNOD_VER` of x86-64) and the device
/// by pointer.
fn xnode(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: *const dev_t,
) -> Answer<c_int> {
    match classify(dirfd, path) {
        Ok(Target::Kernel) => None,
        Err(e) => Some(Err(e)),
        Ok(Target::Easy { .. }) if ver != 0 => Some(Err(libc::EINVAL)),
        Ok(Target::Easy { .. }) if dev.is_null() => Some(Err(libc::EFAULT)),
        // SAFETY: a non-NULL device argument points to a dev_t.
        Ok(Target::Easy { .. }) => node(dirfd, path, mode, unsafe { *dev }),
    }
}

const CWD: c_int = libc::AT_FDCWD;

export! {
    fn vdprintf(fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int { print(fd, fmt, ap, None) }
    fn __vdprintf_chk(fd: c_int, flag: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int { print(fd, fmt, ap, Some(flag)) }
    fn getdents64(fd: c_int, out: *mut c_void, n: size_t) -> ssize_t { dents(fd, out, n, false) }
    fn mknod(p: *const c_char, mode: mode_t, dev: dev_t) -> c_int { node(CWD, p, mode, dev) }
    fn mknodat(d: c_int, p: *const c_char, mode: mode_t, dev: dev_t) -> c_int { node(d, p, mode, dev) }
    fn mkfifo(p: *const c_char, mode: mode_t) -> c_int { node(CWD, p, mode | libc::S_IFIFO, 0) }
    fn mkfifoat(d: c_int, p: *const c_char, mode: mode_t) -> c_int { node(d, p, mode | libc::S_IFIFO, 0) }
    fn __xmknod(ver: c_int, p: *const c_char, mode: mode_t, dev: *const dev_t) -> c_int { xnode(ver, CWD, p, mode, dev) }
    fn __xmknodat(ver: c_int, d: c_int, p: *const c_char, mode: mode_t, dev: *const dev_t) -> c_int { xnode(ver, d, p, mode, dev) }
}
