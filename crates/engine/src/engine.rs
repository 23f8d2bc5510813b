//! The engine: N channels of one backend; submission, completion checks and waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pmem::Pmem;
use threads::{Backoff, Limit, Rest, Spins, WaitPolicy};

use crate::channel::{ChannelCore, ChannelStats};
use crate::config::{BackendKind, EngineConfig};
use crate::desc::{perform_on_cpu, Desc, Direction};
#[cfg(feature = "testing")]
use crate::dsa::Corruption;
use crate::dsa::{Dsa, Portal};
use crate::error::{Error, Result};
use crate::record::{self, RECORD_BYTES};
use crate::software::Software;
use crate::Sn;

/// A waiter spins and yields this long before it starts sleeping.
const WAIT_SPIN: Duration = Duration::from_micros(200);
/// A waiter sleeps this long between checks once spinning and yielding are exhausted.
const WAIT_SLEEP: Duration = Duration::from_micros(20);

enum Backend {
    Cpu,
    Software(Software),
    Dsa(Dsa),
}

/// A copy engine: channels that complete copy descriptors in FIFO order and publish
/// their progress in persistent completion records.
///
/// The cycle: build [`Desc`]s, [`Engine::try_submit`] (or [`Engine::submit`]) a batch to
/// a channel and get its [`Sn`]; later [`Engine::is_done`] (one load and a compare) or
/// [`Engine::wait`]. All methods take `&self`; an engine is shared between threads
/// behind an `Arc`.
pub struct Engine {
    kind: BackendKind,
    pmem: Arc<dyn Pmem>,
    area_off: u64,
    cores: Vec<Arc<ChannelCore>>,
    backend: Backend,
    /// Test-only submission faults ([`Testing::refuse_after`], [`Testing::cap_batch`]).
    faults: crate::fault::SubmitFaults,
}

impl Engine {
    /// Opens an engine of `kind` on a region: the `dsa` backend needs the region's
    /// device addresses ([`Pmem::device_base`]), the others only its [`Pmem`]
    /// operations.
    pub fn open(kind: BackendKind, region: Arc<dyn Pmem>, cfg: &EngineConfig) -> Result<Engine> {
        match kind {
            BackendKind::Cpu => Engine::cpu(region, cfg),
            BackendKind::Software => Engine::software(region, cfg),
            BackendKind::Dsa => Engine::dsa(region, cfg),
        }
    }

    /// The inline CPU engine. The records at `cfg.area_off` must have been formatted
    /// ([`crate::format_records`]); counting continues from the persisted counters.
    pub fn cpu(pmem: Arc<dyn Pmem>, cfg: &EngineConfig) -> Result<Engine> {
        let cores = open_cores(&*pmem, cfg.area_off, cfg.channels)?;
        Ok(Engine {
            kind: BackendKind::Cpu,
            pmem,
            area_off: cfg.area_off,
            cores,
            faults: Default::default(),
            backend: Backend::Cpu,
        })
    }

    /// The software engine: a worker thread per channel. Records as for [`Engine::cpu`].
    pub fn software(pmem: Arc<dyn Pmem>, cfg: &EngineConfig) -> Result<Engine> {
        if cfg.ring_capacity == 0 {
            return Err(Error::Config("ring capacity must be at least 1".into()));
        }
        let cores = open_cores(&*pmem, cfg.area_off, cfg.channels)?;
        let sw = Software::start(pmem.clone(), &cores, cfg)?;
        Ok(Engine {
            kind: BackendKind::Software,
            pmem,
            area_off: cfg.area_off,
            cores,
            faults: Default::default(),
            backend: Backend::Software(sw),
        })
    }

    /// The DSA engine on the enabled user-mode work queues of this machine, one channel
    /// per queue up to `cfg.channels`. Fails with [`Error::DsaUnavailable`], saying what
    /// was looked for, on a machine without them, and with [`Error::Config`] on a
    /// region a device cannot address ([`Pmem::device_base`]).
    pub fn dsa(region: Arc<dyn Pmem>, cfg: &EngineConfig) -> Result<Engine> {
        let portals = crate::dsa::open_portals(cfg.channels)?;
        Engine::dsa_on(region, cfg, portals)
    }

    /// The DSA engine on the given work-queue portals, one channel each: a device
    /// model's portals ([`crate::dsa::model`]) in tests.
    #[cfg(feature = "testing")]
    pub fn dsa_with_portals(
        region: Arc<dyn Pmem>,
        cfg: &EngineConfig,
        portals: Vec<Box<dyn Portal>>,
    ) -> Result<Engine> {
        Engine::dsa_on(region, cfg, portals)
    }

