//! The `software` backend: one worker thread per channel serving a bounded ring.
//!
//! Submission takes the channel's submit lock, hands out consecutive counters and
//! pushes the descriptors onto the ring, so ring order is counter order. The worker
//! pops descriptors in that order, copies each (non-temporal stores into the region,
//! plain loads out of it), and after a group of them issues one fence and publishes
//! the last counter of the group: store, write-back, fence. The counter therefore never
//! runs ahead of durable data. On emulated slow memory the worker copies at DRAM speed
//! and stamps each counter with its modelled completion ([`ChannelCore::stamp`]):
//! the counter is published at once, but counts as done only from its stamp on, so
//! the modelled time passes without the worker sleeping through it.
//!
//! An idle worker spins for [`crate::EngineConfig::spin`], then parks; a submitter
//! unparks it. With [`crate::EngineConfig::nap`] set it instead naps between looks at
//! its ring, unless someone waits with nothing else to do ([`Software::hurry`]), so that
//! callers that poll (uthreads) do not pay for a core spinning between their
//! submissions.

#[cfg(feature = "testing")]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;
use pmem::Pmem;
use threads::{Backoff, Limit, Rest, Role, Spins, Step, WaitPolicy};

use crate::channel::ChannelCore;
use crate::desc::{perform_on_cpu, Desc};
use crate::error::{Error, Result};
use crate::wake::Wake;
use crate::Sn;

/// A worker publishes the counter at least once per this many bytes copied, so that a
/// long backlog of small copies is not reported complete only at its very end.
const PUBLISH_EVERY_BYTES: usize = 256 << 10;
/// How long a napping worker spins after [`Software::hurry`]: long enough to catch the
/// next submission of a caller that waits for each copy in turn, short enough that a
/// caller who only ran out of other work for a moment does not keep it spinning.
const HURRY: Duration = Duration::from_micros(20);
/// Spin iterations between clock reads while idle.
const SPINS_PER_CLOCK_READ: u32 = 64;

/// A descriptor in a ring, with the counter value its completion publishes.
struct Job {
    desc: Desc,
    counter: u64,
}

/// One channel of the software engine.
pub(crate) struct SwChannel {
    core: Arc<ChannelCore>,
    ring: ArrayQueue<Job>,
    /// How the idle worker parks or naps and who wakes it; its clock is ns since `epoch`.
    wake: Wake,
    epoch: Instant,
    suspended: AtomicBool,
    /// Held by the worker while it runs a group of descriptors; `suspend` takes it to
    /// wait for the descriptor in hand. Holds the latest stamp given, which the next
    /// stamp may not precede.
    running: Mutex<Option<Instant>>,
    /// Testing: stop after the data is durable, before publishing.
    #[cfg(feature = "testing")]
    freeze: AtomicBool,
    /// Testing: the counter whose data is durable but unpublished while frozen, else 0.
    #[cfg(feature = "testing")]
    frozen_at: AtomicU64,
    stop: AtomicBool,
    /// Set by the worker as it exits.
    exited: AtomicBool,
}

impl SwChannel {
    /// `at` on the clock of [`SwChannel::wake`]: ns since `epoch`.
    fn clock(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_nanos() as u64
    }
}

/// The software engine's channels and worker threads.
pub(crate) struct Software {
    pmem: Arc<dyn Pmem>,
    chans: Vec<Arc<SwChannel>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Whether idle workers nap ([`crate::EngineConfig::nap`]); if not, a hurry has
    /// nothing to change.
    naps: bool,
}

impl Software {
    pub fn start(
        pmem: Arc<dyn Pmem>,
        cores: &[Arc<ChannelCore>],
        cfg: &crate::EngineConfig,
    ) -> Result<Software> {
        let mut sw = Software {
            pmem,
            chans: Vec::new(),
            workers: Mutex::new(Vec::new()),
            naps: cfg.nap.is_some(),
        };
        let idle = Idle {
            spin: cfg.spin,
            nap: cfg.nap,
        };
        for core in cores {
            let ch = Arc::new(SwChannel {
                core: core.clone(),
                ring: ArrayQueue::new(cfg.ring_capacity),
                wake: Wake::new(),
                epoch: Instant::now(),
                suspended: AtomicBool::new(false),
                running: Mutex::new(None),
                #[cfg(feature = "testing")]
                freeze: AtomicBool::new(false),
                #[cfg(feature = "testing")]
                frozen_at: AtomicU64::new(0),
                stop: AtomicBool::new(false),
                exited: AtomicBool::new(false),
            });
            let (worker_ch, pmem) = (ch.clone(), sw.pmem.clone());
            let name = format!("easyio-engine-{}", core.index);
            let handle = threads::spawn(Role::CopyEngine, name, move || {
                worker(&worker_ch, &*pmem, idle);
                worker_ch.exited.store(true, Ordering::SeqCst);
            })
            .map_err(|source| Error::Io {
                what: format!("spawning the worker of channel {}", core.index),
                source,
            })?;
            ch.wake.set_thread(handle.thread().clone());
            sw.chans.push(ch);
            sw.workers.lock().push(handle);
        }
        Ok(sw)
    }

