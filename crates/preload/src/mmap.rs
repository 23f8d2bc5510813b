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

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void, CString};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use fs::{FileKind, Whence};
use libc::{off_t, size_t};
use parking_lot::Mutex;

use crate::call::mount_of;
use crate::guard::{errno_of, intercept, Answer, Guard};
use crate::live::Live;
use crate::real::{buf, buf_mut, errno, libc_call, real};
use crate::report::Once;
use crate::table::{self, Desc};

/// Bytes moved per step between the file and the object.
const CHUNK: usize = 1 << 20;

/// A file: its inode number and generation (a reused number has another).
type Key = (u64, u64);

/// The shared-memory object of one file, as this process holds it.
struct Object {
    key: Key,
    name: CString,
    /// This process's descriptor of it (close-on-exec), holding `LOCK_SH` while the
    /// process maps it.
    fd: c_int,
    /// The open file written back to: one this process mapped the file by (a
    /// writable one if any was).
    desc: Mutex<Arc<Desc>>,
    /// Takes turns between this process's threads (an OFD lock does not: they share
    /// the descriptor).
    turn: Mutex<()>,
    /// In a child of `fork` that cannot write it back (its parent mounts the image
    /// itself, or did not hand the descriptor over): the parent's object, which the
    /// child neither writes back nor lets go.
    inherited: AtomicBool,
}

impl Drop for Object {
    fn drop(&mut self) {
        let close = real!(close: fn(c_int) -> c_int);
        // SAFETY: our own descriptor, closed once.
        unsafe { close(self.fd) };
    }
}

/// One shared mapping of the shim (the key of the table is its address).
struct Entry {
    /// Bytes, whole pages.
    len: usize,
    /// Offset in the file of its first byte.
    off: u64,
    obj: Arc<Object>,
}

/// Part of a mapping: `len` bytes at `addr`, file offset `off`.
struct Piece {
    len: usize,
    off: u64,
    obj: Arc<Object>,
}

struct State {
    maps: BTreeMap<usize, Entry>,
    objects: Vec<Arc<Object>>,
    /// Which file each open file description seen while something is mapped is of
    /// (the `Weak` holds the allocation, so an address names one description).
    known: Vec<(Weak<Desc>, Key)>,
}

static STATE: Mutex<State> = Mutex::new(State {
    maps: BTreeMap::new(),
    objects: Vec::new(),
    known: Vec::new(),
});
/// Held while a change of the tables and its I/O are made (before `STATE`).
static OPS: Mutex<()> = Mutex::new(());
/// Entries of the table: while 0, `munmap`, `msync` and `mremap` cost one load.
static MAPPED: AtomicUsize = AtomicUsize::new(0);
/// Objects held: while 0, the hooks of `io.rs` cost one load.
static OBJECTS: AtomicUsize = AtomicUsize::new(0);
static WRITE_BACK: Once = Once::new();

fn page() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf only reads a constant of the system.
    *PAGE.get_or_init(|| (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize)
}

fn round_up(n: usize) -> usize {
    n.div_ceil(page()) * page()
}

impl State {
    fn counts(&mut self) {
        MAPPED.store(self.maps.len(), Ordering::Relaxed);
        OBJECTS.store(self.objects.len(), Ordering::Relaxed);
        if self.objects.is_empty() {
            self.known.clear();
        }
    }

    /// Whether a mapping of the shim meets `[a, b)`.
    fn overlaps(&self, a: usize, b: usize) -> bool {
        self.maps
            .range(..b)
            .next_back()
            .is_some_and(|(s, e)| s + e.len > a)
    }

    /// The parts of the shim's mappings in `[a, b)`, taken out of the table (or only
    /// looked at, `keep`).
    fn pieces(&mut self, a: usize, b: usize, keep: bool) -> Vec<Piece> {
        // Mappings do not overlap: their ends rise with their starts.
        let starts: Vec<usize> = (self.maps.range(..b).rev())
            .take_while(|(s, e)| *s + e.len > a)
            .map(|(s, _)| *s)
            .collect();
        let mut out = Vec::new();
        for s in starts {
            let e = &self.maps[&s];
            let (end, ps) = (s + e.len, s.max(a));
            let pe = end.min(b);
            out.push(Piece {
                len: pe - ps,
                off: e.off + (ps - s) as u64,
                obj: e.obj.clone(),
            });
            if keep {
                continue;
            }
            let e = self.maps.remove(&s).expect("listed above");
            if s < ps {
                let head = Entry {
                    len: ps - s,
                    off: e.off,
                    obj: e.obj.clone(),
                };
                self.maps.insert(s, head);
            }
            if pe < end {
                let tail = Entry {
                    len: end - pe,
                    off: e.off + (pe - s) as u64,
                    obj: e.obj,
                };
                self.maps.insert(pe, tail);
            }
        }
        out
    }

