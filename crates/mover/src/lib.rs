//! `mover`: who moves file data between DRAM and the region, and when the caller gets
//! control back — the one axis on which the seed systems differ (DESIGN.md, "Baselines
//! as modes").
//!
//! | mode        | models                      | who copies                         | caller       |
//! |-------------|-----------------------------|------------------------------------|--------------|
//! | `cpu`       | NOVA                        | calling thread, non-temporal stores| blocked      |
//! | `semaphore` | PM-efficiency "Semaphore"   | calling thread, at most K at once  | blocked      |
//! | `delegate`  | OdinFS / "Workqueue"        | delegation threads                 | blocked      |
//! | `dma-sync`  | NOVA-DMA / Fastmove         | engine (+ CPU share of bulk reads) | blocked      |
//! | `async`     | EASYIO                      | engine, selective offload          | uthread yields |
//!
//! A mover *starts* a copy and returns a [`Pending`]; the synchronous modes finish
//! before returning ([`Pending::Done`]), `async` returns the engine's SN, which the file
//! system records in its log entry (orderless commit) before waiting.
//!
//! # Place in the layers
//!
//! Layers, bottom up: `threads`; `pmem` and `rt` over it; `engine`; `mover`; `fs`;
//! then the crash harness, the server, the doors, the benchmarks and the binary (the
//! whole graph is in docs/ARCHITECTURE.md). No crate imports one above it.
//! `mover` imports `engine`, `pmem`, `rt`
//! and `threads`, never `fs` or anything above: it must not know about inodes, logs,
//! locks or the on-region format, and must not hand a caller's buffer back while an
//! engine or a delegation thread may still copy into or out of it.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

mod r#async;
mod config;
mod cpu;
mod delegate;
mod dma_sync;
#[cfg(feature = "testing")]
pub mod fault;
#[cfg(not(feature = "testing"))]
mod fault;
pub mod profile;
pub mod qos;
mod semaphore;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;

pub use config::Config;
pub use cpu::CpuMover;
pub use delegate::DelegateMover;
pub use dma_sync::DmaSyncMover;
pub use qos::{ChannelManager, Class, Client, QosConfig};
pub use r#async::{engine_costly, route_read, write_by_cpu, AsyncMover, ReadCase, ReadRoute};
pub use semaphore::SemaphoreMover;

use pmem::Pmem;

/// A copy into the region: `src` goes to region byte offset `dst`.
pub struct WritePiece<'a> {
    /// Region byte offset the bytes go to.
    pub dst: u64,
    /// The bytes.
    pub src: &'a [u8],
}

/// A copy out of the region: region byte offset `src` fills `dst`.
pub struct ReadPiece<'a> {
    /// Region byte offset the bytes come from.
    pub src: u64,
    /// Where they go.
    pub dst: &'a mut [u8],
}

/// Where a started copy stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    /// Finished (and, for writes, durable).
    Done,
    /// Running on an engine channel; finished once the SN is done.
    Sn(engine::Sn),
    /// Failed: nothing touches the request's buffers any more, and its destination
    /// holds unspecified bytes ([`Mover::wait`] reports [`Error::CopyFailed`]). Never
    /// recorded in a log entry.
    Failed,
}

impl Pending {
    /// The SN as stored in a log entry: 0 for a finished copy.
    pub fn raw(self) -> u64 {
        match self {
            Pending::Done | Pending::Failed => 0,
            Pending::Sn(sn) => sn.to_raw(),
        }
    }
}

/// Why a mover could not be built or a copy failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A mode name that is none of the modes.
    #[error("unknown mode {0:?} (cpu, semaphore, delegate, dma-sync, async)")]
    UnknownMode(String),
    /// The copy engine failed (setting it up, or a copy on it).
    #[error("copy engine: {0}")]
    Engine(#[from] engine::Error),
    /// A configuration value out of range.
    #[error("{0}")]
    Config(String),
    /// A copy could not be made (a delegation thread died under it); nothing touches
    /// its buffers any more, and its destination holds unspecified bytes.
    #[error("the copy failed: a delegation thread died while it held part of the request")]
    CopyFailed,
}

