//! Helpers shared by the command's end-to-end tests: running the built `easyio` binary.

#![allow(dead_code)]

pub mod server;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `easyio` binary this test build produced.
pub fn easyio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_easyio"))
}

/// Runs `easyio ARGS`, requires success (showing its stderr otherwise) and parses its
/// standard output as JSON.
pub fn json(args: &[&str]) -> serde_json::Value {
    success_json(&easyio().args(args).output().unwrap())
}

/// Requires that a finished command succeeded (showing its stderr otherwise) and parses
/// its standard output as JSON.
pub fn success_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "easyio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs a command, failing the test instead of hanging CI if it never finishes;
/// returns its output and process id.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> (Output, u32) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        std::io::Read::read_to_end(&mut so, &mut out).unwrap();
        out
    });
    let err_reader = std::thread::spawn(move || {
        std::io::Read::read_to_end(&mut se, &mut err).unwrap();
        err
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("{cmd:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = Output {
        status,
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    (out, pid)
}
