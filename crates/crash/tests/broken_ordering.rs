//! The harness is itself tested: with a persistence ordering deliberately broken in
//! the file system, a default run must find failures. (A process of its own: the fault
//! switch is global.)

use crash::{run, Config, Mode, Workload};
use fs::fault::{inject, Fault};

fn caught(fault: Fault, workload: Workload) -> usize {
    inject(fault);
    let cfg = Config {
        stop_at_first_failure: true,
        ..Config::new(workload, Mode::Cpu)
    };
    let out = run(&cfg).unwrap();
    inject(Fault::None);
    let f = out.failures.first().unwrap_or_else(|| {
        panic!(
            "{fault:?} not caught by {} points of {}",
            out.points,
            workload.name()
        )
    });
    eprintln!(
        "{fault:?}: caught at point {} of {}: {}\n  {:?}",
        out.points,
        workload.name(),
        f.replay_command(),
        f.problem
    );
    out.points
}

#[test]
fn a_missing_flush_or_fence_is_caught() {
    for w in Workload::ALL {
        caught(Fault::CommitWithoutFlush, w);
        caught(Fault::StageWithoutFence, w);
    }
}
