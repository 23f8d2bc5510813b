//! The short crash test CI runs on every change: every workload in every
//! data-movement mode (cpu, semaphore, delegate, dma-sync, async), a few dozen crash
//! points each. The long sweep is `easyio crashtest --mode all --points 200`.

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
            let out = run(&cfg).unwrap_or_else(|e| panic!("{} in {}: {e}", w.name(), mode.name()));
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
            assert_eq!(
                out.passed,
                out.points,
                "{} in {}: {}",
                w.name(),
                mode.name(),
                shown.join("\n")
            );
            eprintln!(
                "{} {} ops {} events {} fences {} images {} copies {} secs {}",
                mode.name(),
                w.name(),
                out.ops,
                out.trace_events,
                out.fences,
                out.images,
                out.offloaded_copies,
                out.seconds
            );
            assert_eq!(out.points, CI_POINTS);
        }
    }
}

/// An async recording depends on how the engine's workers were scheduled, so its
/// positions are replayed from the saved recording: the same run from the file gives
/// the same points, images and engine copies.
#[test]
fn an_async_run_replays_from_its_saved_trace() {
    let path =
        std::env::temp_dir().join(format!("easyio-crash-replay-{}.trace", std::process::id()));
    let first = run(&Config {
        points: 20,
        save_trace: Some((path.clone(), false)),
        ..Config::new(Workload::Generic090, Mode::Async)
    })
    .unwrap();
    let again = run(&Config {
        points: 20,
        trace: Some(path.clone()),
        ..Config::new(Workload::Generic090, Mode::Async)
    })
    .unwrap();
    let one = run(&Config {
        trace: Some(path.clone()),
        only: Some((first.trace_events / 2, Some(pmem::CrashChoice::Everything))),
        ..Config::new(Workload::Generic090, Mode::Async)
    })
    .unwrap();
    let wrong = run(&Config {
        trace: Some(path.clone()),
        ..Config::new(Workload::Random, Mode::Async)
    });
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        (
            first.trace_events,
            first.points,
            first.images,
            first.offloaded_copies
        ),
        (
            again.trace_events,
            again.points,
            again.images,
            again.offloaded_copies
        )
    );
    assert_eq!(first.offloaded_copy_points, again.offloaded_copy_points);
    assert!(first.offloaded_copies > 0);
    assert_eq!((one.points, one.images, one.passed), (1, 1, 1));
    assert!(wrong.is_err(), "a recording of another workload is refused");
}
