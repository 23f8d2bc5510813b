//! Memory maps of easyio files: `mmap`, `mmap64`, `munmap`, `msync`, `mremap`.
//!
//! A private mapping (`MAP_PRIVATE`) is a private copy filled by a read at `mmap`
//! time. A shared mapping (`MAP_SHARED`, writable or not) maps a POSIX shared-memory
//! object (`shm_open`) that holds the file's pages while any process maps the file:
//!
//! - it is named after the file system (device and inode of the image, or of the
//!   server's socket, that the process reaches it by) and the file (inode number and
//!   generation), so every process of the shim that maps the file maps the same pages
//!   and their mappings are coherent at once, as the kernel's page cache makes them;
//! - the first process to map the file creates it and fills it from the file; it is
//!   as long as the file (a page wholly past the end faults with SIGBUS, as in the
//!   kernel), and grows when a mapping process grows the file;
//! - it is written back to the file — only the pages that differ — at `msync`, at
//!   `munmap` of a range, at `fsync` of the file, at exit and before `exec`, and when
//!   the last mapping of the last process goes, which then removes it.
//!
//! Each process that maps the object holds `flock(LOCK_SH)` on its own descriptor of
//! it; a process whose last mapping of it goes asks for `LOCK_EX|LOCK_NB`, and getting
//! it means it was the last. Filling, growing, writing back and that last look are
//! made under an open-file-description lock (`F_OFD_SETLKW`) on the object, so that
//! processes take turns. An object no process holds (its last one was killed) is
//! filled again from the file by the next process that maps the file, and removed by
//! the first process that maps any file of that file system.
//!
//! While a process maps a file, its `read`s of the file see the mapping (the object's
//! bytes are laid over what the file system returned), its `write`s go to the object
//! too, and its `ftruncate` and `fallocate` resize it: hooks called from `io.rs`.
//! What is not coherent is listed in `docs/PRELOAD.md`.
//!
//! The shim's own table of shared mappings (address, length, object, offset) lets
//! `munmap`, `msync` and `mremap` of other ranges pass to libc after one load.

mod file;
mod fork;
mod object;
mod shm;
mod state;

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fs::{FileKind, Whence};
use libc::{off_t, size_t};

use crate::call::mount_of;
use crate::guard::{errno_of, intercept, Answer};
use crate::live::Live;
use crate::real::{buf, buf_mut, errno, libc_call};
use crate::table::{self, Desc};
use file::{file_read, file_size, flush, grow, report, writable};
pub(crate) use fork::before_exec;
use fork::register_hooks;
use object::{page, round_up, Key, Object, CHUNK};
use shm::{open_object, release};
use state::{key_of, object_of, remember, Entry, Piece, MAPPED, OBJECTS, OPS, STATE};

/// Whether `[a, a + n)` meets a shared mapping of the shim's (one load while the
/// process maps none): memory other processes store into at any time, which the shim
/// reaches only through raw-pointer copies and system calls.
pub(crate) fn shared(a: usize, n: usize) -> bool {
    MAPPED.load(Ordering::Relaxed) != 0 && STATE.lock().overlaps(a, a.saturating_add(n))
}

// ---- mmap ----

/// `mmap` of easyio descriptor `fd` (or, with `MAP_FIXED`, over a mapping of the
/// shim's); `None` for others.
fn easy_mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> Answer<*mut c_void> {
    if flags & libc::MAP_FIXED != 0 && MAPPED.load(Ordering::Relaxed) != 0 {
        // The new mapping replaces what the shim mapped there.
        let _ops = OPS.lock();
        forget(addr as usize, len);
    }
    if fd < 0 || flags & libc::MAP_ANONYMOUS != 0 {
        return None;
    }
    let d = table::get(fd)?;
    let kind = flags & (libc::MAP_SHARED | libc::MAP_PRIVATE);
    Some(if kind == libc::MAP_PRIVATE {
        map_private(&d, addr, len, prot, flags, off)
    } else {
        map_shared(d, addr, len, prot, flags, off)
    })
}

