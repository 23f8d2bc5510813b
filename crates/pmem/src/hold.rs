//! A region that holds, on purpose, the thread making one store: the first `store_u64`
//! into an armed range waits, right after the store and before any write-back, until
//! the test releases it. Tests use it to open the window between a store becoming
//! visible and it becoming durable, and check that nothing reports the store durable
//! meanwhile (an engine's completion counter, the file system's return).

use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::{seal, Durability, Error, Pmem};

/// Whether the held store was made, and whether its thread may go on.
#[derive(Default)]
struct Gate {
    armed: Option<Range<u64>>,
    stored: bool,
    released: bool,
}

/// A region over `inner` whose first store into the armed range is held (see the
/// module). A held thread goes on by itself after `limit`, so that a failing test ends.
pub struct HoldStore {
    inner: Arc<dyn Pmem>,
    limit: Duration,
    gate: Mutex<Gate>,
    cv: Condvar,
}

impl HoldStore {
    /// Over `inner`, not armed; a held thread waits at most `limit`.
    pub fn new(inner: Arc<dyn Pmem>, limit: Duration) -> HoldStore {
        HoldStore {
            inner,
            limit,
            gate: Mutex::default(),
            cv: Condvar::new(),
        }
    }

    /// The region underneath.
    pub fn inner(&self) -> &Arc<dyn Pmem> {
        &self.inner
    }

    /// Holds the next store whose offset is in `range`.
    pub fn arm(&self, range: Range<u64>) {
        self.gate.lock().unwrap().armed = Some(range);
    }

    /// Waits until the held store has been made; false after `limit`.
    pub fn wait_stored(&self) -> bool {
        let g = self.gate.lock().unwrap();
        let (g, _) = self
            .cv
            .wait_timeout_while(g, self.limit, |g| !g.stored)
            .unwrap();
        g.stored
    }

    /// Lets the held thread go on (and every later store pass).
    pub fn release(&self) {
        self.gate.lock().unwrap().released = true;
        self.cv.notify_all();
    }

    /// A guard that releases the held thread when dropped, also when the test panics,
    /// so that nothing joining that thread hangs.
    pub fn release_on_drop(&self) -> ReleaseOnDrop<'_> {
        ReleaseOnDrop(self)
    }

    /// Whether a store at `off` is the one to hold.
    fn holds(&self, off: u64) -> bool {
        let g = self.gate.lock().unwrap();
        !g.stored && g.armed.as_ref().is_some_and(|r| r.contains(&off))
    }
}

/// Releases a [`HoldStore`]'s held thread on drop.
pub struct ReleaseOnDrop<'a>(&'a HoldStore);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Pmem for HoldStore {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn durability(&self) -> Durability {
        self.inner.durability()
    }
    fn write(&self, off: u64, src: &[u8]) {
        self.inner.write(off, src)
    }
    fn store_u64(&self, off: u64, val: u64) {
        let hold = self.holds(off);
        self.inner.store_u64(off, val);
        if hold {
            let mut g = self.gate.lock().unwrap();
            g.stored = true;
            self.cv.notify_all();
            let deadline = Instant::now() + self.limit;
            while !g.released && Instant::now() < deadline {
                g = self.cv.wait_timeout(g, self.limit).unwrap().0;
            }
        }
    }
    fn load_u64(&self, off: u64) -> u64 {
        self.inner.load_u64(off)
    }
    fn read(&self, off: u64, dst: &mut [u8]) {
        self.inner.read(off, dst)
    }
    fn flush(&self, off: u64, len: u64) {
        self.inner.flush(off, len)
    }
    fn fence(&self) {
        self.inner.fence()
    }
    fn copy_nt(&self, off: u64, src: &[u8]) {
        self.inner.copy_nt(off, src)
    }
    fn copy_nt_sealed(&self, off: u64, src: &[u8], seal: &mut seal::Seal) {
        self.inner.copy_nt_sealed(off, src, seal)
    }
    fn take_sync_error(&self) -> Option<Error> {
        self.inner.take_sync_error()
    }
}
