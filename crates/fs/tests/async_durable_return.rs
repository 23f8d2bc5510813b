//! In `async` mode a write returns only once the completion counter of its copy is
//! durable.
//!
//! The write's log entry commits before its copy is done, carrying the copy's SN, and
//! recovery keeps it only if the completion record on the medium shows that SN. The
//! engine's worker publishes a counter with a store, a write-back and a fence; the
//! stored counter is visible to the writer before the fence. A writer that returned
//! then — and the crash harness found one, a write before a `link` dropped by
//! recovery — had its returned data lost by a crash right after. The region here holds
//! the worker right after its counter store, so that window stays open: the write
//! must not return until the worker goes on.

mod common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{fresh, rw_create, MIB};
use fs::{FileSystem, Mode, MountOptions};
use pmem::hold::HoldStore;
use pmem::Pmem;

/// How long the test waits for anything that should happen.
const WATCHDOG: Duration = Duration::from_secs(20);
/// How long the write is given to return (wrongly) while its counter is not durable.
const GRACE: Duration = Duration::from_millis(300);

#[test]
fn an_async_write_does_not_return_before_its_completion_counter_is_durable() {
    // The DSA backend's counter is a fill the device writes into the region itself, not
    // a store through `Pmem` that this region could hold; a device writing with cache
    // control off makes it durable as it becomes visible. The window held here is the
    // software engine's.
    if std::env::var(mover::testing::ENGINE_ENV).as_deref() == Ok("dsa-model") {
        eprintln!("skipped on the DSA device model: the device writes the counter itself");
        return;
    }
    let held = Arc::new(HoldStore::new(fresh(64 * MIB), WATCHDOG));
    let (fs, _) = FileSystem::mount(
        held.clone() as Arc<dyn Pmem>,
        MountOptions::with_mode(Mode::Async),
    )
    .unwrap();
    let fd = fs.open("/a", rw_create(), 0o644).unwrap();
    let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7 + 3) as u8).collect();
    let geo = *fs.geometry();
    let records = geo.records_off();
    held.arm(records..records + geo.channels * pmem::CACHE_LINE as u64);

    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let _release = held.release_on_drop();
        let fs = &fs;
        let data = &data;
        s.spawn(move || {
            let r = fs.pwrite(fd, data, 0);
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
        assert!(
            held.wait_stored(),
            "the write's copy never stored its completion counter within {WATCHDOG:?} \
             (did it go through the engine?)"
        );
        assert!(
            rx.recv_timeout(GRACE).is_err(),
            "the write returned while its completion counter was stored but not yet \
             durable: a crash now would drop the write at recovery"
        );
        held.release();
        let r = rx
            .recv_timeout(WATCHDOG)
            .expect("the write returns once its counter is durable");
        assert_eq!(r, Ok(data.len()));
    });
    let mut back = vec![0u8; data.len()];
    assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), data.len());
    assert_eq!(back, data);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
}
