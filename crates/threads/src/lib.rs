//! Thread plumbing shared by the layers that start or block threads (`rt`, `engine`,
//! `mover`, and the tracer in `pmem`):
//!
//! - [`WaitPolicy`] and [`Backoff`]: how a thread waits for something another thread
//!   will do — spin a number of rounds (or for a while), then yield to the OS scheduler,
//!   then sleep or park or give the wait back — written once, with each user's step sizes
//!   as a value of the type ([`WaitPolicy::wait_until`] is the loop that follows one).
//! - [`Role`] and the registry ([`spawn`], [`register`], [`cpu_time`]): a component that
//!   starts threads registers them under a role, and anyone can ask the CPU time used so
//!   far by every thread of a role, the exited ones included, or which role the calling
//!   thread plays ([`current_role`]). No crate compares another crate's thread names.
//! - CPU clocks and affinity through `rustix` ([`thread_cpu_time`], [`pin_current`],
//!   [`allowed_cpus`]).
//!
//! What it must not do: depend on any easyio crate (it sits at the bottom, beside
//! `pmem`), know what the threads it counts do, or change how long anyone waits — the
//! constants are the callers', this crate only follows them.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

mod affinity;
mod registry;
mod wait;

pub use affinity::{allowed_cpus, pin_current};
pub use registry::{cpu_time, current_role, register, spawn, thread_cpu_time, Registration, Role};
pub use wait::{Backoff, Limit, Rest, Spins, Step, WaitPolicy};
