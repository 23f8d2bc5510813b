//! `async` mode (EASYIO §4): selective offload to the copy engine with read admission
//! control; the caller gets the SN back and waits for it where it likes — in a uthread,
//! by yielding.
//!
//! - Copies of at most `cpu_max` (4 KiB) go by CPU: below that the engine's submission
//!   and completion cost more than the copy.
//! - A write's pieces above that go to the engine as one batch on one channel (the
//!   least loaded); the partial head and tail pages of an unaligned write arrive here as
//!   page-sized pieces and so go by CPU.
//! - A read goes to the engine only if some channel has fewer than `read_queue_depth`
//!   (2) descriptors queued — EASYIO Listing 2 — otherwise the CPU copies it at once,
//!   since a read's latency is what the caller waits on. Two more cases go by CPU
//!   ([`route_read`]): a reader in a uthread whose worker has no other uthread, running
//!   or waiting (handing the copy over would leave its core idle until the engine is done, and
//!   the engine copies no faster than the core would; the CPU's copy also leaves the
//!   data in the cache of the core that is about to use it), and every read when a
//!   hand-off costs the caller more than the copy ([`engine_costly`]: the engine's
//!   threads share the application's cores, or the software engine naps between looks
//!   at its ring). Neither applies on a medium where a core reads slower than the engine
//!   ([`Config::medium`]): there the engine's copy ends first, and a core stalled on
//!   the medium computes nothing meanwhile either. There a read is also admitted
//!   behind more queued copies, as long as it still ends before the core's copy would.
//! - Writes go by CPU as well when a hand-off is costly ([`engine_costly`]) and the
//!   engine does not write faster than a core ([`write_by_cpu`]): on DRAM with a
//!   software engine the hand-off only adds to the same copy, on the same cores or after
//!   a nap of the engine's. So on DRAM with a napping or core-sharing software engine
//!   `async` copies everything on the caller and costs only its uthread switches.
//! - With a channel manager ([`crate::qos`]), copies go to their client's class of
//!   channels; B copies are split and throttled, and B reads skip admission control
//!   (shunting them to the CPU would escape the throttle).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use engine::{Desc, Engine, Sn};
use pmem::Pmem;

use crate::qos::{ChannelManager, Client};
use crate::{
    cpu_read, read_bytes, submit_all, wait_engine, Config, Error, Mode, Mover, Pending, ReadPiece,
    WritePiece,
};

/// EASYIO's selective offload over one engine.
pub struct AsyncMover {
    pm: Arc<dyn Pmem>,
    engine: Arc<Engine>,
    cpu_max: usize,
    read_queue_depth: u64,
    /// [`engine_costly`] of the configuration.
    engine_costly: bool,
    medium: Option<pmem::slowmem::Model>,
    /// Per channel, the copies this mover queued there and their modelled engine time,
    /// oldest first; kept only on an emulated medium, for [`ReadCase::backlog`].
    backlog: Vec<Mutex<VecDeque<(Sn, f64)>>>,
    qos: Option<Arc<ChannelManager>>,
}

/// Who copies a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadRoute {
    /// The calling thread, at once.
    Cpu,
    /// The engine, on the least loaded channel.
    Engine,
}

/// What decides who copies a read ([`route_read`]).
#[derive(Clone, Copy, Debug)]
pub struct ReadCase {
    /// Bytes of the read.
    pub bytes: usize,
    /// Queue depth of the least loaded channel the client may use.
    pub depth: u64,
    /// A bandwidth client under the channel manager: its reads are throttled, so they
    /// must go through the engine.
    pub throttled: bool,
    /// The reader is a uthread whose worker has no other uthread at all: none to run,
    /// and none waiting or sleeping that could become runnable during the copy
    /// ([`rt::alone`]).
    pub caller_would_idle: bool,
    /// How many times longer the calling core would take to copy the read than the
    /// engine on an idle medium ([`pmem::slowmem::Model::engine_speedup`]); at most 1
    /// where the engine is no faster (DRAM).
    pub engine_speedup: f64,
    /// The modelled engine time of the copies queued ahead of the read on its channel,
    /// in units of the read's own engine time (infinite: unknown).
    pub backlog: f64,
}

/// Whether a hand-off to the engine costs its caller more than the copy it saves, where
/// the engine copies no faster than a core: the engine's threads share the
/// application's cores ([`Config::engine_shares_cores`]), so its copy takes the same
/// CPU from the application plus the hand-off; or it is a software engine whose idle
/// worker naps between looks at its ring ([`Config::engine_nap`]), so a hand-off waits
/// up to a nap (40 µs) plus the wake-ups, the time of many DRAM copies (a 64 KiB one
/// takes about 2 µs), and its copy lands read data in another core's cache. A device,
/// or a software engine that spins on a core of its own, takes the copy at once and
/// costs the caller nothing.
pub fn engine_costly(cfg: &Config) -> bool {
    let naps = cfg.engine_nap.is_some() && cfg.engine == engine::BackendKind::Software;
    cfg.engine_shares_cores || naps
}