    /// The DSA engine on `cfg.channels` device models
    /// ([`crate::dsa::model::DeviceModel`]), one dedicated queue each, that live as long
    /// as the engine. On a region a real device could not address (a tracer, an image in
    /// memory) the models reach it through a [`crate::dsa::model::Window`]: every copy
    /// the device makes goes through the region's [`Pmem`] operations, so a tracer sees
    /// it.
    #[cfg(feature = "testing")]
    pub fn dsa_model(
        region: Arc<dyn Pmem>,
        cfg: &EngineConfig,
        model: crate::dsa::model::ModelConfig,
    ) -> Result<Engine> {
        use crate::dsa::model::{DeviceModel, Window};
        let (view, window) = match region.device_base() {
            Some(_) => (region, None),
            None => {
                let w = Arc::new(Window::over(region));
                (w.clone() as Arc<dyn Pmem>, Some(w))
            }
        };
        let portals = (0..cfg.channels)
            .map(|_| Box::new(DeviceModel::owned_portal(model, window.clone())) as Box<dyn Portal>)
            .collect();
        Engine::dsa_on(view, cfg, portals)
    }

    fn dsa_on(
        region: Arc<dyn Pmem>,
        cfg: &EngineConfig,
        portals: Vec<Box<dyn Portal>>,
    ) -> Result<Engine> {
        let channels = portals.len().min(cfg.channels);
        let pmem = region.clone();
        let cores = open_cores(&*pmem, cfg.area_off, channels)?;
        let dsa = Dsa::new(region, &cores, portals.into_iter().take(channels).collect())?;
        Ok(Engine {
            kind: BackendKind::Dsa,
            pmem,
            area_off: cfg.area_off,
            cores,
            faults: Default::default(),
            backend: Backend::Dsa(dsa),
        })
    }

    /// The backend.
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// Whether the engine stores each record's durable counter
    /// ([`crate::record::durable_off`]) as it completes copies, so that another
    /// process can poll it: the `cpu` and `software` backends do; a device writes
    /// the records itself and leaves it alone.
    pub fn publishes_durable_counter(&self) -> bool {
        matches!(self.kind, BackendKind::Cpu | BackendKind::Software)
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.cores.len()
    }

    /// Region offset of the completion-record area.
    pub fn area_off(&self) -> u64 {
        self.area_off
    }

    /// Most descriptors one batch may hold on this engine.
    pub fn max_batch(&self) -> usize {
        let max = match &self.backend {
            Backend::Cpu => usize::MAX,
            Backend::Software(sw) => sw.ring_capacity(),
            Backend::Dsa(dsa) => dsa.max_batch(),
        };
        self.faults.capped(max)
    }

    /// Submits a batch of descriptors to `channel` and returns the SN of its last
    /// descriptor, which is done once every descriptor of the batch is done (a channel
    /// completes in FIFO order). A channel without room answers [`Error::Busy`] at once.
    ///
    /// # Safety
    /// Until `is_done` of the returned SN is true (or [`Engine::wait`] on it returns),
    /// the DRAM range of every descriptor must stay valid: readable and unchanged for a
    /// copy to the region, writable and neither read nor written by anyone else for a
    /// copy from the region. Dropping or shutting down the engine waits for every
    /// submitted descriptor, except behind a channel frozen through `Testing` (test builds).
    /// Test-only: while `fault::Fault::PublishBeforeData` is injected, a software
    /// channel says an SN is done before copying it, so the ranges must then stay valid
    /// until the engine is dropped.
    pub unsafe fn try_submit(&self, channel: u16, descs: &[Desc]) -> Result<Sn> {
        self.validate(channel, descs)?;
        if self.faults.refuses() {
            return Err(Error::ShutDown { channel });
        }
        let sn = match &self.backend {
            Backend::Cpu => Ok(self.run_inline(channel, descs)),
            // SAFETY: forwarded contract; validated above.
            Backend::Software(sw) => unsafe { sw.try_submit(channel, descs) },
            // SAFETY: forwarded contract; validated above.
            Backend::Dsa(dsa) => unsafe { dsa.try_submit(channel, descs) },
        }?;
        self.faults.accepted();
        Ok(sn)
    }

    /// [`Engine::try_submit`], waiting for room while the channel is busy.
    ///
    /// # Safety
    /// As for [`Engine::try_submit`].
    pub unsafe fn submit(&self, channel: u16, descs: &[Desc]) -> Result<Sn> {
        let mut pause = Backoff::new(&WAITER);
        loop {
            // SAFETY: forwarded contract.
            match unsafe { self.try_submit(channel, descs) } {
                Err(Error::Busy { .. }) => {
                    pause.pause();
                }
                other => return other,
            }
        }
    }