/// A private mapping: a private copy filled by a read (of the mapping, if this
/// process maps the file shared).
fn map_private(
    d: &Arc<Desc>,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off_t,
) -> Result<*mut c_void, i32> {
    let l = mount_of(d)?;
    let flags = (flags & !(libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE))
        | libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS;
    let p = libc_call!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void, addr, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0);
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    let mut dst = buf_mut(p, len);
    let filled = file_read(&l, d, &mut dst, off as u64).and_then(|got| {
        if OBJECTS.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let k = key_of(d);
        let held = (STATE.lock().objects.iter())
            .find(|o| Some(o.key) == k)
            .cloned();
        held.map_or(Ok(()), |obj| obj.overlay(&mut dst[..got], off as u64))
    });
    if let Err(e) = filled {
        libc_call!(munmap: fn(*mut c_void, size_t) -> c_int, p, len);
        return Err(e);
    }
    // SAFETY: our own fresh mapping of `len` bytes.
    unsafe { libc::mprotect(p, len, prot) };
    Ok(p)
}

/// A shared mapping: of the file's object, made or joined here.
fn map_shared(
    d: Arc<Desc>,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off_t,
) -> Result<*mut c_void, i32> {
    let status = d.status.load(Ordering::Relaxed);
    if status & libc::O_PATH != 0 {
        return Err(libc::EBADF);
    }
    let mode = status & libc::O_ACCMODE;
    if mode == libc::O_WRONLY || (prot & libc::PROT_WRITE != 0 && mode != libc::O_RDWR) {
        return Err(libc::EACCES);
    }
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(page()) {
        return Err(libc::EINVAL);
    }
    let l = mount_of(&d)?;
    let st = l.fs.fstat(d.fd).map_err(errno_of)?;
    if st.kind != FileKind::File {
        return Err(libc::ENODEV);
    }
    let key = (st.ino, st.generation);
    register_hooks();
    let _ops = OPS.lock();
    let obj = share_of(&l, &d, key)?;
    let p = libc_call!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void, addr, len, prot, flags, obj.fd, off);
    if p == libc::MAP_FAILED {
        let e = errno();
        let gone = {
            let mut st = STATE.lock();
            let probe = [Piece {
                len: 0,
                off: 0,
                obj,
            }];
            st.unused(&probe)
        };
        gone.into_iter().for_each(release);
        return Err(e);
    }
    let mut st = STATE.lock();
    let entry = Entry {
        len: round_up(len),
        off: off as u64,
        obj,
    };
    st.maps.insert(p as usize, entry);
    st.counts();
    Ok(p)
}

/// This process's object of file `key` (which `d` is open on), as long as the file.
fn share_of(l: &Live, d: &Arc<Desc>, key: Key) -> Result<Arc<Object>, i32> {
    remember(d, key);
    let held = (STATE.lock().objects.iter())
        .find(|o| o.key == key)
        .cloned();
    if let Some(obj) = held {
        if writable(d) && !writable(&obj.desc()) {
            *obj.desc.lock() = d.clone();
        }
        obj.locked(|| grow(&obj, l, d, file_size(l, d)?))?;
        return Ok(obj);
    }
    let obj = open_object(l, d, key)?;
    let mut st = STATE.lock();
    st.objects.push(obj.clone());
    st.counts();
    Ok(obj)
}

/// Forgets the shim's mappings in `len` bytes at `a` (being unmapped or replaced):
/// writes them back, and lets go of objects no mapping uses any more. With `OPS`.
fn forget(a: usize, len: usize) {
    let (pieces, gone) = {
        let mut st = STATE.lock();
        let pieces = st.pieces(a, a.saturating_add(round_up(len)), false);
        let gone = st.unused(&pieces);
        (pieces, gone)
    };
    for p in &pieces {
        let _ = report(flush(&p.obj, p.off, p.off + p.len as u64));
    }
    gone.into_iter().for_each(release);
}

// ---- munmap, msync, mremap ----

fn unmap(addr: *mut c_void, len: size_t) -> Answer<c_int> {
    let a = addr as usize;
    if !STATE.lock().overlaps(a, a.saturating_add(len.max(1))) {
        return None;
    }
    if !a.is_multiple_of(page()) || len == 0 {
        return Some(Err(libc::EINVAL));
    }
    let _ops = OPS.lock();
    forget(a, len);
    let r = libc_call!(munmap: fn(*mut c_void, size_t) -> c_int, addr, len);
    Some(if r == 0 { Ok(0) } else { Err(errno()) })
}

