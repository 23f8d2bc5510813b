//! `easyio bench preload` end to end with a tiny runtime and size: real fio under the
//! real shim on a real image, beside fio on tmpfs; every job on both targets, fio's
//! files found on the image with their size, the goals reported. Needs fio (Debian
//! package `fio`).

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// Longest the benchmark may run before the test kills it and fails.
const LIMIT: Duration = Duration::from_secs(240);

/// The benchmark process; on drop (the test failed or timed out) it is killed and its
/// scratch directory in /dev/shm removed.
struct Bench {
    child: Child,
}

impl Bench {
    fn wait(&mut self) -> Output {
        testkit::output(&mut self.child, LIMIT)
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ =
            std::fs::remove_dir_all(format!("/dev/shm/easyio-bench-preload-{}", self.child.id()));
    }
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// Checks one row's numbers and that fio's files were found.
fn check_row(r: &serde_json::Value) {
    let (ops, bytes, io) = (u(&r["ops"]), u(&r["bytes"]), u(&r["io_size"]));
    assert!(ops > 0, "{r}");
    assert_eq!(bytes, ops * io, "every operation moved its whole size: {r}");
    assert!(f(&r["ops_per_s"]) > 0.0 && f(&r["gib_per_s"]) > 0.0, "{r}");
    assert!(
        f(&r["p99_us"]) >= f(&r["p50_us"]) && f(&r["p50_us"]) > 0.0,
        "{r}"
    );
    assert!(f(&r["cpu_s"]) > 0.0, "fio used some CPU: {r}");
    assert_eq!(u(&r["files_checked"]), u(&r["numjobs"]), "{r}");
    let easyio = r["target"] == "easyio-preload";
    assert!(easyio || r["target"] == "tmpfs", "{r}");
    assert_eq!(r["vs_tmpfs"].is_number(), easyio, "{r}");
}

#[test]
fn fio_runs_through_the_shim_beside_tmpfs() {
    testkit::need("fio", "fio");
    let child = Command::new(env!("CARGO_BIN_EXE_easyio"))
        .args([
            "bench",
            "preload",
            "--runtime",
            "0.05",
            "--size",
            "1M",
            "--json",
        ])
        .arg("--shim")
        .arg(testkit::preload_shim())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut bench = Bench { child };
    let v = common::success_json(&bench.wait());
    assert_eq!(u(&v["file_bytes"]), 1 << 20);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 24, "6 jobs x 2 numjobs x 2 targets");
    for r in rows {
        check_row(r);
    }
    for (job, io) in [
        ("randread", 4096),
        ("seqwrite", 65536),
        ("seqwrite", 1 << 20),
    ] {
        for numjobs in [1, 2] {
            for target in ["easyio-preload", "tmpfs"] {
                assert!(
                    rows.iter().any(|r| r["job"] == job
                        && u(&r["io_size"]) == io
                        && u(&r["numjobs"]) == numjobs
                        && r["target"] == target),
                    "no row {job} {io} x{numjobs} on {target}"
                );
            }
        }
    }
    let goals = v["goals"].as_array().unwrap();
    assert_eq!(goals.len(), 6, "3 targets x 2 numjobs: {goals:?}");
    for g in goals {
        assert_eq!(
            g["met"].as_bool().unwrap(),
            f(&g["ratio"]) >= f(&g["asked"]),
            "{g}"
        );
    }
    let id = bench.child.id();
    assert!(
        !std::path::Path::new(&format!("/dev/shm/easyio-bench-preload-{id}")).exists(),
        "scratch directory left behind"
    );
}

#[test]
fn missing_fio_is_one_line_naming_the_package() {
    let out = common::easyio()
        .args(["bench", "preload", "--fio", "/nonexistent/fio", "--shim"])
        .arg(testkit::preload_shim())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Debian package fio"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn missing_shim_says_how_to_build_it() {
    let out = common::easyio()
        .args([
            "bench",
            "preload",
            "--shim",
            "/nonexistent/libeasyio_preload.so",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no shim at"), "{err}");
}
