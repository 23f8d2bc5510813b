//! The current directory inside the mount (`chdir`, `fchdir`, `getcwd`) and
//! `realpath`. The kernel's current directory stays where it was; the shim resolves
//! relative paths from its own while that is inside the mount.

use std::ffi::{c_char, c_int};

use crate::call::{at, fd_call};
use crate::guard::{errno_of, export, Answer};
use crate::path::{classify, cwd, outer, set_cwd, Target};
use crate::real::libc_call;

/// Moves into a directory of the mount (its path from the image root).
fn enter(l: &crate::live::Live, inner: &str) -> Result<c_int, i32> {
    let st = crate::call::session(l).stat(inner).map_err(errno_of)?;
    if st.mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(libc::ENOTDIR);
    }
    // Entering needs search permission on the directory, as the kernel's chdir.
    crate::call::session(l)
        .faccessat(None, inner, libc::X_OK, libc::AT_EACCESS)
        .map_err(errno_of)?;
    // The directory itself, as the kernel's current directory is: `getcwd` names it
    // without the links it was reached through, and `..` from it is its parent.
    set_cwd(Some(resolve(l, inner)?));
    Ok(0)
}

fn easy_chdir(path: *const c_char) -> Answer<c_int> {
    match classify(libc::AT_FDCWD, path) {
        Ok(Target::Kernel) => {
            let r = libc_call!(chdir: fn(*const c_char) -> c_int, path);
            if r == 0 {
                set_cwd(None);
            }
            Some(if r == 0 {
                Ok(0)
            } else {
                Err(crate::real::errno())
            })
        }
        t => at(t, |_, _, p| Ok(p.to_owned())).map(|p| {
            let l = crate::mount::live()?;
            enter(&l, &p?)
        }),
    }
}

fn easy_fchdir(fd: c_int) -> Answer<c_int> {
    if !crate::table::is_ours(fd) {
        let r = libc_call!(fchdir: fn(c_int) -> c_int, fd);
        if r == 0 {
            set_cwd(None);
        }
        return Some(if r == 0 {
            Ok(0)
        } else {
            Err(crate::real::errno())
        });
    }
    fd_call(fd, |d, l| enter(l, &d.path))
}

/// Copies `s` into the program's buffer, or a `malloc`ed one when `buf` is NULL.
fn give(s: &str, buf: *mut c_char, size: usize) -> Result<*mut c_char, i32> {
    let bytes = s.as_bytes();
    let out = if buf.is_null() {
        let n = if size == 0 { bytes.len() + 1 } else { size };
        if n < bytes.len() + 1 {
            return Err(libc::ERANGE);
        }
        // SAFETY: malloc of a nonzero size; NULL is handled.
        let p = unsafe { libc::malloc(n) }.cast::<c_char>();
        if p.is_null() {
            return Err(libc::ENOMEM);
        }
        p
    } else {
        if size < bytes.len() + 1 {
            return Err(if size == 0 {
                libc::EINVAL
            } else {
                libc::ERANGE
            });
        }
        buf
    };
    // SAFETY: `out` has room for the bytes and the NUL (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), out, bytes.len());
        *out.add(bytes.len()) = 0;
    }
    Ok(out)
}

fn easy_getcwd(buf: *mut c_char, size: usize) -> Answer<*mut c_char> {
    let c = cwd()?;
    Some(give(&outer(&c), buf, size))
}

/// Maximum symbolic links followed, as Linux's `MAXSYMLINKS`.
const MAX_LINKS: usize = 40;

/// The names of a path to walk, `..` kept: it is resolved where the walk stands,
/// after the links before it (`l/..` is the parent of where `l` leads).
fn steps(path: &str) -> impl DoubleEndedIterator<Item = String> + '_ {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_owned)
}

/// The canonical path of `inner` (from the image root): every link resolved.
fn resolve(l: &crate::live::Live, inner: &str) -> Result<String, i32> {
    let s = crate::call::session(l);
    let mut todo: Vec<String> = steps(inner).rev().collect();
    let mut done: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            done.pop();
            continue;
        }
        let here = format!("/{}/{c}", done.join("/"));
        let st = s.lstat(&here).map_err(errno_of)?;
        if st.mode & libc::S_IFMT == libc::S_IFLNK {
            links += 1;
            if links > MAX_LINKS {
                return Err(libc::ELOOP);
            }
            let t = s.readlink(&here).map_err(errno_of)?;
            if t.starts_with('/') {
                // An absolute target is stored from the image's root (see
                // `names::inner_target`).
                done.clear();
            }
            todo.extend(steps(&t).rev());
            continue;
        }
        done.push(c);
    }
    Ok(format!("/{}", done.join("/")))
}

fn easy_realpath(path: *const c_char, out: *mut c_char) -> Answer<*mut c_char> {
    let t = classify(libc::AT_FDCWD, path);
    let inner = at(t, |_, _, p| Ok(p.to_owned()))?;
    Some(inner.and_then(|p| {
        let l = crate::mount::live()?;
        let r = outer(&resolve(&l, &p)?);
        give(
            &r,
            out,
            if out.is_null() {
                0
            } else {
                libc::PATH_MAX as usize
            },
        )
    }))
}

export! {
    fn chdir(path: *const c_char) -> c_int { easy_chdir(path) }
    fn fchdir(fd: c_int) -> c_int { easy_fchdir(fd) }
    fn getcwd(buf: *mut c_char, size: usize) -> *mut c_char { easy_getcwd(buf, size) }
    fn get_current_dir_name() -> *mut c_char { easy_getcwd(std::ptr::null_mut(), 0) }
    fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char { easy_realpath(path, out) }
    fn canonicalize_file_name(path: *const c_char) -> *mut c_char { easy_realpath(path, std::ptr::null_mut()) }
}