impl Error {
    /// The errno for the C ABI and exit codes.
    pub fn errno(&self) -> i32 {
        match self {
            Error::UnknownMode(_) | Error::Config(_) => libc::EINVAL,
            Error::Engine(e) => e.errno(),
            Error::CopyFailed => libc::EIO,
        }
    }
}

/// The data-movement modes: who copies file data and when the caller gets control
/// back. The one definition of the modes: the file system, the crash harness, the
/// benchmarks and the command line all use it (the `clap` feature lets a command line
/// parse it, by the kebab-case names of [`Mode::name`], with these lines as help).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// data copied by the calling thread (NOVA)
    Cpu,
    /// callers copy, at most K at once
    Semaphore,
    /// delegation threads copy (OdinFS)
    Delegate,
    /// the engine copies, the caller waits (Fastmove)
    DmaSync,
    /// orderless writes and two-level locking on uthreads (EASYIO)
    Async,
}

impl Mode {
    /// Every mode, in the order of the table above.
    pub const ALL: [Mode; 5] = [
        Mode::Cpu,
        Mode::Semaphore,
        Mode::Delegate,
        Mode::DmaSync,
        Mode::Async,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Semaphore => "semaphore",
            Mode::Delegate => "delegate",
            Mode::DmaSync => "dma-sync",
            Mode::Async => "async",
        }
    }

    /// Whether the mode uses a copy engine.
    pub fn uses_engine(self) -> bool {
        matches!(self, Mode::DmaSync | Mode::Async)
    }

    /// Whether copies are made by threads other than the caller's (engine workers,
    /// delegation threads), so that their stores interleave with the caller's as the
    /// scheduler decides.
    pub fn copies_off_thread(self) -> bool {
        matches!(self, Mode::Delegate | Mode::DmaSync | Mode::Async)
    }

    /// Whether a write may return, or a crash find it committed, with its copy still
    /// running: only in `async` may a committed log entry carry an SN that recovery
    /// finds not done. In every other mode the caller is blocked until its data is
    /// durable and the entry says so (SN 0), so recovery must never drop a committed
    /// write.
    pub fn commits_before_copy(self) -> bool {
        self == Mode::Async
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Mode, Error> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| Error::UnknownMode(s.to_string()))
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Who moves file data.
pub trait Mover: Send + Sync {
    /// The mode this mover implements.
    fn mode(&self) -> Mode;

