//! The errors of the engine layer, each with the errno it maps to.

use std::io;

use crate::dsa::hw::DsaError;

/// Result of engine operations.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a submission, a wait or an engine setup failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The channel's ring has no room for the batch right now (`try_submit`).
    #[error("channel {channel} is busy: {free} free descriptor slots, the batch needs {needed}")]
    Busy {
        /// The channel asked.
        channel: u16,
        /// Descriptor slots free in its ring.
        free: usize,
        /// Descriptors in the batch.
        needed: usize,
    },

    /// No such channel on this engine.
    #[error("channel {channel} does not exist (the engine has {channels})")]
    NoChannel {
        /// The channel asked.
        channel: u16,
        /// Channels the engine has.
        channels: usize,
    },

    /// An empty batch, one larger than the channel can ever hold, or a zero-length copy.
    #[error("invalid batch: {0}")]
    BadBatch(String),

    /// A copy that reaches outside the usable region or over the completion records.
    #[error(
        "copy of {len} bytes at region offset {off} is outside the region ({region_len} bytes) \
         or overlaps the completion records"
    )]
    OutOfRange {
        /// Region offset of the copy.
        off: u64,
        /// Bytes of the copy.
        len: u64,
        /// Usable bytes of the region.
        region_len: u64,
    },

    /// The channel's counter would pass [`crate::sn::MAX_COUNTER`].
    #[error("channel {channel}: completion counter exhausted")]
    Exhausted {
        /// The channel.
        channel: u16,
    },

    /// The engine is shut down: the channel takes no more descriptors, and an SN it
    /// had not completed by then (only a frozen channel leaves one) never completes.
    #[error("the engine is shut down (channel {channel})")]
    ShutDown {
        /// The channel asked.
        channel: u16,
    },

    /// The completion-record area is misplaced, unformatted or of another channel.
    #[error("completion records at region offset {area_off}: {reason}")]
    Records {
        /// Region offset of the record area.
        area_off: u64,
        /// What is wrong with it.
        reason: String,
    },

    /// The `dsa` backend was selected on a machine without a usable DSA work queue.
    #[error("DSA unavailable: {0}")]
    DsaUnavailable(String),

    /// A DSA descriptor completed with an error status. The channel stops completing
    /// (its counter must not pass the failed copy); later waits on it fail the same way.
    #[error("DSA channel {channel}: {error}")]
    Device {
        /// The channel whose copy failed.
        channel: u16,
        /// The status the device reported.
        error: DsaError,
    },

    /// An operation the selected backend does not have.
    #[error("{op} is not supported by the {backend} engine")]
    Unsupported {
        /// The operation asked for.
        op: &'static str,
        /// The backend's name.
        backend: &'static str,
    },

    /// A configuration value out of range.
    #[error("invalid engine configuration: {0}")]
    Config(String),

    /// A system call failed (opening or mapping a work-queue portal, spawning a worker).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The kernel's answer.
        source: io::Error,
    },
}

impl Error {
    /// The errno this error corresponds to, for the C ABI and for exit codes.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Busy { .. } => libc::EAGAIN,
            Error::NoChannel { .. } | Error::BadBatch(_) | Error::Config(_) => libc::EINVAL,
            Error::OutOfRange { .. } => libc::ERANGE,
            Error::Exhausted { .. } => libc::EOVERFLOW,
            Error::ShutDown { .. } => libc::ESHUTDOWN,
            Error::Records { .. } => libc::EUCLEAN,
            Error::DsaUnavailable(_) => libc::ENODEV,
            Error::Device { error, .. } => error.errno(),
            Error::Unsupported { .. } => libc::EOPNOTSUPP,
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}
