//! Directory walks glibc makes with its internal `opendir`, `readdir` and `stat`,
//! which the shim does not see: `glob` (libc's own, given the shim's exported
//! directory functions through `GLOB_ALTDIRFUNC`), `scandir`/`scandirat` and
//! `ftw`/`nftw` (made here, with the shim's exported calls), each with its `64` name.
//! A path of the mount is walked so; any other goes to libc's function.
//!
//! These run outside the guard: what they call (the shim's `opendir`, `stat`, ...,
//! and the program's callbacks, which may call the shim in turn) enters it itself.

use std::collections::{HashSet, VecDeque};
use std::ffi::{c_char, c_int, c_void, CStr};

use crate::guard::intercept;
use crate::path::{classify, Target};
use crate::real::{errno, real, set_errno};

/// Where `path` (relative to `dirfd`) leads, as the shim's calls decide: 1 the
/// mount, 0 the kernel (also while this thread is inside the shim), -1 with errno
/// for a path the shim refuses (one climbing out of a current directory inside the
/// mount: EXDEV).
pub(crate) fn place(dirfd: c_int, path: *const c_char) -> c_int {
    intercept(
        || 0,
        || Some(classify(dirfd, path).map(|t| matches!(t, Target::Easy { .. }) as c_int)),
    )
}

/// [`place`] keeping errno as it was unless the answer is -1.
fn place_quiet(dirfd: c_int, path: *const c_char) -> c_int {
    let saved = errno();
    let p = place(dirfd, path);
    if p >= 0 {
        set_errno(saved);
    }
    p
}

// ---- glob ---------------------------------------------------------------------

/// glibc's `glob_t` (`<glob.h>`), with the `GLOB_ALTDIRFUNC` members.
#[repr(C)]
struct GlobT {
    pathc: usize,
    pathv: *mut *mut c_char,
    offs: usize,
    flags: c_int,
    closedir: *const c_void,
    readdir: *const c_void,
    opendir: *const c_void,
    lstat: *const c_void,
    stat: *const c_void,
}

type GlobErr = Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>;
type GlobFn = unsafe extern "C" fn(*const c_char, c_int, GlobErr, *mut GlobT) -> c_int;

/// `glob` by libc's `real`: over the mount, with the shim's directory functions.
/// A program that gives its own (`GLOB_ALTDIRFUNC`) keeps them.
fn glob_with(
    real: GlobFn,
    pattern: *const c_char,
    flags: c_int,
    errfunc: GlobErr,
    pglob: *mut GlobT,
) -> c_int {
    let mine = flags & libc::GLOB_ALTDIRFUNC == 0
        && !pglob.is_null()
        && !pattern.is_null()
        && place_quiet(libc::AT_FDCWD, pattern) != 0;
    if !mine {
        // SAFETY: the program's own arguments, passed on to libc's glob.
        return unsafe { real(pattern, flags, errfunc, pglob) };
    }
    // The shim's exported functions (these names bind to the shim's definitions): a
    // kernel path glob reaches on the way (`GLOB_BRACE`) goes on to libc from them.
    // SAFETY: `pglob` is the program's glob_t, which glob fills.
    unsafe {
        let g = &mut *pglob;
        g.closedir = libc::closedir as *const c_void;
        g.readdir = libc::readdir64 as *const c_void;
        g.opendir = libc::opendir as *const c_void;
        g.lstat = libc::lstat64 as *const c_void;
        g.stat = libc::stat64 as *const c_void;
    }
    // SAFETY: as above, with the directory functions set.
    let r = unsafe { real(pattern, flags | libc::GLOB_ALTDIRFUNC, errfunc, pglob) };
    // SAFETY: as above; the flags glob recorded are the program's.
    unsafe { (*pglob).flags &= !libc::GLOB_ALTDIRFUNC };
    r
}

#[no_mangle]
extern "C" fn glob(p: *const c_char, flags: c_int, errfunc: GlobErr, g: *mut GlobT) -> c_int {
    let real = real!(glob: fn(*const c_char, c_int, GlobErr, *mut GlobT) -> c_int);
    glob_with(real, p, flags, errfunc, g)
}