    /// # Safety
    /// As [`crate::Engine::try_submit`]; descriptors already validated.
    pub unsafe fn try_submit(&self, channel: u16, descs: &[Desc]) -> Result<Sn> {
        let ch = &self.chans[channel as usize];
        let n = descs.len();
        let mut next = ch.core.next.lock();
        if ch.stop.load(Ordering::SeqCst) {
            return Err(Error::ShutDown { channel });
        }
        let free = ch.ring.capacity() - ch.ring.len();
        if free < n {
            return Err(Error::Busy {
                channel,
                free,
                needed: n,
            });
        }
        let last = crate::channel::advance(channel, *next, n)?;
        ch.core.note_submitted(last);
        for (i, desc) in descs.iter().enumerate() {
            let job = Job {
                desc: *desc,
                counter: *next + 1 + i as u64,
            };
            // Only this lock's holder pushes, and the worker only pops: the space
            // counted above is still there.
            assert!(
                ch.ring.push(job).is_ok(),
                "ring space checked under the submit lock"
            );
        }
        *next = last;
        drop(next);
        ch.wake.wake();
        Ok(Sn::new(channel, last).expect("counter checked by advance"))
    }

    pub fn suspend(&self, channel: u16) {
        let ch = &self.chans[channel as usize];
        ch.suspended.store(true, Ordering::SeqCst);
        // The worker checks the flag between descriptors while holding `running`; once
        // we get the lock it has finished the descriptor in hand and seen the flag.
        drop(ch.running.lock());
    }

    pub fn resume(&self, channel: u16) {
        let ch = &self.chans[channel as usize];
        ch.suspended.store(false, Ordering::SeqCst);
        ch.wake.wake_now();
    }

    /// Someone is about to wait for `channel` with nothing else to do: its idle worker
    /// spins instead of napping for the next [`HURRY`], and is woken if it naps.
    pub fn hurry(&self, channel: u16) {
        if !self.naps {
            return;
        }
        let ch = &self.chans[channel as usize];
        // The window first: a worker that misses the wake-up sees it before it naps.
        ch.wake.hurry(ch.clock(Instant::now() + HURRY));
        ch.wake.wake_now();
    }

    pub fn is_suspended(&self, channel: u16) -> bool {
        self.chans[channel as usize]
            .suspended
            .load(Ordering::Relaxed)
    }

    pub fn ring_capacity(&self) -> usize {
        self.chans.first().map_or(0, |c| c.ring.capacity())
    }

    #[cfg(feature = "testing")]
    pub fn freeze_before_publish(&self, channel: u16) {
        self.chans[channel as usize]
            .freeze
            .store(true, Ordering::SeqCst);
    }

    #[cfg(feature = "testing")]
    pub fn frozen_at(&self, channel: u16) -> Option<u64> {
        let at = self.chans[channel as usize]
            .frozen_at
            .load(Ordering::Acquire);
        (at != 0).then_some(at)
    }

    #[cfg(feature = "testing")]
    pub fn thaw(&self, channel: u16) {
        let ch = &self.chans[channel as usize];
        ch.freeze.store(false, Ordering::SeqCst);
        ch.wake.wake_now();
    }

    /// Stops every worker once its ring is drained (a frozen worker stops at once,
    /// leaving its group unpublished) and joins them. Idempotent.
    pub fn shutdown(&self) {
        for ch in &self.chans {
            // Under the submit lock: a submission either pushed before the flag (and
            // the draining worker will run it) or sees the flag and is refused.
            let _next = ch.core.next.lock();
            ch.stop.store(true, Ordering::SeqCst);
            ch.wake.wake_now();
        }
        for handle in self.workers.lock().drain(..) {
            // A worker that panicked has already reported it; nothing more to do here.
            let _ = handle.join();
        }
    }

    /// True once the channel's worker has exited (after shutdown).
    pub fn exited(&self, channel: u16) -> bool {
        self.chans[channel as usize].exited.load(Ordering::SeqCst)
    }
}

/// How an idle worker waits for work.
#[derive(Clone, Copy)]
struct Idle {
    spin: Duration,
    nap: Option<Duration>,
}

impl Idle {
    /// The wait of an idle worker: spin (or nap, see [`worker`]) for `spin`, reading the
    /// clock every [`SPINS_PER_CLOCK_READ`] spins, then park.
    fn policy(self) -> WaitPolicy {
        WaitPolicy {
            spin: Limit::Until(self.spin),
            spins: Spins::Each(1),
            yields: Limit::Rounds(0),
            rest: Rest::Park,
            clock_every: SPINS_PER_CLOCK_READ,
        }
    }
}

