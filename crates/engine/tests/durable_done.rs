//! An SN counts as done only once the counter saying so is durable.
//!
//! A worker publishes a counter with a store, a write-back and a fence. Between the
//! store and the fence the new counter is already visible to loads from other threads,
//! but a power loss still takes it: a caller told "done" then (a write that returned in
//! `async` mode) loses its copy at recovery, which keeps a log entry only if the
//! record on the medium shows its SN. The region here holds the worker right after
//! its counter store, so that window stays open while the test looks.

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{config, pattern, read, region, AREA, DATA};
use engine::{record, record_is_done, Desc, Engine};
use pmem::{Durability, Pmem, Region};

/// How long the test waits for the worker to reach the held store.
const WATCHDOG: Duration = Duration::from_secs(20);

/// Whether the counter store has happened, and whether the worker may go on.
#[derive(Default)]
struct Gate {
    stored: bool,
    released: bool,
}

/// A region that holds the thread storing the counter word at `hold` right after the
/// store, before its write-back, until released.
struct HoldAfterCounterStore {
    inner: Arc<Region>,
    hold: u64,
    gate: Mutex<Gate>,
    cv: Condvar,
}

impl HoldAfterCounterStore {
    /// Waits until the counter store has been made; false on timeout.
    fn wait_stored(&self) -> bool {
        let g = self.gate.lock().unwrap();
        let (g, _) = self
            .cv
            .wait_timeout_while(g, WATCHDOG, |g| !g.stored)
            .unwrap();
        g.stored
    }

    fn release(&self) {
        self.gate.lock().unwrap().released = true;
        self.cv.notify_all();
    }
}

/// Releases the held worker even if the test panics, so that the engine's drop (which
/// joins the worker) cannot hang.
struct ReleaseOnDrop(Arc<HoldAfterCounterStore>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Pmem for HoldAfterCounterStore {
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
        self.inner.store_u64(off, val);
        if off == self.hold {
            let mut g = self.gate.lock().unwrap();
            g.stored = true;
            self.cv.notify_all();
            let deadline = Instant::now() + WATCHDOG;
            while !g.released && Instant::now() < deadline {
                g = self.cv.wait_timeout(g, WATCHDOG).unwrap().0;
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
}

#[test]
fn an_sn_is_not_done_while_its_counter_is_stored_but_not_yet_written_back() {
    let data = pattern(7, 8192);
    let held = Arc::new(HoldAfterCounterStore {
        inner: region(4, 1),
        hold: record::counter_off(AREA, 0),
        gate: Mutex::default(),
        cv: Condvar::new(),
    });
    let engine = Engine::software(held.clone() as Arc<dyn Pmem>, &config(1)).unwrap();
    // Dropped first on a panic: the worker goes on, and the engine's drop joins it.
    let _release = ReleaseOnDrop(held.clone());
    // SAFETY: `data` outlives the engine's use of it: it is declared before the
    // engine, whose drop joins the worker, and is read back only after the wait.
    let sn = unsafe { engine.submit(0, &[Desc::write(&data, DATA)]) }.unwrap();

    assert!(
        held.wait_stored(),
        "the worker never stored the counter of {sn} within {WATCHDOG:?}"
    );
    // The window: the counter is visible to a load, but not yet written back.
    assert!(
        record_is_done(&*held.inner, AREA, sn),
        "the counter store of {sn} is visible to loads"
    );
    assert!(
        !engine.is_done(sn),
        "{sn} reported done while its counter was stored but not yet durable: a crash \
         now would lose a copy whose caller was told it is done"
    );
    assert!(!engine.poll(sn).unwrap(), "poll agrees with is_done");

    held.release();
    engine.wait(sn).unwrap();
    assert!(engine.is_done(sn));
    assert_eq!(read(&held.inner, DATA, data.len()), data);
}
