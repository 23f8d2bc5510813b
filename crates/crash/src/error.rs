//! What can go wrong in the harness itself (as opposed to a crash image that recovers
//! wrongly, which is a [`crate::oracle::Problem`] in the run's outcome).

use std::path::PathBuf;

/// An errno, written as its name where it has one.
fn errno_name(e: &i32) -> String {
    std::io::Error::from_raw_os_error(*e).to_string()
}

/// A harness failure: the run could not be made, or the workload or the file system
/// is wrong before any crash.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model refuses an operation of the workload (a workload generated wrongly).
    #[error("the model refuses {op}: {}", errno_name(errno))]
    ModelRefuses {
        /// The operation.
        op: String,
        /// The model's answer.
        errno: model::Errno,
    },
    /// The fresh region could not be mounted.
    #[error("mount of the fresh region: {0}")]
    Mount(#[source] fs::Error),
    /// An operation failed on the live file system.
    #[error("operation {index} ({op}) failed: {source}")]
    Operation {
        /// Its position in the workload.
        index: usize,
        /// The operation.
        op: String,
        /// The file system's error.
        source: fs::Error,
    },
    /// The live file system's namespace differs from the model's before any crash.
    #[error("the file system disagrees with the model before any crash: {0:?}")]
    LiveMismatch(Vec<String>),
    /// Reading the live file system back failed.
    #[error("reading back: {0}")]
    ReadBack(#[from] ReadBackError),
    /// Unmounting the live file system failed.
    #[error("unmount: {0}")]
    Unmount(#[source] fs::Error),
    /// The tracing region was still shared after the unmount.
    #[error("the tracing region is still shared after unmount")]
    TraceShared,
    /// A saved recording could not be written.
    #[error("saving the trace to {}: {source}", path.display())]
    SaveTrace {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A saved recording could not be used.
    #[error("trace file {}: {why}", path.display())]
    TraceFile {
        /// Where.
        path: PathBuf,
        /// Why.
        why: TraceFileError,
    },
    /// A replay asked for a position the trace does not have.
    #[error("position {pos} is past the end of the trace ({len} events)")]
    PositionPastEnd {
        /// The position asked for.
        pos: usize,
        /// Events in the trace.
        len: usize,
    },
}

/// Why a saved recording cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TraceFileError {
    /// It could not be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It does not start as a saved recording does.
    #[error("not a saved crash-test recording")]
    NotARecording,
    /// It ends early.
    #[error("truncated")]
    Truncated,
    /// It records another number of operations than the workload has.
    #[error(
        "{recorded} operations recorded, the workload has {workload}: another workload or seed"
    )]
    OtherWorkload {
        /// Operations in the file.
        recorded: usize,
        /// Operations of the workload.
        workload: usize,
    },
    /// The trace inside does not parse.
    #[error("{0}")]
    Trace(String),
    /// An operation's span lies outside the trace.
    #[error("operation spans outside the trace")]
    SpansOutside,
}

/// Why reading a mounted file system back failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadBackError {
    /// A call failed.
    #[error("{call} {path}: {source}")]
    Call {
        /// Which call.
        call: &'static str,
        /// On what.
        path: String,
        /// The file system's error.
        source: fs::Error,
    },
    /// A file read back to a length other than its size.
    #[error("{path}: size {size} but {read} bytes read")]
    Size {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
        /// Bytes read.
        read: usize,
    },
}

/// An unknown workload name.
#[derive(Debug, thiserror::Error)]
#[error("unknown workload {name:?}; workloads: {known}")]
pub struct UnknownWorkload {
    /// The name given.
    pub name: String,
    /// The names there are, comma-separated.
    pub known: String,
}
