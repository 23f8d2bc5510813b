//! `posix_spawn` whose file actions or program touch the mount. glibc carries the
//! actions out in the child with its internal calls, which the shim does not see:
//! an `addopen` of a mount path would fail (ENOENT) and a `dup2` of a mount
//! descriptor would copy its placeholder. So the shim records each action as the
//! program adds it, and when one of them (or the program's path) is the mount's it
//! spawns by `fork`, the attributes, the actions through its own calls and `exec`,
//! reporting a failure before the exec as `posix_spawn` does: its errno, and no
//! child.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};

use libc::{mode_t, pid_t, posix_spawn_file_actions_t as Actions, posix_spawnattr_t as Attr};
use parking_lot::Mutex;

use crate::path::{classify, Target};
use crate::real::libc_call;

#[no_mangle]
extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    acts: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    if let Some(list) = own_spawn(acts, path, false) {
        let program = Program {
            path,
            attr,
            argv,
            envp,
            search: false,
        };
        return spawn(pid, &list, &program);
    }
    let real = crate::real::real!(posix_spawn: fn(*mut pid_t, *const c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut c_char, *const *mut c_char) -> c_int);
    crate::process::spawn_with_handoff(real, pid, path, acts, attr, (argv, envp))
}

#[no_mangle]
extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    acts: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    if let Some(list) = own_spawn(acts, file, true) {
        let program = Program {
            path: file,
            attr,
            argv,
            envp,
            search: true,
        };
        return spawn(pid, &list, &program);
    }
    let real = crate::real::real!(posix_spawnp: fn(*mut pid_t, *const c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut c_char, *const *mut c_char) -> c_int);
    crate::process::spawn_with_handoff(real, pid, file, acts, attr, (argv, envp))
}

/// One file action, as added.
#[derive(Clone, Debug)]
pub(crate) enum Action {
    Open {
        fd: c_int,
        path: CString,
        flags: c_int,
        mode: mode_t,
    },
    Dup2 {
        fd: c_int,
        to: c_int,
    },
    Close(c_int),
    Chdir(CString),
    Fchdir(c_int),
    CloseFrom(c_int),
}

/// The actions of each action list the program made, by its address.
static LISTS: Mutex<Option<HashMap<usize, Vec<Action>>>> = Mutex::new(None);

fn record(fa: *mut Actions, r: c_int, a: impl FnOnce() -> Action) -> c_int {
    if r == 0 && !fa.is_null() {
        LISTS
            .lock()
            .get_or_insert_with(HashMap::new)
            .entry(fa as usize)
            .or_default()
            .push(a());
    }
    r
}

fn forget(fa: *mut Actions) {
    if let Some(m) = LISTS.lock().as_mut() {
        m.remove(&(fa as usize));
    }
}

fn owned(p: *const c_char) -> CString {
    if p.is_null() {
        return CString::default();
    }
    // SAFETY: a path argument is a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_owned()
}

#[no_mangle]
extern "C" fn posix_spawn_file_actions_init(fa: *mut Actions) -> c_int {
    forget(fa);
    libc_call!(posix_spawn_file_actions_init: fn(*mut Actions) -> c_int, fa)
}

#[no_mangle]
extern "C" fn posix_spawn_file_actions_destroy(fa: *mut Actions) -> c_int {
    forget(fa);
    libc_call!(posix_spawn_file_actions_destroy: fn(*mut Actions) -> c_int, fa)
}

#[no_mangle]
extern "C" fn posix_spawn_file_actions_addopen(
    fa: *mut Actions,
    fd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    let r = libc_call!(posix_spawn_file_actions_addopen: fn(*mut Actions, c_int, *const c_char, c_int, mode_t) -> c_int, fa, fd, path, flags, mode);
    record(fa, r, || Action::Open {
        fd,
        path: owned(path),
        flags,
        mode,
    })
}

#[no_mangle]
extern "C" fn posix_spawn_file_actions_adddup2(fa: *mut Actions, fd: c_int, to: c_int) -> c_int {
    let r = libc_call!(posix_spawn_file_actions_adddup2: fn(*mut Actions, c_int, c_int) -> c_int, fa, fd, to);
    record(fa, r, || Action::Dup2 { fd, to })
}

#[no_mangle]
extern "C" fn posix_spawn_file_actions_addclose(fa: *mut Actions, fd: c_int) -> c_int {
    let r = libc_call!(posix_spawn_file_actions_addclose: fn(*mut Actions, c_int) -> c_int, fa, fd);
    record(fa, r, || Action::Close(fd))
}

#[no_mangle]
extern "C" fn posix_spawn_file_actions_addchdir_np(fa: *mut Actions, path: *const c_char) -> c_int {
    let r = libc_call!(posix_spawn_file_actions_addchdir_np: fn(*mut Actions, *const c_char) -> c_int, fa, path);
    record(fa, r, || Action::Chdir(owned(path)))
}

