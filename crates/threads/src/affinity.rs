//! CPU affinity of the calling thread, through `rustix`.

use std::io;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// The CPUs the calling thread may run on, in increasing order (empty if the kernel
/// refuses to say).
pub fn allowed_cpus() -> Vec<usize> {
    sched_getaffinity(None).map_or_else(
        |_| Vec::new(),
        |set| (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
    )
}

/// Pins the calling thread to `cpu`.
pub fn pin_current(cpu: usize) -> io::Result<()> {
    if cpu >= CpuSet::MAX_CPU {
        return Err(io::Error::from_raw_os_error(
            rustix::io::Errno::INVAL.raw_os_error(),
        ));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_only_on_its_cpu() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty(), "the process may run on no CPU?");
        let last = *cpus.last().unwrap();
        std::thread::spawn(move || {
            pin_current(last).unwrap();
            assert_eq!(allowed_cpus(), vec![last]);
        })
        .join()
        .unwrap();
        assert!(pin_current(CpuSet::MAX_CPU).is_err());
    }
}
