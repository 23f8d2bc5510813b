//! The channel manager (EASYIO §4.4): quality of service between latency-critical (L)
//! and bandwidth-oriented (B) clients of one copy engine.
//!
//! - **Separate channels.** L and B clients never share a channel: all B clients share
//!   [`QosConfig::b_channels`] (1) channels, L clients spread over up to
//!   [`QosConfig::l_channels`] (4), so a bulk copy never queues ahead of a latency-critical
//!   one (the head-of-line blocking of EASYIO §2.2, Fig. 4).
//! - **Split bulk copies.** A B copy larger than [`QosConfig::split`] (64 KiB) goes as
//!   64 KiB descriptors, so a suspended channel only ever holds back a small copy.
//! - **Throttling loop (Listing 1).** Every epoch the manager compares each L client's
//!   worst latency of the epoch with its target; if any missed, the B limit drops by
//!   [`QosConfig::delta_fraction`] of its maximum; if all had slack above
//!   [`QosConfig::slack`], it rises. The limit is enforced on the engine: the B channels
//!   get a byte budget per epoch (limit × elapsed, less what they overran before), are
//!   suspended once they have copied it and resumed at the next epoch. Bytes are counted
//!   from the channel's own statistics, so the long-run rate is the limit whatever the
//!   timer's precision.
//! - **No busy core.** The loop runs on a thread that sleeps between epochs (and between
//!   resuming the B channel and its expected budget-exhaustion time); its CPU time is
//!   counted ([`QosStats::loop_cpu_ns`]).
//!
//! [`CpuThrottle`] is the comparison of EASYIO Fig. 12: it limits the B client's CPU time
//! instead, which fails once the copies themselves are offloaded.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engine::{Desc, Engine, Sn};

use crate::Error;

/// L clients spread over this many channels (EASYIO §4.4: "up to 4 channels").
pub const L_CHANNELS: usize = 4;
/// All B clients share this many channels (EASYIO §4.4: "a single DMA channel").
pub const B_CHANNELS: usize = 1;
/// B copies are split into descriptors of at most this size (EASYIO §4.4: 64 KB).
pub const SPLIT: usize = 64 << 10;
/// Epoch of the throttling loop. EASYIO suspends "at a fine-grained timescale (µs)";
/// a sleeping thread on a general-purpose kernel wakes with ~50 µs of timer slack, so
/// a few hundred microseconds keeps the loop's own overhead small.
pub const EPOCH: Duration = Duration::from_micros(250);
/// Listing 1's `threshold`: the limit rises only when every L client's slack,
/// `(target - latency) / target`, is above this.
pub const SLACK: f64 = 0.2;
/// Listing 1's `Delta`, as a fraction of the largest B limit ("a hyper-parameter
/// concluded from experiments": 1/16 reaches either bound in 16 epochs).
pub const DELTA_FRACTION: f64 = 1.0 / 16.0;
/// The B limit never drops below this fraction of its maximum, so bulk work always
/// progresses.
pub const MIN_FRACTION: f64 = 1.0 / 16.0;
/// Before the B channels have copied anything, their rate is guessed at this multiple
/// of the limit (only the first mid-epoch check depends on it).
const FALLBACK_RATE_FACTOR: f64 = 4.0;
/// Budget banked at an epoch boundary is at most this many epochs' worth (a client
/// idle for a while does not get a burst that would swamp the L clients).
pub const CARRY_EPOCHS: u32 = 2;

/// What a client of the file system is, for the channel manager.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Class {
    /// No class given: shares the non-bulk channels like an L client, no target.
    #[default]
    Default,
    /// Latency-critical, with a latency target per request.
    Latency {
        /// The latency each request of the client should stay under.
        target: Duration,
    },
    /// Bandwidth-oriented (bulk).
    Bandwidth,
}

/// A registered client: its class and, for L clients, its slot in the manager.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Client {
    /// What the client is.
    pub class: Class,
    /// Index of an L client's latency slot; 0 otherwise.
    pub id: u32,
}

