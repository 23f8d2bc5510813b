//! `delegate` mode (OdinFS, the PM-efficiency study's "Workqueue"): a fixed pool of
//! delegation threads owns the copies into and out of slow memory, so the number of
//! concurrent copiers is bounded whatever the number of application threads. Callers
//! split a request into stripes, hand them to the threads, and wait.
//!
//! Policy (OdinFS §3.5): writes larger than 256 B and reads larger than one 32 KiB
//! stripe are delegated; smaller ones are copied by the caller.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use pmem::Pmem;

use crate::{
    cpu_read, cpu_write, read_bytes, write_bytes, Config, Mode, Mover, Pending, ReadPiece,
    WritePiece,
};

/// Stripes queued per delegation thread before callers wait for room.
const QUEUE_PER_THREAD: usize = 256;

/// One stripe of a request.
struct Job {
    write: bool,
    /// Region byte offset.
    off: u64,
    /// DRAM address: the source of a write, the destination of a read.
    mem: *mut u8,
    len: usize,
    /// Stripes of the request not yet copied.
    left: Arc<AtomicUsize>,
}

// SAFETY: a Job carries a DRAM address across threads; the caller that made it waits
// until `left` reaches zero before its buffer borrow ends, and each stripe's memory is
// touched by exactly one delegation thread.
unsafe impl Send for Job {}

/// A pool of delegation threads.
pub struct DelegateMover {
    pm: Arc<dyn Pmem>,
    write_min: usize,
    read_min: usize,
    stripe: usize,
    queues: Vec<Sender<Job>>,
    next: AtomicUsize,
    threads: Vec<JoinHandle<()>>,
}

impl DelegateMover {
    pub fn new(pm: Arc<dyn Pmem>, cfg: &Config) -> DelegateMover {
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for i in 0..cfg.delegation_threads {
            let (tx, rx) = crossbeam_channel::bounded(QUEUE_PER_THREAD);
            let pm = pm.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("easyio-delegate-{i}"))
                    .spawn(move || serve(&*pm, rx))
                    .expect("spawning a delegation thread"),
            );
            queues.push(tx);
        }
        DelegateMover {
            pm,
            write_min: cfg.delegate_write_min,
            read_min: cfg.delegate_read_min,
            stripe: cfg.stripe,
            queues,
            next: AtomicUsize::new(0),
            threads,
        }
    }

    /// Splits into stripes, queues them round-robin, waits for all.
    fn delegate(&self, spans: impl Iterator<Item = (bool, u64, *mut u8, usize)>) {
        let left = Arc::new(AtomicUsize::new(0));
        let mut jobs = Vec::new();
        for (write, off, mem, len) in spans {
            let mut done = 0;
            while done < len {
                let n = self.stripe.min(len - done);
                jobs.push(Job {
                    write,
                    off: off + done as u64,
                    // SAFETY: `done + n <= len`, inside the caller's buffer.
                    mem: unsafe { mem.add(done) },
                    len: n,
                    left: left.clone(),
                });
                done += n;
            }
        }
        left.store(jobs.len(), Ordering::Release);
        for job in jobs {
            let q = self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len();
            self.queues[q].send(job).expect("delegation thread gone");
        }
        let done = || left.load(Ordering::Acquire) == 0;
        if !rt::in_uthread() {
            let start = std::time::Instant::now();
            while !done() && start.elapsed() < crate::THREAD_SPIN {
                std::hint::spin_loop();
            }
        }
        rt::wait_until(done);
    }
}

fn serve(pm: &dyn Pmem, rx: Receiver<Job>) {
    for job in rx {
        if job.write {
            // SAFETY: the submitter keeps `mem..mem+len` alive and unmodified until
            // `left` reaches zero (see `Job`).
            let src = unsafe { std::slice::from_raw_parts(job.mem, job.len) };
            pm.copy_nt(job.off, src);
            pm.fence();
        } else {
            // SAFETY: as above; this stripe of the destination is ours alone.
            let dst = unsafe { std::slice::from_raw_parts_mut(job.mem, job.len) };
            pm.read(job.off, dst);
        }
        job.left.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Mover for DelegateMover {
    fn mode(&self) -> Mode {
        Mode::Delegate
    }

    fn completes_on_return(&self) -> bool {
        true
    }

    unsafe fn start_write(&self, pieces: &[WritePiece<'_>]) -> Pending {
        if write_bytes(pieces) <= self.write_min {
            cpu_write(&*self.pm, pieces);
        } else {
            self.delegate(
                pieces
                    .iter()
                    .map(|p| (true, p.dst, p.src.as_ptr() as *mut u8, p.src.len())),
            );
        }
        Pending::Done
    }

    unsafe fn start_read(&self, pieces: &mut [ReadPiece<'_>]) -> Pending {
        if read_bytes(pieces) <= self.read_min {
            cpu_read(&*self.pm, pieces);
        } else {
            self.delegate(
                pieces
                    .iter_mut()
                    .map(|p| (false, p.src, p.dst.as_mut_ptr(), p.dst.len())),
            );
        }
        Pending::Done
    }
}

impl Drop for DelegateMover {
    fn drop(&mut self) {
        self.queues.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
