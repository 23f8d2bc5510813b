//! `easyio bench micro` end to end with tiny durations: every workload runs in both
//! modes, and the JSON carries what the README quotes.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{run_bounded, success_json};

#[test]
fn every_workload_runs_in_every_mode() {
    let (out, _) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_easyio")).args([
            "bench",
            "micro",
            "--duration",
            "0.03",
            "--region-size",
            "64M",
            "--workload",
            "DWAL,DWOL,DWOM,DRBL,DRBM,MWCL,MWUL,MWRL,CIOW,CIOR",
            "--mode",
            "cpu,semaphore,delegate,dma-sync,async,async-locked,kernel",
            "--uthreads-per-core",
            "2",
            "--compute-us",
            "2",
            "--json",
        ]),
        Duration::from_secs(180),
    );
    let v = success_json(&out);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 10 * 7);
    for r in rows {
        assert!(r["ops_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["p99_us"].as_f64().unwrap() >= r["p50_us"].as_f64().unwrap());
        let data = !["MWCL", "MWUL", "MWRL"].contains(&r["workload"].as_str().unwrap());
        assert_eq!(r["of_limit"].is_number(), data, "{r}");
        assert_eq!(r["limit"].is_string(), data, "{r}");
        assert_eq!(
            r["bare_p50_us"].as_f64().is_some_and(|b| b > 0.0),
            data,
            "{r}"
        );
        assert_eq!(r["cpu_s_per_gib"].is_number(), data, "{r}");
        // Writes have a floor: their bare copy and an ordered commit, never less than
        // the bare copy alone.
        let writes = data && r["limit"].as_str().unwrap().starts_with("persistent copy");
        assert_eq!(r["floor_p50_us"].is_number(), writes, "{r}");
        if writes {
            // Both are medians of separate timings: allow for a nanosecond of noise.
            let (floor, bare) = (
                r["floor_p50_us"].as_f64().unwrap(),
                r["bare_p50_us"].as_f64().unwrap(),
            );
            assert!(floor >= bare - 0.01, "{r}");
        }
    }
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        &["--io-size", "0"][..],
        &["--threads", "0"],
        &["--duration", "-1"],
        &["--mode", "warp"],
        &["--workload", "XYZ"],
        &["--uthreads-per-core", "0"],
        &["--slowmem", "floppy"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_easyio"))
            .args(["bench", "micro"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn a_client_failing_before_the_start_line_ends_the_run_with_its_error() {
    // Two clients each write 3 MiB before the start line into a region with room for
    // one: the second fails (ENOSPC); the first must not wait for it forever.
    for mode in ["cpu", "async"] {
        let (out, _) = run_bounded(
            common::easyio().args([
                "bench",
                "micro",
                "--duration",
                "1",
                "--workload",
                "DWOL",
                "--io-size",
                "3M",
                "--threads",
                "2",
                "--mode",
                mode,
                "--region-size",
                "6M",
            ]),
            Duration::from_secs(60),
        );
        assert!(
            !out.status.success(),
            "{mode}: a failed client went unreported"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no space left"), "{mode}: {err}");
    }
}
