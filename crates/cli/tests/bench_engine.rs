//! `easyio bench engine` and `easyio engines` end to end: the binary runs and its JSON
//! has the expected shape (timings are never asserted).

mod common;

use common::easyio;

#[test]
fn bench_engine_json_has_every_case_and_the_headline() {
    let v = common::json(&[
        "bench",
        "engine",
        "--json",
        "--round-ms",
        "1",
        "--backends",
        "cpu,software",
    ]);
    assert_eq!(v["backends"], serde_json::json!(["cpu", "software"]));
    let results = v["results"].as_array().unwrap();
    for backend in ["cpu", "software"] {
        for dir in ["to-region", "from-region"] {
            for size in [4096u64, 16384, 65536, 262144, 2097152] {
                for (metric, batch, channels) in
                    [("bandwidth", 1, 1), ("bandwidth", 4, 1), ("latency", 1, 1)]
                {
                    let row = results
                        .iter()
                        .find(|r| {
                            r["backend"] == backend
                                && r["direction"] == dir
                                && r["bytes"] == size
                                && r["metric"] == metric
                                && r["batch"] == batch
                                && r["channels"] == channels
                        })
                        .unwrap_or_else(|| {
                            panic!("no row {backend} {dir} {size} {metric} {batch}")
                        });
                    assert!(row["gib_per_s"].as_f64().unwrap() > 0.0);
                    assert!(row["ns_per_op"].as_f64().unwrap() > 0.0);
                    assert!(row["vs_cpu_copy"].as_f64().unwrap() > 0.0);
                }
            }
        }
    }
    assert!(results
        .iter()
        .any(|r| r["backend"] == "software" && r["channels"] == 2));
    let h = &v["headline"];
    assert_eq!(h["bytes"], 65536);
    for k in ["software_gib_per_s", "persistent_copy_gib_per_s", "ratio"] {
        assert!(h[k].as_f64().unwrap() > 0.0, "{k}");
    }
    let peers = v["peers"].as_array().unwrap();
    assert!(peers
        .iter()
        .any(|p| p["path"] == "persistent-copy" && p["bytes"] == 65536));
}

#[test]
fn engines_lists_every_backend() {
    let v = common::json(&["engines", "--json"]);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cpu", "software", "dsa"]);
    let dsa = &v[2];
    if dsa["available"] == false {
        assert!(dsa["detail"][0].as_str().unwrap().contains("/dev/dsa"));
    }
}

#[test]
fn bench_engine_rejects_an_unknown_backend() {
    let out = easyio()
        .args(["bench", "engine", "--round-ms", "1", "--backends", "gpu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(libc::EINVAL));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown engine"));
}