fn worker(ch: &SwChannel, pmem: &dyn Pmem, idle: Idle) {
    // On emulated slow memory, stamp copies with their modelled time instead of
    // spinning through it.
    pmem::slowmem::defer_stalls();
    let policy = idle.policy();
    let mut wait = Backoff::new(&policy);
    loop {
        let stopping = ch.stop.load(Ordering::SeqCst);
        if ch.suspended.load(Ordering::SeqCst) && !stopping {
            park(ch, || !ch.suspended.load(Ordering::SeqCst));
            continue;
        }
        match run_group(ch, pmem) {
            GroupEnd::Ran => {
                wait.reset();
                continue;
            }
            #[cfg(feature = "testing")]
            GroupEnd::Abandoned => return,
            GroupEnd::Empty if stopping => return,
            GroupEnd::Empty => {}
        }
        // Idle: spin (someone waits in place) or nap a while, since a submission soon
        // after the last is common; then park.
        match wait.step() {
            Step::Park => {
                park(ch, || !ch.ring.is_empty());
                wait.reset();
            }
            Step::Spin(n) => idle_spin(ch, idle, &mut wait, n),
            step => unreachable!("an idle worker's policy has no {step:?}"),
        }
    }
}

/// One spinning round of an idle worker: with naps configured, at a round that read the
/// clock and with nobody hurrying the worker, a nap instead of the spin.
fn idle_spin(ch: &SwChannel, idle: Idle, wait: &mut Backoff<'_>, spins: u32) {
    if let (Some(d), Some(now)) = (idle.nap, wait.clock_read()) {
        if !ch.wake.hurried(ch.clock(now)) {
            ch.wake.nap(
                d,
                || ch.clock(Instant::now()),
                || ch.stop.load(Ordering::SeqCst),
            );
            // The nap took time: look at the clock at the next round.
            wait.clock_stale();
            return;
        }
    }
    (0..spins).for_each(|_| std::hint::spin_loop());
}

/// Parks until woken, unless `ready` (or a stop request) already holds once the worker
/// is seen parked by submitters.
fn park(ch: &SwChannel, ready: impl Fn() -> bool) {
    ch.wake.park(|| ready() || ch.stop.load(Ordering::SeqCst));
}

enum GroupEnd {
    /// Descriptors were copied and published.
    Ran,
    /// Nothing in the ring.
    Empty,
    /// Frozen and told to stop: the group's data is durable, its counter unpublished.
    #[cfg(feature = "testing")]
    Abandoned,
}

/// Copies descriptors from the ring until it is empty, the channel is suspended or
/// [`PUBLISH_EVERY_BYTES`] have been copied; then fences and publishes.
fn run_group(ch: &SwChannel, pmem: &dyn Pmem) -> GroupEnd {
    let mut running = ch.running.lock();
    let start = Instant::now();
    let (mut last, mut count, mut bytes) = (0u64, 0u64, 0usize);
    let due = &mut *running;
    if due.is_some_and(|at| at <= start) {
        *due = None;
    }
    while bytes < PUBLISH_EVERY_BYTES {
        if count > 0 && ch.suspended.load(Ordering::SeqCst) {
            break;
        }
        let Some(job) = ch.ring.pop() else { break };
        // Only copies into the region: a copy out of it would write a buffer its owner
        // already took back.
        if crate::fault::active(crate::fault::Fault::PublishBeforeData)
            && job.desc.direction() == crate::desc::Direction::ToRegion
        {
            ch.core.publish(pmem, job.counter);
        }
        // SAFETY: the submitter promised (submit contract) that the DRAM range stays
        // valid until the SN is done, which cannot happen before we publish below (with
        // the test-only fault above, until the engine is dropped, which joins us); the
        // region range was checked at submission.
        unsafe { perform_on_cpu(pmem, &job.desc) };
        // Stamps do not decrease: a copy is visible no earlier than the one before it.
        *due = (*due).max(pmem::slowmem::deferred_deadline());
        if let Some(at) = *due {
            ch.core.stamp(job.counter, at);
        }
        last = job.counter;
        count += 1;
        bytes += job.desc.len();
    }
    if count == 0 {
        return GroupEnd::Empty;
    }
    // Everything copied so far is durable after this fence; only then may the counter
    // say so.
    pmem.fence();
    #[cfg(feature = "testing")]
    if ch.freeze.load(Ordering::SeqCst) {
        ch.frozen_at.store(last, Ordering::Release);
        while ch.freeze.load(Ordering::SeqCst) {
            if ch.stop.load(Ordering::SeqCst) {
                return GroupEnd::Abandoned;
            }
            park(ch, || !ch.freeze.load(Ordering::SeqCst));
        }
        ch.frozen_at.store(0, Ordering::Release);
    }
    // Statistics first, so that whoever sees the SN done also sees the work counted.
    ch.core
        .account(count, bytes as u64, start.elapsed().as_nanos() as u64);
    ch.core.publish(pmem, last);
    GroupEnd::Ran
}