#[no_mangle]
extern "C" fn glob64(p: *const c_char, flags: c_int, errfunc: GlobErr, g: *mut GlobT) -> c_int {
    let real = real!(glob64: fn(*const c_char, c_int, GlobErr, *mut GlobT) -> c_int);
    glob_with(real, p, flags, errfunc, g)
}

// ---- scandir ------------------------------------------------------------------

type Dirent = libc::dirent64;
type Filter = Option<unsafe extern "C" fn(*const Dirent) -> c_int>;
type Compar = Option<unsafe extern "C" fn(*mut *const Dirent, *mut *const Dirent) -> c_int>;
type List = *mut *mut *mut Dirent;

/// Frees what `scan` gathered.
fn free_all(v: &[*mut Dirent]) {
    for &p in v {
        // SAFETY: each was malloc'ed by `scan` and not handed out.
        unsafe { libc::free(p.cast()) };
    }
}

/// Reads stream `d` (closing it): the entries `filter` keeps, each copied into
/// memory of `malloc`, sorted by `compar`, in an array of `malloc` at `*list`.
fn scan(d: *mut libc::DIR, list: List, filter: Filter, compar: Compar) -> c_int {
    if d.is_null() {
        return -1;
    }
    let saved = errno();
    let mut v: Vec<*mut Dirent> = Vec::new();
    let failed = loop {
        set_errno(0);
        // SAFETY: an open stream of the shim (readdir64 is the shim's).
        let e = unsafe { libc::readdir64(d) };
        if e.is_null() {
            break errno();
        }
        // SAFETY: the program's filter, given the entry as glibc gives it.
        if filter.is_some_and(|f| unsafe { f(e) } == 0) {
            continue;
        }
        let size = std::mem::size_of::<Dirent>();
        // SAFETY: malloc of a nonzero size; NULL is handled.
        let p = unsafe { libc::malloc(size) }.cast::<Dirent>();
        if p.is_null() {
            break libc::ENOMEM;
        }
        // SAFETY: `e` is a whole dirent64 of the stream, `p` room for one.
        unsafe { std::ptr::copy_nonoverlapping(e, p, 1) };
        v.push(p);
    };
    // SAFETY: the stream is ours to close.
    unsafe { libc::closedir(d) };
    if failed != 0 {
        free_all(&v);
        set_errno(failed);
        return -1;
    }
    if let Some(c) = compar {
        // SAFETY: glibc's scandir sorts with qsort and the program's function as
        // this, whose arguments are pointers to elements of the array.
        unsafe {
            let c = std::mem::transmute::<
                unsafe extern "C" fn(*mut *const Dirent, *mut *const Dirent) -> c_int,
                unsafe extern "C" fn(*const c_void, *const c_void) -> c_int,
            >(c);
            libc::qsort(
                v.as_mut_ptr().cast(),
                v.len(),
                std::mem::size_of::<*mut Dirent>(),
                Some(c),
            );
        }
    }
    let bytes = std::mem::size_of::<*mut Dirent>() * v.len().max(1);
    // SAFETY: malloc of a nonzero size; NULL is handled.
    let arr = unsafe { libc::malloc(bytes) }.cast::<*mut Dirent>();
    if arr.is_null() {
        free_all(&v);
        set_errno(libc::ENOMEM);
        return -1;
    }
    // SAFETY: `arr` has room for every pointer; `list` is the program's out
    // parameter.
    unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr(), arr, v.len());
        *list = arr;
    }
    set_errno(saved);
    v.len() as c_int
}

/// `scandirat` of a directory of the mount: opened with the shim's `openat` and
/// `fdopendir`, as glibc opens it.
fn scan_at(dfd: c_int, dir: *const c_char, list: List, filter: Filter, compar: Compar) -> c_int {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: the program's path; openat and fdopendir are the shim's.
    let fd = unsafe { libc::openat(dfd, dir, flags) };
    if fd < 0 {
        return -1;
    }
    // SAFETY: `fd` was just opened.
    let d = unsafe { libc::fdopendir(fd) };
    if d.is_null() {
        let e = errno();
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
        set_errno(e);
        return -1;
    }
    scan(d, list, filter, compar)
}