    /// The objects of `pieces` no mapping uses any more, taken out of the table.
    fn unused(&mut self, pieces: &[Piece]) -> Vec<Arc<Object>> {
        let mut gone: Vec<Arc<Object>> = Vec::new();
        for p in pieces {
            let used = self.maps.values().any(|e| Arc::ptr_eq(&e.obj, &p.obj));
            if !used && !gone.iter().any(|g| Arc::ptr_eq(g, &p.obj)) {
                gone.push(p.obj.clone());
            }
        }
        self.objects
            .retain(|o| !gone.iter().any(|g| Arc::ptr_eq(g, o)));
        self.counts();
        gone
    }
}

// ---- the object's side: libc calls on the shared-memory descriptor ----

impl Object {
    fn desc(&self) -> Arc<Desc> {
        self.desc.lock().clone()
    }

    fn stat(&self) -> Result<libc::stat64, i32> {
        let fstat = real!(fstat64: fn(c_int, *mut libc::stat64) -> c_int);
        // SAFETY: a plain struct filled by the call.
        let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
        // SAFETY: our descriptor and a struct of the right type.
        if unsafe { fstat(self.fd, &mut st) } != 0 {
            return Err(errno());
        }
        Ok(st)
    }

    fn size(&self) -> Result<u64, i32> {
        self.stat().map(|s| s.st_size as u64)
    }

    fn resize(&self, len: u64) -> Result<(), i32> {
        let ftruncate = real!(ftruncate64: fn(c_int, off_t) -> c_int);
        // SAFETY: our descriptor.
        if unsafe { ftruncate(self.fd, len as off_t) } != 0 {
            return Err(errno());
        }
        Ok(())
    }

    /// Reads at `off` until `b` is full or the object ends; returns the bytes read.
    fn read(&self, b: &mut [u8], off: u64) -> Result<usize, i32> {
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
    fn write(&self, b: &[u8], off: u64) -> Result<(), i32> {
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
    fn flock(&self, op: c_int) -> bool {
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
    fn locked<T>(&self, f: impl FnOnce() -> Result<T, i32>) -> Result<T, i32> {
        let _turn = self.turn.lock();
        self.ofd_lock(libc::F_WRLCK)?;
        let r = f();
        let _ = self.ofd_lock(libc::F_UNLCK);
        r
    }

    /// Bytes of the object laid over `b`, which holds the file's bytes at `off`.
    fn overlay(&self, b: &mut [u8], off: u64) -> Result<(), i32> {
        let size = self.size()?;
        if off < size {
            let n = b.len().min((size - off) as usize);
            self.read(&mut b[..n], off)?;
        }
        Ok(())
    }
}

// ---- the file's side ----

/// Whether write back may go through `d` (it must also read, to compare).
fn writable(d: &Desc) -> bool {
    let s = d.status.load(Ordering::Relaxed);
    s & libc::O_PATH == 0 && s & libc::O_ACCMODE == libc::O_RDWR
}

fn file_size(l: &Live, d: &Desc) -> Result<u64, i32> {
    l.fs.fstat(d.fd).map(|s| s.size).map_err(errno_of)
}

/// Reads the file at `off` until `b` is full or the file ends.
fn file_read(l: &Live, d: &Desc, b: &mut [u8], off: u64) -> Result<usize, i32> {
    let mut at = 0;
    while at < b.len() {
        match l.fs.pread(d.fd, &mut b[at..], off + at as u64) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) => return Err(errno_of(e)),
        }
    }
    Ok(at)
}

fn file_write(l: &Live, d: &Desc, b: &[u8], off: u64) -> Result<(), i32> {
    let mut at = 0;
    while at < b.len() {
        match l.fs.pwrite(d.fd, &b[at..], off + at as u64) {
            Ok(0) => return Err(libc::EIO),
            Ok(n) => at += n,
            Err(e) => return Err(errno_of(e)),
        }
    }
    Ok(())
}

/// Copies the file's `[from, to)` into the object (which holds zeros there when
/// `fresh`: zero chunks are then skipped, so a sparse file stays sparse).
fn fill(obj: &Object, l: &Live, d: &Desc, from: u64, to: u64, fresh: bool) -> Result<(), i32> {
    let mut b = vec![0u8; CHUNK.min(to.saturating_sub(from) as usize)];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(b.len());
        let got = file_read(l, d, &mut b[..n], at)?;
        b[got..n].fill(0);
        if !(fresh && b[..n].iter().all(|&x| x == 0)) {
            obj.write(&b[..n], at)?;
        }
        at += n as u64;
    }
    Ok(())
}

