//! Descriptors of a server's connection (`EASYIO_SERVER`) across `fork` and `exec`,
//! as the kernel passes a process's open files on.
//!
//! - **fork**: before it (in the `pthread_atfork` handler, with the descriptor table
//!   held, see `mount.rs`), a process holding descriptors of the mount asks the
//!   server to keep them for its child (a handoff, by an unguessable token); after
//!   it, the parent names the child as the heir, and the child connects and adopts
//!   them at once, under the same numbers and sharing their offsets with the
//!   parent. The server lets only the heir (or, before it is named, a child of the
//!   maker) adopt, and closes what was kept once the heir is gone.
//! - **exec**: the descriptors the program did not mark close-on-exec (a shell's
//!   redirections), and a current directory inside the mount, are handed to the new
//!   program through `EASYIO_INHERIT`; its shim adopts them before `main`. Their
//!   kernel placeholders survive the exec as `O_PATH` descriptors, so a program run
//!   without the shim fails on them (EBADF) rather than writing to `/dev/null`.

use std::ffi::{c_char, CString};
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use crate::table::{self, Desc};

/// The variable that carries a handoff through `exec`.
const VAR: &str = "EASYIO_INHERIT";

/// After `fork` returned `pid`: the child connects and adopts what its parent
/// handed over (at once: a child whose parent exits is no longer its child); the
/// parent names the child as the heir (or gives the handoff up if the fork failed).
pub(crate) fn after_fork(pid: libc::pid_t) {
    if pid == 0 {
        if crate::mount::adoption_pending() {
            let _ = crate::mount::live();
        }
        return;
    }
    let Some(token) = crate::mount::take_fork_token() else {
        return;
    };
    if let Ok(l) = crate::mount::live() {
        if let Some(c) = l.fs.client() {
            let _ = c.heir(token, if pid > 0 { pid } else { -1 });
        }
    }
}

/// A handoff made before `exec`.
pub(crate) struct ExecHandoff {
    /// `EASYIO_INHERIT=...`, for the new program's environment.
    pub var: CString,
    token: u64,
    /// Placeholders made to survive the exec.
    kept: Vec<i32>,
}

/// Before `exec` in a client of a server: hands the descriptors that stay open
/// across exec, and the current directory inside the mount, to the new program.
/// `None` when there is nothing to hand (or no server).
pub(crate) fn before_exec() -> Option<ExecHandoff> {
    let cwd = crate::path::cwd();
    let kept: Vec<(i32, Arc<Desc>)> = table::entries()
        .into_iter()
        .filter(|(_, _, cloexec)| !cloexec)
        .map(|(k, d, _)| (k, d))
        .collect();
    if kept.is_empty() && cwd.is_none() {
        return None;
    }
    let l = crate::mount::live().ok()?;
    let c = l.fs.client()?;
    let mut fds: Vec<u32> = kept.iter().map(|(_, d)| d.fd.0).collect();
    fds.dedup();
    let token = c.handoff(&fds).ok()?;
    let mut value = format!("{token};{}", cwd.as_deref().map_or("-".into(), hex));
    let mut made = Vec::new();
    for (kfd, d) in &kept {
        if table::inheritable_placeholder(*kfd).is_ok() {
            made.push(*kfd);
            let status = d.status.load(std::sync::atomic::Ordering::Relaxed);
            value += &format!(";{kfd},{},{status},{}", d.fd.0, hex(&d.path));
        }
    }
    let var = CString::new(format!("{VAR}={value}")).expect("no NUL in hex and digits");
    Some(ExecHandoff {
        var,
        token,
        kept: made,
    })
}

/// After an `exec` that returned (failed): the placeholders close on exec again and
/// the server lets the handoff go.
pub(crate) fn exec_failed(h: ExecHandoff) {
    for kfd in h.kept {
        table::restore_placeholder(kfd);
    }
    if let Some(c) = crate::live::current().as_ref().and_then(|l| l.fs.client()) {
        let _ = c.heir(h.token, -1);
    }
}

/// After `posix_spawn`, `system` or `popen` made a child with the handoff (the
/// parent goes on): the placeholders close on exec again; the server keeps what was
/// handed for `child` (`Some(None)`: a child whose pid is not known, kept while this
/// process runs), or lets it go if no child was made (`None`).
pub(crate) fn spawned(h: ExecHandoff, child: Option<Option<libc::pid_t>>) {
    for &kfd in &h.kept {
        table::restore_placeholder(kfd);
    }
    if let Some(c) = crate::live::current().as_ref().and_then(|l| l.fs.client()) {
        match child {
            Some(Some(pid)) => {
                let _ = c.heir(h.token, pid);
            }
            Some(None) => {}
            None => {
                let _ = c.heir(h.token, -1);
            }
        }
    }
}

