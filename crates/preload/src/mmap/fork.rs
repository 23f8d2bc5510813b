//! Exit, `exec` and `fork`: shared mappings written back and let go before an
//! `exec` or at exit, the tables held across `fork`, and a child's own share.

use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::file::{flush, report};
use super::object::Object;
use super::shm::release;
use super::state::{MAPPED, OBJECTS, OPS, STATE};
use crate::guard::Guard;
use crate::real::real;
use crate::table;

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

pub(super) fn register_hooks() {
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
