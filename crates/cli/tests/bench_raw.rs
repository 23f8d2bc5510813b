//! `easyio bench raw` end to end: the binary runs, its JSON has one object per size and
//! path, and an existing region is never overwritten.

mod common;

use common::easyio;

#[test]
fn bench_raw_json_has_every_size_and_path() {
    let v = common::json(&["bench", "raw", "--json", "--round-ms", "2"]);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 5 * 4);
    for size in [4096u64, 16384, 65536, 262144, 2097152] {
        for path in [
            "persistent-copy",
            "c-nt-loop",
            "memcpy-read",
            "memcpy-flush-fence",
        ] {
            let row = results
                .iter()
                .find(|r| r["bytes"] == size && r["path"] == path)
                .unwrap_or_else(|| panic!("no row for {size} {path}"));
            assert!(row["gib_per_s"].as_f64().unwrap() > 0.0);
            assert!(row["ns_per_op"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn bench_raw_refuses_an_existing_file() {
    let path = format!("/dev/shm/easyio-cli-test-{}", std::process::id());
    std::fs::write(&path, b"precious").unwrap();
    let out = easyio()
        .args(["bench", "raw", "--round-ms", "1", "--image", &path])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists"));
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    std::fs::remove_file(&path).unwrap();
}
