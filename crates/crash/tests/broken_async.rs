//! The harness is tested on the async path too: with the orderless write or the
//! engine's completion ordering deliberately broken, default async runs must find
//! failures. (A process of its own: the fault switches are global.)
//!
//! Whether a broken ordering shows at all depends on how the engine's worker and the
//! file system's thread interleaved in the recorded trace (a copy finished before its
//! entry was committed leaves nothing to catch), which the scheduler decides; so each
//! fault gets a few runs — workloads, then seeds — and must be caught by one of them.

use crash::{run, Config, Mode, Workload};

/// Runs for one fault before giving up.
const SEEDS: [u64; 2] = [1, 2];
const WORKLOADS: [Workload; 3] = [
    Workload::Generic322,
    Workload::Generic090,
    Workload::CreateDelete,
];

/// Default async runs with a fault switched on by `on` (and off by `off` afterwards)
/// until one finds a failure; panics if none does.
fn caught(what: &str, on: impl Fn(), off: impl Fn()) {
    let mut tried = Vec::new();
    for seed in SEEDS {
        for w in WORKLOADS {
            on();
            let cfg = Config {
                stop_at_first_failure: true,
                seed,
                ..Config::new(w, Mode::Async)
            };
            let out = run(&cfg);
            off();
            // A broken completion ordering can already corrupt the live file system
            // (a later write merges a page whose copy was reported done and was not):
            // the recording then refuses, which is a catch too.
            let out = match out {
                Ok(out) => out,
                Err(e @ crash::Error::LiveMismatch(_)) => {
                    eprintln!("{what}: caught before any crash in {}: {e}", w.name());
                    return;
                }
                Err(e) => panic!("{what}: {}: {e}", w.name()),
            };
            if let Some(f) = out.failures.first() {
                eprintln!(
                    "{what}: caught at point {} of {} (after {} runs without): {}\n  {:?}",
                    out.points,
                    w.name(),
                    tried.len(),
                    f.replay_command(),
                    f.problem
                );
                return;
            }
            tried.push(format!("{} seed {seed}: {} points", w.name(), out.points));
        }
    }
    panic!("{what} not caught: {}", tried.join(", "));
}

/// One test: the two switches are global to the process, and a run with one on must
/// not overlap a run meant to test the other.
#[test]
fn a_broken_async_ordering_is_caught() {
    use engine::fault as ef;
    use fs::fault as ff;
    caught(
        "an orderless write committed with SN 0",
        || ff::inject(ff::Fault::AsyncEntryWithoutSn),
        || ff::inject(ff::Fault::None),
    );
    caught(
        "an engine counter published before its copy",
        || ef::inject(ef::Fault::PublishBeforeData),
        || ef::inject(ef::Fault::None),
    );
}