#[no_mangle]
extern "C" fn posix_spawn_file_actions_addfchdir_np(fa: *mut Actions, fd: c_int) -> c_int {
    let r =
        libc_call!(posix_spawn_file_actions_addfchdir_np: fn(*mut Actions, c_int) -> c_int, fa, fd);
    record(fa, r, || Action::Fchdir(fd))
}

#[no_mangle]
extern "C" fn posix_spawn_file_actions_addclosefrom_np(fa: *mut Actions, from: c_int) -> c_int {
    let r = libc_call!(posix_spawn_file_actions_addclosefrom_np: fn(*mut Actions, c_int) -> c_int, fa, from);
    record(fa, r, || Action::CloseFrom(from))
}

fn is_mount_path(p: &CStr) -> bool {
    matches!(
        classify(libc::AT_FDCWD, p.as_ptr()),
        Ok(Target::Easy { .. }) | Err(_)
    )
}

/// The recorded actions of `fa` when the shim must carry them out (one of them,
/// or the program's path, is the mount's); `None` for glibc's own spawn.
pub(crate) fn own_spawn(
    fa: *const Actions,
    path: *const c_char,
    search: bool,
) -> Option<Vec<Action>> {
    let _g = crate::guard::Guard::enter()?;
    let acts = if fa.is_null() {
        Vec::new()
    } else {
        LISTS
            .lock()
            .as_ref()
            .and_then(|m| m.get(&(fa as usize)).cloned())
            .unwrap_or_default()
    };
    let ours = |fd: c_int| crate::table::is_ours(fd) || crate::mount::is_internal(fd);
    let touches = acts.iter().any(|a| match a {
        Action::Open { path, .. } | Action::Chdir(path) => is_mount_path(path),
        Action::Dup2 { fd, to } => ours(*fd) || ours(*to),
        Action::Close(fd) | Action::Fchdir(fd) => ours(*fd),
        Action::CloseFrom(_) => false,
    });
    // A bare name that `posix_spawnp` looks up in PATH is the kernel's to find.
    let named = !path.is_null() && {
        // SAFETY: the program path argument is a NUL-terminated string.
        let p = unsafe { CStr::from_ptr(path) };
        (!search || p.to_bytes().contains(&b'/')) && is_mount_path(p)
    };
    (touches || named).then_some(acts)
}

type Argv = *const *mut c_char;

/// The program a spawn runs: its path (or name to look up in PATH, `search`), its
/// arguments and environment, and the attributes to apply first.
pub(crate) struct Program {
    pub path: *const c_char,
    pub attr: *const Attr,
    pub argv: Argv,
    pub envp: Argv,
    pub search: bool,
}

/// The spawn itself: see the module's comment. Returns 0 with `*pid` set, or the
/// errno of what failed (the child, if one was made, is reaped).
pub(crate) fn spawn(pid: *mut pid_t, acts: &[Action], program: &Program) -> c_int {
    // A close-on-exec pipe, kept high so that no action moves or closes it by
    // accident: the child writes its errno to it if it cannot exec.
    let mut p = [0; 2];
    // SAFETY: a two-int array for the pipe's ends.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return crate::real::errno();
    }
    let high = |fd: c_int| {
        // SAFETY: our own pipe's descriptor, copied to a free number >= 512.
        let h = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 512) };
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        h
    };
    let (rd, wr) = (high(p[0]), high(p[1]));
    if rd < 0 || wr < 0 {
        return libc::EMFILE;
    }
    // The shim's fork: a client of a server hands its descriptors to the child.
    let child = crate::process::fork();
    if child < 0 {
        let e = crate::real::errno();
        // SAFETY: our own pipe.
        unsafe { (libc::close(rd), libc::close(wr)) };
        return e;
    }
    if child == 0 {
        // SAFETY: our own pipe's read end, in the child.
        unsafe { libc::close(rd) };
        let e = in_child(acts, program);
        // SAFETY: telling the parent why, then leaving without the program's
        // exit handlers, as a failed exec in a spawn does.
        unsafe {
            libc::write(
                wr,
                (&e as *const c_int).cast(),
                std::mem::size_of::<c_int>(),
            );
            libc::_exit(127);
        }
    }
    // SAFETY: our own pipe's write end, in the parent.
    unsafe { libc::close(wr) };
    let mut e: c_int = 0;
    let n = loop {
        // SAFETY: reading one int from our own pipe.
        let n = unsafe {
            libc::read(
                rd,
                (&mut e as *mut c_int).cast(),
                std::mem::size_of::<c_int>(),
            )
        };
        if n >= 0 || crate::real::errno() != libc::EINTR {
            break n;
        }
    };
    // SAFETY: our own pipe.
    unsafe { libc::close(rd) };
    if n as usize == std::mem::size_of::<c_int>() && e != 0 {
        // SAFETY: reaping the child that could not exec.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        return e;
    }
    if !pid.is_null() {
        // SAFETY: the caller's pid slot.
        unsafe { *pid = child };
    }
    0
}