/// Makes the object at least `size` bytes long, the new part filled from the file.
fn grow(obj: &Object, l: &Live, d: &Desc, size: u64) -> Result<(), i32> {
    let old = obj.size()?;
    if size > old {
        obj.resize(size)?;
        fill(obj, l, d, old, size, false)?;
    }
    Ok(())
}

/// Writes the object's `[from, to)` (within the file and the object) back to the
/// file: the pages that differ from the file's. In the object's turn.
fn flush_locked(obj: &Object, l: &Live, d: &Desc, from: u64, to: u64) -> Result<(), i32> {
    let to = to.min(file_size(l, d)?).min(obj.size()?);
    if from >= to {
        return Ok(());
    }
    let cap = CHUNK.min((to - from) as usize);
    let (mut mine, mut theirs) = (vec![0u8; cap], vec![0u8; cap]);
    let mut at = from;
    while at < to {
        let want = ((to - at) as usize).min(cap);
        // The file's length bounds the write back: it never grows the file.
        let n = file_read(l, d, &mut theirs[..want], at)?;
        let got = obj.read(&mut mine[..n], at)?;
        mine[got..n].fill(0);
        write_differences(l, d, &mine[..n], &theirs[..n], at)?;
        if n < want {
            break;
        }
        at += n as u64;
    }
    Ok(())
}

/// Writes the runs of pages of `mine` that differ from `theirs` (both at `off`).
fn write_differences(l: &Live, d: &Desc, mine: &[u8], theirs: &[u8], off: u64) -> Result<(), i32> {
    let pg = page();
    let differs = |i: usize| {
        let e = (i + pg).min(mine.len());
        mine[i..e] != theirs[i..e]
    };
    let mut i = 0;
    while i < mine.len() {
        if !differs(i) {
            i += pg;
            continue;
        }
        let start = i;
        while i < mine.len() && differs(i) {
            i += pg;
        }
        let end = i.min(mine.len());
        file_write(l, d, &mine[start..end], off + start as u64)?;
    }
    Ok(())
}

/// Writes the object's `[from, to)` back to the file (nothing for a process that
/// cannot write the file, or that is a child of the image's holder).
fn flush(obj: &Object, from: u64, to: u64) -> Result<(), i32> {
    if obj.inherited.load(Ordering::Relaxed) {
        return Ok(());
    }
    let d = obj.desc();
    if !writable(&d) {
        return Ok(());
    }
    let l = mount_of(&d)?;
    obj.locked(|| flush_locked(obj, &l, &d, from, to))
}

/// Says once on stderr that a write back failed (the data stays in the mapping).
fn report(r: Result<(), i32>) -> Result<(), i32> {
    if let Err(e) = r {
        WRITE_BACK.say(|| {
            format!(
                "writing a shared mapping back to its easyio file failed: {}",
                std::io::Error::from_raw_os_error(e)
            )
        });
    }
    r
}

