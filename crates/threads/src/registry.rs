//! Threads registered under a role, and the CPU time they use.
//!
//! `rustix` reads only the calling thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`); it
//! cannot name another thread's. So each registered thread reports its own clock when
//! it leaves: its [`Registration`] drops on it (at the end of the closure given to
//! [`spawn`], on a normal exit or while a panic unwinds), reads the clock and adds it to
//! its role's total. A thread still running is read by the thread id it registered
//! with, from `/proc/self/task/TID/schedstat` (nanoseconds on a CPU, what the thread's
//! clock counts; `stat`'s clock ticks if schedstat is missing). Thread names play no
//! part: they stay for debuggers only.

use std::cell::Cell;
use std::io;
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// What a thread started by an easyio component is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Role {
    /// A software copy engine's channel worker: the CPU stand-in for a copy device.
    CopyEngine = 1,
    /// A thread that plays a copy device (the DSA device model of the tests).
    CopyDevice = 2,
    /// A delegation thread that copies stripes for callers (OdinFS's delegation).
    Delegation = 3,
    /// A worker of the user-level thread runtime.
    RuntimeWorker = 4,
    /// The quality-of-service throttling loop.
    Throttle = 5,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 5] = [
        Role::CopyEngine,
        Role::CopyDevice,
        Role::Delegation,
        Role::RuntimeWorker,
        Role::Throttle,
    ];

    /// A one-byte code for files that record roles (never 0).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The role of a [`Role::code`], if it is one.
    pub fn from_code(code: u8) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.code() == code)
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Role::CopyEngine => "copy-engine",
            Role::CopyDevice => "copy-device",
            Role::Delegation => "delegation",
            Role::RuntimeWorker => "runtime-worker",
            Role::Throttle => "throttle",
        }
    }

    /// Whether threads of this role copy data on behalf of a copy engine (a software
    /// engine's worker or a device model): the stores a device would make.
    pub fn is_engine(self) -> bool {
        matches!(self, Role::CopyEngine | Role::CopyDevice)
    }

    fn index(self) -> usize {
        self as usize - 1
    }
}

/// The registered threads alive now, and the time of those that left.
struct Registry {
    /// (registration key, thread id, role) of each registered thread alive.
    live: Vec<(u64, i32, Role)>,
    /// CPU time of the threads of each role that have left, by [`Role::index`].
    left: [Duration; Role::ALL.len()],
    next_key: u64,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: Vec::new(),
    left: [Duration::ZERO; Role::ALL.len()],
    next_key: 0,
});

thread_local! {
    static CURRENT: Cell<Option<Role>> = const { Cell::new(None) };
}

fn registry() -> MutexGuard<'static, Registry> {
    // The registry holds plain numbers, consistent at every unlock.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The calling thread's membership of a role; dropping it (on that thread) adds the
/// thread's CPU time to the role's total and ends the membership.
#[derive(Debug)]
pub struct Registration {
    key: u64,
    role: Role,
    /// Dropped on the thread that registered: it reads that thread's clock.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let used = thread_cpu_time();
        let mut reg = registry();
        reg.live.retain(|&(key, _, _)| key != self.key);
        reg.left[self.role.index()] += used;
        drop(reg);
        CURRENT.with(|c| c.set(None));
    }
}

/// Registers the calling thread under `role` until the returned guard drops (keep it
/// for the thread's life: the time counted is the thread's whole CPU time).
///
/// Panics if the thread is registered already.
pub fn register(role: Role) -> Registration {
    CURRENT.with(|c| {
        assert!(c.get().is_none(), "thread registered twice");
        c.set(Some(role));
    });
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    let mut reg = registry();
    let key = reg.next_key;
    reg.next_key += 1;
    reg.live.push((key, tid, role));
    Registration {
        key,
        role,
        _not_send: std::marker::PhantomData,
    }
}

