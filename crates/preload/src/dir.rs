//! Directory streams of the mount: `opendir`, `fdopendir`, `readdir(64)`,
//! `closedir`, `rewinddir`, `dirfd`. A stream of the shim is a `DIR *` of its own,
//! told from libc's by a set of the live ones.

use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_long};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::call::{fd_call, open};
use crate::guard::{errno_of, export, Answer};
use crate::path::classify;

/// A directory stream on an easyio descriptor.
struct Dir {
    kfd: c_int,
    /// Entries fetched and not yet returned.
    batch: Vec<fs::DirEntryAt>,
    next: usize,
    /// Cookie to resume from when the batch runs out.
    cookie: u64,
    done: bool,
    /// What `readdir` returned last (valid until the next call on the stream).
    ent: libc::dirent64,
}

static DIRS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The shim's stream behind `p`, if it is one.
fn ours(p: *mut libc::DIR) -> Option<&'static mut Dir> {
    if LIVE.load(Ordering::Relaxed) == 0 || p.is_null() {
        return None;
    }
    if !DIRS.lock().as_ref()?.contains(&(p as usize)) {
        return None;
    }
    // SAFETY: a live stream made by `wrap` and not yet closed; a stream is used by
    // one thread at a time (POSIX leaves concurrent use of one DIR undefined).
    Some(unsafe { &mut *p.cast::<Dir>() })
}

/// A stream over easyio descriptor `kfd` (which it then owns).
fn wrap(kfd: c_int) -> Result<*mut libc::DIR, i32> {
    let d = crate::table::get(kfd).ok_or(libc::EBADF)?;
    let st = crate::call::mount_of(&d)?
        .fs
        .fstat(d.fd)
        .map_err(errno_of)?;
    if st.mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(libc::ENOTDIR);
    }
    // SAFETY: `dirent64` is plain integers and bytes, for which zeros is a value.
    let ent = unsafe { std::mem::zeroed() };
    let dir = Box::new(Dir {
        kfd,
        batch: Vec::new(),
        next: 0,
        cookie: 0,
        done: false,
        ent,
    });
    let p = Box::into_raw(dir) as usize;
    DIRS.lock().get_or_insert_with(HashSet::new).insert(p);
    LIVE.fetch_add(1, Ordering::Relaxed);
    Ok(p as *mut libc::DIR)
}

fn easy_opendir(path: *const c_char) -> Answer<*mut libc::DIR> {
    let kfd = open(
        classify(libc::AT_FDCWD, path),
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    )?;
    Some(kfd.and_then(|k| {
        wrap(k).inspect_err(|_| {
            crate::table::remove(k);
            crate::table::close_placeholder(k);
        })
    }))
}

/// The next entry, or `None` at the end.
fn next(d: &mut Dir) -> Result<Option<*mut libc::dirent64>, i32> {
    if d.next == d.batch.len() {
        if d.done {
            return Ok(None);
        }
        let cookie = d.cookie;
        d.batch = fd_call(d.kfd, |desc, l| {
            l.fs.readdir_fd(desc.fd, cookie).map_err(errno_of)
        })
        .ok_or(libc::EBADF)??;
        d.next = 0;
        if d.batch.is_empty() {
            d.done = true;
            return Ok(None);
        }
    }
    let e = &d.batch[d.next];
    d.next += 1;
    d.cookie = e.offset;
    let name = e.entry.name.as_bytes();
    let ent = &mut d.ent;
    ent.d_ino = e.entry.ino;
    ent.d_off = e.offset as i64;
    ent.d_type = e
        .entry
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
        });
    let k = name.len().min(ent.d_name.len() - 1);
    for (dst, src) in ent.d_name.iter_mut().zip(&name[..k]) {
        *dst = *src as c_char;
    }
    ent.d_name[k] = 0;
    ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    Ok(Some(ent as *mut libc::dirent64))
}

fn easy_readdir(p: *mut libc::DIR) -> Answer<*mut libc::dirent64> {
    let d = ours(p)?;
    // The end of the stream is NULL with errno unchanged.
    Some(match next(d) {
        Ok(Some(e)) => Ok(e),
        Ok(None) => return Some(Ok(std::ptr::null_mut())),
        Err(e) => Err(e),
    })
}

fn easy_closedir(p: *mut libc::DIR) -> Answer<c_int> {
    ours(p)?;
    DIRS.lock()
        .get_or_insert_with(HashSet::new)
        .remove(&(p as usize));
    LIVE.fetch_sub(1, Ordering::Relaxed);
    // SAFETY: made by `wrap` with Box::into_raw and now out of the live set.
    let d = unsafe { Box::from_raw(p.cast::<Dir>()) };
    crate::table::remove(d.kfd);
    crate::table::close_placeholder(d.kfd);
    Some(Ok(0))
}

export! {
    fn opendir(path: *const c_char) -> *mut libc::DIR { easy_opendir(path) }
    fn fdopendir(fd: c_int) -> *mut libc::DIR {
        crate::table::is_ours(fd).then(|| wrap(fd))
    }
    fn readdir(p: *mut libc::DIR) -> *mut libc::dirent64 { easy_readdir(p) }
    fn readdir64(p: *mut libc::DIR) -> *mut libc::dirent64 { easy_readdir(p) }
    fn closedir(p: *mut libc::DIR) -> c_int { easy_closedir(p) }
    fn dirfd(p: *mut libc::DIR) -> c_int { ours(p).map(|d| Ok(d.kfd)) }
    fn rewinddir(p: *mut libc::DIR) -> () {
        ours(p).map(|d| {
            d.batch.clear();
            d.next = 0;
            d.cookie = 0;
            d.done = false;
            Ok(())
        })
    }
    fn telldir(p: *mut libc::DIR) -> c_long { ours(p).map(|d| Ok(d.cookie as c_long)) }
    fn seekdir(p: *mut libc::DIR, pos: c_long) -> () {
        ours(p).map(|d| {
            d.batch.clear();
            d.next = 0;
            d.cookie = pos as u64;
            d.done = false;
            Ok(())
        })
    }
}