    /// Copies `src` to region offset `off` through `channel` and waits until it is
    /// durable. Safe: the borrow outlives the copy.
    pub fn write_sync(&self, channel: u16, src: &[u8], off: u64) -> Result<()> {
        // SAFETY: `src` stays borrowed until `wait` returns, and `wait` returns, `Ok` or
        // `Err`, only once the channel no longer touches it; nothing between the two
        // can fail or panic.
        let sn = unsafe { self.submit(channel, &[Desc::write(src, off)])? };
        self.wait(sn)
    }

    /// Copies region offset `off` into `dst` through `channel` and waits. Safe as
    /// [`Engine::write_sync`].
    pub fn read_sync(&self, channel: u16, off: u64, dst: &mut [u8]) -> Result<()> {
        // SAFETY: as in write_sync; `dst` is exclusively borrowed for the whole copy.
        let sn = unsafe { self.submit(channel, &[Desc::read(off, dst)])? };
        self.wait(sn)
    }

    /// True when `sn` is done: its copies reached their destination (durably, for
    /// copies to the region), and so did the counter that says so, so that a crash
    /// from now on keeps the copy. One load and a compare; on emulated slow memory also
    /// the channel's stamp, so that a copy counts as done no earlier than its modelled
    /// completion (the record itself, read after a crash, says only that the data is
    /// durable).
    ///
    /// The `cpu` and `software` backends publish a counter with a store, a write-back
    /// and a fence on their own thread: the stored counter is visible to loads from
    /// other threads before that write-back, while a crash can still lose it. So for
    /// them the DRAM mirror the publisher updates after its fence decides
    /// (the channel's completion mirror), not a load of the record.
    #[inline]
    pub fn is_done(&self, sn: Sn) -> bool {
        let core = self.cores.get(sn.channel() as usize);
        let durable = match (&self.backend, core) {
            (Backend::Cpu | Backend::Software(_), Some(c)) => c.completed_durably(sn.counter()),
            _ => record::record_is_done(&*self.pmem, self.area_off, sn),
        };
        durable && core.is_none_or(|c| c.visible(sn.counter()))
    }

    /// Like [`Engine::is_done`], but reports a channel that will never complete `sn`
    /// (a device error, or shutdown) as an error.
    pub fn poll(&self, sn: Sn) -> Result<bool> {
        let channel = sn.channel();
        if let Backend::Dsa(dsa) = &self.backend {
            // Reap first, so that a failed channel is reported; a done SN's batch is
            // counted in the statistics and queue depth before the caller hears of it.
            self.core(channel)?;
            dsa.reap(channel)?;
            let done = self.is_done(sn);
            if done {
                dsa.settle(channel, sn.counter());
            }
            return Ok(done);
        }
        if self.is_done(sn) {
            return Ok(true);
        }
        self.core(channel)?;
        if let Backend::Software(sw) = &self.backend {
            // Published but not yet visible is still going to be done.
            if sw.exited(channel) && !record::record_is_done(&*self.pmem, self.area_off, sn) {
                return Err(Error::ShutDown { channel });
            }
        }
        Ok(self.is_done(sn))
    }

    /// Waits on the calling thread until `sn` is done (spinning, then yielding, then
    /// sleeping in short steps). An error means the channel will never complete `sn`;
    /// it comes only once the channel no longer touches the DRAM ranges of `sn`'s batch
    /// or of any batch before it (a software worker that has exited, a DSA batch whose
    /// own record is written), so either way the caller may then reuse or free them.
    pub fn wait(&self, sn: Sn) -> Result<()> {
        self.hurry(sn);
        let mut pause = Backoff::new(&WAITER);
        while !self.poll(sn)? {
            pause.pause();
        }
        Ok(())
    }

    /// Tells the engine that the caller is about to wait for `sn` with nothing else to
    /// do: a napping software worker of its channel ([`EngineConfig::nap`]) is woken and
    /// spins instead of napping for a few microseconds. Callers that poll
    /// between other work need not call it. [`Engine::wait`] calls it.
    pub fn hurry(&self, sn: Sn) {
        if let Backend::Software(sw) = &self.backend {
            if (sn.channel() as usize) < self.cores.len() {
                sw.hurry(sn.channel());
            }
        }
    }

    /// Descriptors submitted to `channel` and not yet completed: two loads, no lock.
    /// 0 for a channel that does not exist.
    #[inline]
    pub fn queue_depth(&self, channel: u16) -> u64 {
        self.cores
            .get(channel as usize)
            .map_or(0, |c| c.queue_depth())
    }