type ScandirAtFn = unsafe extern "C" fn(c_int, *const c_char, List, Filter, Compar) -> c_int;

/// `scandirat` (and `scandir`, from `AT_FDCWD`) with libc's `real` for a kernel path.
fn scandir_any(
    real: ScandirAtFn,
    dfd: c_int,
    dir: *const c_char,
    list: List,
    (filter, compar): (Filter, Compar),
) -> c_int {
    match place_quiet(dfd, dir) {
        0 => {
            // SAFETY: the program's own arguments, passed on to libc's function.
            unsafe { real(dfd, dir, list, filter, compar) }
        }
        -1 => -1,
        _ => scan_at(dfd, dir, list, filter, compar),
    }
}

#[no_mangle]
extern "C" fn scandir(dir: *const c_char, list: List, filter: Filter, compar: Compar) -> c_int {
    let real = real!(scandirat: fn(c_int, *const c_char, List, Filter, Compar) -> c_int);
    scandir_any(real, libc::AT_FDCWD, dir, list, (filter, compar))
}

#[no_mangle]
extern "C" fn scandir64(dir: *const c_char, list: List, filter: Filter, compar: Compar) -> c_int {
    let real = real!(scandirat64: fn(c_int, *const c_char, List, Filter, Compar) -> c_int);
    scandir_any(real, libc::AT_FDCWD, dir, list, (filter, compar))
}

#[no_mangle]
extern "C" fn scandirat(
    dfd: c_int,
    dir: *const c_char,
    list: List,
    filter: Filter,
    compar: Compar,
) -> c_int {
    let real = real!(scandirat: fn(c_int, *const c_char, List, Filter, Compar) -> c_int);
    scandir_any(real, dfd, dir, list, (filter, compar))
}

#[no_mangle]
extern "C" fn scandirat64(
    dfd: c_int,
    dir: *const c_char,
    list: List,
    filter: Filter,
    compar: Compar,
) -> c_int {
    let real = real!(scandirat64: fn(c_int, *const c_char, List, Filter, Compar) -> c_int);
    scandir_any(real, dfd, dir, list, (filter, compar))
}

// ---- ftw, nftw ----------------------------------------------------------------

/// glibc's `struct FTW`.
#[repr(C)]
struct Ftw {
    base: c_int,
    level: c_int,
}

/// An `nftw` callback; an `ftw` one is called the same way (its fourth argument
/// ignored), as glibc calls it.
type NftwFn = unsafe extern "C" fn(*const c_char, *const libc::stat64, c_int, *mut Ftw) -> c_int;
type FtwFn = unsafe extern "C" fn(*const c_char, *const libc::stat64, c_int) -> c_int;

// `<ftw.h>`: the types a callback is given...
const FTW_F: c_int = 0;
const FTW_D: c_int = 1;
const FTW_DNR: c_int = 2;
const FTW_NS: c_int = 3;
const FTW_SL: c_int = 4;
const FTW_DP: c_int = 5;
const FTW_SLN: c_int = 6;
// ... the flags of `nftw` ...
const FTW_PHYS: c_int = 1;
const FTW_MOUNT: c_int = 2;
const FTW_CHDIR: c_int = 4;
const FTW_DEPTH: c_int = 8;
const FTW_ACTIONRETVAL: c_int = 16;
// ... and what a callback answers with `FTW_ACTIONRETVAL`.
const FTW_STOP: c_int = 1;
const FTW_SKIP_SUBTREE: c_int = 2;
const FTW_SKIP_SIBLINGS: c_int = 3;

/// The types `ftw` reports of nftw's: no links nor post-order directories.
const FTW_TYPES: [c_int; 7] = [FTW_F, FTW_D, FTW_DNR, FTW_NS, FTW_F, FTW_D, FTW_NS];

/// A directory being read: its stream, or (once the stream was closed to keep
/// within the program's number of descriptors) the names it had left.
struct Level {
    stream: *mut libc::DIR,
    rest: VecDeque<Vec<u8>>,
}

