//! What is mounted now: the image mounted here or the server's connection ([`Live`]),
//! the state the first call under the prefix moves from `Down` (`mount.rs` starts it,
//! forks and releases it), and whether a forked child's parent holds the image.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::backend::Backend;

/// The mounted file system, or the server's connection.
pub(crate) struct Live {
    pub fs: Backend,
    /// The image file or the server's socket, for messages.
    pub image: String,
    /// The fork generation of the process that mounted or connected (see
    /// [`GENERATION`]): in a forked child, its parent's.
    pub generation: u64,
}

impl Live {
    /// Whether this is a server's connection made by another process: a forked
    /// child's copy of its parent's, which the child must not use.
    pub fn is_parents_connection(&self) -> bool {
        self.fs.client().is_some() && self.generation != GENERATION.load(Ordering::Relaxed)
    }
}

/// Counts the forks this process descends from (raised in every child), so that a
/// child knows its parent's connection for what it is even if it could not replace
/// it at the fork (another thread held the state's lock then).
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);

pub(crate) enum State {
    /// Nothing mounted yet (or released before a `fork`): the next call mounts.
    Down,
    Up(Arc<Live>),
    /// Mounting failed: calls under the prefix fail with this errno.
    Failed(i32),
}

pub(crate) static STATE: RwLock<State> = RwLock::new(State::Down);
/// Set in a child of `fork` while its parent held the image: the pid of the holder.
pub(crate) static HELD_BY_PARENT: AtomicI32 = AtomicI32::new(0);
/// The mount if it is up, without starting it (and without waiting for a lock).
pub(crate) fn current() -> Option<Arc<Live>> {
    match &*STATE.try_read()? {
        State::Up(l) if !l.is_parents_connection() => Some(l.clone()),
        _ => None,
    }
}
/// Whether this process is a forked child whose parent holds the image.
pub(crate) fn is_forked_child() -> bool {
    HELD_BY_PARENT.load(Ordering::Relaxed) != 0
}
