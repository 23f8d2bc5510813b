//! Tables of live handles. A handle given to C is the address of its object; every
//! call looks the address up here instead of dereferencing it, so a pointer that is
//! stale, made up or of another kind is EBADF rather than a crash.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::{CResult, Failure};

/// Live handles of one kind, by address.
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

    /// Makes `obj` a live handle; returns the address C gets.
    pub fn insert<C>(&self, obj: T) -> *mut C {
        let obj = Arc::new(obj);
        let addr = Arc::as_ptr(&obj) as usize;
        self.live.write().insert(addr, obj);
        addr as *mut C
    }

    /// The object of a live handle.
    pub fn get<C>(&self, handle: *const C) -> CResult<Arc<T>> {
        if handle.is_null() {
            return Err(Failure::null(self.what));
        }
        self.live
            .read()
            .get(&(handle as usize))
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
            .remove(&(handle as usize))
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