/// In the child: the attributes, the actions, the exec; the errno of what failed.
fn in_child(acts: &[Action], program: &Program) -> c_int {
    let fail = || crate::real::errno();
    if !program.attr.is_null() {
        if let Err(e) = apply_attr(program.attr) {
            return e;
        }
    }
    for a in acts {
        // SAFETY: each call is the shim's own (or libc's) with the action's
        // arguments, as glibc's child would make it.
        let r = unsafe {
            match a {
                Action::Open {
                    fd,
                    path,
                    flags,
                    mode,
                } => {
                    let got = libc::open(path.as_ptr(), *flags, *mode as c_int);
                    if got < 0 {
                        -1
                    } else if got != *fd {
                        let r = libc::dup2(got, *fd);
                        libc::close(got);
                        r
                    } else {
                        0
                    }
                }
                Action::Dup2 { fd, to } if fd == to => {
                    // POSIX: the descriptor stays, its close-on-exec flag cleared.
                    let fl = libc::fcntl(*fd, libc::F_GETFD);
                    if fl < 0 {
                        -1
                    } else {
                        libc::fcntl(*fd, libc::F_SETFD, fl & !libc::FD_CLOEXEC)
                    }
                }
                Action::Dup2 { fd, to } => libc::dup2(*fd, *to),
                Action::Close(fd) => {
                    // A close of a descriptor that is not open is not an error.
                    let r = libc::close(*fd);
                    if r < 0 && crate::real::errno() == libc::EBADF {
                        0
                    } else {
                        r
                    }
                }
                Action::Chdir(p) => libc::chdir(p.as_ptr()),
                Action::Fchdir(fd) => libc::fchdir(*fd),
                Action::CloseFrom(from) => {
                    libc::close_range(*from as u32, u32::MAX, 0);
                    0
                }
            }
        };
        if r < 0 {
            return fail();
        }
    }
    let (argv, envp) = (program.argv.cast(), program.envp.cast());
    if program.search {
        crate::process::execvpe(program.path, argv, envp);
    } else {
        crate::process::execve(program.path, argv, envp);
    }
    fail()
}

/// The attributes glibc's child applies: session, process group, signal
/// dispositions, scheduling, real ids, signal mask.
fn apply_attr(attr: *const Attr) -> Result<(), c_int> {
    let check = |r: c_int| {
        if r < 0 {
            Err(crate::real::errno())
        } else {
            Ok(())
        }
    };
    // SAFETY: the program's attribute object, read with its own accessors; the
    // calls change only this (child) process.
    unsafe {
        let mut flags: libc::c_short = 0;
        libc::posix_spawnattr_getflags(attr, &mut flags);
        let flags = c_int::from(flags);
        if flags & c_int::from(libc::POSIX_SPAWN_SETSID) != 0 {
            check(libc::setsid())?;
        }
        if flags & libc::POSIX_SPAWN_SETPGROUP != 0 {
            let mut g: pid_t = 0;
            libc::posix_spawnattr_getpgroup(attr, &mut g);
            check(libc::setpgid(0, g))?;
        }
        if flags & libc::POSIX_SPAWN_SETSIGDEF != 0 {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::posix_spawnattr_getsigdefault(attr, &mut set);
            for sig in 1..libc::SIGRTMAX() {
                if libc::sigismember(&set, sig) == 1 && sig != libc::SIGKILL && sig != libc::SIGSTOP
                {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
        }
        if flags & libc::POSIX_SPAWN_SETSCHEDULER != 0 {
            let mut policy = 0;
            let mut param: libc::sched_param = std::mem::zeroed();
            libc::posix_spawnattr_getschedpolicy(attr, &mut policy);
            libc::posix_spawnattr_getschedparam(attr, &mut param);
            check(libc::sched_setscheduler(0, policy, &param))?;
        } else if flags & libc::POSIX_SPAWN_SETSCHEDPARAM != 0 {
            let mut param: libc::sched_param = std::mem::zeroed();
            libc::posix_spawnattr_getschedparam(attr, &mut param);
            check(libc::sched_setparam(0, &param))?;
        }
        if flags & libc::POSIX_SPAWN_RESETIDS != 0 {
            check(libc::setgid(libc::getgid()))?;
            check(libc::setuid(libc::getuid()))?;
        }
        if flags & libc::POSIX_SPAWN_SETSIGMASK != 0 {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::posix_spawnattr_getsigmask(attr, &mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        }
    }
    Ok(())
}