/// One walk, as glibc's `ftw_startup` runs it.
struct Walk {
    func: NftwFn,
    nftw: bool,
    flags: c_int,
    /// Streams open at once, at most (`nopenfd`).
    max_open: usize,
    levels: Vec<Level>,
    /// The path of the current entry, as the callback is given it (no NUL).
    path: Vec<u8>,
    ftw: Ftw,
    dev: u64,
    /// Directories seen, when links are followed: each is walked once.
    known: HashSet<(u64, u64)>,
}

/// A `struct stat64` of zeros (what an `FTW_NS` callback is given).
fn zeroed_stat() -> libc::stat64 {
    // SAFETY: plain integers, for which all zeros is a value.
    unsafe { std::mem::zeroed() }
}

/// `stat`, `lstat` or `fstatat` (the shim's), by a name without NUL.
fn stat_name(dirfd: Option<c_int>, name: &[u8], follow: bool) -> Option<libc::stat64> {
    let mut c = name.to_vec();
    c.push(0);
    let mut st = zeroed_stat();
    let p: *const c_char = c.as_ptr().cast();
    // SAFETY: a NUL-terminated name and a writable stat; the calls are the shim's.
    let r = unsafe {
        match (dirfd, follow) {
            (Some(fd), f) => libc::fstatat64(
                fd,
                p,
                &mut st,
                if f { 0 } else { libc::AT_SYMLINK_NOFOLLOW },
            ),
            (None, true) => libc::stat64(p, &mut st),
            (None, false) => libc::lstat64(p, &mut st),
        }
    };
    (r == 0).then_some(st)
}

