//! Stack-overflow reporting: a SIGSEGV/SIGBUS handler that recognises a fault in the guard
//! page of the uthread running on this thread and aborts with a message naming it, instead
//! of the silent crash a plain SIGSEGV would be.
//!
//! The handler runs on an alternate signal stack (the faulting stack is exhausted). Every
//! other fault is passed on to the handler installed before ours (the standard library's,
//! which reports overflows of ordinary thread stacks), or to the default action.

use std::io;
use std::ptr;
use std::sync::OnceLock;

/// What is written to stderr before aborting.
const MESSAGE: &[u8] = b"\nrt: fatal: uthread stack overflow (a uthread ran into the guard page \
below its stack); give uthreads bigger stacks with rt::Builder::stack_size\n";
/// Size of the alternate signal stack given to a worker thread that has none.
const ALT_STACK_SIZE: usize = 64 << 10;

/// The actions that were installed for SIGSEGV and SIGBUS before ours.
struct Previous {
    segv: libc::sigaction,
    bus: libc::sigaction,
}

static PREVIOUS: OnceLock<Result<Previous, i32>> = OnceLock::new();

/// Installs the handler for the whole process, once.
pub(crate) fn install() -> io::Result<()> {
    let previous = PREVIOUS.get_or_init(|| {
        // SAFETY: sigaction is called with valid pointers to initialised structs; the handler
        // only reads thread-locals without destructors, writes to fd 2 and aborts, or chains.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut segv: libc::sigaction = std::mem::zeroed();
            let mut bus: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGSEGV, &action, &mut segv) != 0 {
                return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
            if libc::sigaction(libc::SIGBUS, &action, &mut bus) != 0 {
                let err = io::Error::last_os_error().raw_os_error().unwrap_or(0);
                libc::sigaction(libc::SIGSEGV, &segv, ptr::null_mut());
                return Err(err);
            }
            Ok(Previous { segv, bus })
        }
    });
    match previous {
        Ok(_) => Ok(()),
        Err(errno) => Err(io::Error::from_raw_os_error(*errno)),
    }
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let (lo, hi) = crate::context::running_guard();
    if lo <= addr && addr < hi {
        // SAFETY: write(2) and abort(3) are async-signal-safe; MESSAGE is a static buffer.
        unsafe {
            libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
            libc::abort();
        }
    }
    let Some(Ok(prev)) = PREVIOUS.get() else {
        return;
    };
    let prev = if sig == libc::SIGBUS {
        &prev.bus
    } else {
        &prev.segv
    };
    match prev.sa_sigaction {
        libc::SIG_DFL | libc::SIG_IGN => {
            // Restore the old action and return: the faulting instruction runs again and
            // gets the default treatment (a crash with the usual signal).
            // SAFETY: `prev` is the action the system gave us; sigaction is async-signal-safe.
            unsafe { libc::sigaction(sig, prev, ptr::null_mut()) };
        }
        f if prev.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: with SA_SIGINFO, sa_sigaction holds a three-argument handler.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(f) };
            f(sig, info, ctx);
        }
        f => {
            // SAFETY: without SA_SIGINFO, sa_sigaction holds a one-argument handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(f) };
            f(sig);
        }
    }
}

/// An alternate signal stack this module installed on a worker thread; removed on drop.
pub(crate) struct AltStack {
    map: *mut libc::c_void,
    len: usize,
}

impl AltStack {
    /// Makes sure the calling thread has an alternate signal stack; returns the one it
    /// installed, or `None` if the thread already had one (the standard library gives its
    /// threads one).
    pub(crate) fn ensure() -> io::Result<Option<AltStack>> {
        // SAFETY: querying the current alternate stack with a null new-stack pointer.
        unsafe {
            let mut old: libc::stack_t = std::mem::zeroed();
            if libc::sigaltstack(ptr::null(), &mut old) != 0 {
                return Err(io::Error::last_os_error());
            }
            if old.ss_flags & libc::SS_DISABLE == 0 {
                return Ok(None);
            }
        }
        let len = ALT_STACK_SIZE.max(libc::SIGSTKSZ);
        // SAFETY: an anonymous private mapping with no address hint.
        let map = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = libc::stack_t {
            ss_sp: map,
            ss_flags: 0,
            ss_size: len,
        };
        // SAFETY: `stack` describes the mapping just made, which lives until drop.
        if unsafe { libc::sigaltstack(&stack, ptr::null_mut()) } != 0 {
            let err = io::Error::last_os_error();
            // SAFETY: unmapping the mapping made above, never used.
            unsafe { libc::munmap(map, len) };
            return Err(err);
        }
        Ok(Some(AltStack { map, len }))
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        let disable = libc::stack_t {
            ss_sp: ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        // SAFETY: this thread installed the stack; it is disabled before being unmapped, and
        // no signal handler runs on it at this point (we are not in a handler).
        unsafe {
            libc::sigaltstack(&disable, ptr::null_mut());
            libc::munmap(self.map, self.len);
        }
    }
}
