//! `easyio bench shared` end to end: the binary serves a fresh image to client
//! processes, and its JSON has every measurement beside its in-process peer, with the
//! ratio and the goal it is held to; nothing is left behind in /dev/shm.

mod common;

#[test]
fn bench_shared_json_has_every_measurement_beside_its_peer() {
    let before = leftovers();
    let v = common::json(&[
        "bench",
        "shared",
        "--json",
        "--ops",
        "200",
        "--seconds",
        "0.2",
        "--files",
        "50",
    ]);
    assert!(v["machine"]["cpu"].is_string());
    let rows = v["rows"].as_array().unwrap();
    let what: Vec<&str> = rows.iter().map(|r| r["what"].as_str().unwrap()).collect();
    assert_eq!(
        what,
        [
            "read 4K",
            "write 4K",
            "write 4K, staged",
            "create",
            "stat",
            "reader with 2 writers",
            "create, 2 processes"
        ]
    );
    assert!(v["reader_fresh_file"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["stat_asked_us"].as_f64().unwrap() > 0.0, "{v}");
    // Each 64 KiB write and its 20 µs of work take at least the work.
    for k in [
        "here_written",
        "here_submitted",
        "client_written",
        "client_submitted",
    ] {
        let us = v["overlap"][k].as_f64().unwrap();
        assert!((20.0..10_000.0).contains(&us), "overlap {k}: {us} µs");
    }
    for r in rows {
        let (b, s, ratio) = (
            r["baseline"].as_f64().unwrap(),
            r["shared"].as_f64().unwrap(),
            r["ratio"].as_f64().unwrap(),
        );
        assert!(b > 0.0 && s > 0.0, "{r}");
        assert!((ratio - s / b).abs() <= 1e-9 * ratio, "{r}");
        let goal = r["goal"].as_str().unwrap();
        let met = r["met"].as_bool().unwrap();
        let asked: f64 = goal
            .trim_start_matches(['≤', '≥', ' '])
            .trim_end_matches('x')
            .parse()
            .unwrap();
        assert_eq!(
            met,
            if goal.starts_with('≤') {
                ratio <= asked
            } else {
                ratio >= asked
            },
            "{r}"
        );
    }
    assert_eq!(
        leftovers(),
        before,
        "the image or its socket was left in /dev/shm"
    );
}

/// The benchmark's files in /dev/shm.
fn leftovers() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("easyio-bench-shared"))
        .collect();
    v.sort();
    v
}