    /// Starts copying every piece into the region. Synchronous modes return
    /// [`Pending::Done`] with the data durable.
    ///
    /// # Safety
    /// Every `src` buffer must stay valid and unmodified until the returned copy is done
    /// ([`Mover::is_done`] or [`Mover::wait`]).
    unsafe fn start_write(&self, pieces: &[WritePiece<'_>]) -> Pending;

    /// Starts copying every piece out of the region.
    ///
    /// # Safety
    /// Every `dst` buffer must stay valid, and must not be read or written by anyone
    /// else, until the returned copy is done.
    unsafe fn start_read(&self, pieces: &mut [ReadPiece<'_>]) -> Pending;

    /// Whether every `start_write*` returns [`Pending::Done`]: the copy is made (by
    /// this thread or by helpers it waits for) before the call returns, so a caller
    /// needs no SN to record it and may write its metadata before the data.
    fn completes_on_return(&self) -> bool {
        false
    }

    /// Whether a started copy has finished (or failed): one load and a compare for
    /// engine copies.
    fn is_done(&self, p: Pending) -> bool {
        matches!(p, Pending::Done | Pending::Failed)
    }

    /// Waits for a started copy: inside a uthread the uthread yields (it waits in its
    /// worker's wait set); on an ordinary thread the caller spins, then backs off.
    /// Fails if the engine channel failed before completing it. Returns, `Ok` or `Err`,
    /// only once nothing copies into or out of the request's buffers any more.
    fn wait(&self, p: Pending) -> Result<(), Error> {
        match p {
            Pending::Done => Ok(()),
            Pending::Failed => Err(Error::CopyFailed),
            Pending::Sn(_) => unreachable!("a mover that returns SNs must override wait"),
        }
    }

    /// Copies into the region and returns once everything is durable.
    fn write(&self, pieces: &[WritePiece<'_>]) -> Result<(), Error> {
        // SAFETY: `pieces` stay borrowed until the wait right after returns, `Ok` or `Err`,
        // when nothing copies them any more.
        let p = unsafe { self.start_write(pieces) };
        self.wait(p)
    }

    /// Copies out of the region and returns once every byte is in place.
    fn read(&self, pieces: &mut [ReadPiece<'_>]) -> Result<(), Error> {
        // SAFETY: as in `write`.
        let p = unsafe { self.start_read(pieces) };
        self.wait(p)
    }

    /// The copy engine, for modes that use one.
    fn engine(&self) -> Option<&Arc<engine::Engine>> {
        None
    }

    /// The channel manager, for modes that have one.
    fn qos(&self) -> Option<&Arc<ChannelManager>> {
        None
    }

    /// Registers a client of `class` (a handle opened with it); modes without a
    /// channel manager treat every client alike.
    fn register(&self, class: Class) -> Client {
        self.qos()
            .map_or(Client { class, id: 0 }, |q| q.register(class))
    }

    /// [`Mover::start_write`] on behalf of `client`.
    ///
    /// # Safety
    /// As for [`Mover::start_write`].
    unsafe fn start_write_for(&self, client: Client, pieces: &[WritePiece<'_>]) -> Pending {
        let _ = client;
        // SAFETY: forwarded from the caller.
        unsafe { self.start_write(pieces) }
    }

    /// [`Mover::start_write_for`], except that copies the calling thread makes itself
    /// are left without their closing fence: the caller must fence on this thread
    /// ([`Pmem::fence`]) before anything that depends on the data being durable. The
    /// file system uses it to let one fence cover both a write's data and its log
    /// entry. Engine copies are fenced by the engine as always.
    ///
    /// # Safety
    /// As for [`Mover::start_write`].
    unsafe fn start_write_unfenced(&self, client: Client, pieces: &[WritePiece<'_>]) -> Pending {
        // SAFETY: forwarded from the caller.
        unsafe { self.start_write_for(client, pieces) }
    }

    /// Whether [`Mover::note_latency`] uses what it is told: callers skip timing
    /// requests otherwise.
    fn wants_latency(&self, client: Client) -> bool {
        self.qos().is_some() && matches!(client.class, Class::Latency { .. })
    }

    /// [`Mover::start_read`] on behalf of `client`.
    ///
    /// # Safety
    /// As for [`Mover::start_read`].
    unsafe fn start_read_for(&self, client: Client, pieces: &mut [ReadPiece<'_>]) -> Pending {
        let _ = client;
        // SAFETY: forwarded from the caller.
        unsafe { self.start_read(pieces) }
    }

    /// Reports how long one request of an L client took, for the throttling loop.
    fn note_latency(&self, client: Client, latency: std::time::Duration) {
        if let Some(q) = self.qos() {
            q.note_latency(client, latency);
        }
    }
}

/// Builds the mover for `mode` over the region `pm`, whose engine completion records
/// are at `records_off`.
pub fn build(
    mode: Mode,
    pm: Arc<dyn Pmem>,
    records_off: u64,
    cfg: &Config,
) -> Result<Box<dyn Mover>, Error> {
    cfg.validate()?;
    Ok(match mode {
        Mode::Cpu => Box::new(CpuMover::new(pm)),
        Mode::Semaphore => Box::new(SemaphoreMover::new(pm, cfg.semaphore_k)),
        Mode::Delegate => Box::new(DelegateMover::new(pm, cfg)),
        Mode::DmaSync => Box::new(DmaSyncMover::new(
            pm.clone(),
            open_engine(pm, records_off, cfg)?,
            cfg,
        )),
        Mode::Async => Box::new(AsyncMover::new(
            pm.clone(),
            open_engine(pm, records_off, cfg)?,
            cfg,
        )?),
    })
}

/// Opens the engine of `cfg.engine` on `pm`.
fn open_engine(
    pm: Arc<dyn Pmem>,
    records_off: u64,
    cfg: &Config,
) -> Result<Arc<engine::Engine>, Error> {
    let ecfg = engine::EngineConfig {
        area_off: records_off,
        channels: cfg.channels_needed(),
        nap: cfg.engine_nap,
        ..engine::EngineConfig::default()
    };
    #[cfg(feature = "testing")]
    if let Some(e) = testing::engine_override(&pm, &ecfg)? {
        return Ok(Arc::new(e));
    }
    Ok(Arc::new(engine::Engine::open(cfg.engine, pm, &ecfg)?))
}

/// Copies pieces into the region on the calling thread, one fence for all.
pub(crate) fn cpu_write(pm: &dyn Pmem, pieces: &[WritePiece<'_>]) {
    cpu_write_unfenced(pm, pieces);
    pm.fence();
}

/// [`cpu_write`] without the closing fence, which the caller owes.
pub(crate) fn cpu_write_unfenced(pm: &dyn Pmem, pieces: &[WritePiece<'_>]) {
    for p in pieces {
        pm.copy_nt(p.dst, p.src);
    }
}

/// Copies pieces out of the region on the calling thread.
pub(crate) fn cpu_read(pm: &dyn Pmem, pieces: &mut [ReadPiece<'_>]) {
    for p in pieces {
        pm.read(p.src, p.dst);
    }
}

/// An ordinary thread waiting for an engine copy spins this long before handing over
/// to the runtime's back-off (whose naps cost a timer-slack tick, ~50 µs, each): a
/// bulk copy finishes within a few microseconds to tens of microseconds.
pub const THREAD_SPIN: std::time::Duration = std::time::Duration::from_micros(100);

/// How an ordinary thread waits for an engine copy before the runtime's back-off:
/// rounds of 32 spin hints for [`THREAD_SPIN`].
pub const ENGINE_SPIN: threads::WaitPolicy = threads::WaitPolicy::spin_for(THREAD_SPIN, 32);

/// How a thread waits for a channel to make progress without switching uthreads (room
/// on a full channel, see [`submit_all`]; a batch to be over, see [`settle`]): a spin,
/// and now and then a turn of the OS scheduler to whoever drains the channel.
pub(crate) const CHANNEL_WAIT: threads::WaitPolicy = threads::WaitPolicy {
    spin: threads::Limit::Rounds(1),
    spins: threads::Spins::Each(64),
    yields: threads::Limit::Rounds(1),
    rest: threads::Rest::Again,
    clock_every: 1,
};

/// Waits for `sn` on `engine`: in a uthread through the runtime's wait set; on an
/// ordinary thread spinning first, then backing off.
pub(crate) fn wait_engine(engine: &engine::Engine, sn: engine::Sn) -> Result<(), Error> {
    let settled = || !matches!(engine.poll(sn), Ok(false));
    if rt::would_idle() {
        // Nothing else would run meanwhile: the engine should not nap.
        engine.hurry(sn);
    }
    if !rt::in_uthread() {
        ENGINE_SPIN.wait_until(settled);
    }
    rt::wait_until(settled);
    engine.poll(sn)?;
    Ok(())
}

/// Submits `descs` to `channel` as batches no larger than the engine takes, waiting on
/// this thread while the channel is full; returns the SN of the last batch, which covers
/// all of them (a channel completes in order).
///
/// The wait for room never switches to another uthread: a write submits while it holds
/// its inode's level-1 lock, and a uthread run meanwhile on this worker could block the
/// worker's thread on that lock (EASYIO's level 1 is never held across a yield). A
/// full channel drains without this thread's help — a software channel has its worker,
/// a DSA queue its device, and its next submission reaps the batch before it — so the
/// wait ends. A DSA channel, which takes one batch at a time, is full whenever a batch
/// is in flight.
///
/// A request completes as a whole: if a batch is refused after earlier ones were
/// accepted, those are waited out before the error is returned, so that on `Err` no
/// engine copy of the request touches its buffers any more and the caller may copy by
/// CPU instead or give the buffers back.
///
/// # Safety
/// As for [`engine::Engine::try_submit`]: every buffer must live until the SN is done.
pub(crate) unsafe fn submit_all(
    engine: &engine::Engine,
    channel: u16,
    descs: &[engine::Desc],
) -> Result<engine::Sn, engine::Error> {
    let mut last = None;
    let mut room = threads::Backoff::new(&CHANNEL_WAIT);
    for batch in descs.chunks(engine.max_batch().max(1)) {
        loop {
            // SAFETY: forwarded from the caller.
            match unsafe { engine.try_submit(channel, batch) } {
                Ok(sn) => {
                    last = Some(sn);
                    break;
                }
                Err(engine::Error::Busy { .. }) => {
                    room.pause();
                }
                Err(e) => {
                    if let Some(sn) = last {
                        settle(engine, sn);
                    }
                    return Err(e);
                }
            }
        }
    }
    last.ok_or(engine::Error::BadBatch("empty request".into()))
}

/// Waits until the engine no longer touches the buffers of `sn` and of every batch
/// before it on its channel: `sn` is done, or its channel reports that it never will
/// be — a software worker that has exited, a DSA batch whose record says it failed
/// (the device has finished with it either way).
///
/// It waits on this thread, never switching to another uthread, for the reason
/// [`submit_all`] gives: its callers (a request refused part-way, a copy unwinding) may
/// hold their inode's level-1 lock.
pub(crate) fn settle(engine: &engine::Engine, sn: engine::Sn) {
    engine.hurry(sn);
    // Whether it failed is the caller's concern; only that it is over matters here.
    CHANNEL_WAIT.wait_until(|| !matches!(engine.poll(sn), Ok(false)));
}

/// An engine copy whose buffers the caller borrows: waited out ([`settle`]) if dropped
/// before [`Submitted::wait`], so that a panic between the submission and the wait (in
/// the CPU's share of the same request, say) cannot unwind past the borrow and hand the
/// buffers back while the engine still copies.
pub(crate) struct Submitted<'e> {
    engine: &'e engine::Engine,
    sn: Option<engine::Sn>,
}

impl<'e> Submitted<'e> {
    pub(crate) fn new(engine: &'e engine::Engine, sn: engine::Sn) -> Submitted<'e> {
        Submitted {
            engine,
            sn: Some(sn),
        }
    }

    /// Waits for the copy ([`wait_engine`]).
    pub(crate) fn wait(mut self) -> Result<(), Error> {
        match self.sn.take() {
            Some(sn) => wait_engine(self.engine, sn),
            None => Ok(()),
        }
    }
}

impl Drop for Submitted<'_> {
    fn drop(&mut self) {
        if let Some(sn) = self.sn.take() {
            settle(self.engine, sn);
        }
    }
}

/// Total bytes of a request.
pub(crate) fn write_bytes(pieces: &[WritePiece<'_>]) -> usize {
    pieces.iter().map(|p| p.src.len()).sum()
}

/// Total bytes of a request.
pub(crate) fn read_bytes(pieces: &[ReadPiece<'_>]) -> usize {
    pieces.iter().map(|p| p.dst.len()).sum()
}