/// Who copies a read, for a mover copying up to `cpu_max` bytes by CPU, admitting reads
/// below `read_queue_depth` (EASYIO Listing 2) or, where the engine is faster, while
/// the read still ends before the core's copy would, and whose hand-offs are or are not
/// costly ([`engine_costly`]).
pub fn route_read(
    case: ReadCase,
    cpu_max: usize,
    read_queue_depth: u64,
    engine_costly: bool,
) -> ReadRoute {
    let faster = case.engine_speedup > 1.0;
    let engine_no_faster = !faster && (engine_costly || case.caller_would_idle);
    // Behind its backlog the engine ends the read after backlog + 1 of its copy times;
    // the core needs `engine_speedup` of them.
    let admitted = case.depth < read_queue_depth || case.backlog + 1.0 < case.engine_speedup;
    let cpu = case.bytes <= cpu_max || (!case.throttled && (engine_no_faster || !admitted));
    if cpu {
        ReadRoute::Cpu
    } else {
        ReadRoute::Engine
    }
}

/// Whether every piece of a write goes by CPU: a hand-off is costly ([`engine_costly`])
/// and the engine writes no faster than a core, and the client is not throttled (a
/// throttled client's copies must go through the engine).
pub fn write_by_cpu(engine_costly: bool, engine_writes_faster: bool, throttled: bool) -> bool {
    engine_costly && !engine_writes_faster && !throttled
}

impl AsyncMover {
    /// Copies the small pieces by CPU and submits the rest as one batch; the CPU's
    /// stores are left unfenced (the caller fences).
    ///
    /// # Safety
    /// As for [`Mover::start_write`].
    unsafe fn write_pieces(&self, client: Client, pieces: &[WritePiece<'_>]) -> Pending {
        let throttled = client.is_bulk() && self.qos.is_some();
        let bulk: usize = pieces
            .iter()
            .map(|p| p.src.len())
            .filter(|&n| n > self.cpu_max)
            .sum();
        let faster = self
            .medium
            .is_some_and(|m| m.engine_speedup(bulk, true) > 1.0);
        let cpu_all = write_by_cpu(self.engine_costly, faster, throttled);
        let mut descs = Vec::new();
        for p in pieces {
            if cpu_all || p.src.len() <= self.cpu_max {
                self.pm.copy_nt(p.dst, p.src);
            } else {
                descs.push(Desc::write(p.src, p.dst));
            }
        }
        if descs.is_empty() {
            return Pending::Done;
        }
        let (channel, _) = self.least_loaded(client);
        // SAFETY: forwarded from our caller's contract.
        match unsafe { self.submit(client, channel, &descs, bulk, true) } {
            Ok(sn) => Pending::Sn(sn),
            Err(_) => {
                // The engine refused (shut down or failed): copy by CPU instead.
                for p in pieces.iter().filter(|p| p.src.len() > self.cpu_max) {
                    self.pm.copy_nt(p.dst, p.src);
                }
                Pending::Done
            }
        }
    }

    /// Selective offload over `engine`, with a channel manager if `cfg.qos` asks for one
    /// (its throttling loop runs when a B limit is set).
    pub fn new(pm: Arc<dyn Pmem>, engine: Arc<Engine>, cfg: &Config) -> Result<AsyncMover, Error> {
        let qos = match &cfg.qos {
            Some(q) => {
                let m = ChannelManager::new(engine.clone(), q)?;
                if q.b_limit_max.is_some() {
                    m.start();
                }
                Some(m)
            }
            None => None,
        };
        let backlog = (0..engine.channels())
            .map(|_| Mutex::new(VecDeque::new()))
            .collect();
        Ok(AsyncMover {
            pm,
            engine,
            cpu_max: cfg.cpu_max,
            read_queue_depth: cfg.read_queue_depth,
            engine_costly: engine_costly(cfg),
            medium: cfg.medium,
            backlog,
            qos,
        })
    }

    /// The channel with the fewest queued descriptors among those `client` may use, and
    /// its depth.
    fn least_loaded(&self, client: Client) -> (u16, u64) {
        if let Some(q) = &self.qos {
            return q.least_loaded(client);
        }
        (0..self.engine.channels() as u16)
            .map(|c| (c, self.engine.queue_depth(c)))
            .min_by_key(|&(_, d)| d)
            .unwrap_or((0, 0))
    }

    /// Submits for `client`: through the channel manager if there is one. `bytes` and
    /// `write`: the copy's size and direction, for the backlog.
    ///
    /// # Safety
    /// As for [`Engine::try_submit`].
    unsafe fn submit(
        &self,
        client: Client,
        channel: u16,
        descs: &[Desc],
        bytes: usize,
        write: bool,
    ) -> Result<engine::Sn, engine::Error> {
        match &self.qos {
            // SAFETY: forwarded from the caller.
            Some(q) if client.is_bulk() => unsafe { q.submit(client, descs) },
            _ => {
                // SAFETY: forwarded from the caller.
                let sn = unsafe { submit_all(&self.engine, channel, descs) }?;
                if let (Some(m), Some(queue)) = (self.medium, self.backlog.get(channel as usize)) {
                    let ns = m.engine_copy_time(bytes, write).as_nanos() as f64;
                    let mut queue = queue.lock().unwrap_or_else(|e| e.into_inner());
                    self.drain(&mut queue);
                    queue.push_back((sn, ns));
                }
                Ok(sn)
            }
        }
    }

    /// Drops the copies the engine has done from the front of a channel's backlog.
    fn drain(&self, queue: &mut VecDeque<(Sn, f64)>) {
        while queue
            .front()
            .is_some_and(|&(sn, _)| self.engine.is_done(sn))
        {
            queue.pop_front();
        }
    }

    /// The modelled engine time of the copies still queued on `channel`, in ns;
    /// infinite where this mover does not know it (the channel manager's channels).
    fn backlog_ns(&self, channel: u16) -> f64 {
        match self.backlog.get(channel as usize) {
            Some(queue) if self.qos.is_none() => {
                let mut queue = queue.lock().unwrap_or_else(|e| e.into_inner());
                self.drain(&mut queue);
                queue.iter().map(|&(_, ns)| ns).sum()
            }
            _ => f64::INFINITY,
        }
    }
}

impl Drop for AsyncMover {
    fn drop(&mut self) {
        if let Some(q) = &self.qos {
            q.stop();
        }
    }
}

impl Mover for AsyncMover {
    fn mode(&self) -> Mode {
        Mode::Async
    }

