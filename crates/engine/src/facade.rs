//! The synchronisation primitives the idle worker's hand-off (`wake`) is written against:
//! the standard library's here, a model checker's in `tests/model_check.rs`, which
//! compiles the same protocol file against its own `facade`.

pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
pub(crate) use std::sync::Mutex;
pub(crate) use std::thread::{self, Thread};
