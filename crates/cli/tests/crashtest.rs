//! `easyio crashtest` end to end: the Table 2 report as JSON (cpu, async, every mode),
//! a replay of one image, and an unknown mode refused.

mod common;

use common::easyio;

#[test]
fn crashtest_json_reports_every_point_passed() {
    let v = common::json(&[
        "crashtest",
        "--workload",
        "generic_056",
        "--points",
        "8",
        "--json",
    ]);
    let w = &v[0];
    assert_eq!(w["workload"], "generic_056");
    assert_eq!(w["mode"], "cpu");
    assert_eq!(w["points"], 8);
    assert_eq!(w["passed"], 8);
    assert!(w["images"].as_u64().unwrap() >= 8);
    assert_eq!(w["failures"], serde_json::json!([]));
}

#[test]
fn async_crashtest_reports_engine_copies() {
    let v = common::json(&[
        "crashtest",
        "--workload",
        "generic_322",
        "--mode",
        "async",
        "--points",
        "12",
        "--json",
    ]);
    let w = &v[0];
    assert_eq!(w["mode"], "async");
    assert_eq!(w["passed"], 12);
    assert!(w["offloaded_copies"].as_u64().unwrap() > 0, "{w}");
    assert!(w["offloaded_copy_points"].as_u64().unwrap() > 0, "{w}");
}

#[test]
fn every_mode_runs_with_mode_all() {
    let v = common::json(&[
        "crashtest",
        "--workload",
        "generic_090",
        "--mode",
        "all",
        "--points",
        "6",
        "--json",
    ]);
    let modes: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["mode"].as_str().unwrap())
        .collect();
    assert_eq!(
        modes,
        ["cpu", "semaphore", "delegate", "dma-sync", "async"],
        "{v}"
    );
    for w in v.as_array().unwrap() {
        assert_eq!(w["passed"], 6, "{w}");
        let offloaded = w["offloaded_copies"].as_u64().unwrap();
        match w["mode"].as_str().unwrap() {
            "cpu" | "semaphore" => assert_eq!(offloaded, 0, "{w}"),
            _ => assert!(offloaded > 0, "{w}"),
        }
    }
}

#[test]
fn one_image_replays_and_an_unknown_mode_is_refused() {
    let out = easyio()
        .args([
            "crashtest",
            "--workload",
            "create_delete",
            "--at",
            "100",
            "--state",
            "random:0x2a",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("create_delete"), "{table}");
    let out = easyio()
        .args(["crashtest", "--mode", "dma"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("modes: cpu, semaphore, delegate, dma-sync, async"));
}