    unsafe fn start_write(&self, pieces: &[WritePiece<'_>]) -> Pending {
        // SAFETY: forwarded from the caller.
        unsafe { self.start_write_for(Client::DEFAULT, pieces) }
    }

    unsafe fn start_read(&self, pieces: &mut [ReadPiece<'_>]) -> Pending {
        // SAFETY: forwarded from the caller.
        unsafe { self.start_read_for(Client::DEFAULT, pieces) }
    }

    unsafe fn start_write_for(&self, client: Client, pieces: &[WritePiece<'_>]) -> Pending {
        // SAFETY: forwarded from our caller.
        let p = unsafe { self.write_pieces(client, pieces) };
        self.pm.fence();
        p
    }

    unsafe fn start_write_unfenced(&self, client: Client, pieces: &[WritePiece<'_>]) -> Pending {
        // SAFETY: forwarded from our caller.
        unsafe { self.write_pieces(client, pieces) }
    }

    unsafe fn start_read_for(&self, client: Client, pieces: &mut [ReadPiece<'_>]) -> Pending {
        let bytes = read_bytes(pieces);
        if bytes <= self.cpu_max {
            cpu_read(&*self.pm, pieces);
            return Pending::Done;
        }
        let (channel, depth) = self.least_loaded(client);
        let case = ReadCase {
            bytes,
            depth,
            throttled: client.is_bulk() && self.qos.is_some(),
            caller_would_idle: rt::in_uthread() && rt::alone(),
            engine_speedup: 1.0,
            backlog: f64::INFINITY,
        };
        let case = match self.medium {
            Some(m) => ReadCase {
                engine_speedup: m.engine_speedup(bytes, false),
                backlog: self.backlog_ns(channel)
                    / m.engine_copy_time(bytes, false).as_nanos().max(1) as f64,
                ..case
            },
            None => case,
        };
        let route = route_read(
            case,
            self.cpu_max,
            self.read_queue_depth,
            self.engine_costly,
        );
        if route == ReadRoute::Cpu {
            cpu_read(&*self.pm, pieces);
            return Pending::Done;
        }
        let descs: Vec<Desc> = pieces
            .iter_mut()
            .map(|p| Desc::read(p.src, p.dst))
            .collect();
        // SAFETY: forwarded from our caller's contract.
        match unsafe { self.submit(client, channel, &descs, bytes, false) } {
            Ok(sn) => Pending::Sn(sn),
            Err(_) => {
                cpu_read(&*self.pm, pieces);
                Pending::Done
            }
        }
    }

    fn is_done(&self, p: Pending) -> bool {
        match p {
            Pending::Done | Pending::Failed => true,
            Pending::Sn(sn) => self.engine.is_done(sn),
        }
    }

    fn wait(&self, p: Pending) -> Result<(), crate::Error> {
        match p {
            Pending::Done => Ok(()),
            Pending::Failed => Err(Error::CopyFailed),
            Pending::Sn(sn) => wait_engine(&self.engine, sn),
        }
    }

    fn engine(&self) -> Option<&Arc<Engine>> {
        Some(&self.engine)
    }

    fn qos(&self) -> Option<&Arc<ChannelManager>> {
        self.qos.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::{engine_costly, route_read, write_by_cpu, ReadCase, ReadRoute};
    use crate::Config;

    const BULK: ReadCase = ReadCase {
        bytes: 64 << 10,
        depth: 0,
        throttled: false,
        caller_would_idle: false,
        engine_speedup: 1.0,
        backlog: 0.0,
    };

    fn route(case: ReadCase, costly: bool) -> ReadRoute {
        route_read(case, 4096, 2, costly)
    }

    #[test]
    fn a_software_engine_that_naps_or_shares_the_cores_is_costly() {
        let spins = Config::default();
        assert!(!engine_costly(&spins), "a spinning engine on its own core");
        let naps = Config {
            engine_nap: Some(engine::DEFAULT_NAP),
            ..Config::default()
        };
        assert!(engine_costly(&naps));
        let device = Config {
            engine: engine::BackendKind::Dsa,
            ..naps.clone()
        };
        assert!(!engine_costly(&device), "a device does not nap");
        let shares = Config {
            engine_shares_cores: true,
            ..Config::default()
        };
        assert!(engine_costly(&shares));
    }

    #[test]
    fn a_bulk_read_with_other_work_to_overlap_goes_to_the_engine() {
        assert_eq!(route(BULK, false), ReadRoute::Engine);
        assert_eq!(
            route(ReadCase { depth: 1, ..BULK }, false),
            ReadRoute::Engine
        );
    }

    #[test]
    fn small_reads_and_busy_channels_go_by_cpu() {
        assert_eq!(
            route(
                ReadCase {
                    bytes: 4096,
                    ..BULK
                },
                false
            ),
            ReadRoute::Cpu
        );
        assert_eq!(route(ReadCase { depth: 2, ..BULK }, false), ReadRoute::Cpu);
    }

    #[test]
    fn a_reader_whose_core_would_idle_copies_itself() {
        let idle = ReadCase {
            caller_would_idle: true,
            ..BULK
        };
        assert_eq!(route(idle, false), ReadRoute::Cpu);
    }

    #[test]
    fn a_costly_engine_gets_no_reads_where_it_is_no_faster() {
        assert_eq!(route(BULK, true), ReadRoute::Cpu);
    }

    #[test]
    fn throttled_reads_always_go_to_the_engine_unless_small() {
        let b = ReadCase {
            throttled: true,
            caller_would_idle: true,
            depth: 9,
            ..BULK
        };
        assert_eq!(route(b, true), ReadRoute::Engine);
        assert_eq!(route(ReadCase { bytes: 100, ..b }, true), ReadRoute::Cpu);
    }

    #[test]
    fn where_a_core_reads_slower_than_the_engine_bulk_reads_go_to_the_engine() {
        // Optane's 64 KiB read: 17.4 µs by one core, 2.6 µs by the engine.
        let faster = ReadCase {
            caller_would_idle: true,
            engine_speedup: 6.7,
            ..BULK
        };
        for costly in [false, true] {
            assert_eq!(route(faster, costly), ReadRoute::Engine);
        }
        // Admitted behind queued copies while it still ends first: 5 + 1 < 6.7, however
        // many copies that backlog is made of.
        let behind = |depth, backlog| ReadCase {
            depth,
            backlog,
            ..faster
        };
        assert_eq!(route(behind(9, 5.0), true), ReadRoute::Engine);
        assert_eq!(route(behind(2, 6.0), true), ReadRoute::Cpu);
        // An unknown backlog leaves Listing 2's depth.
        assert_eq!(route(behind(1, f64::INFINITY), true), ReadRoute::Engine);
        assert_eq!(route(behind(2, f64::INFINITY), true), ReadRoute::Cpu);
        // Never below Listing 2's depth, and small copies stay on the CPU.
        let barely = ReadCase {
            depth: 1,
            engine_speedup: 1.5,
            ..faster
        };
        assert_eq!(route(barely, true), ReadRoute::Engine);
        let small = ReadCase {
            bytes: 4096,
            ..faster
        };
        assert_eq!(route(small, false), ReadRoute::Cpu);
    }

    #[test]
    fn writes_go_by_cpu_only_where_the_engine_is_costly_and_no_faster() {
        assert!(write_by_cpu(true, false, false));
        assert!(!write_by_cpu(false, false, false));
        assert!(!write_by_cpu(true, true, false));
        assert!(!write_by_cpu(true, false, true));
    }
}
