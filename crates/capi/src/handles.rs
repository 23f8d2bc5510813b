//! Tables of live handles. A handle given to C is a number that looks like a pointer
//! but is never dereferenced: every call looks it up here, so a pointer that is
//! stale, made up or of another kind is EBADF rather than a crash. Numbers are never
//! reused (unlike addresses, which the allocator hands out again), so a handle closed
//! in one part of a program cannot name an object opened later in another.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::{CResult, Failure};

/// The next handle number, shared by every kind: a handle of one kind is never a live
/// handle of another. Starts past the first page and steps by a cache line, so that
/// handles look like the aligned pointers C code may assume they are.
static NEXT: AtomicUsize = AtomicUsize::new(1 << 16);
const STEP: usize = 64;

/// Live handles of one kind, by number.
pub(crate) struct Registry<T> {
    what: &'static str,
    /// Looked up by every call, changed only by opening and closing handles.
    live: RwLock<BTreeMap<usize, Arc<T>>>,
}

impl<T> Registry<T> {
    pub const fn new(what: &'static str) -> Registry<T> {
        Registry {
            what,
            live: RwLock::new(BTreeMap::new()),
        }
    }

    /// Makes `obj` a live handle; returns the number C gets as its pointer.
    pub fn insert<C>(&self, obj: T) -> *mut C {
        let id = NEXT.fetch_add(STEP, Ordering::Relaxed);
        self.live.write().insert(id, Arc::new(obj));
        std::ptr::without_provenance_mut(id)
    }

    /// The object of a live handle.
    pub fn get<C>(&self, handle: *const C) -> CResult<Arc<T>> {
        if handle.is_null() {
            return Err(Failure::null(self.what));
        }
        self.live
            .read()
            .get(&handle.addr())
            .cloned()
            .ok_or_else(|| Failure::bad_handle(self.what))
    }

    /// Ends a handle: it is no longer live; the object is returned to be closed.
    pub fn remove<C>(&self, handle: *const C) -> CResult<Arc<T>> {
        if handle.is_null() {
            return Err(Failure::null(self.what));
        }
        self.live
            .write()
            .remove(&handle.addr())
            .ok_or_else(|| Failure::bad_handle(self.what))
    }
}

/// Takes sole ownership of an object whose handle was removed, once the calls still
/// running with it have returned (they hold clones only for their duration).
pub(crate) fn into_sole<T>(mut obj: Arc<T>) -> T {
    loop {
        match Arc::try_unwrap(obj) {
            Ok(v) => return v,
            Err(back) => {
                obj = back;
                if rt::in_uthread() {
                    rt::yield_now();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}
