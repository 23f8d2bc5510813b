//! Memory protection keys for mapped regions: a stray store into a region — a wild
//! pointer in the application that shares the process with the file system — faults
//! instead of corrupting the image.
//!
//! A region that [`crate::Region::protect`] protected is tagged with the process's
//! easyio key (`pkey_mprotect`). Outside the file system every thread's rights for
//! that key are "no access": the key is allocated with them, and threads that existed
//! before, or that a signal handler runs on, have the kernel's default, which is no
//! access for every key but 0. Each [`crate::Pmem`] operation of a protected region
//! opens access on its own thread for its own duration (`open`: one `rdpkru`, and a
//! `wrpkru` before and after unless access is open already), so only the file
//! system's loads and stores reach the region. A thread that stands for a copy
//! device (the DSA model) opens it for good ([`allow_this_thread`]): a device's
//! accesses are not subject to keys. (The model copies through `process_vm_writev`,
//! which keys do not check either, but it also writes lines back by address.)
//!
//! Protection keys need the CPU's `pku` and the kernel's enabling of it (`ospke`,
//! both read from CPUID at run time); where either is missing, or the kernel has no
//! key left, regions stay unprotected and [`key`] says why.
//!
//! Whether regions are protected: [`crate::Region::protect`] asks for it; the
//! environment variable [`ENV`] set to `1` (or `yes`, `true`, `on`) makes every region
//! this process maps writable protect itself (anything else, or unset: not, the
//! default until the cost is measured on hardware that has keys).

use std::sync::OnceLock;

/// `pkey_alloc`'s initial rights: no access (`PKEY_DISABLE_ACCESS`, linux/mman.h).
const DISABLE_ACCESS: libc::c_uint = 1;

/// The environment variable that makes every writable region protect itself.
pub const ENV: &str = "EASYIO_PROTECT";

/// Whether [`ENV`] asks for protection: `1`, `yes`, `true` or `on` (any case).
pub fn wanted_by_env() -> bool {
    std::env::var(ENV).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "yes" | "true" | "on"
        )
    })
}

/// The process's easyio key, allocated at the first call: `Err` says why there is
/// none (no `pku` or `ospke`, or the kernel had no key left).
pub fn key() -> Result<u32, String> {
    slot().get_or_init(alloc).clone()
}

/// The key if one was allocated already (never allocates).
fn allocated() -> Option<u32> {
    slot().get().and_then(|k| k.as_ref().ok().copied())
}

fn slot() -> &'static OnceLock<Result<u32, String>> {
    static KEY: OnceLock<Result<u32, String>> = OnceLock::new();
    &KEY
}

fn alloc() -> Result<u32, String> {
    if !crate::persist::features().pku {
        return Err("this CPU or kernel has no protection keys (pku, ospke)".into());
    }
    // SAFETY: pkey_alloc takes two integers and touches no memory of ours.
    let k = unsafe { libc::syscall(libc::SYS_pkey_alloc, 0, DISABLE_ACCESS) };
    if k < 0 {
        return Err(format!("pkey_alloc: {}", std::io::Error::last_os_error()));
    }
    Ok(k as u32)
}

/// Tags `len` bytes at `addr` (a mapping of this process, page-aligned) with `key`,
/// keeping `prot`.
///
/// # Safety
/// `addr..addr + len` must be a mapping this process owns and whose accesses go
/// through [`open`] from now on.
pub(crate) unsafe fn tag(addr: *mut u8, len: usize, prot: i32, key: u32) -> std::io::Result<()> {
    // SAFETY: forwarded from our caller; pkey_mprotect changes only the permissions of
    // the mapping, as mprotect does.
    let r = unsafe { libc::syscall(libc::SYS_pkey_mprotect, addr, len, prot, key) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Access to the regions of a key opened on this thread until dropped (see the
/// module's documentation). Not `Send`: it restores the rights register of the
/// thread that opened it.
#[must_use]
pub(crate) struct Open {
    restore: Option<u32>,
    _this_thread: std::marker::PhantomData<*const ()>,
}

/// Opens access to the regions of `key` (a key [`key`] allocated, so the CPU has the
/// instructions) on this thread, unless it is open already.
#[inline]
pub(crate) fn open(key: u32) -> Open {
    debug_assert!((1..16).contains(&key), "protection key {key}");
    let old = rdpkru();
    let want = old & !(3 << (2 * (key & 15)));
    let restore = (old != want).then(|| {
        wrpkru(want);
        old
    });
    Open {
        restore,
        _this_thread: std::marker::PhantomData,
    }
}

impl Drop for Open {
    #[inline]
    fn drop(&mut self) {
        if let Some(v) = self.restore {
            wrpkru(v);
        }
    }
}

/// Opens access to protected regions on this thread for good (a thread that stands
/// for a copy device). Does nothing if no key was allocated.
pub fn allow_this_thread() {
    if let Some(k) = allocated() {
        std::mem::forget(open(k));
    }
}

/// This thread's rights register (PKRU): two bits per key, access-disable and
/// write-disable. Only called once a key exists, so the CPU has the instruction.
#[inline]
fn rdpkru() -> u32 {
    let eax: u32;
    // SAFETY: rdpkru reads a register into eax (edx is cleared); it needs ecx = 0 and
    // the OSPKE the key's allocation checked.
    unsafe {
        std::arch::asm!("rdpkru", in("ecx") 0u32, lateout("eax") eax, lateout("edx") _,
            options(nostack, preserves_flags));
    }
    eax
}

/// Sets this thread's PKRU. Not marked `nomem`: the compiler must not move loads or
/// stores of the region across it.
#[inline]
fn wrpkru(v: u32) {
    // SAFETY: wrpkru writes a register (eax, with ecx = edx = 0); it changes only which
    // pages of keyed mappings this thread may access.
    unsafe {
        std::arch::asm!("wrpkru", in("eax") v, in("ecx") 0u32, in("edx") 0u32,
            options(nostack, preserves_flags));
    }
}