// ---- objects: found, opened, let go ----

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
fn open_object(l: &Live, d: &Arc<Desc>, key: Key) -> Result<Arc<Object>, i32> {
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
fn release(obj: Arc<Object>) {
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

/// Which file `d` is open on (asked once per open file description).
fn key_of(d: &Arc<Desc>) -> Option<Key> {
    let known = |st: &State| {
        (st.known.iter())
            .find(|(w, _)| w.as_ptr() == Arc::as_ptr(d))
            .map(|(_, k)| *k)
    };
    if let Some(k) = known(&STATE.lock()) {
        return Some(k);
    }
    let l = mount_of(d).ok()?;
    let s = l.fs.fstat(d.fd).ok()?;
    let key = (s.ino, s.generation);
    remember(d, key);
    Some(key)
}

fn remember(d: &Arc<Desc>, key: Key) {
    let mut st = STATE.lock();
    st.known.retain(|(w, _)| w.strong_count() > 0);
    if !(st.known.iter()).any(|(w, _)| w.as_ptr() == Arc::as_ptr(d)) {
        st.known.push((Arc::downgrade(d), key));
    }
}

/// The description of easyio descriptor `kfd` and the object of its file, if this
/// process maps that file shared.
fn object_of(kfd: c_int) -> Option<(Arc<Desc>, Arc<Object>)> {
    let d = table::get(kfd)?;
    let key = key_of(&d)?;
    let obj = (STATE.lock().objects.iter())
        .find(|o| o.key == key)
        .cloned()?;
    Some((d, obj))
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
    let dst = buf_mut(p, len);
    let filled = file_read(&l, d, dst, off as u64).and_then(|got| {
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
            let _ = obj.overlay(buf_mut(p, n), at);
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
                obj.write(buf(p, n), at)
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

// ---- exit, exec, fork ----

/// Set in a child of `fork`: it maps what its parent mapped, which the parent writes
/// back; the child's exit or `exec` only lets its share go.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Before an `exec` (and at exit): every shared mapping is written back and its
/// object let go; the mappings stay, untracked (an `exec` ends them). A child of
/// `fork` writes back only as the last process out.
pub(crate) fn before_exec() {
    if MAPPED.load(Ordering::Relaxed) == 0 && OBJECTS.load(Ordering::Relaxed) == 0 {
        return;
    }
    let _ops = OPS.lock();
    let (maps, objects) = {
        let mut st = STATE.lock();
        let maps = std::mem::take(&mut st.maps);
        let objects = std::mem::take(&mut st.objects);
        st.counts();
        (maps, objects)
    };
    if !FORKED.load(Ordering::Relaxed) {
        for e in maps.values() {
            let _ = report(flush(&e.obj, e.off, e.off + e.len as u64));
        }
    }
    drop(maps);
    objects.into_iter().for_each(release);
}

fn register_hooks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: plain functions of the shim that live as long as the process. Exit
    // handlers run last registered first: this one, registered after the mount's,
    // writes back before the image is unmounted.
    ONCE.call_once(|| unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(Some(before_fork), Some(in_parent), Some(in_child));
    });
}

extern "C" fn at_exit() {
    let Some(_g) = Guard::enter() else {
        return;
    };
    let _ = std::panic::catch_unwind(before_exec);
}

/// Before `fork`: the tables are held across it, so that the child gets them whole.
extern "C" fn before_fork() {
    std::mem::forget(OPS.lock());
    std::mem::forget(STATE.lock());
}

/// After `fork`, in the parent: lets the tables go.
extern "C" fn in_parent() {
    // SAFETY: `before_fork` on this thread locked both and forgot the guards.
    unsafe {
        STATE.force_unlock();
        OPS.force_unlock();
    }
}

/// In a child of `fork`: the child maps what its parent mapped, and takes a share of
/// each object of its own (a descriptor of its own, with its own `LOCK_SH`: the one it
/// inherited shares its lock with the parent's). It can write an object back only
/// through a descriptor its parent handed over (one of the table: a server's child
/// adopts them); a child of a process that mounts the image itself can make no call
/// of it. Objects it cannot write back it leaves to its parent, untouched.
extern "C" fn in_child() {
    let _g = Guard::enter();
    // SAFETY: `before_fork` on this thread (the child's only one) locked both and
    // forgot the guards.
    unsafe {
        STATE.force_unlock();
        OPS.force_unlock();
    }
    FORKED.store(true, Ordering::Relaxed);
    let st = STATE.lock();
    if st.objects.is_empty() {
        return;
    }
    let handed = if crate::live::is_forked_child() {
        Vec::new()
    } else {
        table::entries()
    };
    for obj in &st.objects {
        if obj.turn.is_locked() {
            // SAFETY: the thread that held it is not in the child.
            unsafe { obj.turn.force_unlock() };
        }
        let d = obj.desc();
        if handed.iter().any(|(_, h, _)| Arc::ptr_eq(h, &d)) {
            own_share(obj);
        } else {
            obj.inherited.store(true, Ordering::Relaxed);
        }
    }
}

/// Replaces the child's descriptor of `obj` with one of its own, holding `LOCK_SH`.
fn own_share(obj: &Object) {
    let open = real!(open: fn(*const libc::c_char, c_int, libc::mode_t) -> c_int);
    let dup3 = real!(dup3: fn(c_int, c_int, c_int) -> c_int);
    let close = real!(close: fn(c_int) -> c_int);
    let flock = real!(flock: fn(c_int, c_int) -> c_int);
    let Ok(path) = CString::new(format!("/proc/self/fd/{}", obj.fd)) else {
        return;
    };
    // SAFETY: a NUL-terminated path; descriptors of our own.
    unsafe {
        let own = open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0);
        if own < 0 {
            obj.inherited.store(true, Ordering::Relaxed);
            return;
        }
        flock(own, libc::LOCK_SH);
        dup3(own, obj.fd, libc::O_CLOEXEC);
        close(own);
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
