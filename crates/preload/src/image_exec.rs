//! `exec` of a program stored in the mount. The kernel cannot open such a path, so
//! the shim does what the kernel's loaders would: a script (`#!interpreter [arg]`)
//! becomes an exec of its interpreter with the script's path as the program sees it
//! (the interpreter, under the shim too, reads the script from the mount); a binary
//! is copied into an anonymous memory file that is executed with `fexecve`, its
//! `argv` unchanged.

use std::ffi::{c_char, c_int, CStr, CString};

use crate::call::{fd_call, open};
use crate::guard::Guard;
use crate::path::{classify, Target};

/// What an exec of a mount path becomes.
pub(crate) enum Plan {
    /// Run `interp` with these arguments before the program's own (from `argv[1]`).
    Script { interp: CString, args: Vec<CString> },
    /// Execute this memory file (close-on-exec) with the program's `argv`.
    Binary(c_int),
}

/// The longest `#!` line the kernel reads (`BINPRM_BUF_SIZE`).
const SHEBANG_MAX: usize = 256;

/// The plan for an exec of `path`: `None` when the path is the kernel's, an errno
/// when the mount refuses it (EACCES for a file without execute permission or a
/// directory, ENOENT, ...).
pub(crate) fn plan(path: *const c_char) -> Option<Result<Plan, i32>> {
    let _g = Guard::enter()?;
    let t = classify(libc::AT_FDCWD, path);
    if let Ok(Target::Kernel) = t {
        return None;
    }
    let t2 = classify(libc::AT_FDCWD, path);
    let access = crate::call::at(t2, |s, d, p| s.faccessat(d, p, libc::X_OK, 0))?;
    if let Err(e) = access {
        return Some(Err(e));
    }
    let kfd = match open(t, libc::O_RDONLY | libc::O_CLOEXEC, 0)? {
        Ok(k) => k,
        Err(e) => return Some(Err(e)),
    };
    let r = read_all(kfd).and_then(|bytes| plan_of(&bytes));
    let _ = crate::open::easy_close(kfd);
    Some(r)
}

/// The whole file of easyio descriptor `kfd`; a directory is EACCES, as exec says.
fn read_all(kfd: c_int) -> Result<Vec<u8>, i32> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let off = out.len() as u64;
        let n = fd_call(kfd, |d, l| {
            crate::io::read_at(l, d.fd, &mut chunk, Some(off))
        })
        .unwrap_or(Err(libc::EBADF))
        .map_err(|e| if e == libc::EISDIR { libc::EACCES } else { e })?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

fn plan_of(bytes: &[u8]) -> Result<Plan, i32> {
    if let Some(rest) = bytes.strip_prefix(b"#!") {
        return script(rest);
    }
    binary(bytes).map(Plan::Binary)
}

/// `#!interpreter [one argument]`, split as the kernel splits it: the interpreter
/// ends at the first blank, the rest of the line (trimmed) is one argument.
fn script(rest: &[u8]) -> Result<Plan, i32> {
    let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
    if rest.len() >= SHEBANG_MAX - 2 && !rest[..SHEBANG_MAX - 2].contains(&b'\n') {
        return Err(libc::ENOEXEC);
    }
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let line = trim(line, blank);
    let end = line.iter().position(blank).unwrap_or(line.len());
    let (interp, arg) = line.split_at(end);
    if interp.is_empty() {
        return Err(libc::ENOEXEC);
    }
    let arg = trim(arg, blank);
    let c = |b: &[u8]| CString::new(b).map_err(|_| libc::ENOEXEC);
    let mut args = Vec::new();
    if !arg.is_empty() {
        args.push(c(arg)?);
    }
    Ok(Plan::Script {
        interp: c(interp)?,
        args,
    })
}

fn trim(mut s: &[u8], blank: impl Fn(&u8) -> bool) -> &[u8] {
    while s.first().is_some_and(&blank) {
        s = &s[1..];
    }
    while s.last().is_some_and(&blank) {
        s = &s[..s.len() - 1];
    }
    s
}

/// A close-on-exec memory file holding `bytes`, executable.
fn binary(bytes: &[u8]) -> Result<c_int, i32> {
    // SAFETY: a NUL-terminated name and a flag.
    let fd = unsafe { libc::memfd_create(c"easyio-exec".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::real::errno());
    }
    let mut done = 0;
    while done < bytes.len() {
        let rest = &bytes[done..];
        // SAFETY: writing our own buffer to our own memory file.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            let e = crate::real::errno();
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        done += n as usize;
    }
    Ok(fd)
}

/// The interpreter's `argv`: `interp [arg] path argv[1..]`.
pub(crate) fn script_argv(
    interp: &CStr,
    args: &[CString],
    path: *const c_char,
    argv: *const *const c_char,
) -> Vec<*const c_char> {
    let mut v = vec![interp.as_ptr()];
    v.extend(args.iter().map(|a| a.as_ptr()));
    v.push(path);
    if !argv.is_null() {
        let mut i = 1;
        // SAFETY: `argv` is a NULL-terminated array of strings (exec's contract);
        // its first entry, if any, is skipped.
        unsafe {
            if !(*argv).is_null() {
                while !(*argv.add(i)).is_null() {
                    v.push(*argv.add(i));
                    i += 1;
                }
            }
        }
    }
    v.push(std::ptr::null());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(line: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
        match script(line).unwrap() {
            Plan::Script { interp, args } => (
                interp.into_bytes(),
                args.into_iter().map(CString::into_bytes).collect(),
            ),
            Plan::Binary(_) => unreachable!(),
        }
    }

    #[test]
    fn a_script_line_splits_as_the_kernel_splits_it() {
        assert_eq!(parts(b"/bin/sh\necho"), (b"/bin/sh".to_vec(), vec![]));
        assert_eq!(
            parts(b" /usr/bin/env  python3 -u \n"),
            (b"/usr/bin/env".to_vec(), vec![b"python3 -u".to_vec()])
        );
        assert!(matches!(script(b"\n"), Err(libc::ENOEXEC)));
        assert!(matches!(script(&[b'x'; 300]), Err(libc::ENOEXEC)));
    }
}
