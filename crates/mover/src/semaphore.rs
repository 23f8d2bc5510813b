//! `semaphore` mode (the PM CPU-efficiency study's "Semaphore"): callers copy
//! themselves, at most K at a time, so slow memory is never driven by more copiers than
//! it serves well.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pmem::Pmem;

use crate::{cpu_read, cpu_write, Mode, Mover, Pending, ReadPiece, WritePiece};

/// Callers copy, at most `k` at once.
pub struct SemaphoreMover {
    pm: Arc<dyn Pmem>,
    k: usize,
    holders: AtomicUsize,
}

/// A held slot; released on drop.
struct Permit<'a>(&'a AtomicUsize);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl SemaphoreMover {
    /// A mover over `pm` that lets at most `k` callers copy at once.
    pub fn new(pm: Arc<dyn Pmem>, k: usize) -> SemaphoreMover {
        SemaphoreMover {
            pm,
            k,
            holders: AtomicUsize::new(0),
        }
    }

    /// Takes a slot, waiting (yielding in a uthread) while all `k` are held.
    fn acquire(&self) -> Permit<'_> {
        loop {
            let n = self.holders.load(Ordering::Acquire);
            if n < self.k {
                if self
                    .holders
                    .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return Permit(&self.holders);
                }
                continue;
            }
            rt::wait_until(|| self.holders.load(Ordering::Acquire) < self.k);
        }
    }
}

impl Mover for SemaphoreMover {
    fn mode(&self) -> Mode {
        Mode::Semaphore
    }

    fn completes_on_return(&self) -> bool {
        true
    }

    unsafe fn start_write(&self, pieces: &[WritePiece<'_>]) -> Pending {
        let _permit = self.acquire();
        cpu_write(&*self.pm, pieces);
        Pending::Done
    }

    unsafe fn start_read(&self, pieces: &mut [ReadPiece<'_>]) -> Pending {
        let _permit = self.acquire();
        cpu_read(&*self.pm, pieces);
        Pending::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_more_than_k_copiers() {
        let region: Arc<dyn Pmem> = Arc::new(pmem::Region::create_temp(8 << 20).unwrap());
        let m = Arc::new(SemaphoreMover::new(region, 2));
        let peak = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let (m, peak) = (m.clone(), peak.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let _p = m.acquire();
                        let now = m.holders.load(Ordering::Acquire);
                        peak.fetch_max(now, Ordering::Relaxed);
                        assert!(now <= 2, "{now} holders");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(peak.load(Ordering::Relaxed) >= 1);
        assert_eq!(m.holders.load(Ordering::Relaxed), 0);
    }
}
