//! A process that changes its ids (`setuid`, `setgroups` and the like) after it
//! reached the mount: the calls that follow are checked with the new ones, as the
//! kernel checks them. A server reads them anew from the kernel; an image mounted
//! here takes them from the process. A forked child of a process joined to a server
//! connects before it changes its ids, as its parent could (the server of an image
//! started on demand is reached through a directory of the user who started it).

use std::ffi::c_int;

use libc::{gid_t, size_t, uid_t};

use crate::real::libc_call;

/// Before a call that may change the ids: a child that would use its parent's
/// server connects while it still has the ids the parent had.
fn before() {
    if let Some(_g) = crate::guard::Guard::enter() {
        let e = crate::real::errno();
        crate::mount::connect_if_inherited();
        crate::real::set_errno(e);
    }
}

/// After a call that may have changed the ids returned `r` (0: it did).
fn changed(r: c_int) -> c_int {
    if r == 0 {
        if let Some(_g) = crate::guard::Guard::enter() {
            let e = crate::real::errno();
            if let Some(l) = crate::live::current() {
                l.fs.recredential(crate::mount::process_cred());
            }
            crate::real::set_errno(e);
        }
    }
    r
}

/// Exports each id-changing call: libc's, between [`before`] and [`changed`].
macro_rules! id_calls {
    ($(fn $name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
        extern "C" fn $name($($a: $t),*) -> c_int {
            before();
            changed(libc_call!($name: fn($($t),*) -> c_int, $($a),*))
        }
    )*};
}

id_calls! {
    fn setuid(u: uid_t);
    fn setgid(g: gid_t);
    fn seteuid(u: uid_t);
    fn setegid(g: gid_t);
    fn setreuid(r: uid_t, e: uid_t);
    fn setregid(r: gid_t, e: gid_t);
    fn setresuid(r: uid_t, e: uid_t, s: uid_t);
    fn setresgid(r: gid_t, e: gid_t, s: gid_t);
    fn setgroups(n: size_t, list: *const gid_t);
}

#[no_mangle]
extern "C" fn setfsuid(u: uid_t) -> c_int {
    before();
    let old = libc_call!(setfsuid: fn(uid_t) -> c_int, u);
    changed(0);
    old
}

#[no_mangle]
extern "C" fn setfsgid(g: gid_t) -> c_int {
    before();
    let old = libc_call!(setfsgid: fn(gid_t) -> c_int, g);
    changed(0);
    old
}