impl Client {
    /// The unclassed client.
    pub const DEFAULT: Client = Client {
        class: Class::Default,
        id: 0,
    };

    /// Whether the client is bulk.
    pub fn is_bulk(self) -> bool {
        self.class == Class::Bandwidth
    }
}

/// The manager's knobs; `Default` gives EASYIO's values and no throttling.
#[derive(Clone, Debug, serde::Serialize)]
pub struct QosConfig {
    /// Channels for L (and unclassed) clients.
    pub l_channels: usize,
    /// Channels for B clients.
    pub b_channels: usize,
    /// B copies are split into descriptors of at most this many bytes.
    pub split: usize,
    /// Epoch of the throttling loop.
    #[serde(serialize_with = "ser_duration_us")]
    pub epoch: Duration,
    /// Largest B limit, bytes per second; `None`: B runs unthrottled.
    pub b_limit_max: Option<u64>,
    /// Listing 1's `threshold`.
    pub slack: f64,
    /// Listing 1's `Delta`, as a fraction of `b_limit_max`.
    pub delta_fraction: f64,
    /// Floor of the B limit, as a fraction of `b_limit_max`.
    pub min_fraction: f64,
}

fn ser_duration_us<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e6)
}

impl Default for QosConfig {
    fn default() -> QosConfig {
        QosConfig {
            l_channels: L_CHANNELS,
            b_channels: B_CHANNELS,
            split: SPLIT,
            epoch: EPOCH,
            b_limit_max: None,
            slack: SLACK,
            delta_fraction: DELTA_FRACTION,
            min_fraction: MIN_FRACTION,
        }
    }
}

impl QosConfig {
    /// Engine channels the manager needs.
    pub fn channels(&self) -> usize {
        self.l_channels + self.b_channels
    }

    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |what: &str| Err(Error::Config(format!("qos config: {what}")));
        if self.l_channels == 0 || self.b_channels == 0 {
            return bad("l_channels and b_channels must be at least 1");
        }
        if self.channels() > engine::MAX_CHANNELS {
            return bad("l_channels + b_channels exceed the engine's channels");
        }
        if self.split < 4096 {
            return bad("split must be at least 4 KiB");
        }
        if self.epoch < Duration::from_micros(10) || self.epoch > Duration::from_secs(1) {
            return bad("epoch must be between 10 µs and 1 s");
        }
        if self.b_limit_max == Some(0) {
            return bad("b_limit_max must be positive");
        }
        Ok(())
    }
}

/// One L client's latency slot.
struct LSlot {
    target_ns: u64,
    /// Worst latency reported this epoch; 0 when none.
    worst_ns: AtomicU64,
}

/// Counters of the manager; cheap to read at any time.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct QosStats {
    /// Current B limit, bytes per second (0: unthrottled).
    pub b_limit: u64,
    /// Epochs run.
    pub epochs: u64,
    /// Times the B channels were suspended for having spent their budget.
    pub suspensions: u64,
    /// Epochs in which some L client missed its target.
    pub misses: u64,
    /// CPU time of the throttling loop's thread.
    pub loop_cpu_ns: u64,
    /// Wall time the loop has been running.
    pub loop_wall_ns: u64,
}

/// Budget accounting of the B channels (touched only by the loop).
struct Budget {
    /// Bytes the B channels may still copy; negative after an overrun.
    credit: f64,
    /// B channels' copied bytes when last looked at.
    seen: u64,
    last_tick: Instant,
    suspended: bool,
}