/// The handoff's value (what follows `EASYIO_INHERIT=`).
pub(crate) fn value(h: &ExecHandoff) -> &std::ffi::CStr {
    let all = h.var.as_bytes_with_nul();
    std::ffi::CStr::from_bytes_with_nul(&all[VAR.len() + 1..]).expect("ends with its NUL")
}

/// The name of the variable, NUL-terminated.
pub(crate) const VAR_C: &std::ffi::CStr = c"EASYIO_INHERIT";

/// `envp` with `var` in place of any `EASYIO_INHERIT` it has; the strings are
/// borrowed from `envp` and `var`, which must outlive the result.
pub(crate) fn with_var(envp: *const *const c_char, var: &CString) -> Vec<*const c_char> {
    let mut out = Vec::new();
    let mut p = envp;
    // SAFETY: `envp` is NULL or a NULL-terminated array of C strings, as exec takes.
    unsafe {
        while !p.is_null() && !(*p).is_null() {
            let s = std::ffi::CStr::from_ptr(*p).to_bytes();
            if !s.starts_with(VAR.as_bytes()) || s.get(VAR.len()) != Some(&b'=') {
                out.push(*p);
            }
            p = p.add(1);
        }
    }
    out.push(var.as_ptr());
    out.push(std::ptr::null());
    out
}

/// Adopts what the program that exec'd this one handed over, before `main`.
extern "C" fn at_start() {
    let Some(_g) = crate::guard::Guard::enter() else {
        return;
    };
    let Ok(value) = std::env::var(VAR) else {
        return;
    };
    drop_from_environ();
    // Only a client of a server can adopt (an image mounted here alone has other
    // numbers); without one the placeholders stay `O_PATH`: EBADF, not `/dev/null`.
    if std::env::var_os("EASYIO_SERVER").is_none() && crate::mount::private() {
        return;
    }
    let _ = std::panic::catch_unwind(|| adopt(&value));
}

/// Takes `EASYIO_INHERIT` out of the process's environment by hand, before `main`:
/// a program may define its own `unsetenv` (bash does, and its version does nothing
/// before the shell's variables exist), so the variable would reach its children
/// with a handoff already taken.
fn drop_from_environ() {
    extern "C" {
        static mut environ: *mut *mut c_char;
    }
    // SAFETY: before `main`, one thread; `environ` is NULL or a NULL-terminated array
    // of C strings that the entries are shifted down within, as glibc's `unsetenv`
    // does.
    unsafe {
        let env = environ;
        if env.is_null() {
            return;
        }
        let mut read = env;
        let mut write = env;
        while !(*read).is_null() {
            let s = std::ffi::CStr::from_ptr(*read).to_bytes();
            let ours = s.starts_with(VAR.as_bytes()) && s.get(VAR.len()) == Some(&b'=');
            if !ours {
                *write = *read;
                write = write.add(1);
            }
            read = read.add(1);
        }
        *write = std::ptr::null_mut();
    }
}

// SAFETY of the link section: `.init_array` entries are run by the dynamic loader,
// once, before `main`, with the process single-threaded.
#[used]
#[link_section = ".init_array"]
static AT_START: extern "C" fn() = at_start;

/// Parses `EASYIO_INHERIT` and adopts it: `token;cwd;kfd,fd,status,path;...`, names
/// in hex, `-` for no current directory.
fn adopt(value: &str) {
    let mut parts = value.split(';');
    let Some(token) = parts.next().and_then(|t| t.parse::<u64>().ok()) else {
        return;
    };
    let cwd = parts.next().filter(|c| *c != "-").and_then(unhex);
    let entries: Vec<(i32, u32, i32, String)> = parts
        .filter_map(|p| {
            let f: Vec<&str> = p.split(',').collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                unhex(f.get(3)?)?,
            ))
        })
        .collect();
    let keep = entries.iter().map(|e| e.1).collect();
    crate::mount::adopt_at_connect(token, Some(keep));
    let Ok(l) = crate::mount::live() else {
        return;
    };
    let mut by_fd: std::collections::HashMap<u32, Arc<Desc>> = Default::default();
    let mut std_fds = Vec::new();
    for (kfd, fd, status, path) in entries {
        let desc = by_fd
            .entry(fd)
            .or_insert_with(|| {
                Arc::new(Desc {
                    live: l.clone(),
                    fd: fs::Fd(fd),
                    path,
                    status: AtomicI32::new(status),
                })
            })
            .clone();
        table::restore_placeholder(kfd);
        table::insert(kfd, desc, false);
        std_fds.push(kfd);
    }
    crate::stdio::adopt_std_streams(&std_fds);
    if cwd.is_some() {
        crate::path::set_cwd(cwd);
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(h: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}
