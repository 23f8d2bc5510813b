//! Every threshold of every mode, named, with where it comes from; all overridable.

use crate::qos::QosConfig;
use crate::Error;

/// The knobs of the data movers. `Default` gives the values of the papers.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Config {
    /// `async`: copies of at most this many bytes go by CPU (EASYIO §4.4: the engine
    /// only pays off above 4 KiB).
    pub cpu_max: usize,
    /// `async`: a read goes to the engine only if some channel has fewer than this many
    /// descriptors queued, else by CPU (EASYIO Listing 2: queue depth below 2).
    pub read_queue_depth: u64,
    /// Engine channels the file system uses. One by default: each software channel is a
    /// worker thread that spins briefly when idle, and on a machine with few cores a
    /// second one competes with the application for them (measured: `bench micro`
    /// CIOW on 2 cores, 2.4x the throughput with one channel than with two). The
    /// channel manager's configuration asks for more.
    pub engine_channels: usize,
    /// `dma-sync`: writes smaller than this go by CPU (Fastmove §5.4 size threshold;
    /// §6.3.2 finds bulk writes pay off from 16 KiB).
    pub dma_write_min: usize,
    /// `dma-sync`: reads smaller than this go by CPU (Fastmove §6.3: 32 KiB).
    pub dma_read_min: usize,
    /// `dma-sync`: requests in flight on the engine above which the CPU copies
    /// (Fastmove's concurrency sweet spot M).
    pub dma_concurrency: usize,
    /// `delegate`: writes larger than this are delegated (OdinFS §3.5: 256 B, the
    /// media's XPBuffer size).
    pub delegate_write_min: usize,
    /// `delegate`: reads larger than this are delegated (OdinFS §3.5: one 32 KiB
    /// stripe, where parallelising across delegation threads starts to pay).
    pub delegate_read_min: usize,
    /// `delegate`: a request is split into pieces of this size across the delegation
    /// threads (OdinFS stripe).
    pub stripe: usize,
    /// `delegate`: number of delegation threads.
    pub delegation_threads: usize,
    /// `semaphore`: callers copying at once (PM-efficiency study: 2).
    pub semaphore_k: usize,
    /// `async`, `dma-sync`: `Some`: the software engine's idle workers nap this long
    /// between looks instead of spinning ([`engine::EngineConfig::nap`]): less CPU when
    /// callers poll between other work (uthreads), at up to a nap of latency for them;
    /// only for machines where the engine's threads have cores of their own. `None`
    /// (default): they spin, then park. In `async`, a napping software engine makes
    /// hand-offs costly ([`crate::engine_costly`]): where it copies no faster than a
    /// core (DRAM) it gets no copies.
    pub engine_nap: Option<std::time::Duration>,
    /// `async`: the copy engine's threads share the cores of the application's threads
    /// (a software engine on a machine with no core to spare). Hand-offs are then costly
    /// ([`crate::engine_costly`]): where the engine copies no faster than a core, reads
    /// and writes go by CPU, since the engine's copy would take as much CPU from the
    /// application as the CPU copy, plus the hand-off, and would land read data in
    /// another core's cache. `false` (default): the engine has cores of its own, or is
    /// a device.
    pub engine_shares_cores: bool,
    /// `async`: the emulated slow medium, if the region is one (`pmem::slowmem`). Its
    /// model says whether the engine copies faster than a core
    /// ([`pmem::slowmem::Model::engine_speedup`]): on emulated Optane a core reads at
    /// 3.96 GB/s and writes at 2.52 against the medium's 37.6 and 13.2, which the engine
    /// reaches (Fastmove Table 4, EASYIO §6.1). Where it does:
    /// - a bulk read goes to the engine even when its caller would idle meanwhile or a
    ///   hand-off is costly ([`crate::engine_costly`]): the engine's copy ends first, and a core stalled on the
    ///   medium computes nothing either;
    /// - admission control takes the faster path (Fastmove §4: the path of least time
    ///   cost): a read is admitted while, behind the modelled engine time of the copies
    ///   this mover has queued on the channel, it still ends before the core's own copy
    ///   would, and always below `read_queue_depth` (EASYIO Listing 2);
    /// - writes go to the engine even when a hand-off is costly.
    ///
    /// `None` (default): DRAM, where a core copies as fast as the engine.
    #[serde(serialize_with = "medium_name")]
    pub medium: Option<pmem::slowmem::Model>,
    /// `async`, `dma-sync`: the copy engine's backend: `software` (worker threads, the
    /// default) or `dsa` (the machine's DSA work queues; the region must be a mapping).
    #[serde(serialize_with = "backend_name")]
    pub engine: engine::BackendKind,
    /// `async`: the channel manager (EASYIO §4.4) — L and B clients on separate
    /// channels, B copies split and throttled. `None`: every client shares every channel.
    pub qos: Option<QosConfig>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            cpu_max: 4096,
            read_queue_depth: 2,
            engine_channels: 1,
            dma_write_min: 16 * 1024,
            dma_read_min: 32 * 1024,
            dma_concurrency: 4,
            delegate_write_min: 256,
            delegate_read_min: 32 * 1024,
            stripe: 32 * 1024,
            delegation_threads: 2,
            semaphore_k: 2,
            engine_nap: None,
            engine_shares_cores: false,
            medium: None,
            engine: engine::BackendKind::Software,
            qos: None,
        }
    }
}

fn medium_name<S: serde::Serializer>(
    medium: &Option<pmem::slowmem::Model>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(medium.map_or("none", |m| m.name))
}

fn backend_name<S: serde::Serializer>(kind: &engine::BackendKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind.name())
}

impl Config {
    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |what: &str| Err(Error::Config(format!("mover config: {what}")));
        if self.engine_channels == 0 || self.engine_channels > engine::MAX_CHANNELS {
            return bad("engine_channels must be 1..=64");
        }
        if self.delegation_threads == 0 || self.semaphore_k == 0 || self.dma_concurrency == 0 {
            return bad("delegation_threads, semaphore_k and dma_concurrency must be at least 1");
        }
        if self.stripe == 0 {
            return bad("stripe must be at least 1 byte");
        }
        if let Some(q) = &self.qos {
            q.validate()?;
        }
        Ok(())
    }

    /// Engine channels to open: enough for the channel manager when there is one.
    pub fn channels_needed(&self) -> usize {
        self.qos.as_ref().map_or(self.engine_channels, |q| {
            q.channels().max(self.engine_channels)
        })
    }
}
