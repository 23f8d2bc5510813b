//! What an engine is opened with: the backend that moves the bytes and the
//! configuration of its channels and workers.

use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

/// Descriptors a software channel's ring holds by default.
pub const DEFAULT_RING_CAPACITY: usize = 256;
/// How long an idle software worker spins before it parks, by default: long enough to
/// catch the next submission of a caller streaming copies, short enough that an idle
/// engine costs no CPU.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// A nap for [`EngineConfig::nap`]: callers that poll (uthreads) find their copies done
/// up to this much later; the worker serves several submissions per wake-up instead of
/// spinning between them.
pub const DEFAULT_NAP: Duration = Duration::from_micros(40);
/// Which backend moves the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Copies inline on the submitting thread; every SN is done when submit returns.
    Cpu,
    /// A worker thread per channel (the embedded default).
    Software,
    /// Intel DSA through user-mode work queues.
    Dsa,
}

impl BackendKind {
    /// Every backend, in the order they are listed to people.
    pub const ALL: [BackendKind; 3] = [BackendKind::Cpu, BackendKind::Software, BackendKind::Dsa];

    /// The name used on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Software => "software",
            BackendKind::Dsa => "dsa",
        }
    }
}

impl FromStr for BackendKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<BackendKind> {
        BackendKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| Error::Config(format!("unknown engine {s:?} (cpu, software or dsa)")))
    }
}

/// How to set an engine up.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Region offset of the completion-record area ([`crate::format_records`]).
    pub area_off: u64,
    /// Channels to open, 1..=[`crate::MAX_CHANNELS`] (the `dsa` backend opens at most
    /// one per usable work queue).
    pub channels: usize,
    /// Descriptors a software channel's ring holds; a batch may not be larger.
    pub ring_capacity: usize,
    /// How long an idle software worker spins (or naps) before parking.
    pub spin: Duration,
    /// `Some`: an idle software worker naps this long between looks at its ring instead
    /// of spinning, unless a caller waits with nothing else to run
    /// ([`crate::Engine::hurry`]); submitters do not wake a napping worker. It saves the
    /// worker's CPU when callers poll between other work, at up to a nap of their
    /// latency. Use it only when the workers have cores of their own: on a machine
    /// whose cores are all busy, a nap ends only when the scheduler frees one, which
    /// can take a time slice (milliseconds). `None` (default): spin.
    pub nap: Option<Duration>,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            area_off: 0,
            channels: 1,
            ring_capacity: DEFAULT_RING_CAPACITY,
            spin: DEFAULT_SPIN,
            nap: None,
        }
    }
}
