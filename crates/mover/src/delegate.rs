//! `delegate` mode (OdinFS, the PM-efficiency study's "Workqueue"): a fixed pool of
//! delegation threads owns the copies into and out of slow memory, so the number of
//! concurrent copiers is bounded whatever the number of application threads. Callers
//! split a request into stripes, hand them to the threads, and wait.
//!
//! Policy (OdinFS §3.5): writes larger than 256 B and reads larger than one 32 KiB
//! stripe are delegated; smaller ones are copied by the caller.
//!
//! A delegation thread that dies (a panic) fails the requests it held stripes of: each
//! stripe it took is given up as its thread unwinds, and the stripes still queued for it
//! are taken out of its queue by the waiting callers, so a caller hears
//! [`Pending::Failed`] only once no stripe of its request can be copied any more. Later
//! requests go to the threads still alive, or are copied by the caller when none is.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use pmem::Pmem;
use threads::{Role, WaitPolicy};

use crate::fault::{self, Fault};
use crate::{
    cpu_read, cpu_write, read_bytes, write_bytes, Config, Mode, Mover, Pending, ReadPiece,
    WritePiece,
};

/// Stripes queued per delegation thread before callers wait for room.
const QUEUE_PER_THREAD: usize = 256;

/// How an ordinary thread waits for its stripes before the runtime's back-off: one spin
/// hint per look, for [`crate::THREAD_SPIN`].
const DELEGATION_SPIN: WaitPolicy = WaitPolicy::spin_for(crate::THREAD_SPIN, 1);

/// What is left of one request.
struct Request {
    /// Stripes not yet copied or given up.
    left: AtomicUsize,
    /// Whether a stripe was given up.
    failed: AtomicBool,
}

/// One stripe of a request. A stripe dropped without being copied (its thread died, or
/// a caller took it out of a dead thread's queue) counts as given up.
struct Job {
    write: bool,
    /// Region byte offset.
    off: u64,
    /// DRAM address: the source of a write, the destination of a read.
    mem: *mut u8,
    len: usize,
    request: Arc<Request>,
    copied: bool,
}

// SAFETY: a Job carries a DRAM address across threads; the caller that made it waits
// until every stripe of the request is copied or dropped (`Request::left` at zero)
// before its buffer borrow ends, and each stripe's memory is touched by exactly one
// delegation thread.
unsafe impl Send for Job {}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.copied {
            self.request.failed.store(true, Ordering::Release);
        }
        self.request.left.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One delegation thread as the callers see it.
struct Worker {
    tx: Sender<Job>,
    /// The queue's receiving end, kept so that callers can take back the stripes of a
    /// thread that died.
    rx: Receiver<Job>,
    /// Cleared as the thread exits, by return or by panic.
    alive: Arc<AtomicBool>,
}

impl Worker {
    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Takes the stripes out of a dead thread's queue, giving them up.
    fn drain_if_dead(&self) {
        if !self.alive() {
            while let Ok(job) = self.rx.try_recv() {
                drop(job);
            }
        }
    }
}

/// A pool of delegation threads.
pub struct DelegateMover {
    pm: Arc<dyn Pmem>,
    write_min: usize,
    read_min: usize,
    stripe: usize,
    workers: Vec<Worker>,
    next: AtomicUsize,
    threads: Vec<JoinHandle<()>>,
}

