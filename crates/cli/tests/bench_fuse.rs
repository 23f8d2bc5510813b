//! `easyio bench fuse` end to end with a tiny duration, on a real FUSE mount served by
//! the `easyio` binary: every workload through every door, the bytes checked, the
//! goals reported, and nothing left mounted. Skipped, saying so, only where /dev/fuse
//! is missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// Longest the benchmark may run before the test kills it and fails.
const LIMIT: Duration = Duration::from_secs(240);

/// The benchmark process; on drop (the test failed or timed out) it is killed and its
/// server's mount detached, so that the server ends and nothing is left mounted.
struct Bench {
    child: Child,
}

impl Bench {
    /// Where the benchmark mounts its image (named after its pid).
    fn mountpoint(&self) -> PathBuf {
        std::env::temp_dir().join(format!("easyio-bench-fuse-{}", self.child.id()))
    }

    /// Where it mounts the image served through FUSE over io_uring.
    fn uring_mountpoint(&self) -> PathBuf {
        std::env::temp_dir().join(format!("easyio-bench-fuse-uring-{}", self.child.id()))
    }

    /// Waits for the benchmark to end, killing it after [`LIMIT`].
    fn wait(&mut self) -> Output {
        testkit::output(&mut self.child, LIMIT)
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for m in [self.mountpoint(), self.uring_mountpoint()] {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(m)
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn mounted(mountpoint: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let needle = format!(" {} ", mountpoint.display());
    table.lines().any(|l| l.contains(&needle))
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// Checks one row's numbers and that the bytes it moved were checked.
fn check_row(r: &serde_json::Value, file_bytes: u64) {
    let (ops, bytes, io) = (u(&r["ops"]), u(&r["bytes"]), u(&r["io_size"]));
    assert!(ops > 0, "{r}");
    assert_eq!(bytes, ops * io, "every operation moved its whole size: {r}");
    // The round trip moves no data.
    let roundtrip = r["workload"] == "roundtrip";
    assert!(f(&r["ops_per_s"]) > 0.0, "{r}");
    assert_eq!(f(&r["gib_per_s"]) > 0.0, !roundtrip, "{r}");
    assert!(f(&r["p99_us"]) >= f(&r["p50_us"]), "{r}");
    assert!(f(&r["cpu_s_per_gib"]) >= 0.0, "{r}");
    let fuse = r["door"] == "easyio-fuse" || r["door"] == "easyio-fuse-uring";
    assert_eq!(r["server_cpu_s"].is_number(), fuse, "{r}");
    assert_eq!(r["vs_tmpfs"].is_number(), r["door"] != "tmpfs", "{r}");
    let checked = u(&r["checked_blocks"]);
    match r["workload"].as_str().unwrap() {
        "randread" | "seqread" => assert_eq!(checked, bytes / 4096, "{r}"),
        "randwrite" | "seqwrite" => assert_eq!(checked, file_bytes / 4096, "{r}"),
        "create" => {
            assert_eq!(u(&r["files_checked"]), ops, "{r}");
            assert_eq!(checked, ops, "{r}");
        }
        "roundtrip" => assert_eq!((io, checked), (0, 0), "{r}"),
        w => panic!("unknown workload {w}"),
    }
}

/// Runs `easyio bench fuse --duration 0.1 --size 4M --json ARGS`, requires that it
/// succeeded and left nothing mounted or behind, and returns its report.
fn bench_fuse(args: &[&str]) -> serde_json::Value {
    let child = Command::new(env!("CARGO_BIN_EXE_easyio"))
        .args([
            "bench",
            "fuse",
            "--duration",
            "0.1",
            "--size",
            "4M",
            "--json",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut bench = Bench { child };
    let mountpoints = [bench.mountpoint(), bench.uring_mountpoint()];
    let out = bench.wait();
    let v = common::success_json(&out);
    for m in mountpoints {
        assert!(!mounted(&m), "{} left mounted", m.display());
        assert!(!m.exists(), "{} left behind", m.display());
    }
    v
}

#[test]
fn every_workload_runs_through_the_mount_tmpfs_and_the_library() {
    if testkit::fuse_missing() {
        return;
    }
    let v = bench_fuse(&["--threads", "2", "--transport", "dev"]);
    assert_eq!(v["direct"], false);
    assert_eq!(v["mode"], "cpu");
    assert_eq!(u(&v["server_threads"]), 2);
    let file_bytes = u(&v["file_bytes"]);
    assert_eq!(file_bytes, 4 << 20);
    assert!(v["note"].as_str().unwrap().contains("durable"));
    let rows = v["results"].as_array().unwrap();
    let mut seen = Vec::new();
    for r in rows {
        check_row(r, file_bytes);
        seen.push(format!("{} {}", r["workload"], r["door"]));
    }
    seen.sort();
    let mut want = Vec::new();
    for w in [
        "roundtrip",
        "randread",
        "randwrite",
        "seqread",
        "seqwrite",
        "create",
    ] {
        for d in ["easyio-fuse", "tmpfs", "easyio-lib"] {
            want.push(format!("\"{w}\" \"{d}\""));
        }
    }
    want.sort();
    assert_eq!(seen, want);
    let goals = v["goals"].as_array().unwrap();
    assert_eq!(goals.len(), 5, "{goals:?}");
    for g in goals {
        let asked = match g["workload"].as_str().unwrap() {
            "seqread" | "seqwrite" => 0.8,
            _ => 0.3,
        };
        assert_eq!(f(&g["asked"]), asked, "{g}");
        assert_eq!(g["met"].as_bool().unwrap(), f(&g["ratio"]) >= asked, "{g}");
    }
}

/// The `fuse` module's switch for FUSE over io_uring.
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

#[test]
fn the_io_uring_transport_is_measured_beside_dev_fuse() {
    if testkit::fuse_missing() || testkit::not_root("to turn on FUSE over io_uring") {
        return;
    }
    let Ok(was) = std::fs::read_to_string(ENABLE_URING) else {
        testkit::skip("the kernel has no FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING)");
        return;
    };
    // On for the run, back to what it was after, however the test ends (connections
    // keep what they got).
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::write(ENABLE_URING, &self.0);
        }
    }
    let _restore = Restore(was.trim().to_string());
    std::fs::write(ENABLE_URING, "Y").unwrap();
    let v = bench_fuse(&["--workload", "randread", "--workload", "create"]);
    let file_bytes = u(&v["file_bytes"]);
    let mut seen = Vec::new();
    for r in v["results"].as_array().unwrap() {
        check_row(r, file_bytes);
        seen.push(format!("{} {}", r["workload"], r["door"]));
    }
    seen.sort();
    let mut want = Vec::new();
    for w in ["randread", "create"] {
        for d in ["easyio-fuse", "easyio-fuse-uring", "tmpfs", "easyio-lib"] {
            want.push(format!("\"{w}\" \"{d}\""));
        }
    }
    want.sort();
    assert_eq!(seen, want);
    assert_eq!(v["goals"].as_array().unwrap().len(), 4, "{}", v["goals"]);
}

#[test]
fn real_programs_run_on_the_mount_and_on_tmpfs() {
    if testkit::fuse_missing() {
        return;
    }
    let v = bench_fuse(&["--workload", "programs"]);
    assert!(v["results"].as_array().unwrap().is_empty());
    let rows = v["programs"].as_array().unwrap();
    let steps: Vec<&str> = rows.iter().map(|r| r["step"].as_str().unwrap()).collect();
    assert_eq!(
        steps,
        [
            "tar x",
            "cp -a",
            "git add",
            "git commit",
            "git status",
            "make -j2",
            "sqlite3",
            "rm -rf",
            "all"
        ]
    );
    for r in rows {
        let (fuse, tmpfs) = (f(&r["fuse_s"]), f(&r["tmpfs_s"]));
        assert!(fuse > 0.0 && tmpfs > 0.0, "{r}");
        assert!((f(&r["times_tmpfs"]) - fuse / tmpfs).abs() < 1e-9, "{r}");
    }
}

#[test]
fn o_direct_reaches_the_server_and_moves_the_right_bytes() {
    if testkit::fuse_missing() {
        return;
    }
    let v = bench_fuse(&["--direct", "--workload", "randread,seqwrite,create"]);
    assert_eq!(v["direct"], true);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 3 * 3);
    for r in rows {
        check_row(r, 4 << 20);
    }
    // Every read through the mount is a request to the server: it worked for them.
    let fuse_read = rows
        .iter()
        .find(|r| r["workload"] == "randread" && r["door"] == "easyio-fuse")
        .unwrap();
    assert!(f(&fuse_read["server_cpu_s"]) > 0.0, "{fuse_read}");
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        &["--threads", "0"][..],
        &["--duration", "0"],
        &["--size", "0"],
        &["--size", "17G"],
        &["--mode", "warp"],
        &["--workload", "scan"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_easyio"))
            .args(["bench", "fuse"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
    }
}
