//! A delegation thread that dies under a request — by panicking, or by returning and so
//! leaving its queue without a reader — fails that request with an error instead of
//! panicking or hanging the caller, and only once no stripe of it can be copied any
//! more: after the call returns the test poisons the caller's buffer, stops every
//! delegation thread, and finds no poison in the region (writes) and only poison in
//! the buffer (reads). The mover keeps working on the threads left, and on the caller
//! when none is left.
//!
//! The fault hook is global to the process: the tests here take [`SERIAL`] in turn.

use std::sync::{Arc, Mutex, MutexGuard};

use mover::fault::{self, Fault};
use mover::{Config, DelegateMover, Error, Mover, Pending, ReadPiece, WritePiece};
use pmem::{Pmem, Region};
use testkit::{pattern, POISON};

const REGION: u64 = 8 << 20;
const DATA: u64 = 1 << 20;
const STRIPE: usize = 32 * 1024;
/// Stripes per request: several per delegation thread.
const STRIPES: usize = 8;
const FAULTS: [Fault; 2] = [Fault::DelegatePanic, Fault::DelegateExit];

static SERIAL: Mutex<()> = Mutex::new(());

/// Serialises the tests of this process (the hook is global); a test that failed
/// while holding it does not fail the others.
fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fault::inject(Fault::None);
    guard
}

fn setup() -> (Arc<dyn Pmem>, DelegateMover) {
    let pm: Arc<dyn Pmem> = Arc::new(Region::create_temp(REGION).unwrap());
    let cfg = Config {
        delegation_threads: 2,
        stripe: STRIPE,
        ..Config::default()
    };
    let m = DelegateMover::new(pm.clone(), &cfg);
    (pm, m)
}

fn write(m: &DelegateMover, off: u64, src: &[u8]) -> Pending {
    // SAFETY: `src` outlives the call, and a delegate copy is over when it returns.
    unsafe { m.start_write(&[WritePiece { dst: off, src }]) }
}

fn read(m: &DelegateMover, off: u64, dst: &mut [u8]) -> Pending {
    // SAFETY: as for `write`.
    unsafe { m.start_read(&mut [ReadPiece { src: off, dst }]) }
}

#[test]
fn a_write_whose_delegation_thread_dies_fails_and_leaves_no_copy_running() {
    let _serial = serial();
    for fault in FAULTS {
        let (pm, m) = setup();
        let mut src = pattern(3, STRIPES * STRIPE);
        fault::inject(fault);
        let p = write(&m, DATA, &src);
        assert_eq!(p, Pending::Failed, "{fault:?}: the write did not fail");
        assert!(matches!(m.wait(p), Err(Error::CopyFailed)));
        assert_eq!(Error::CopyFailed.errno(), libc::EIO);
        src.fill(POISON);
        assert!(!m.healthy(), "{fault:?}: thread 0 still alive");
        // The mover goes on with the thread left.
        let next = pattern(9, STRIPES * STRIPE);
        m.write(&[WritePiece {
            dst: DATA + (STRIPES * STRIPE) as u64,
            src: &next,
        }])
        .unwrap();
        drop(m); // joins every delegation thread
        let mut image = vec![0u8; 2 * STRIPES * STRIPE];
        pm.read(DATA, &mut image);
        assert!(
            !image.contains(&POISON),
            "{fault:?}: a stripe was copied after the write returned"
        );
        assert!(
            image[STRIPES * STRIPE..] == next[..],
            "{fault:?}: the later write"
        );
    }
}

#[test]
fn a_read_whose_delegation_thread_dies_fails_and_leaves_no_copy_running() {
    let _serial = serial();
    for fault in FAULTS {
        let (pm, m) = setup();
        let data = pattern(5, STRIPES * STRIPE);
        pm.copy_persist(DATA, &data);
        let mut dst = vec![0u8; STRIPES * STRIPE];
        fault::inject(fault);
        let p = read(&m, DATA, &mut dst);
        assert_eq!(p, Pending::Failed, "{fault:?}: the read did not fail");
        dst.fill(POISON);
        let mut again = vec![0u8; STRIPES * STRIPE];
        m.read(&mut [ReadPiece {
            src: DATA,
            dst: &mut again,
        }])
        .unwrap();
        assert!(again == data, "{fault:?}: the later read");
        drop(m);
        assert!(
            dst.iter().all(|&b| b == POISON),
            "{fault:?}: a stripe was copied into the buffer after the read returned"
        );
    }
}

#[test]
fn with_every_delegation_thread_dead_the_caller_copies() {
    let _serial = serial();
    let (pm, m) = setup();
    let first = pattern(1, STRIPES * STRIPE);
    for dead in 1..=2 {
        fault::inject(Fault::DelegateExit);
        assert_eq!(write(&m, DATA, &first), Pending::Failed);
        assert!(!m.healthy(), "{dead} thread(s) dead");
    }
    let data = pattern(2, STRIPES * STRIPE);
    assert_eq!(write(&m, DATA, &data), Pending::Done);
    let mut back = vec![0u8; data.len()];
    assert_eq!(read(&m, DATA, &mut back), Pending::Done);
    assert!(back == data);
    let mut image = vec![0u8; data.len()];
    pm.read(DATA, &mut image);
    assert!(image == data);
}

/// The delegation threads' CPU time is asked for by role: copies made by them count
/// under [`threads::Role::Delegation`], and stay counted after the mover (and its
/// threads) are gone. The caller only waits, so most of the copying time is theirs.
#[test]
fn delegation_threads_count_their_cpu_time_under_their_role() {
    let _serial = serial();
    let before = threads::cpu_time(threads::Role::Delegation);
    let (_pm, m) = setup();
    let src = pattern(3, STRIPE * STRIPES);
    let caller0 = threads::thread_cpu_time();
    for _ in 0..200 {
        assert_eq!(write(&m, DATA, &src), Pending::Done);
    }
    let caller = threads::thread_cpu_time() - caller0;
    drop(m);
    let theirs = threads::cpu_time(threads::Role::Delegation) - before;
    // 200 x 256 KiB = 50 MiB copied by them: at least a few milliseconds of CPU.
    assert!(
        theirs >= std::time::Duration::from_millis(2),
        "delegation {theirs:?}, caller {caller:?}"
    );
}