/// Starts a thread named `name` (for debuggers) that runs `f` registered under `role`.
pub fn spawn<F, T>(role: Role, name: String, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new().name(name).spawn(move || {
        let _registration = register(role);
        f()
    })
}

/// The role the calling thread is registered under, if any.
pub fn current_role() -> Option<Role> {
    CURRENT.with(Cell::get)
}

/// CPU time (user plus system) used so far by every thread registered under `role`:
/// those that have left, and those alive now (their time up to now).
pub fn cpu_time(role: Role) -> Duration {
    let reg = registry();
    let live: Duration = reg
        .live
        .iter()
        .filter(|&&(_, _, r)| r == role)
        .map(|&(_, tid, _)| task_cpu_time(tid))
        .sum();
    reg.left[role.index()] + live
}

/// CPU time the calling thread has used (its `CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// CPU time of the live thread `tid` of this process, from procfs (zero if unreadable).
fn task_cpu_time(tid: i32) -> Duration {
    let dir = format!("/proc/self/task/{tid}");
    if let Ok(s) = std::fs::read_to_string(format!("{dir}/schedstat")) {
        if let Some(ns) = s.split_whitespace().next().and_then(|f| f.parse().ok()) {
            return Duration::from_nanos(ns);
        }
    }
    let Ok(stat) = std::fs::read_to_string(format!("{dir}/stat")) else {
        return Duration::ZERO;
    };
    // "tid (comm) state ...": comm may hold spaces, so split at the last ')'; utime and
    // stime are fields 14 and 15 of the line, 12 and 13 after the comm.
    let Some(close) = stat.rfind(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let per_second = rustix::param::clock_ticks_per_second();
    match (tick(11), tick(12)) {
        (Some(u), Some(s)) if per_second > 0 => {
            Duration::from_nanos((u + s).saturating_mul(1_000_000_000) / per_second)
        }
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    /// Burns about `d` of the calling thread's CPU.
    fn burn(d: Duration) {
        let start = thread_cpu_time();
        let mut x = 0u64;
        while thread_cpu_time() - start < d {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }

    #[test]
    fn a_roles_time_counts_live_threads_and_keeps_exited_ones() {
        let before = cpu_time(Role::Throttle);
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let t = spawn(Role::Throttle, "registry-test".into(), move || {
            assert_eq!(current_role(), Some(Role::Throttle));
            burn(Duration::from_millis(60));
            tx.send(thread_cpu_time()).unwrap();
            go_rx.recv().unwrap();
            thread_cpu_time()
        })
        .unwrap();
        let burnt = rx.recv().unwrap();
        // Alive and blocked: its time so far is counted, read through procfs.
        let live = cpu_time(Role::Throttle) - before;
        assert!(
            live >= Duration::from_millis(50),
            "live {live:?}, burnt {burnt:?}"
        );
        go_tx.send(()).unwrap();
        let at_exit = t.join().unwrap();
        // Gone: its time stays, as read by the thread itself when it left.
        let after = cpu_time(Role::Throttle) - before;
        assert!(after >= at_exit, "after exit {after:?} < {at_exit:?}");
        assert!(after < at_exit + Duration::from_millis(50), "{after:?}");
        // The test thread itself was never registered.
        assert_eq!(current_role(), None);
    }

    #[test]
    fn a_panicking_thread_is_still_accounted() {
        let before = cpu_time(Role::CopyDevice);
        let start = Instant::now();
        let t = spawn(Role::CopyDevice, "registry-panic".into(), || {
            burn(Duration::from_millis(30));
            panic!("on purpose");
        })
        .unwrap();
        assert!(t.join().is_err());
        let used = cpu_time(Role::CopyDevice) - before;
        assert!(used >= Duration::from_millis(30), "{used:?}");
        assert!(used <= start.elapsed() * 2, "{used:?}");
    }

    #[test]
    fn role_codes_round_trip() {
        for r in Role::ALL {
            assert_eq!(Role::from_code(r.code()), Some(r));
        }
        assert_eq!(Role::from_code(0), None);
    }
}
