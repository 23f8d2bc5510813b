//! The synchronisation primitives the hand-off protocols (`park_state`, `sleepers`) are
//! written against: the standard library's here, a model checker's in `tests/model_check.rs`,
//! which compiles the same protocol files against its own `facade`.

pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
pub(crate) use std::sync::Mutex;
pub(crate) use std::thread::{self, Thread};