    /// Statistics of `channel`.
    pub fn stats(&self, channel: u16) -> Result<ChannelStats> {
        if let Backend::Dsa(dsa) = &self.backend {
            self.core(channel)?;
            // A failed channel still has statistics.
            let _ = dsa.reap(channel);
        }
        Ok(self.core(channel)?.stats(self.is_suspended(channel)))
    }

    /// Suspends `channel`: the descriptor in hand finishes, no other starts until
    /// [`Engine::resume`]; submissions are still accepted while there is room (the DSA
    /// backend answers busy instead). Returns once the channel is quiet.
    pub fn suspend(&self, channel: u16) -> Result<()> {
        self.core(channel)?;
        match &self.backend {
            Backend::Cpu => {
                return Err(Error::Unsupported {
                    op: "suspend",
                    backend: "cpu",
                })
            }
            Backend::Software(sw) => sw.suspend(channel),
            Backend::Dsa(dsa) => dsa.set_suspended(channel, true),
        }
        Ok(())
    }

    /// Resumes a suspended channel.
    pub fn resume(&self, channel: u16) -> Result<()> {
        self.core(channel)?;
        match &self.backend {
            Backend::Cpu => {}
            Backend::Software(sw) => sw.resume(channel),
            Backend::Dsa(dsa) => dsa.set_suspended(channel, false),
        }
        Ok(())
    }

    /// Whether `channel` is suspended.
    pub fn is_suspended(&self, channel: u16) -> bool {
        match &self.backend {
            Backend::Cpu => false,
            Backend::Software(sw) => sw.is_suspended(channel),
            Backend::Dsa(dsa) => dsa.is_suspended(channel),
        }
    }

    /// Completes every submitted descriptor, then stops the workers. Idempotent; later
    /// submissions fail with [`Error::ShutDown`]. Dropping the engine does the same.
    pub fn shutdown(&self) {
        match &self.backend {
            Backend::Cpu => {}
            Backend::Software(sw) => sw.shutdown(),
            Backend::Dsa(dsa) => dsa.shutdown(),
        }
    }

    /// Hooks for tests that must stop a channel at a chosen point (`testing` feature).
    #[cfg(feature = "testing")]
    pub fn testing(&self) -> Testing<'_> {
        Testing { engine: self }
    }

    fn core(&self, channel: u16) -> Result<&ChannelCore> {
        self.cores
            .get(channel as usize)
            .map(|c| &**c)
            .ok_or(Error::NoChannel {
                channel,
                channels: self.cores.len(),
            })
    }

    fn validate(&self, channel: u16, descs: &[Desc]) -> Result<()> {
        self.core(channel)?;
        if descs.is_empty() {
            return Err(Error::BadBatch(
                "a batch needs at least one descriptor".into(),
            ));
        }
        if descs.len() > self.max_batch() {
            return Err(Error::BadBatch(format!(
                "{} descriptors; a {} batch holds at most {}",
                descs.len(),
                self.kind.name(),
                self.max_batch()
            )));
        }
        let region_len = self.pmem.len();
        let records = self.area_off..self.area_off + self.cores.len() as u64 * RECORD_BYTES;
        for d in descs {
            if d.is_empty() {
                return Err(Error::BadBatch("zero-length descriptor".into()));
            }
            let (off, len) = (d.region_off(), d.len() as u64);
            let end = off.checked_add(len).filter(|&e| e <= region_len);
            let hits_records = d.direction() == Direction::ToRegion
                && off < records.end
                && records.start < off.saturating_add(len);
            if end.is_none() || hits_records {
                return Err(Error::OutOfRange {
                    off,
                    len,
                    region_len,
                });
            }
        }
        Ok(())
    }

    /// The CPU backend: copy, fence, publish, all under the channel's submit lock so
    /// that counters are published in order.
    fn run_inline(&self, channel: u16, descs: &[Desc]) -> Sn {
        let core = &self.cores[channel as usize];
        let start = Instant::now();
        let mut next = core.next.lock();
        let last =
            crate::channel::advance(channel, *next, descs.len()).expect("cpu counter exhausted");
        core.note_submitted(last);
        let mut bytes = 0;
        for d in descs {
            // SAFETY: the submit contract covers the DRAM ranges; the region ranges
            // were validated.
            unsafe { perform_on_cpu(&*self.pmem, d) };
            bytes += d.len() as u64;
        }
        self.pmem.fence();
        core.publish(&*self.pmem, last);
        *next = last;
        drop(next);
        core.account(descs.len() as u64, bytes, start.elapsed().as_nanos() as u64);
        Sn::new(channel, last).expect("counter checked by advance")
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Testing hooks, from [`Engine::testing`]. Not for production paths; only with the
/// `testing` feature.
#[cfg(feature = "testing")]
pub struct Testing<'a> {
    engine: &'a Engine,
}