fn sync_range(addr: *mut c_void, len: size_t, flags: c_int) -> Answer<c_int> {
    let a = addr as usize;
    if !STATE.lock().overlaps(a, a.saturating_add(len.max(1))) {
        return None;
    }
    let r = libc_call!(msync: fn(*mut c_void, size_t, c_int) -> c_int, addr, len, flags);
    if r != 0 {
        return Some(Err(errno()));
    }
    let _ops = OPS.lock();
    let pieces = STATE.lock().pieces(a, a.saturating_add(len), true);
    for p in &pieces {
        if report(flush(&p.obj, p.off, p.off + p.len as u64)).is_err() {
            return Some(Err(libc::EIO));
        }
    }
    Some(Ok(0))
}

/// libc's `mremap`, which is variadic (the new address comes with `MREMAP_FIXED`).
fn real_mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let f = crate::real::resolve(&SLOT, "mremap\0");
    type Mremap = unsafe extern "C" fn(*mut c_void, size_t, size_t, c_int, ...) -> *mut c_void;
    // SAFETY: `f` is libc's `mremap`, of this C type.
    let f = unsafe { std::mem::transmute::<usize, Mremap>(f) };
    // SAFETY: the program's own arguments.
    unsafe { f(old, old_len, new_len, flags, new_addr) }
}

/// `mremap` of a mapping of the shim: the kernel moves or resizes it; the table
/// follows (a shrunk part is written back first).
fn remap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> Answer<*mut c_void> {
    let a = old as usize;
    let (obj, off) = {
        let st = STATE.lock();
        let (s, e) = st.maps.range(..=a).next_back()?;
        if a >= s + e.len {
            return None;
        }
        (e.obj.clone(), e.off + (a - s) as u64)
    };
    let _ops = OPS.lock();
    let (keep, was) = (round_up(new_len), round_up(old_len));
    if old_len != 0 && keep < was {
        forget(a + keep, was - keep);
    }
    let r = real_mremap(old, old_len, new_len, flags, new_addr);
    if r == libc::MAP_FAILED {
        return Some(Err(errno()));
    }
    let (replaced, gone) = {
        let mut st = STATE.lock();
        if old_len != 0 && flags & libc::MREMAP_DONTUNMAP == 0 {
            st.pieces(a, a + keep.min(was), false);
        }
        let replaced = st.pieces(r as usize, r as usize + keep, false);
        st.maps.insert(
            r as usize,
            Entry {
                len: keep,
                off,
                obj,
            },
        );
        let gone = st.unused(&replaced);
        (replaced, gone)
    };
    for p in &replaced {
        let _ = report(flush(&p.obj, p.off, p.off + p.len as u64));
    }
    gone.into_iter().for_each(release);
    Some(Ok(r))
}

// ---- hooks of io.rs ----

/// Where a call at `off` (`None`: at the position, now `n` bytes past it) began.
fn start_of(d: &Desc, off: Option<u64>, n: usize) -> Result<u64, i32> {
    match off {
        Some(o) => Ok(o),
        None => {
            let l = mount_of(d)?;
            let pos = l.fs.lseek(d.fd, 0, Whence::Cur).map_err(errno_of)?;
            Ok(pos.saturating_sub(n as u64))
        }
    }
}

/// After a read of `n` bytes into `p` from easyio descriptor `kfd` (at `off`, or at
/// the position): if this process maps the file shared, the bytes are the
/// mapping's. Returns `n`.
pub(crate) fn read_done(kfd: c_int, p: *mut c_void, n: usize, off: Option<u64>) -> usize {
    if OBJECTS.load(Ordering::Relaxed) == 0 || n == 0 {
        return n;
    }
    if let Some((d, obj)) = object_of(kfd) {
        if let Ok(at) = start_of(&d, off, n) {
            let _ = obj.overlay(&mut buf_mut(p, n), at);
        }
    }
    n
}

/// After a write of `n` bytes from `p` to easyio descriptor `kfd` (at `off`, or at
/// the position): if this process maps the file shared, they go to the mapping too
/// (grown with the file). Returns `n`.
pub(crate) fn write_done(kfd: c_int, p: *const c_void, n: usize, off: Option<u64>) -> usize {
    if OBJECTS.load(Ordering::Relaxed) == 0 || n == 0 {
        return n;
    }
    if let Some((d, obj)) = object_of(kfd) {
        let _ = (|| {
            let at = start_of(&d, off, n)?;
            let od = obj.desc();
            let l = mount_of(&od)?;
            obj.locked(|| {
                let size = obj.size()?;
                if at > size {
                    grow(&obj, &l, &od, at)?;
                }
                obj.write(&buf(p, n), at)
            })
        })();
    }
    n
}

