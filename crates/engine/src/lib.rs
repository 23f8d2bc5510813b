//! `engine`: copy engines that move bytes between DRAM and the region on someone
//! else's time, and say when they are done through persistent completion records.
//!
//! An [`Engine`] has N channels. A caller submits a batch of [`Desc`]s (DRAM → region,
//! durable; or region → DRAM) to one channel and gets a sequence number, [`Sn`]:
//! (channel, counter). Each channel completes in FIFO order and advances a 64-bit
//! counter in its persistent record ([`record`]) only after the data it covers is
//! durable, so `record >= sn` means "that copy reached the region" at any time,
//! including after a crash ([`record_is_done`] needs no engine). [`Engine::is_done`]
//! is one load and a compare that says so only once the counter itself is durable
//! too (a counter stored but not yet written back is visible to loads, and lost by a
//! crash).
//!
//! Backends ([`BackendKind`]): `cpu` copies inline at submit; `software` (the
//! embedded default) runs a worker thread per channel on a bounded ring; `dsa` drives
//! Intel DSA user-mode work queues ([`dsa`]).
//!
//! Test hooks — fault injection (`fault`), `Engine::testing` and the DSA device model
//! (`dsa::model`) — exist only with the `testing` feature, which tests and the
//! crash harness's tests enable; the production build carries none of them.
//!
//! Setting up: reserve [`AREA_BYTES`] (= `MAX_CHANNELS * RECORD_BYTES`) cache-line
//! aligned bytes of the region, [`format_records`] them once (at file-system format),
//! and open engines on them with [`EngineConfig::area_off`]; an engine continues
//! counting from the persisted counters, so SNs stay monotonic across remounts.
//! Counters that were handed out but never completed before a crash are handed out
//! again after it: recovery must discard log entries whose SN is not done before new
//! submissions start.
//!
//! # Place in the layers
//!
//! Layers, bottom up: `threads`; `pmem` and `rt` over it; `engine`; `mover`; `fs`;
//! then the crash harness, the server, the doors, the benchmarks and the binary (the
//! whole graph is in docs/ARCHITECTURE.md). No crate imports one above it.
//! `engine` imports only `pmem` and
//! `threads`. It must not know about files, logs, modes or uthreads, must not decide
//! when a caller waits or which copies to offload (the movers do), and must not write a
//! completion counter before the data it covers is durable.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

mod channel;
mod config;
mod desc;
pub mod dsa;
mod engine;
mod error;
mod facade;
#[cfg(feature = "testing")]
pub mod fault;
#[cfg(not(feature = "testing"))]
mod fault;
pub mod record;
pub mod sn;
mod software;
mod wake;

pub use channel::ChannelStats;
pub use config::{BackendKind, EngineConfig, DEFAULT_NAP, DEFAULT_RING_CAPACITY, DEFAULT_SPIN};
pub use desc::{Desc, Direction};
pub use engine::Engine;
#[cfg(feature = "testing")]
pub use engine::Testing;
pub use error::{Error, Result};
pub use record::{
    format_records, read_counters, record_is_done, rewrite_record_headers, AREA_BYTES,
    MAX_CHANNELS, RECORD_BYTES,
};
pub use sn::Sn;

/// What `easyio engines` shows for one backend on this machine.
#[derive(Clone, Debug)]
pub struct BackendInfo {
    /// The backend.
    pub kind: BackendKind,
    /// Whether it can be opened here.
    pub available: bool,
    /// Channels it can offer here.
    pub channels: usize,
    /// One line per channel, or why the backend is unavailable.
    pub detail: Vec<String>,
}

/// The backends and channels available on this machine.
pub fn available() -> Vec<BackendInfo> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dsa = match dsa::discover() {
        Ok(wqs) => BackendInfo {
            kind: BackendKind::Dsa,
            available: true,
            channels: wqs.len().min(MAX_CHANNELS),
            detail: wqs.iter().map(|w| w.describe()).collect(),
        },
        Err(e) => BackendInfo {
            kind: BackendKind::Dsa,
            available: false,
            channels: 0,
            detail: vec![e.to_string()],
        },
    };
    vec![
        BackendInfo {
            kind: BackendKind::Cpu,
            available: true,
            channels: MAX_CHANNELS,
            detail: vec!["copies on the submitting thread; done at submit".into()],
        },
        BackendInfo {
            kind: BackendKind::Software,
            available: true,
            channels: MAX_CHANNELS,
            detail: vec![format!(
                "one worker thread per channel (up to {MAX_CHANNELS}; {cores} CPU cores here), \
                 ring of {DEFAULT_RING_CAPACITY} descriptors"
            )],
        },
        dsa,
    ]
}
