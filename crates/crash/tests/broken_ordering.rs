//! The harness is itself tested: with a persistence ordering deliberately broken in
//! the file system, default runs must find failures, in every data-movement mode. Each
//! mode's fences cover different stores: in `cpu` one fence covers a write's data and
//! its log entry; in `semaphore` the mover's own fence after the copy covers the entry
//! issued before it too (so a write hides a missing staging fence, an attribute change
//! does not); in `delegate` and `dma-sync` the caller's fence covers its entries only,
//! the data being fenced by the thread that copied it. (A process of its own: the
//! fault switch is global.)

use crash::{run, Config, Mode, Workload};
use fs::fault::{inject, Fault};

/// The first failure a default run with `fault` on finds, as a line to print.
fn caught(fault: Fault, workload: Workload, mode: Mode) -> Option<String> {
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
        // In cpu mode by every workload.
        for w in Workload::ALL {
            let line = caught(fault, w, Mode::Cpu)
                .unwrap_or_else(|| panic!("{fault:?} not caught by {} in cpu", w.name()));
            eprintln!("{line}");
        }
        // In every other mode by some workload (one whose operations the mode does not
        // fence otherwise).
        for mode in Mode::ALL.into_iter().filter(|&m| m != Mode::Cpu) {
            let line = Workload::ALL
                .into_iter()
                .find_map(|w| caught(fault, w, mode))
                .unwrap_or_else(|| panic!("{fault:?} not caught in {}", mode.name()));
            eprintln!("{line}");
        }
    }
}
