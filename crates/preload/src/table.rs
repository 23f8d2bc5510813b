//! Descriptors: an easyio descriptor is a real kernel descriptor number — a
//! placeholder of `/dev/null`, opened close-on-exec — mapped here to the open file of
//! the file system, so its number never collides with the program's other
//! descriptors. `dup`s share one [`Desc`] (one open file description: one offset),
//! which closes the file system's descriptor when the last of them goes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::RwLock;

use crate::live::{is_forked_child, Live};
use crate::real::real;

/// An open file description of the mount.
pub(crate) struct Desc {
    pub live: Arc<Live>,
    pub fd: fs::Fd,
    /// The path it was opened by, from the image root (for `fchdir`, `getcwd`).
    pub path: String,
    /// `F_GETFL`'s flags: access mode and status flags.
    pub status: AtomicI32,
}

impl Drop for Desc {
    fn drop(&mut self) {
        // A forked child's copy of the table names the parent's descriptors: a
        // mounted image's are the parent's alone; a server's were handed to the
        // child's own connection, if it made one.
        if is_forked_child() {
            return;
        }
        if !self.live.is_parents_connection() {
            let _ = self.live.fs.close(self.fd);
        } else if let Some(l) = crate::live::current() {
            let _ = l.fs.close(self.fd);
        }
    }
}

struct Slot {
    desc: Arc<Desc>,
    cloexec: bool,
}

static TABLE: RwLock<BTreeMap<i32, Slot>> = RwLock::new(BTreeMap::new());
/// Slots in the table: while 0, a descriptor call costs one load.
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Bumped by every change of the table: a thread's last lookup stands while it is
/// unchanged.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's last lookup: the generation it was made in, the descriptor and
    /// its description. Weak, so a closed description is not kept open by a
    /// thread that looked it up; a thread being torn down just misses it.
    static LAST: RefCell<Option<(u64, i32, Weak<Desc>)>> = const { RefCell::new(None) };
}

/// Notes a change of the table (after it, made under its write lock).
fn changed() {
    GENERATION.fetch_add(1, Ordering::Release);
}

/// The description behind kernel descriptor `kfd`, if it is the mount's. A thread
/// that calls on one descriptor again and again (a program's read or write loop)
/// finds it in its last lookup without taking the table's lock, whose line the
/// threads of a program on several CPUs would otherwise pass between them on every
/// call.
pub(crate) fn get(kfd: i32) -> Option<Arc<Desc>> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let generation = GENERATION.load(Ordering::Acquire);
    let hit = LAST.try_with(|last| match &*last.borrow() {
        Some((g, k, d)) if *g == generation && *k == kfd => d.upgrade(),
        _ => None,
    });
    if let Ok(Some(d)) = hit {
        return Some(d);
    }
    let d = TABLE.read().get(&kfd).map(|s| s.desc.clone())?;
    let _ = LAST.try_with(|last| {
        *last.borrow_mut() = Some((generation, kfd, Arc::downgrade(&d)));
    });
    Some(d)
}

/// Whether `kfd` is the mount's.
pub(crate) fn is_ours(kfd: i32) -> bool {
    COUNT.load(Ordering::Relaxed) != 0 && TABLE.read().contains_key(&kfd)
}

/// Makes `kfd` (a placeholder the caller opened) name `desc`.
pub(crate) fn insert(kfd: i32, desc: Arc<Desc>, cloexec: bool) {
    let mut table = TABLE.write();
    if table.insert(kfd, Slot { desc, cloexec }).is_none() {
        COUNT.fetch_add(1, Ordering::Relaxed);
    }
    changed();
}

/// Forgets `kfd`; its description closes if it was the last. Returns whether it
/// was the mount's.
pub(crate) fn remove(kfd: i32) -> bool {
    let slot = {
        let mut table = TABLE.write();
        let slot = table.remove(&kfd);
        if slot.is_some() {
            COUNT.fetch_sub(1, Ordering::Relaxed);
            changed();
        }
        slot
    };
    // Dropped outside the lock: closing may wait for the file system.
    slot.is_some()
}

/// `FD_CLOEXEC` as the program set it.
pub(crate) fn cloexec(kfd: i32) -> Option<bool> {
    TABLE.read().get(&kfd).map(|s| s.cloexec)
}

