//! The short crash test CI runs on every change: every workload, every mode, a few
//! dozen crash points each.

use crash::{run, Config, Mode, Workload};

/// Crash points per workload in CI (a release `easyio crashtest` runs 1000).
const CI_POINTS: usize = 50;

#[test]
fn every_workload_survives_crashes() {
    for mode in Mode::ALL {
        for w in Workload::ALL {
            let cfg = Config {
                points: CI_POINTS,
                ..Config::new(w, mode)
            };
            let out = run(&cfg).unwrap_or_else(|e| panic!("{}: {e}", w.name()));
            let shown: Vec<String> = out
                .failures
                .iter()
                .take(3)
                .map(|f| {
                    format!(
                        "{}: {:?}\n  {}",
                        f.replay_command(),
                        f.problem,
                        f.in_flight.as_ref().map_or(String::new(), |o| o.1.clone())
                    )
                })
                .collect();
            assert_eq!(out.passed, out.points, "{}: {}", w.name(), shown.join("\n"));
            eprintln!(
                "{} ops {} events {} fences {} images {} secs {}",
                w.name(),
                out.ops,
                out.trace_events,
                out.fences,
                out.images,
                out.seconds
            );
            assert_eq!(out.points, CI_POINTS);
        }
    }
}
