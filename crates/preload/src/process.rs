//! Processes: before `fork`, `vfork`, `posix_spawn`, `system` and `popen` an idle
//! process lets the image go (see [`crate::mount::release_if_idle`]); a child of a
//! process that still holds it gets EBUSY under the prefix (see `mount.rs`); before an
//! `exec` the image is unmounted cleanly, so that the new program can mount it. A
//! client of a server instead hands its descriptors to the child or to the new
//! program (see `inherit.rs`). `posix_spawn` itself is in `spawn.rs`, which calls
//! back here.

use std::ffi::{c_char, c_int, CStr};

use libc::pid_t;

use crate::real::libc_call;

#[no_mangle]
pub(crate) extern "C" fn fork() -> pid_t {
    if let Some(_g) = crate::guard::Guard::enter() {
        crate::mount::release_if_idle();
    }
    // A client of a server hands its descriptors over inside the fork (see
    // `mount::before_fork`).
    let pid = libc_call!(fork: fn() -> pid_t,);
    if let Some(_g) = crate::guard::Guard::enter() {
        let e = crate::real::errno();
        crate::inherit::after_fork(pid);
        crate::real::set_errno(e);
    }
    pid
}

/// `vfork` is made a `fork`: a wrapper cannot return twice on one stack, and `fork`
/// gives the child everything `vfork` promises.
#[no_mangle]
extern "C" fn vfork() -> pid_t {
    fork()
}

type SpawnFn = unsafe extern "C" fn(
    *mut pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

/// Before a child is started by a call that execs inside glibc (`posix_spawn`,
/// `system`, `popen`): an idle mounted image is let go; a client of a server hands
/// its inheritable descriptors and current directory to the child.
fn before_spawn() -> Option<crate::inherit::ExecHandoff> {
    let _g = crate::guard::Guard::enter()?;
    crate::mount::release_if_idle();
    if crate::live::is_forked_child() {
        return None;
    }
    crate::inherit::before_exec()
}

/// After such a call: see [`crate::inherit::spawned`].
fn after_spawn(h: Option<crate::inherit::ExecHandoff>, child: Option<Option<pid_t>>) {
    if let (Some(h), Some(_g)) = (h, crate::guard::Guard::enter()) {
        let e = crate::real::errno();
        crate::inherit::spawned(h, child);
        crate::real::set_errno(e);
    }
}

/// `posix_spawn` or `posix_spawnp` (`real`), with the handoff in the child's
/// environment.
pub(crate) fn spawn_with_handoff(
    real: SpawnFn,
    pid: *mut pid_t,
    path: *const c_char,
    acts: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    (argv, envp): (*const *mut c_char, *const *mut c_char),
) -> c_int {
    let h = before_spawn();
    let env = h
        .as_ref()
        .map(|h| crate::inherit::with_var(envp.cast(), &h.var));
    let envp = env.as_ref().map_or(envp, |e| e.as_ptr().cast());
    // SAFETY: the program's own arguments, with an environment that lives until the
    // call returns.
    let r = unsafe { real(pid, path, acts, attr, argv, envp) };
    // SAFETY: on success, `pid` (if not NULL) holds the child's pid.
    let child = (r == 0).then(|| (!pid.is_null()).then(|| unsafe { *pid }));
    after_spawn(h, child);
    r
}

/// Runs `f` (`system` or `popen`, which start their child with glibc's internal
/// spawn and `environ`) with the handoff in the environment.
fn with_handoff_in_environ<T>(f: impl FnOnce() -> T, waits: bool) -> T {
    let h = before_spawn();
    if let Some(h) = &h {
        // SAFETY: NUL-terminated strings; the variable is removed again below.
        unsafe {
            libc::setenv(
                crate::inherit::VAR_C.as_ptr(),
                crate::inherit::value(h).as_ptr(),
                1,
            )
        };
    }
    let r = f();
    if h.is_some() {
        // SAFETY: as above.
        unsafe { libc::unsetenv(crate::inherit::VAR_C.as_ptr()) };
    }
    // `system` waited for its child: what it did not adopt can go.
    after_spawn(h, if waits { None } else { Some(None) });
    r
}

#[no_mangle]
extern "C" fn system(command: *const c_char) -> c_int {
    with_handoff_in_environ(
        || libc_call!(system: fn(*const c_char) -> c_int, command),
        true,
    )
}

#[no_mangle]
extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    with_handoff_in_environ(
        || libc_call!(popen: fn(*const c_char, *const c_char) -> *mut libc::FILE, command, mode),
        false,
    )
}

