//! `crash`: the crash-consistency harness of easyio (`easyio crashtest`) and the
//! fuzzing helpers for the on-region format.
//!
//! A workload ([`Workload`]) runs on a tracing region ([`pmem::TracePmem`]) in a
//! data-movement [`Mode`]; the harness ([`run`]) picks crash points in the trace,
//! builds the images a power loss there could leave ([`pmem::CrashCursor`]), and the
//! oracle ([`oracle::check_image`]) mounts each and compares what it finds with the
//! reference model of the operations that had returned (the shared `model` crate,
//! through [`crate::model::Shadow`]). [`fuzz`] mounts and checks arbitrary and
//! corrupted images. It holds no POSIX semantics of its own: those are the `model`
//! crate's; what is crash-specific here is which states a crash may leave.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

pub mod error;
pub mod fuzz;
pub mod harness;
pub mod model;
pub mod ops;
pub mod oracle;
pub mod rng;
#[cfg(feature = "runner")]
pub mod runner;
pub mod workload;

pub use error::Error;
pub use harness::{run, Config, Failure, Mode, Outcome};
pub use workload::Workload;
