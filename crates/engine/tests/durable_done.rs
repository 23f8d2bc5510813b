//! An SN counts as done only once the counter saying so is durable.
//!
//! A worker publishes a counter with a store, a write-back and a fence. Between the
//! store and the fence the new counter is already visible to loads from other threads,
//! but a power loss still takes it: a caller told "done" then (a write that returned in
//! `async` mode) loses its copy at recovery, which keeps a log entry only if the
//! record on the medium shows its SN. The region here holds the worker right after
//! its counter store, so that window stays open while the test looks.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{config, pattern, region, AREA, DATA};
use engine::{record, record_is_done, Desc, Engine};
use pmem::hold::HoldStore;
use pmem::Pmem;

/// How long the test waits for the worker to reach the held store.
const WATCHDOG: Duration = Duration::from_secs(20);

#[test]
fn an_sn_is_not_done_while_its_counter_is_stored_but_not_yet_written_back() {
    let data = pattern(7, 8192);
    let held = Arc::new(HoldStore::new(region(4, 1), WATCHDOG));
    let hold = record::counter_off(AREA, 0);
    held.arm(hold..hold + 1);
    let engine = Engine::software(held.clone() as Arc<dyn Pmem>, &config(1)).unwrap();
    // Dropped first on a panic: the worker goes on, and the engine's drop joins it.
    let _release = held.release_on_drop();
    // SAFETY: `data` outlives the engine's use of it: it is declared before the
    // engine, whose drop joins the worker, and is read back only after the wait.
    let sn = unsafe { engine.submit(0, &[Desc::write(&data, DATA)]) }.unwrap();

    assert!(
        held.wait_stored(),
        "the worker never stored the counter of {sn} within {WATCHDOG:?}"
    );
    // The window: the counter is visible to a load, but not yet written back.
    assert!(
        record_is_done(&**held.inner(), AREA, sn),
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
    let mut back = vec![0u8; data.len()];
    held.inner().read(DATA, &mut back);
    assert_eq!(back, data);
}