#[cfg(feature = "testing")]
impl Testing<'_> {
    /// Software engine: from now on `channel`'s worker stops after the data of its
    /// current group is durable and before it publishes the counter, and stays stopped
    /// until [`Testing::thaw`]. Shutting the engine down while frozen leaves the
    /// counter unpublished: exactly what a crash at that point leaves in the region.
    /// While frozen, [`Engine::suspend`] of the channel blocks.
    pub fn freeze_before_publish(&self, channel: u16) -> Result<()> {
        self.engine.core(channel)?;
        self.software("freeze_before_publish")?
            .freeze_before_publish(channel);
        Ok(())
    }

    /// The counter whose data is durable but unpublished on a frozen channel, once
    /// its worker has stopped there.
    pub fn frozen_at(&self, channel: u16) -> Result<Option<u64>> {
        self.engine.core(channel)?;
        Ok(self.software("frozen_at")?.frozen_at(channel))
    }

    /// Waits until the frozen `channel` has stopped before publishing; returns the
    /// counter it holds back.
    pub fn wait_frozen(&self, channel: u16) -> Result<u64> {
        let mut pause = Backoff::new(&WAITER);
        loop {
            if let Some(at) = self.frozen_at(channel)? {
                return Ok(at);
            }
            pause.pause();
        }
    }

    /// Lets a frozen channel publish and go on.
    pub fn thaw(&self, channel: u16) -> Result<()> {
        self.engine.core(channel)?;
        self.software("thaw")?.thaw(channel);
        Ok(())
    }

    /// DSA engine: damages the first copy descriptor of the next batch on `channel`
    /// so that the device rejects it (error-path tests).
    pub fn corrupt_next(&self, channel: u16, how: Corruption) -> Result<()> {
        self.engine.core(channel)?;
        match &self.engine.backend {
            Backend::Dsa(dsa) => {
                dsa.corrupt_next(channel, how);
                Ok(())
            }
            _ => Err(Error::Unsupported {
                op: "corrupt_next",
                backend: self.engine.kind.name(),
            }),
        }
    }

    /// Test-only fault: `Some(n)` accepts the next `n` submissions and refuses every
    /// later one with [`Error::ShutDown`], as an engine shut down between the batches of
    /// a request would; `None` accepts again. Refused batches are never queued;
    /// accepted ones run as usual.
    pub fn refuse_after(&self, accepted: Option<u64>) {
        self.engine.faults.refuse_after(accepted);
    }

    /// Test-only fault: `Some(n)` makes [`Engine::max_batch`] at most `n`, so that a
    /// request is submitted as several batches which all fit a channel's ring at once;
    /// `None` undoes it.
    pub fn cap_batch(&self, max: Option<usize>) {
        self.engine.faults.cap_batch(max);
    }

    fn software(&self, op: &'static str) -> Result<&Software> {
        match &self.engine.backend {
            Backend::Software(sw) => Ok(sw),
            _ => Err(Error::Unsupported {
                op,
                backend: self.engine.kind.name(),
            }),
        }
    }
}

/// Opens the records of `channels` channels and a core for each, counting on from the
/// persisted counters.
fn open_cores(pmem: &dyn Pmem, area_off: u64, channels: usize) -> Result<Vec<Arc<ChannelCore>>> {
    let counters = record::read_counters(pmem, area_off, channels)?;
    Ok(counters
        .into_iter()
        .enumerate()
        .map(|(c, counter)| Arc::new(ChannelCore::new(c as u16, area_off, counter)))
        .collect())
}

/// Spin, then yield, then sleep: how callers waiting for an SN back off. Spins double
/// from 1 to 64 hints, then the waiter yields until [`WAIT_SPIN`] has passed, then sleeps
/// [`WAIT_SLEEP`] between looks. Sleeping is left for waits longer than [`WAIT_SPIN`]: a
/// timed sleep costs tens of microseconds (timer slack), more than most copies take.
pub(crate) const WAITER: WaitPolicy = WaitPolicy {
    spin: Limit::Rounds(7),
    spins: Spins::Doubling,
    yields: Limit::Until(WAIT_SPIN),
    rest: Rest::Sleep {
        first: WAIT_SLEEP,
        max: WAIT_SLEEP,
    },
    clock_every: 1,
};
