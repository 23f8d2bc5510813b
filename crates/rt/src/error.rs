//! Errors of building a runtime and of joining a uthread.

use std::any::Any;
use std::io;

use crate::sleepers::MAX_WORKERS;
use crate::stack::{MAX_STACK_SIZE, MIN_STACK_SIZE};

/// Why a runtime could not be built.
#[derive(thiserror::Error, Debug)]
pub enum Error {
    /// The worker count is 0 or above the limit.
    #[error("a runtime has 1 to {MAX_WORKERS} workers, not {0}")]
    Workers(usize),
    /// The uthread stack size is out of range.
    #[error("uthread stacks are {MIN_STACK_SIZE} to {MAX_STACK_SIZE} bytes, not {0}")]
    StackSize(usize),
    /// A worker thread could not be started.
    #[error("cannot start a worker thread: {0}")]
    Spawn(#[source] io::Error),
    /// A worker could not be pinned to its core.
    #[error("cannot pin worker {worker} to CPU {cpu}: {source}")]
    Pin {
        /// The worker's index.
        worker: usize,
        /// The CPU it was to run on.
        cpu: usize,
        /// What the system said.
        source: io::Error,
    },
    /// The stack-overflow signal handler could not be installed.
    #[error("cannot install the uthread stack-overflow handler: {0}")]
    Signal(#[source] io::Error),
}

impl Error {
    /// The errno this error maps to.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Workers(_) | Error::StackSize(_) => libc::EINVAL,
            Error::Spawn(e) | Error::Pin { source: e, .. } | Error::Signal(e) => {
                e.raw_os_error().unwrap_or(libc::EIO)
            }
        }
    }
}

/// Why joining a uthread gave no value.
#[derive(thiserror::Error, Debug)]
pub enum JoinError {
    /// The uthread panicked; this is the panic payload, as `std::thread::JoinHandle::join`
    /// gives it.
    #[error("uthread panicked: {}", panic_message(.0.as_ref()).unwrap_or("(non-string payload)"))]
    Panicked(Box<dyn Any + Send + 'static>),
    /// The uthread never ran: no stack could be mapped for it.
    #[error("uthread could not start: no stack: {0}")]
    NoStack(#[source] io::Error),
}

impl JoinError {
    /// The errno this maps to: 0 for a panic (not an OS error), the mapping error's otherwise.
    pub fn errno(&self) -> i32 {
        match self {
            JoinError::Panicked(_) => 0,
            JoinError::NoStack(e) => e.raw_os_error().unwrap_or(libc::ENOMEM),
        }
    }

    /// The panic payload, if the uthread panicked (to `std::panic::resume_unwind` it).
    pub fn into_panic(self) -> Option<Box<dyn Any + Send + 'static>> {
        match self {
            JoinError::Panicked(p) => Some(p),
            JoinError::NoStack(_) => None,
        }
    }
}

/// The message of a panic payload made by `panic!` with a string.
pub fn panic_message(payload: &(dyn Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<&'static str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}