/// The channel manager over one engine.
pub struct ChannelManager {
    engine: Arc<Engine>,
    cfg: QosConfig,
    l_channels: Vec<u16>,
    b_channels: Vec<u16>,
    /// Current B limit in bytes per second; 0: unthrottled.
    limit: AtomicU64,
    /// Largest B limit (the loop's ceiling); 0: unthrottled.
    ceiling: AtomicU64,
    l_slots: Mutex<Vec<Arc<LSlot>>>,
    budget: Mutex<Budget>,
    epochs: AtomicU64,
    suspensions: AtomicU64,
    misses: AtomicU64,
    loop_cpu_ns: AtomicU64,
    loop_wall_ns: AtomicU64,
    next_l: AtomicUsize,
    stop: Mutex<bool>,
    wake: Condvar,
    running: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ChannelManager {
    /// A manager over `engine`, whose first `l_channels` channels serve L clients and the
    /// next `b_channels` serve B clients. The loop is not started.
    pub fn new(engine: Arc<Engine>, cfg: &QosConfig) -> Result<Arc<ChannelManager>, Error> {
        cfg.validate()?;
        if engine.channels() < cfg.channels() {
            return Err(Error::Config(format!(
                "qos: {} L + {} B channels need {} engine channels, the engine has {}",
                cfg.l_channels,
                cfg.b_channels,
                cfg.channels(),
                engine.channels()
            )));
        }
        let l = cfg.l_channels as u16;
        let b = cfg.b_channels as u16;
        let limit = cfg.b_limit_max.unwrap_or(0);
        Ok(Arc::new(ChannelManager {
            l_channels: (0..l).collect(),
            b_channels: (l..l + b).collect(),
            limit: AtomicU64::new(limit),
            ceiling: AtomicU64::new(limit),
            l_slots: Mutex::new(Vec::new()),
            budget: Mutex::new(Budget {
                credit: 0.0,
                seen: 0,
                last_tick: Instant::now(),
                suspended: false,
            }),
            epochs: AtomicU64::new(0),
            suspensions: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            loop_cpu_ns: AtomicU64::new(0),
            loop_wall_ns: AtomicU64::new(0),
            next_l: AtomicUsize::new(0),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            running: AtomicBool::new(false),
            thread: Mutex::new(None),
            cfg: cfg.clone(),
            engine,
        }))
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The configuration.
    pub fn config(&self) -> &QosConfig {
        &self.cfg
    }

    /// Channels serving L and unclassed clients.
    pub fn l_channels(&self) -> &[u16] {
        &self.l_channels
    }

    /// Channels serving B clients.
    pub fn b_channels(&self) -> &[u16] {
        &self.b_channels
    }

    /// Registers a client of `class`; L clients get a latency slot.
    pub fn register(&self, class: Class) -> Client {
        match class {
            Class::Latency { target } => {
                let mut slots = self.l_slots.lock().unwrap_or_else(|e| e.into_inner());
                slots.push(Arc::new(LSlot {
                    target_ns: target.as_nanos().max(1) as u64,
                    worst_ns: AtomicU64::new(0),
                }));
                Client {
                    class,
                    id: (slots.len() - 1) as u32,
                }
            }
            _ => Client { class, id: 0 },
        }
    }

    /// Records one request's latency for an L client (others are ignored).
    pub fn note_latency(&self, client: Client, latency: Duration) {
        if !matches!(client.class, Class::Latency { .. }) {
            return;
        }
        let slots = self.l_slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = slots.get(client.id as usize) {
            s.worst_ns
                .fetch_max(latency.as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// The channel a copy of `client` goes to: the least-loaded channel of its class,
    /// ties broken round-robin so L clients spread.
    pub fn channel_for(&self, client: Client) -> u16 {
        let set = if client.is_bulk() {
            &self.b_channels
        } else {
            &self.l_channels
        };
        let start = self.next_l.fetch_add(1, Ordering::Relaxed);
        (0..set.len())
            .map(|i| set[(start + i) % set.len()])
            .min_by_key(|&c| self.engine.queue_depth(c))
            .unwrap_or(set[0])
    }

    /// The least-loaded channel of `client`'s class and its queue depth.
    pub fn least_loaded(&self, client: Client) -> (u16, u64) {
        let c = self.channel_for(client);
        (c, self.engine.queue_depth(c))
    }

    /// Splits `descs` into descriptors of at most [`QosConfig::split`] bytes, in order.
    pub fn split(&self, descs: &[Desc]) -> Vec<Desc> {
        split_descs(descs, self.cfg.split)
    }

    /// Submits a copy for `client`: on its class's channel, split first if bulk. Yields
    /// (in a uthread) or retries while the channel is full. Returns the SN covering all
    /// of it; on `Err`, no engine copy of the request touches its buffers any more.
    ///
    /// # Safety
    /// As for [`Engine::try_submit`]: every buffer must live until the SN is done.
    pub unsafe fn submit(&self, client: Client, descs: &[Desc]) -> Result<Sn, engine::Error> {
        let channel = self.channel_for(client);
        if client.is_bulk() {
            let split = self.split(descs);
            // One descriptor per submission so the channel accounts (and a suspension
            // stops) at split granularity.
            let mut last = None;
            for d in split.chunks(1) {
                // SAFETY: forwarded from the caller; the split descriptors cover the same
                // memory as the caller's.
                match unsafe { crate::submit_all(&self.engine, channel, d) } {
                    Ok(sn) => last = Some(sn),
                    Err(e) => {
                        // The request completes as a whole: what was accepted is waited
                        // out before the caller hears of the failure.
                        if let Some(sn) = last {
                            crate::settle(&self.engine, sn);
                        }
                        return Err(e);
                    }
                }
            }
            last.ok_or(engine::Error::BadBatch("empty request".into()))
        } else {
            // SAFETY: forwarded from the caller.
            unsafe { crate::submit_all(&self.engine, channel, descs) }
        }
    }

    /// The current B limit in bytes per second (0: unthrottled).
    pub fn b_limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Sets the B limit and its maximum (bytes per second); `None` removes throttling
    /// (and resumes the B channels).
    pub fn set_b_limit_max(&self, max: Option<u64>) {
        self.ceiling.store(max.unwrap_or(0), Ordering::Relaxed);
        self.limit.store(max.unwrap_or(0), Ordering::Relaxed);
        if max.is_none() {
            let mut b = self.budget.lock().unwrap_or_else(|e| e.into_inner());
            self.set_suspended(&mut b, false);
        }
    }

    /// Listing 1, steps 1 and 2: reads and clears each L client's worst latency of the
    /// epoch and moves the B limit. Returns the smallest slack (`None`: no L samples).
    pub fn control_step(&self) -> Option<f64> {
        let ceiling = self.ceiling.load(Ordering::Relaxed);
        let slots: Vec<Arc<LSlot>> = self
            .l_slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut min: Option<f64> = None;
        for s in &slots {
            let worst = s.worst_ns.swap(0, Ordering::Relaxed);
            if worst == 0 {
                continue;
            }
            let slack = (s.target_ns as f64 - worst as f64) / s.target_ns as f64;
            min = Some(min.map_or(slack, |m: f64| m.min(slack)));
        }
        if ceiling == 0 {
            return min;
        }
        let delta = (ceiling as f64 * self.cfg.delta_fraction).max(1.0) as u64;
        let floor = (ceiling as f64 * self.cfg.min_fraction) as u64;
        let limit = self.limit.load(Ordering::Relaxed);
        let next = match min {
            Some(m) if m < 0.0 => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                limit.saturating_sub(delta).max(floor.max(1))
            }
            // No L traffic this epoch counts as slack.
            Some(m) if m <= self.cfg.slack => limit,
            _ => (limit + delta).min(ceiling),
        };
        self.limit.store(next, Ordering::Relaxed);
        min
    }

    fn b_copied(&self) -> u64 {
        self.b_channels
            .iter()
            .filter_map(|&c| self.engine.stats(c).ok())
            .map(|s| s.bytes)
            .sum()
    }

    /// The B channels' copy rate while busy, bytes per second, from their statistics.
    fn b_rate(&self) -> Option<f64> {
        let (bytes, busy) = self
            .b_channels
            .iter()
            .filter_map(|&c| self.engine.stats(c).ok())
            .fold((0u64, 0u64), |(b, n), s| (b + s.bytes, n + s.busy_ns));
        (busy > 0 && bytes > 0).then(|| bytes as f64 * 1e9 / busy as f64)
    }

    fn set_suspended(&self, b: &mut Budget, on: bool) {
        if b.suspended == on {
            return;
        }
        for &c in &self.b_channels {
            let _ = if on {
                self.engine.suspend(c)
            } else {
                self.engine.resume(c)
            };
        }
        if on {
            self.suspensions.fetch_add(1, Ordering::Relaxed);
        }
        b.suspended = on;
    }

    /// One epoch boundary of the enforcement: credits the B channels with
    /// `limit × elapsed` (at most [`CARRY_EPOCHS`] epochs' worth banked), debits what
    /// they copied, and suspends or resumes them. Returns how long the B channels may
    /// run before their budget is spent at the limit's rate, if they are running.
    pub fn enforce_step(&self) -> Option<Duration> {
        let limit = self.b_limit();
        let mut b = self.budget.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let copied = self.b_copied();
        let elapsed = now.duration_since(b.last_tick);
        b.last_tick = now;
        b.credit -= copied.saturating_sub(b.seen) as f64;
        b.seen = copied;
        if limit == 0 {
            self.set_suspended(&mut b, false);
            b.credit = 0.0;
            return None;
        }
        // Bank at most CARRY_EPOCHS epochs beyond what accrued since the last tick, so
        // a late tick (a loaded machine) loses no allowance but an idle client gains
        // no burst.
        let cap = limit as f64
            * (elapsed + self.cfg.epoch * CARRY_EPOCHS.saturating_sub(1)).as_secs_f64();
        b.credit = (b.credit + limit as f64 * elapsed.as_secs_f64()).min(cap);
        if b.credit > 0.0 {
            self.set_suspended(&mut b, false);
            // Running, the channel copies at its own rate, not the limit's: the budget
            // is spent after credit / rate.
            let rate = self.b_rate().unwrap_or(limit as f64 * FALLBACK_RATE_FACTOR);
            Some(Duration::from_secs_f64(b.credit / rate.max(limit as f64)))
        } else {
            self.set_suspended(&mut b, true);
            None
        }
    }

    /// Mid-epoch check: suspends the B channels if they have copied their budget.
    fn check_budget(&self) {
        let mut b = self.budget.lock().unwrap_or_else(|e| e.into_inner());
        if b.suspended || self.b_limit() == 0 {
            return;
        }
        let copied = self.b_copied();
        if (copied.saturating_sub(b.seen)) as f64 >= b.credit {
            self.set_suspended(&mut b, true);
        }
    }

    /// Starts the throttling loop on a thread that sleeps between epochs.
    pub fn start(self: &Arc<Self>) {
        if self.running.swap(true, Ordering::SeqCst) {
            return;
        }
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = false;
        {
            let mut b = self.budget.lock().unwrap_or_else(|e| e.into_inner());
            b.seen = self.b_copied();
            b.last_tick = Instant::now();
            b.credit = 0.0;
        }
        let me = self.clone();
        let h = threads::spawn(threads::Role::Throttle, "qos-loop".into(), move || {
            me.run_loop()
        })
        .expect("spawn the throttling loop");
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
    }

    /// Stops the loop and resumes the B channels.
    pub fn stop(&self) {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
        if let Some(h) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
        self.running.store(false, Ordering::SeqCst);
        let mut b = self.budget.lock().unwrap_or_else(|e| e.into_inner());
        self.set_suspended(&mut b, false);
    }

    /// Sleeps until `deadline`; false if told to stop.
    fn sleep_until(&self, deadline: Instant) -> bool {
        let mut stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if *stop {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            stop = self
                .wake
                .wait_timeout(stop, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn run_loop(&self) {
        // Wake when asked: the default 50 µs of timer slack is a fifth of an epoch.
        // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only this thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        let started = Instant::now();
        let cpu0 = thread_cpu_ns();
        let mut next = Instant::now() + self.cfg.epoch;
        loop {
            self.control_step();
            let run_for = self.enforce_step();
            self.epochs.fetch_add(1, Ordering::Relaxed);
            self.loop_cpu_ns
                .store(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
            self.loop_wall_ns
                .store(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            // Wake once more within the epoch if the budget runs out before it ends.
            if let Some(d) = run_for {
                let at = Instant::now() + d;
                if at < next {
                    if !self.sleep_until(at) {
                        return;
                    }
                    self.check_budget();
                }
            }
            if !self.sleep_until(next) {
                return;
            }
            next += self.cfg.epoch;
            let now = Instant::now();
            if next < now {
                // Overslept (a loaded machine): do not try to catch up epoch by epoch.
                next = now + self.cfg.epoch;
            }
        }
    }

    /// The manager's counters.
    pub fn stats(&self) -> QosStats {
        QosStats {
            b_limit: self.b_limit(),
            epochs: self.epochs.load(Ordering::Relaxed),
            suspensions: self.suspensions.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            loop_cpu_ns: self.loop_cpu_ns.load(Ordering::Relaxed),
            loop_wall_ns: self.loop_wall_ns.load(Ordering::Relaxed),
        }
    }
}

impl Drop for ChannelManager {
    fn drop(&mut self) {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
    }
}

/// Splits descriptors into pieces of at most `max` bytes, in order.
pub fn split_descs(descs: &[Desc], max: usize) -> Vec<Desc> {
    let mut out = Vec::with_capacity(descs.len());
    for d in descs {
        let mut done = 0;
        while done < d.len() || (d.is_empty() && done == 0) {
            let len = (d.len() - done).min(max);
            // Wrapping: a descriptor is only a description, and this safe function may be
            // given one whose address is no allocation at all; only its submitter vouches
            // for the range, and the pieces cover exactly that range.
            let dram = d.dram().wrapping_add(done);
            let off = d.region_off() + done as u64;
            out.push(match d.direction() {
                engine::Direction::ToRegion => Desc::to_region(dram, off, len),
                engine::Direction::FromRegion => Desc::from_region(off, dram, len),
            });
            if d.is_empty() {
                break;
            }
            done += len;
        }
    }
    out
}

/// CPU time of the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    threads::thread_cpu_time().as_nanos() as u64
}

/// EASYIO Fig. 12's "CPU-Throttling": the B client may use at most `share` of each
/// epoch's CPU time (Caladan-style core allocation), measured on its own thread. With
/// copies offloaded, the client needs little CPU to keep the engine busy, so this does
/// not bound its bandwidth.
pub struct CpuThrottle {
    share: f64,
    epoch: Duration,
    epoch_start: Instant,
    cpu_at_start: u64,
    /// Time spent held back.
    pub throttled: Duration,
}

impl CpuThrottle {
    /// A throttle for the calling thread.
    pub fn new(share: f64, epoch: Duration) -> CpuThrottle {
        CpuThrottle {
            share: share.clamp(0.001, 1.0),
            epoch,
            epoch_start: Instant::now(),
            cpu_at_start: thread_cpu_ns(),
            throttled: Duration::ZERO,
        }
    }

    /// Called by the B client between units of work: sleeps out the rest of the epoch
    /// once the thread has used its share of it.
    pub fn gate(&mut self) {
        let now = Instant::now();
        if now.duration_since(self.epoch_start) >= self.epoch {
            self.epoch_start = now;
            self.cpu_at_start = thread_cpu_ns();
            return;
        }
        let used = thread_cpu_ns().saturating_sub(self.cpu_at_start);
        if used as f64 >= self.share * self.epoch.as_nanos() as f64 {
            let wake = self.epoch_start + self.epoch;
            std::thread::sleep(wake.saturating_duration_since(now));
            self.throttled += wake.saturating_duration_since(now);
            self.epoch_start = Instant::now();
            self.cpu_at_start = thread_cpu_ns();
        }
    }
}
