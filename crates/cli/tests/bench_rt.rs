//! `easyio bench rt` end to end: the binary runs, and its JSON has one row per operation
//! with both kinds measured and their ratio, plus the runtime's per-worker counters.

mod common;

#[test]
fn bench_rt_json_has_every_operation_beside_its_kernel_thread_peer() {
    let v = common::json(&["bench", "rt", "--json", "--round-ms", "1"]);
    assert!(v["machine"]["cpu"].is_string());
    assert_eq!(v["workers"], 1);
    let results = v["results"].as_array().unwrap();
    let ops: Vec<&str> = results.iter().map(|r| r["op"].as_str().unwrap()).collect();
    assert_eq!(
        ops,
        [
            "yield-round-trip",
            "yield-switch",
            "spawn-join",
            "ping-pong",
            "ping-pong-2-workers"
        ]
    );
    for r in results {
        let u = r["uthread_ns"].as_f64().unwrap();
        let o = r["os_thread_ns"].as_f64().unwrap();
        let ratio = r["ratio"].as_f64().unwrap();
        assert!(u > 0.0 && o > 0.0, "{r}");
        assert!((ratio - o / u).abs() <= 1e-9 * ratio.max(1.0), "{r}");
    }
    assert_eq!(results[0]["target"], 20.0);
    assert_eq!(results[2]["target"], 10.0);
    assert!(results[1].get("target").is_none());
    let stats = v["stats"].as_array().unwrap();
    assert_eq!(stats.len(), 1);
    assert!(stats[0]["switches"].as_u64().unwrap() > 0);
}
