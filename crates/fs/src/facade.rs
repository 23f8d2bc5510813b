//! The synchronisation primitives epoch-based reclamation (`epoch`) is written against:
//! the standard library's and parking_lot's here, a model checker's in
//! `tests/model_check.rs`, which compiles the same file against its own `facade`.

pub(crate) use parking_lot::Mutex;
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// Runs a unit test of a file written against this facade: here, as it is; under the
/// model checker, as one of its executions.
#[cfg(test)]
pub(crate) fn check(test: impl Fn() + Send + Sync + 'static) {
    test()
}