/// Before an `exec`: the new program cannot reach a mounted image through this
/// process's descriptors (their placeholders close on exec), so the image is
/// unmounted cleanly first and the new program may mount it itself. If the exec
/// fails, the next call under the prefix mounts again (descriptors opened before it
/// are gone: EBADF). A client of a server hands the descriptors that stay open, and
/// its current directory, to the new program instead (see `inherit.rs`).
fn before_exec() -> Option<crate::inherit::ExecHandoff> {
    let _g = crate::guard::Guard::enter()?;
    if crate::live::is_forked_child() {
        return None;
    }
    crate::mmap::before_exec();
    let _ = crate::mount::release();
    crate::inherit::before_exec()
}

/// After an exec that returned: takes the handoff back.
fn exec_failed(h: Option<crate::inherit::ExecHandoff>) {
    if let (Some(h), Some(_g)) = (h, crate::guard::Guard::enter()) {
        crate::inherit::exec_failed(h);
    }
}

type Argv = *const *const c_char;

extern "C" {
    static environ: Argv;
}

/// Runs `exec` with `envp`, or with `envp` and the handoff's variable.
fn exec_with(envp: Argv, exec: impl FnOnce(Argv) -> c_int) -> c_int {
    let h = before_exec();
    let r = match &h {
        Some(h) => {
            let env = crate::inherit::with_var(envp, &h.var);
            exec(env.as_ptr())
        }
        None => exec(envp),
    };
    let e = crate::real::errno();
    exec_failed(h);
    crate::real::set_errno(e);
    r
}

/// How many scripts deep an exec of the mount may go (the kernel's limit on
/// interpreters that are scripts themselves).
const SCRIPT_DEPTH: u32 = 4;

/// An exec of `path` with `argv` and `envp`: a program stored in the mount runs as
/// [`crate::image_exec`] plans it, any other through `kernel`.
fn exec_path(
    path: *const c_char,
    argv: Argv,
    envp: Argv,
    depth: u32,
    kernel: &dyn Fn(Argv) -> c_int,
) -> c_int {
    use crate::image_exec::{plan, script_argv, Plan};
    match plan(path) {
        None => exec_with(envp, kernel),
        Some(Err(e)) => {
            crate::real::set_errno(e);
            -1
        }
        Some(Ok(_)) if depth >= SCRIPT_DEPTH => {
            crate::real::set_errno(libc::ELOOP);
            -1
        }
        Some(Ok(Plan::Script { interp, args })) => {
            let v = script_argv(&interp, &args, path, argv);
            exec_path(
                interp.as_ptr(),
                v.as_ptr(),
                envp,
                depth + 1,
                &|env| libc_call!(execve: fn(*const c_char, Argv, Argv) -> c_int, interp.as_ptr(), v.as_ptr(), env),
            )
        }
        Some(Ok(Plan::Binary(fd))) => {
            let r = exec_with(
                envp,
                |env| libc_call!(fexecve: fn(c_int, Argv, Argv) -> c_int, fd, argv, env),
            );
            let e = crate::real::errno();
            // SAFETY: the memory file made for this exec, which did not happen.
            unsafe { libc::close(fd) };
            crate::real::set_errno(e);
            r
        }
    }
}

/// Whether `execvp`'s `file` is a path (it names a slash) rather than a name to
/// look up in `PATH`.
fn is_path(file: *const c_char) -> bool {
    // SAFETY: exec's file argument is a NUL-terminated string (or NULL).
    !file.is_null() && unsafe { CStr::from_ptr(file) }.to_bytes().contains(&b'/')
}

#[no_mangle]
pub(crate) extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    exec_path(
        path,
        argv,
        envp,
        0,
        &|env| libc_call!(execve: fn(*const c_char, Argv, Argv) -> c_int, path, argv, env),
    )
}

#[no_mangle]
extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    // SAFETY: `environ` is libc's environment, read as exec reads it.
    let envp = unsafe { environ };
    execve(path, argv, envp)
}

#[no_mangle]
extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    // SAFETY: as in `execv`.
    let envp = unsafe { environ };
    execvpe(file, argv, envp)
}

#[no_mangle]
pub(crate) extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    if is_path(file) {
        return execve(file, argv, envp);
    }
    exec_with(
        envp,
        |env| libc_call!(execvpe: fn(*const c_char, Argv, Argv) -> c_int, file, argv, env),
    )
}

#[no_mangle]
extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    exec_with(
        envp,
        |env| libc_call!(fexecve: fn(c_int, Argv, Argv) -> c_int, fd, argv, env),
    )
}
