//! Temporary files and directories of the mount: `mkstemp`, `mkostemp`, `mkstemps`,
//! `mkostemps` (and their `64` names), `mkdtemp` and `mktemp`. glibc fills the
//! template and creates the file with its internal `open`, `mkdir` and `lstat`, which
//! the shim does not see (so `git init` and `sed -i` on the mount failed: "unable to
//! create temporary file"); for a template under the mount the shim does the same
//! here, through its own calls, so that it works in both backends. A template outside
//! the mount goes to libc.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::call::{at, open};
use crate::guard::{export, Answer};
use crate::path::{classify, Target};

/// The characters glibc fills a template with.
const LETTERS: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Names tried before giving up with EEXIST: glibc's (62³, `TMP_MAX`).
const ATTEMPTS: u32 = 238_328;

/// The `X`s a template ends with (before its suffix).
const XS: usize = 6;

/// What a template is made into.
#[derive(Clone, Copy)]
enum Make {
    /// A file opened `O_RDWR | O_CREAT | O_EXCL` with mode 0600 and these extra
    /// flags (`mkostemp`'s `O_CLOEXEC`, `O_APPEND`, ...).
    File(c_int),
    /// A directory of mode 0700 (`mkdtemp`).
    Dir,
    /// Nothing: a name no file has (`mktemp`).
    Name,
}

/// What a made template answers: the descriptor of a file, or 0.
type Made = c_int;

/// 64 random bits: the kernel's, or (if it has none to give) the clock, the pid and
/// a counter mixed, as glibc falls back to.
fn random() -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: `v` is 8 writable bytes.
    let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), v.len(), libc::GRND_NONBLOCK) };
    if n == v.len() as isize {
        return u64::from_ne_bytes(v);
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    let mut x = (ts.tv_sec as u64).wrapping_mul(1_000_000_007)
        ^ ts.tv_nsec as u64
        ^ pid << 40
        ^ COUNTER
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .rotate_left(17);
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Where the `X`s of `template` start, given `suffix` bytes after them; EINVAL
/// unless they are there.
fn xs_at(template: *const c_char, suffix: c_int) -> Result<usize, i32> {
    // SAFETY: a template argument is a NUL-terminated string (NULL checked by the
    // caller).
    let t = unsafe { CStr::from_ptr(template) }.to_bytes();
    let suffix = usize::try_from(suffix).map_err(|_| libc::EINVAL)?;
    let start = t.len().checked_sub(suffix + XS).ok_or(libc::EINVAL)?;
    if t[start..start + XS] != *b"XXXXXX" {
        return Err(libc::EINVAL);
    }
    Ok(start)
}

/// One try at making `template` (its name filled already).
fn attempt(template: *const c_char, how: Make) -> Result<Made, i32> {
    let t = classify(libc::AT_FDCWD, template);
    let r = match how {
        Make::File(flags) => {
            let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
            open(t, flags, 0o600)
        }
        Make::Dir => {
            at(t, |s, d, p| s.mkdirat(d, p, crate::umask::masked(0o700))).map(|r| r.map(|_| 0))
        }
        Make::Name => {
            let st = at(t, |s, d, p| s.fstatat(d, p, libc::AT_SYMLINK_NOFOLLOW));
            st.map(|r| match r {
                Ok(_) => Err(libc::EEXIST),
                Err(libc::ENOENT) => Ok(0),
                Err(e) => Err(e),
            })
        }
    };
    // The prefix did not change, so neither did the place: still the mount's.
    r.unwrap_or(Err(libc::EIO))
}

/// Fills the `X`s of a template under the mount and makes it; `None` for a template
/// outside the mount (libc's).
fn make(template: *mut c_char, suffix: c_int, how: Make) -> Answer<Made> {
    if template.is_null() {
        return None;
    }
    match classify(libc::AT_FDCWD, template) {
        Ok(Target::Kernel) => return None,
        Err(e) => return Some(Err(e)),
        Ok(Target::Easy { .. }) => {}
    }
    Some((|| {
        let start = xs_at(template, suffix)?;
        for _ in 0..ATTEMPTS {
            let mut v = random();
            for i in 0..XS {
                // SAFETY: `start + i` is inside the template (checked by `xs_at`),
                // which the program gives us to write.
                unsafe { *template.add(start + i) = LETTERS[(v % 62) as usize] as c_char };
                v /= 62;
            }
            match attempt(template, how) {
                Err(libc::EEXIST) => continue,
                r => return r,
            }
        }
        Err(libc::EEXIST)
    })())
}

/// `mkdtemp`: the template itself on success.
fn make_dir(template: *mut c_char) -> Answer<*mut c_char> {
    make(template, 0, Make::Dir).map(|r| r.map(|_| template))
}

/// `mktemp`: the template, emptied if no name was found (it never fails otherwise).
fn make_name(template: *mut c_char) -> Answer<*mut c_char> {
    let r = make(template, 0, Make::Name)?;
    if let Err(e) = r {
        // SAFETY: a non-NULL template has at least its NUL byte.
        unsafe { *template = 0 };
        crate::real::set_errno(e);
    }
    Some(Ok(template))
}

export! {
    fn mkstemp(t: *mut c_char) -> c_int { make(t, 0, Make::File(0)) }
    fn mkstemp64(t: *mut c_char) -> c_int { make(t, 0, Make::File(0)) }
    fn mkostemp(t: *mut c_char, flags: c_int) -> c_int { make(t, 0, Make::File(flags)) }
    fn mkostemp64(t: *mut c_char, flags: c_int) -> c_int { make(t, 0, Make::File(flags)) }
    fn mkstemps(t: *mut c_char, suffix: c_int) -> c_int { make(t, suffix, Make::File(0)) }
    fn mkstemps64(t: *mut c_char, suffix: c_int) -> c_int { make(t, suffix, Make::File(0)) }
    fn mkostemps(t: *mut c_char, suffix: c_int, flags: c_int) -> c_int { make(t, suffix, Make::File(flags)) }
    fn mkostemps64(t: *mut c_char, suffix: c_int, flags: c_int) -> c_int { make(t, suffix, Make::File(flags)) }
    fn mkdtemp(t: *mut c_char) -> *mut c_char { make_dir(t) }
    fn mktemp(t: *mut c_char) -> *mut c_char { make_name(t) }
}