fn is(st: &libc::stat64, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

/// A name of `bytes` with its NUL, for a C call.
fn cstr(bytes: &[u8]) -> Vec<u8> {
    let mut c = bytes.to_vec();
    c.push(0);
    c
}

impl Walk {
    fn phys(&self) -> bool {
        self.flags & FTW_PHYS != 0
    }

    fn retval(&self) -> bool {
        self.flags & FTW_ACTIONRETVAL != 0
    }

    /// Calls the program's function on the current path.
    fn call(&mut self, st: &libc::stat64, kind: c_int) -> c_int {
        let kind = if self.nftw {
            kind
        } else {
            FTW_TYPES[kind as usize]
        };
        self.path.push(0);
        // SAFETY: the program's callback, given a NUL-terminated path, a stat and
        // its `struct FTW`, valid for the call.
        let r = unsafe { (self.func)(self.path.as_ptr().cast(), st, kind, &mut self.ftw) };
        self.path.pop();
        r
    }

    fn open_count(&self) -> usize {
        self.levels.iter().filter(|l| !l.stream.is_null()).count()
    }

    /// Closes the oldest open stream, keeping the names it had left.
    fn drain_oldest(&mut self) -> Result<(), ()> {
        let Some(l) = self.levels.iter_mut().find(|l| !l.stream.is_null()) else {
            return Ok(());
        };
        loop {
            set_errno(0);
            // SAFETY: an open stream of this walk.
            let e = unsafe { libc::readdir64(l.stream) };
            if e.is_null() {
                break;
            }
            // SAFETY: a dirent's name is NUL-terminated.
            let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) };
            l.rest.push_back(name.to_bytes().to_vec());
        }
        let e = errno();
        // SAFETY: as above; the stream is not used again.
        unsafe { libc::closedir(l.stream) };
        l.stream = std::ptr::null_mut();
        if e != 0 {
            set_errno(e);
            return Err(());
        }
        Ok(())
    }

    /// The stream of the directory at the current path (`parent`: the level it is
    /// in, if any), opened as glibc opens it.
    fn open_dir(&mut self, parent: Option<usize>) -> *mut libc::DIR {
        if self.open_count() >= self.max_open && self.drain_oldest().is_err() {
            return std::ptr::null_mut();
        }
        let base = self.ftw.base as usize;
        if let Some(s) = parent
            .map(|i| self.levels[i].stream)
            .filter(|s| !s.is_null())
        {
            let name = cstr(&self.path[base..]);
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NDELAY | libc::O_CLOEXEC;
            // SAFETY: an open stream; a NUL-terminated name. The calls are the shim's.
            unsafe {
                let fd = libc::openat(libc::dirfd(s), name.as_ptr().cast(), flags);
                if fd < 0 {
                    return std::ptr::null_mut();
                }
                let d = libc::fdopendir(fd);
                if d.is_null() {
                    let e = errno();
                    libc::close(fd);
                    set_errno(e);
                }
                return d;
            }
        }
        let name = if self.flags & FTW_CHDIR != 0 {
            match &self.path[base..] {
                [] => b".".to_vec(),
                n => n.to_vec(),
            }
        } else {
            self.path.clone()
        };
        let name = cstr(&name);
        // SAFETY: a NUL-terminated name; opendir is the shim's.
        unsafe { libc::opendir(name.as_ptr().cast()) }
    }

    /// Walks the directory at the current path, of status `st`.
    fn dir(&mut self, st: &libc::stat64, parent: Option<usize>) -> c_int {
        let stream = self.open_dir(parent);
        if stream.is_null() {
            return if errno() == libc::EACCES {
                self.call(st, FTW_DNR)
            } else {
                -1
            };
        }
        let me = self.levels.len();
        self.levels.push(Level {
            stream,
            rest: VecDeque::new(),
        });
        let entered = self.enter(st, me);
        let mut r = match entered {
            Ok(()) => self.dir_entries(me),
            Err(r) => r,
        };
        let level = self.levels.pop().expect("this walk's level");
        if !level.stream.is_null() {
            let e = errno();
            // SAFETY: the stream this call opened, not used again.
            unsafe { libc::closedir(level.stream) };
            set_errno(e);
        }
        if entered.is_err() {
            return r;
        }
        if r == 0 && self.flags & FTW_DEPTH != 0 {
            r = self.call(st, FTW_DP);
        }
        let chdir_back = r == 0 || (self.retval() && r != -1 && r != FTW_STOP);
        if let (Some(p), true) = (parent, self.flags & FTW_CHDIR != 0 && chdir_back) {
            r = self.back_to(p, r);
        }
        r
    }

    /// Before the entries of the directory at level `me`: reports it (unless
    /// depth first) and moves into it with `FTW_CHDIR`. `Err`: what the walk of
    /// it answers instead.
    fn enter(&mut self, st: &libc::stat64, me: usize) -> Result<(), c_int> {
        if self.flags & FTW_DEPTH == 0 {
            let r = self.call(st, FTW_D);
            if r != 0 {
                return Err(r);
            }
        }
        if self.flags & FTW_CHDIR != 0 {
            // SAFETY: the open stream of this level; fchdir is the shim's.
            if unsafe { libc::fchdir(libc::dirfd(self.levels[me].stream)) } < 0 {
                return Err(-1);
            }
        }
        Ok(())
    }

    /// The entries of the directory at level `me`: the callbacks' answer.
    fn dir_entries(&mut self, me: usize) -> c_int {
        let previous_base = self.ftw.base;
        self.ftw.level += 1;
        if self.path.last() != Some(&b'/') {
            self.path.push(b'/');
        }
        self.ftw.base = self.path.len() as c_int;
        let mut r = 0;
        while let Some(name) = self.next_name(me) {
            r = self.entry(&name, me);
            if r != 0 {
                break;
            }
        }
        if self.retval() && r == FTW_SKIP_SIBLINGS {
            r = 0;
        }
        self.path.truncate(self.ftw.base as usize - 1);
        if self.path.is_empty() {
            // The walk of "/" itself: glibc reports it as "" here; keep "/".
            self.path.push(b'/');
        }
        self.ftw.level -= 1;
        self.ftw.base = previous_base;
        r
    }

    /// The next name of the directory at level `me`.
    fn next_name(&mut self, me: usize) -> Option<Vec<u8>> {
        let l = &mut self.levels[me];
        if l.stream.is_null() {
            return l.rest.pop_front();
        }
        // SAFETY: an open stream of this walk; readdir64 is the shim's.
        let e = unsafe { libc::readdir64(l.stream) };
        if e.is_null() {
            return None;
        }
        // SAFETY: a dirent's name is NUL-terminated.
        Some(
            unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }
                .to_bytes()
                .to_vec(),
        )
    }

    /// After a subdirectory with `FTW_CHDIR`: back into its parent (level `p`).
    fn back_to(&mut self, p: usize, r: c_int) -> c_int {
        let s = self.levels[p].stream;
        // SAFETY: an open stream; fchdir and chdir are the shim's.
        unsafe {
            if !s.is_null() && libc::fchdir(libc::dirfd(s)) == 0 {
                return r;
            }
            let up: &CStr = if self.ftw.base == 1 { c"/" } else { c".." };
            if libc::chdir(up.as_ptr()) < 0 {
                return -1;
            }
        }
        r
    }

    /// The status of `name` in the directory at level `me`, and its type.
    fn status(&mut self, name: &[u8], me: usize) -> Result<(libc::stat64, c_int), c_int> {
        let s = self.levels[me].stream;
        let at = (!s.is_null()).then(|| {
            // SAFETY: an open stream; dirfd is the shim's.
            unsafe { libc::dirfd(s) }
        });
        let by: Vec<u8> = if at.is_some() || self.flags & FTW_CHDIR != 0 {
            name.to_vec()
        } else {
            self.path.clone()
        };
        if let Some(st) = stat_name(at, &by, !self.phys()) {
            let kind = if is(&st, libc::S_IFDIR) {
                FTW_D
            } else if is(&st, libc::S_IFLNK) {
                FTW_SL
            } else {
                FTW_F
            };
            return Ok((st, kind));
        }
        let e = errno();
        if e != libc::EACCES && e != libc::ENOENT {
            return Err(-1);
        }
        if !self.phys() {
            if let Some(st) = stat_name(at, &by, false).filter(|st| is(st, libc::S_IFLNK)) {
                return Ok((st, FTW_SLN));
            }
            set_errno(e);
        }
        Ok((zeroed_stat(), FTW_NS))
    }

    /// One entry of the directory at level `me`.
    fn entry(&mut self, name: &[u8], me: usize) -> c_int {
        if name == b"." || name == b".." {
            return 0;
        }
        self.path.truncate(self.ftw.base as usize);
        self.path.extend_from_slice(name);
        let (st, kind) = match self.status(name, me) {
            Ok(v) => v,
            Err(r) => return r,
        };
        let mut r = 0;
        if kind == FTW_NS || self.flags & FTW_MOUNT == 0 || st.st_dev == self.dev {
            if kind == FTW_D {
                if self.phys() || self.known.insert((st.st_dev, st.st_ino)) {
                    r = self.dir(&st, Some(me));
                }
            } else {
                r = self.call(&st, kind);
            }
        }
        if self.retval() && r == FTW_SKIP_SUBTREE {
            r = 0;
        }
        r
    }

    /// The walk from its first path (`self.path`), from the directory it is in.
    fn start(&mut self) -> c_int {
        let base = self.ftw.base as usize;
        let name = if self.flags & FTW_CHDIR != 0 {
            match &self.path[base..] {
                [] => b".".to_vec(),
                n => n.to_vec(),
            }
        } else {
            self.path.clone()
        };
        let Some(st) = stat_name(None, &name, !self.phys()) else {
            if !self.phys() && errno() == libc::ENOENT {
                if let Some(st) = stat_name(None, &name, false).filter(|s| is(s, libc::S_IFLNK)) {
                    return self.call(&st, FTW_SLN);
                }
            }
            return -1;
        };
        if is(&st, libc::S_IFDIR) {
            self.dev = st.st_dev;
            if !self.phys() {
                self.known.insert((st.st_dev, st.st_ino));
            }
            self.dir(&st, None)
        } else {
            let kind = if is(&st, libc::S_IFLNK) {
                FTW_SL
            } else {
                FTW_F
            };
            self.call(&st, kind)
        }
    }
}

