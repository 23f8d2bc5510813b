//! The harness in every data-movement mode: each mode's copies are traced on the
//! threads that make them, their durability rests on those threads' own fences (the
//! caller's fence does not cover them), and the oracle accepts what is legal for the
//! mode and no more (a committed write dropped by recovery is legal only in `async`).

use std::sync::Arc;

use crash::harness::record;
use crash::oracle::check_image;
use crash::{run, Config, Mode, Workload};
use fs::{FileSystem, MountOptions};
use pmem::trace::{EventKind, Role};
use pmem::{CrashChoice, CrashCursor, MemPmem, Pmem};

/// Roles of the threads that made non-temporal stores (data copies) in a recording
/// (`None`: a thread registered under no role, such as the caller's).
fn copying_threads(mode: Mode) -> Vec<Option<Role>> {
    let rec = record(Workload::Generic090.generate_for(1, mode), mode).unwrap();
    let mut roles: Vec<Option<Role>> = Vec::new();
    for e in rec
        .trace
        .events
        .iter()
        .filter(|e| e.kind == EventKind::NtStore)
    {
        if !roles.contains(&rec.trace.role_of(e)) {
            roles.push(rec.trace.role_of(e));
        }
    }
    roles
}

#[test]
fn each_mode_copies_on_its_own_threads_through_the_traced_region() {
    for mode in Mode::ALL {
        let threads = copying_threads(mode);
        let engine = threads.iter().any(|r| r.is_some_and(Role::is_engine));
        let delegate = threads.contains(&Some(Role::Delegation));
        match mode {
            Mode::Cpu | Mode::Semaphore => assert!(!engine && !delegate, "{threads:?}"),
            Mode::Delegate => assert!(delegate && !engine, "{threads:?}"),
            Mode::DmaSync | Mode::Async => assert!(engine && !delegate, "{threads:?}"),
        }
    }
}

/// An `async` image in which recovery drops a committed write whose copy had not
/// completed is accepted in `async` and refused in a mode whose caller waits for its
/// data before committing.
#[test]
fn a_dropped_committed_write_is_legal_only_in_async() {
    let rec = record(Workload::Random.generate_for(1, Mode::Async), Mode::Async).unwrap();
    let mut cursor = CrashCursor::new(&rec.trace);
    // Just before a copy's counter store: its data is durable or not, the counter is
    // not advanced, and the entry carrying its SN may already be committed.
    for &(_, end) in &rec.copy_windows {
        if end < cursor.position() {
            continue;
        }
        cursor.advance_to(end);
        let image = cursor.image(CrashChoice::Nothing);
        let pm = Arc::new(MemPmem::from_image(image.clone()));
        let (fs, report) = FileSystem::mount(pm as Arc<dyn Pmem>, MountOptions::default())
            .expect("mount of a crash image");
        fs.abandon();
        if report.pending_writes_dropped == 0 {
            continue;
        }
        let (returned, in_flight) = rec.at(end);
        let mut allowed = vec![&rec.states[returned]];
        if in_flight.is_some() {
            allowed.push(&rec.states[returned + 1]);
        }
        check_image(image.clone(), &allowed, Mode::Async)
            .unwrap_or_else(|p| panic!("async refuses a legal image at {end}: {p:?}"));
        for mode in [Mode::Cpu, Mode::Semaphore, Mode::Delegate, Mode::DmaSync] {
            let p = check_image(image.clone(), &allowed, mode)
                .expect_err("a dropped committed write passed in a blocking mode");
            assert!(p.what.contains("dropped"), "{}: {p:?}", mode.name());
        }
        return;
    }
    panic!(
        "no crash point before a counter store left a committed write pending ({} copies)",
        rec.copy_windows.len()
    );
}

/// Runs `mode` on a recording of generic_090 whose fences made by threads of `roles`
/// are taken out (as if those threads never fenced their copies), replayed
/// from a saved file at up to `points` crash points; returns the failures found and the
/// fences taken out.
fn without_fences_of(mode: Mode, roles: &[Role], points: usize) -> (usize, usize) {
    let mut rec = record(Workload::Generic090.generate_for(1, mode), mode).unwrap();
    let gone: Vec<usize> = (0..rec.trace.len())
        .filter(|&i| {
            let e = &rec.trace.events[i];
            e.kind == EventKind::Fence && rec.trace.role_of(e).is_some_and(|r| roles.contains(&r))
        })
        .collect();
    let shift = |p: usize| p - gone.partition_point(|&g| g < p);
    rec.spans = rec
        .spans
        .iter()
        .map(|&(a, z)| (shift(a), shift(z)))
        .collect();
    let mut i = 0;
    rec.trace.events.retain(|_| {
        i += 1;
        gone.binary_search(&(i - 1)).is_err()
    });
    let path = std::env::temp_dir().join(format!(
        "easyio-crash-nofence-{}-{}.trace",
        mode.name(),
        std::process::id()
    ));
    rec.save(&path).unwrap();
    let out = run(&Config {
        trace: Some(path.clone()),
        stop_at_first_failure: true,
        points,
        ..Config::new(Workload::Generic090, mode)
    });
    std::fs::remove_file(&path).unwrap();
    (out.unwrap().failures.len(), gone.len())
}

#[test]
fn copies_off_the_callers_thread_are_durable_only_by_their_own_fences() {
    let engine = [Role::CopyEngine, Role::CopyDevice];
    for (mode, roles) in [
        (Mode::Delegate, &[Role::Delegation][..]),
        (Mode::DmaSync, &engine[..]),
    ] {
        // The same replay with nothing taken out passes.
        assert_eq!(without_fences_of(mode, &[], 100), (0, 0));
        let (failures, fences) = without_fences_of(mode, roles, 1000);
        assert!(fences > 0, "{}: no fence by {roles:?}", mode.name());
        assert!(
            failures > 0,
            "{}: {fences} fences of the copying threads taken out and no crash image \
             failed",
            mode.name()
        );
    }
}
