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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{fresh, rw_create, MIB};
use fs::{FileSystem, Mode, MountOptions};
use pmem::{Durability, Pmem};

/// How long the test waits for anything that should happen.
const WATCHDOG: Duration = Duration::from_secs(20);
/// How long the write is given to return (wrongly) while its counter is not durable.
const GRACE: Duration = Duration::from_millis(300);

/// Whether the held store has happened, and whether its thread may go on.
#[derive(Default)]
struct Gate {
    stored: bool,
    released: bool,
}

/// A region that, once armed, holds the first thread storing into the completion
/// records (`start..end`) right after that store, before its write-back.
struct HoldCounterStore {
    inner: Arc<dyn Pmem>,
    armed: AtomicBool,
    start: AtomicU64,
    end: AtomicU64,
    gate: Mutex<Gate>,
    cv: Condvar,
}

impl HoldCounterStore {
    fn arm(&self, start: u64, end: u64) {
        self.start.store(start, Ordering::SeqCst);
        self.end.store(end, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Waits until the held store has been made; false on timeout.
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

    fn hold_here(&self, off: u64) -> bool {
        self.armed.load(Ordering::SeqCst)
            && (self.start.load(Ordering::SeqCst)..self.end.load(Ordering::SeqCst)).contains(&off)
            && !self.gate.lock().unwrap().stored
    }
}

/// Releases the held thread even if the test panics, so that nothing waits on it.
struct ReleaseOnDrop<'a>(&'a HoldCounterStore);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Pmem for HoldCounterStore {
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
        let hold = self.hold_here(off);
        self.inner.store_u64(off, val);
        if hold {
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
fn an_async_write_does_not_return_before_its_completion_counter_is_durable() {
    // The DSA backend's counter is a fill the device writes into the region itself, not
    // a store through `Pmem` that this region could hold; a device writing with cache
    // control off makes it durable as it becomes visible. The window held here is the
    // software engine's.
    if std::env::var(mover::testing::ENGINE_ENV).as_deref() == Ok("dsa-model") {
        eprintln!("skipped on the DSA device model: the device writes the counter itself");
        return;
    }
    let held = Arc::new(HoldCounterStore {
        inner: fresh(64 * MIB),
        armed: AtomicBool::new(false),
        start: AtomicU64::new(0),
        end: AtomicU64::new(0),
        gate: Mutex::default(),
        cv: Condvar::new(),
    });
    let (fs, _) = FileSystem::mount(
        held.clone() as Arc<dyn Pmem>,
        MountOptions::with_mode(Mode::Async),
    )
    .unwrap();
    let fd = fs.open("/a", rw_create(), 0o644).unwrap();
    let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7 + 3) as u8).collect();
    let geo = *fs.geometry();
    let records = geo.records_off();
    held.arm(records, records + geo.channels * pmem::CACHE_LINE as u64);

    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let _release = ReleaseOnDrop(&held);
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