/// Clears a thread's `alive` flag however it leaves `serve`.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl DelegateMover {
    /// A mover over `pm` that starts `cfg.delegation_threads` delegation threads.
    pub fn new(pm: Arc<dyn Pmem>, cfg: &Config) -> DelegateMover {
        let mut workers = Vec::new();
        let mut threads = Vec::new();
        for i in 0..cfg.delegation_threads {
            let (tx, rx) = crossbeam_channel::bounded(QUEUE_PER_THREAD);
            let alive = Arc::new(AtomicBool::new(true));
            let (pm, thread_rx, guard) = (pm.clone(), rx.clone(), AliveGuard(alive.clone()));
            let name = format!("easyio-delegate-{i}");
            threads.push(
                threads::spawn(Role::Delegation, name, move || {
                    let _guard = guard;
                    serve(&*pm, thread_rx)
                })
                .expect("spawning a delegation thread"),
            );
            workers.push(Worker { tx, rx, alive });
        }
        DelegateMover {
            pm,
            write_min: cfg.delegate_write_min,
            read_min: cfg.delegate_read_min,
            stripe: cfg.stripe,
            workers,
            next: AtomicUsize::new(0),
            threads,
        }
    }

    /// Whether every delegation thread is alive.
    pub fn healthy(&self) -> bool {
        self.workers.iter().all(Worker::alive)
    }

    /// Whether some delegation thread is alive to take stripes.
    fn any_alive(&self) -> bool {
        self.workers.iter().any(Worker::alive)
    }

    /// Splits into stripes, queues them round-robin on the threads alive, waits for all.
    /// Returns false if a stripe was given up (its thread died, or none is alive), once
    /// no stripe of the request can be copied any more.
    fn delegate(&self, spans: impl Iterator<Item = (bool, u64, *mut u8, usize)>) -> bool {
        let request = Arc::new(Request {
            left: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
        });
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
                    request: request.clone(),
                    copied: false,
                });
                done += n;
            }
        }
        request.left.store(jobs.len(), Ordering::Release);
        for job in jobs {
            self.queue(job);
        }
        let settled = || {
            self.workers.iter().for_each(Worker::drain_if_dead);
            request.left.load(Ordering::Acquire) == 0
        };
        if !rt::in_uthread() {
            DELEGATION_SPIN.wait_until(settled);
        }
        rt::wait_until(settled);
        !request.failed.load(Ordering::Acquire)
    }

    /// Queues `job` on the next thread alive, waiting while its queue is full; drops it
    /// (giving it up) if no thread is alive.
    fn queue(&self, mut job: Job) {
        loop {
            let alive = self.workers.iter().filter(|w| w.alive()).count();
            if alive == 0 {
                return;
            }
            let mut full = 0;
            for _ in 0..self.workers.len() {
                let w =
                    &self.workers[self.next.fetch_add(1, Ordering::Relaxed) % self.workers.len()];
                if !w.alive() {
                    continue;
                }
                match w.tx.try_send(job) {
                    Ok(()) => return,
                    Err(TrySendError::Full(j) | TrySendError::Disconnected(j)) => {
                        job = j;
                        full += 1;
                    }
                }
            }
            if full > 0 {
                rt::yield_now();
            }
        }
    }
}

fn serve(pm: &dyn Pmem, rx: Receiver<Job>) {
    for mut job in rx {
        // Test-only fault injection.
        match fault::take(&[Fault::DelegatePanic, Fault::DelegateExit]) {
            Fault::DelegatePanic => panic!("delegation thread: injected panic"),
            Fault::DelegateExit => return,
            _ => {}
        }
        if job.write {
            // SAFETY: the submitter keeps `mem..mem+len` alive and unmodified until
            // every stripe of the request is copied or dropped (see `Job`).
            let src = unsafe { std::slice::from_raw_parts(job.mem, job.len) };
            pm.copy_nt(job.off, src);
            pm.fence();
        } else {
            // SAFETY: as above; this stripe of the destination is ours alone.
            let dst = unsafe { std::slice::from_raw_parts_mut(job.mem, job.len) };
            pm.read(job.off, dst);
        }
        job.copied = true;
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
        if write_bytes(pieces) <= self.write_min || !self.any_alive() {
            cpu_write(&*self.pm, pieces);
        } else if !self.delegate(
            pieces
                .iter()
                .map(|p| (true, p.dst, p.src.as_ptr() as *mut u8, p.src.len())),
        ) {
            return Pending::Failed;
        }
        Pending::Done
    }

    unsafe fn start_read(&self, pieces: &mut [ReadPiece<'_>]) -> Pending {
        if read_bytes(pieces) <= self.read_min || !self.any_alive() {
            cpu_read(&*self.pm, pieces);
        } else if !self.delegate(
            pieces
                .iter_mut()
                .map(|p| (false, p.src, p.dst.as_mut_ptr(), p.dst.len())),
        ) {
            return Pending::Failed;
        }
        Pending::Done
    }
}

impl Drop for DelegateMover {
    fn drop(&mut self) {
        // The threads end when every sending end is gone; the receiving ends kept here
        // do not hold them.
        self.workers.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