/// Sets `FD_CLOEXEC` as the program sees it (the placeholder itself is always
/// close-on-exec: an exec'd program cannot reach the image through it).
pub(crate) fn set_cloexec(kfd: i32, on: bool) {
    if let Some(s) = TABLE.write().get_mut(&kfd) {
        s.cloexec = on;
    }
}

/// Whether nothing of the mount is open.
pub(crate) fn is_idle() -> bool {
    COUNT.load(Ordering::Relaxed) == 0
}

/// Drops every descriptor (before an unmount); their placeholders stay open as
/// `/dev/null`, so no number is reused behind the program's back.
pub(crate) fn clear() {
    let all = {
        let mut table = TABLE.write();
        COUNT.store(0, Ordering::Relaxed);
        changed();
        std::mem::take(&mut *table)
    };
    drop(all);
}

/// A new placeholder descriptor: the lowest free number, as the kernel would give.
pub(crate) fn placeholder() -> Result<i32, i32> {
    let open = real!(open: fn(*const libc::c_char, libc::c_int, libc::mode_t) -> libc::c_int);
    // SAFETY: a NUL-terminated path and plain flags.
    let fd = unsafe { open(c"/dev/null".as_ptr(), libc::O_PATH | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        Err(crate::real::errno())
    } else {
        Ok(fd)
    }
}

/// Closes a placeholder with libc's `close`.
pub(crate) fn close_placeholder(kfd: i32) {
    let close = real!(close: fn(libc::c_int) -> libc::c_int);
    // SAFETY: closing a descriptor number is safe whatever it is.
    unsafe { close(kfd) };
}

/// Every descriptor of the mount: number, description, and `FD_CLOEXEC` as the
/// program set it.
pub(crate) fn entries() -> Vec<(i32, Arc<Desc>, bool)> {
    TABLE
        .read()
        .iter()
        .map(|(&k, s)| (k, s.desc.clone(), s.cloexec))
        .collect()
}

/// Makes kernel descriptor `kfd` a placeholder again (close-on-exec, `/dev/null`).
pub(crate) fn restore_placeholder(kfd: i32) {
    if let Ok(p) = placeholder() {
        let dup3 = real!(dup3: fn(libc::c_int, libc::c_int, libc::c_int) -> libc::c_int);
        // SAFETY: both are descriptor numbers; dup3 replaces `kfd` atomically.
        unsafe { dup3(p, kfd, libc::O_CLOEXEC) };
        close_placeholder(p);
    }
}

/// Makes kernel descriptor `kfd` survive an `exec` as an `O_PATH` descriptor of
/// `/dev/null`: the new program's shim adopts it, and a program without the shim
/// gets EBADF from any read or write of it instead of writing to `/dev/null`.
pub(crate) fn inheritable_placeholder(kfd: i32) -> Result<(), i32> {
    let open = real!(open: fn(*const libc::c_char, libc::c_int, libc::mode_t) -> libc::c_int);
    let dup3 = real!(dup3: fn(libc::c_int, libc::c_int, libc::c_int) -> libc::c_int);
    // SAFETY: a NUL-terminated path and plain flags.
    let p = unsafe { open(c"/dev/null".as_ptr(), libc::O_PATH | libc::O_CLOEXEC, 0) };
    if p < 0 {
        return Err(crate::real::errno());
    }
    // SAFETY: both are descriptor numbers; dup3 without O_CLOEXEC keeps `kfd` open
    // across exec.
    let r = unsafe { dup3(p, kfd, 0) };
    close_placeholder(p);
    if r < 0 {
        Err(crate::real::errno())
    } else {
        Ok(())
    }
}

/// Before `fork`: holds the table (read) until [`release_after_fork`], so that the
/// child's copy is whole and not locked; the file system descriptors it names.
pub(crate) fn hold_across_fork() -> Vec<u32> {
    let table = TABLE.read();
    let mut fds: Vec<u32> = table.values().map(|s| s.desc.fd.0).collect();
    fds.sort_unstable();
    fds.dedup();
    std::mem::forget(table);
    fds
}

/// After `fork`, in the parent and in the child: lets the table go.
pub(crate) fn release_after_fork() {
    // SAFETY: `hold_across_fork` took a read lock on this thread and forgot its guard
    // (in the child, the copy of that lock).
    unsafe { TABLE.force_unlock_read() };
}
