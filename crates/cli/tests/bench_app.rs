//! `easyio bench app` and `easyio demo` end to end at small sizes: every application
//! gives verified output in every mode, and the demo's table, JSON and plot are whole.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{run_bounded, success_json};

/// The namespace of an SVG document's root element.
const SVG_NS: &str = "xmlns=\"http://www.w3.org/2000/svg\"";

const APPS: [&str; 8] = [
    "snappy",
    "jpeg",
    "aes",
    "grep",
    "knn",
    "bfs",
    "fileserver",
    "webserver",
];
const MODES: [&str; 6] = [
    "cpu",
    "semaphore",
    "delegate",
    "dma-sync",
    "async",
    "kernel",
];

#[test]
fn every_application_gives_verified_output_in_every_mode() {
    let svg = std::env::temp_dir().join(format!("easyio-app-test-{}.svg", std::process::id()));
    let (out, _) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_easyio")).args([
            "bench",
            "app",
            "--app",
            "all",
            "--mode",
            &MODES.join(","),
            "--threads",
            "1",
            "--uthreads-per-core",
            "2",
            "--duration",
            "0.03",
            "--scale",
            "0.02",
            "--region-size",
            "64M",
            "--plot",
            svg.to_str().unwrap(),
            "--json",
        ]),
        Duration::from_secs(120),
    );
    let v = success_json(&out);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), APPS.len() * MODES.len());
    for app in APPS {
        for mode in MODES {
            let r = rows
                .iter()
                .find(|r| r["app"] == app && r["mode"] == mode)
                .unwrap_or_else(|| panic!("no row for {app} in {mode}"));
            assert_eq!(r["verified"], true, "{r}");
            assert!(r["tasks"].as_u64().unwrap() > 0, "{r}");
            assert!(r["read_kib_per_task"].as_f64().unwrap() > 0.0, "{r}");
            let writes = !["grep", "knn", "bfs"].contains(&app);
            assert_eq!(
                r["write_kib_per_task"].as_f64().unwrap() > 0.0,
                writes,
                "{r}"
            );
            assert!(r["p99_ms"].as_f64().unwrap() >= r["p50_ms"].as_f64().unwrap());
        }
    }
    let plot = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(&svg);
    assert!(plot.contains(SVG_NS) && plot.trim_end().ends_with("</svg>"));
    // One panel per application, one line per mode in each.
    assert_eq!(
        plot.matches("stroke-width=\"2\"").count(),
        APPS.len() * MODES.len()
    );
}

#[test]
fn the_demo_prints_its_table_and_writes_its_plot() {
    let svg = std::env::temp_dir().join(format!("easyio-demo-test-{}.svg", std::process::id()));
    let (out, pid) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_easyio")).args([
            "demo",
            "--quick",
            "--plot",
            svg.to_str().unwrap(),
        ]),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for want in [
        "snappy",
        "fileserver",
        "cpu",
        "dma-sync",
        "delegate",
        "async",
        "EMULATED Optane",
        "optane (emulated)",
        "in short: on emulated optane, async: ",
    ] {
        assert!(text.contains(want), "no {want} in\n{text}");
    }
    assert!(
        text.contains(&format!("plot:    {}", svg.display())),
        "{text}"
    );
    // 2 applications × 2 memories × 2 thread counts × 4 modes, all verified.
    assert_eq!(text.matches(" ok ").count(), 32, "{text}");
    let plot = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(&svg);
    assert!(plot.contains(SVG_NS) && plot.trim_end().ends_with("</svg>"));
    assert_eq!(plot.matches("stroke-width=\"2\"").count(), 4 * 4);
    assert_eq!(plot.matches("<circle").count(), 4 * 4 * 2 + 4);
    assert!(plot.contains("machine: ") && plot.contains("EMULATED"));
    // The demo's temporary region (named after its process) is gone.
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("easyio-{pid}-")))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The demo's plain-words line says what its own rows say: the range of async's
/// tasks/s over cpu's on emulated Optane is recomputed here from the JSON rows.
#[test]
fn the_demo_line_is_made_of_the_runs_figures() {
    let (out, _) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_easyio")).args(["demo", "--quick", "--json"]),
        Duration::from_secs(60),
    );
    let v = success_json(&out);
    let rows = v["results"].as_array().unwrap();
    let tasks = |mode: &str, app: &str, threads: u64| {
        rows.iter()
            .find(|r| {
                r["mode"] == mode
                    && r["app"] == app
                    && r["threads"] == threads
                    && r["slowmem"] == "optane"
            })
            .unwrap()["tasks_per_s"]
            .as_f64()
            .unwrap()
    };
    let mut ratios = Vec::new();
    for app in ["snappy", "fileserver"] {
        for threads in [1, 2] {
            ratios.push(tasks("async", app, threads) / tasks("cpu", app, threads));
        }
    }
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(0.0, f64::max);
    let (lo, hi) = (format!("{lo:.2}"), format!("{hi:.2}"));
    let want = if lo == hi {
        format!("async: {lo}× cpu's tasks/s")
    } else {
        format!("async: {lo}–{hi}× cpu's tasks/s")
    };
    let line = v["summary"].as_str().unwrap();
    assert!(
        line.starts_with(&format!("on emulated optane, {want}")),
        "{line} (want {want})"
    );
    assert!(line.contains("; on DRAM, "), "{line}");
}