/// Where the walk started, to come back to after `FTW_CHDIR`.
enum Home {
    Fd(c_int),
    Path(*mut c_char),
}

/// Saves the current directory and moves into the one the first path is in.
fn leave_home(w: &mut Walk) -> Result<Option<Home>, ()> {
    // SAFETY: a NUL-terminated path; open is the shim's.
    let fd = unsafe { libc::open(c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    let home = if fd >= 0 {
        if w.max_open > 1 {
            w.max_open -= 1;
        }
        Home::Fd(fd)
    } else {
        // A current directory that cannot be opened (searchable, not readable):
        // its name instead.
        if errno() != libc::EACCES {
            return Err(());
        }
        // SAFETY: getcwd(NULL, 0) mallocs the path; it is the shim's.
        let p = unsafe { libc::getcwd(std::ptr::null_mut(), 0) };
        if p.is_null() {
            return Err(());
        }
        Home::Path(p)
    };
    let base = w.ftw.base as usize;
    let r = match base {
        0 => 0,
        1 => {
            // SAFETY: a NUL-terminated path; chdir is the shim's.
            unsafe { libc::chdir(c"/".as_ptr()) }
        }
        _ => {
            let dir = cstr(&w.path[..base - 1]);
            // SAFETY: as above.
            unsafe { libc::chdir(dir.as_ptr().cast()) }
        }
    };
    if r < 0 {
        come_home(Some(home));
        return Err(());
    }
    Ok(Some(home))
}

/// Back where the walk started (errno kept).
fn come_home(home: Option<Home>) {
    let e = errno();
    // SAFETY: our descriptor, or getcwd's path; fchdir, chdir, close are the shim's.
    unsafe {
        match home {
            Some(Home::Fd(fd)) => {
                libc::fchdir(fd);
                libc::close(fd);
            }
            Some(Home::Path(p)) => {
                libc::chdir(p);
                libc::free(p.cast());
            }
            None => {}
        }
    }
    set_errno(e);
}

/// `ftw`/`nftw` of a path of the mount.
fn walk(path: *const c_char, func: NftwFn, nftw: bool, nopenfd: c_int, flags: c_int) -> c_int {
    // SAFETY: a path argument is a NUL-terminated string (NULL is libc's).
    let mut p = unsafe { CStr::from_ptr(path) }.to_bytes().to_vec();
    if p.is_empty() {
        set_errno(libc::ENOENT);
        return -1;
    }
    while p.len() > 1 && p.last() == Some(&b'/') {
        p.pop();
    }
    let base = p.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let mut w = Walk {
        func,
        nftw,
        flags,
        max_open: nopenfd.max(1) as usize,
        levels: Vec::new(),
        path: p,
        ftw: Ftw {
            base: base as c_int,
            level: 0,
        },
        dev: 0,
        known: HashSet::new(),
    };
    let home = if flags & FTW_CHDIR != 0 {
        match leave_home(&mut w) {
            Ok(h) => h,
            Err(()) => return -1,
        }
    } else {
        None
    };
    let mut r = w.start();
    if w.retval() && (r == FTW_SKIP_SUBTREE || r == FTW_SKIP_SIBLINGS) {
        r = 0;
    }
    come_home(home);
    r
}

/// `nftw` (libc's `real` for a kernel path).
fn nftw_any(
    real: unsafe extern "C" fn(*const c_char, NftwFn, c_int, c_int) -> c_int,
    path: *const c_char,
    func: NftwFn,
    nopenfd: c_int,
    flags: c_int,
) -> c_int {
    if path.is_null() {
        // SAFETY: the program's own arguments, passed on to libc's function.
        return unsafe { real(path, func, nopenfd, flags) };
    }
    match place_quiet(libc::AT_FDCWD, path) {
        // SAFETY: as above.
        0 => unsafe { real(path, func, nopenfd, flags) },
        -1 => -1,
        _ if flags & !(FTW_PHYS | FTW_MOUNT | FTW_CHDIR | FTW_DEPTH | FTW_ACTIONRETVAL) != 0 => {
            set_errno(libc::EINVAL);
            -1
        }
        _ => walk(path, func, true, nopenfd, flags),
    }
}

/// `ftw` (libc's `real` for a kernel path): `nftw` without flags, reporting
/// `ftw`'s types.
fn ftw_any(
    real: unsafe extern "C" fn(*const c_char, FtwFn, c_int) -> c_int,
    path: *const c_char,
    func: FtwFn,
    nopenfd: c_int,
) -> c_int {
    if path.is_null() {
        // SAFETY: the program's own arguments, passed on to libc's function.
        return unsafe { real(path, func, nopenfd) };
    }
    match place_quiet(libc::AT_FDCWD, path) {
        // SAFETY: as above.
        0 => unsafe { real(path, func, nopenfd) },
        -1 => -1,
        _ => {
            // SAFETY: an ftw callback called with nftw's arguments ignores the
            // fourth, as glibc calls it (the first three are the same).
            let f = unsafe { std::mem::transmute::<FtwFn, NftwFn>(func) };
            walk(path, f, false, nopenfd, 0)
        }
    }
}

#[no_mangle]
extern "C" fn nftw(path: *const c_char, func: NftwFn, nopenfd: c_int, flags: c_int) -> c_int {
    let real = real!(nftw: fn(*const c_char, NftwFn, c_int, c_int) -> c_int);
    nftw_any(real, path, func, nopenfd, flags)
}

#[no_mangle]
extern "C" fn nftw64(path: *const c_char, func: NftwFn, nopenfd: c_int, flags: c_int) -> c_int {
    let real = real!(nftw64: fn(*const c_char, NftwFn, c_int, c_int) -> c_int);
    nftw_any(real, path, func, nopenfd, flags)
}

#[no_mangle]
extern "C" fn ftw(path: *const c_char, func: FtwFn, nopenfd: c_int) -> c_int {
    let real = real!(ftw: fn(*const c_char, FtwFn, c_int) -> c_int);
    ftw_any(real, path, func, nopenfd)
}

#[no_mangle]
extern "C" fn ftw64(path: *const c_char, func: FtwFn, nopenfd: c_int) -> c_int {
    let real = real!(ftw64: fn(*const c_char, FtwFn, c_int) -> c_int);
    ftw_any(real, path, func, nopenfd)
}

// ---- fts ----------------------------------------------------------------------

/// glibc's `fts_open` walks with its internal calls: a path of the mount (and `.`
/// from a current directory inside it) would be walked in the kernel's view, an
/// empty or missing directory. Refused instead: EOPNOTSUPP, before any walk.
/// (coreutils, findutils and the like bring their own `fts`, made of the calls the
/// shim serves.)
fn fts_refused(paths: *const *const c_char) -> bool {
    if paths.is_null() {
        return false;
    }
    let mut i = 0;
    loop {
        // SAFETY: `fts_open` takes a NULL-terminated array of C strings.
        let p = unsafe { *paths.add(i) };
        if p.is_null() {
            return false;
        }
        if place_quiet(libc::AT_FDCWD, p) != 0 {
            return true;
        }
        i += 1;
    }
}

type FtsCompare = Option<unsafe extern "C" fn(*const *const c_void, *const *const c_void) -> c_int>;

/// `fts_open` or `fts64_open` (`real`), unless a path is the mount's.
fn fts_open_checked(
    real: unsafe extern "C" fn(*const *const c_char, c_int, FtsCompare) -> *mut c_void,
    paths: *const *const c_char,
    options: c_int,
    compar: FtsCompare,
) -> *mut c_void {
    if fts_refused(paths) {
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    // SAFETY: the program's own arguments, passed on to libc's function.
    unsafe { real(paths, options, compar) }
}

#[no_mangle]
extern "C" fn fts_open(
    paths: *const *const c_char,
    options: c_int,
    compar: FtsCompare,
) -> *mut c_void {
    let real = real!(fts_open: fn(*const *const c_char, c_int, FtsCompare) -> *mut c_void);
    fts_open_checked(real, paths, options, compar)
}

#[no_mangle]
extern "C" fn fts64_open(
    paths: *const *const c_char,
    options: c_int,
    compar: FtsCompare,
) -> *mut c_void {
    let real = real!(fts64_open: fn(*const *const c_char, c_int, FtsCompare) -> *mut c_void);
    fts_open_checked(real, paths, options, compar)
}
