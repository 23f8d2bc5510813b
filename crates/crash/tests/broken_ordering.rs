//! The harness is itself tested: with a persistence ordering deliberately broken in
//! the file system, default runs must find failures, in every data-movement mode. Each
//! mode's fences cover different stores: in `cpu` one fence covers a write's data and
//! its log entry, sealed with the data's hash, which commits itself; in `semaphore` the mover's own fence after the copy covers the entry
//! issued before it too (so a write hides a missing staging fence, an attribute change
//! does not); in `delegate` and `dma-sync` the caller's fence covers its entries only,
//! the data being fenced by the thread that copied it. (A process of its own: the
//! fault switch is global; the tests here take turns with it.)

use crash::{run, Config, Mode, Workload};
use fs::fault::{inject, Fault};
use std::sync::Mutex;

/// Held while a fault is on: the switch is global, and the tests of this file run on
/// threads of one process, so one test's fault must not be on (or turned off) while
/// another's run is recording.
static SWITCH: Mutex<()> = Mutex::new(());

/// The first failure a default run with `fault` on finds, as a line to print.
fn caught(fault: Fault, workload: Workload, mode: Mode) -> Option<String> {
    let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    inject(fault);
    let cfg = Config {
        stop_at_first_failure: true,
        ..Config::new(workload, mode)
    };
    let out = run(&cfg).unwrap();
    inject(Fault::None);
    out.failures.first().map(|f| {
        format!(
            "{fault:?}: caught at point {} of {} in {}: {}\n  {:?}",
            out.points,
            workload.name(),
            mode.name(),
            f.replay_command(),
            f.problem
        )
    })
}

#[test]
fn a_missing_flush_or_fence_is_caught_in_every_mode() {
    for fault in [Fault::CommitWithoutFlush, Fault::StageWithoutFence] {
        // In cpu mode by every workload, except for the tail store's write-back, which
        // only the operations other than writes of one run of blocks still have (those
        // are sealed entries that commit themselves): by some workload.
        if fault == Fault::StageWithoutFence {
            for w in Workload::ALL {
                let line = caught(fault, w, Mode::Cpu)
                    .unwrap_or_else(|| panic!("{fault:?} not caught by {} in cpu", w.name()));
                eprintln!("{line}");
            }
        }
        // In every mode by some workload (one whose operations the mode does not fence
        // otherwise).
        for mode in Mode::ALL {
            let line = Workload::ALL
                .into_iter()
                .find_map(|w| caught(fault, w, mode))
                .unwrap_or_else(|| panic!("{fault:?} not caught in {}", mode.name()));
            eprintln!("{line}");
        }
    }
}

#[test]
fn a_sealed_write_kept_without_its_seal_checked_is_caught() {
    // In cpu mode a write of one run of blocks commits by its sealed entry, under one
    // fence with its data; only the seal tells an entry whose data did not all arrive.
    let line = Workload::ALL
        .into_iter()
        .find_map(|w| caught(Fault::SealNotChecked, w, Mode::Cpu))
        .unwrap_or_else(|| panic!("SealNotChecked not caught in cpu"));
    eprintln!("{line}");
}
