//! An async recording runs on the engine the test run asked for: the software engine,
//! or with `EASYIO_TEST_ENGINE=dsa-model` the DSA backend on a device model, whose
//! copies the trace records from the device's thread. So a crash run on the DSA path
//! really crashes between a device's copies and the counter it writes.

use crash::harness::record;
use crash::{Mode, Workload};
use pmem::trace::Role;

#[test]
fn an_async_recording_traces_the_engine_the_run_asked_for() {
    let device = match std::env::var(mover::testing::ENGINE_ENV).as_deref() {
        Ok("dsa-model") => Role::CopyDevice,
        _ => Role::CopyEngine,
    };
    let rec = record(
        Workload::Generic090.generate_for(1, Mode::Async),
        Mode::Async,
    )
    .unwrap();
    assert!(
        rec.trace.roles.contains(&Some(device)),
        "no stores by a {device:?} thread in the trace; its threads: {:?} {:?}",
        rec.trace.threads,
        rec.trace.roles
    );
    assert!(
        rec.trace
            .roles
            .iter()
            .all(|r| !r.is_some_and(Role::is_engine) || *r == Some(device)),
        "stores by another engine: {:?} {:?}",
        rec.trace.threads,
        rec.trace.roles
    );
    assert!(!rec.copy_windows.is_empty(), "no engine copy in the trace");
}