/// After `ftruncate(kfd, len)`: a mapped file's object takes the length. Returns 0.
pub(crate) fn truncated(kfd: c_int, len: u64) -> c_int {
    if OBJECTS.load(Ordering::Relaxed) != 0 {
        if let Some((_, obj)) = object_of(kfd) {
            let _ = obj.locked(|| obj.resize(len));
        }
    }
    0
}

/// After `fallocate(kfd, mode, off, len)`: a punched hole reads as zeros in the
/// mapping too, and a file made longer makes the object longer. Returns 0.
pub(crate) fn allocated(kfd: c_int, mode: c_int, off: u64, len: u64) -> c_int {
    if OBJECTS.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    if let Some((d, obj)) = object_of(kfd) {
        let _ = (|| {
            let l = mount_of(&d)?;
            obj.locked(|| {
                let size = obj.size()?;
                if mode & fs::FALLOC_FL_PUNCH_HOLE != 0 && off < size {
                    let end = off.saturating_add(len).min(size);
                    let zeros = vec![0u8; CHUNK.min((end - off) as usize)];
                    let mut at = off;
                    while at < end {
                        let n = ((end - at) as usize).min(zeros.len());
                        obj.write(&zeros[..n], at)?;
                        at += n as u64;
                    }
                }
                let file = file_size(&l, &d)?;
                if file > size {
                    obj.resize(file)?;
                }
                Ok(())
            })
        })();
    }
    0
}

/// Before `fsync` of easyio descriptor `kfd`: a mapped file is written back whole.
pub(crate) fn before_sync(kfd: c_int) {
    if OBJECTS.load(Ordering::Relaxed) == 0 {
        return;
    }
    if let Some((_, obj)) = object_of(kfd) {
        let _ = report(flush(&obj, 0, u64::MAX));
    }
}

// ---- the exported calls ----

// `mmap` returns MAP_FAILED, not NULL, on failure: exported by hand.
#[no_mangle]
extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    map(addr, len, prot, flags, fd, off)
}

#[no_mangle]
extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    map(addr, len, prot, flags, fd, off)
}

fn map(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let pass = || libc_call!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void, addr, len, prot, flags, fd, off);
    let over_ours = flags & libc::MAP_FIXED != 0 && MAPPED.load(Ordering::Relaxed) != 0;
    if (fd < 0 || flags & libc::MAP_ANONYMOUS != 0) && !over_ours {
        return pass();
    }
    failed_is_map_failed(intercept(pass, || {
        easy_mmap(addr, len, prot, flags, fd, off)
    }))
}

/// The shim's failure (NULL) as `mmap` and `mremap` say it.
fn failed_is_map_failed(p: *mut c_void) -> *mut c_void {
    if p.is_null() {
        libc::MAP_FAILED
    } else {
        p
    }
}

#[no_mangle]
extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let pass = || libc_call!(munmap: fn(*mut c_void, size_t) -> c_int, addr, len);
    if MAPPED.load(Ordering::Relaxed) == 0 {
        return pass();
    }
    intercept(pass, || unmap(addr, len))
}

#[no_mangle]
extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    let pass = || libc_call!(msync: fn(*mut c_void, size_t, c_int) -> c_int, addr, len, flags);
    if MAPPED.load(Ordering::Relaxed) == 0 {
        return pass();
    }
    intercept(pass, || sync_range(addr, len, flags))
}

/// `mremap` is variadic in C; the fifth argument (the new address) is read only
/// with `MREMAP_FIXED`, as libc does, so a caller that passes four is served too.
#[no_mangle]
extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let pass = || real_mremap(old, old_len, new_len, flags, new_addr);
    if MAPPED.load(Ordering::Relaxed) == 0 {
        return pass();
    }
    failed_is_map_failed(intercept(pass, || {
        remap(old, old_len, new_len, flags, new_addr)
    }))
}
