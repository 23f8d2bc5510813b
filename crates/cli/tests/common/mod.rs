//! Helpers shared by the command's end-to-end tests: running the built `easyio` binary.

#![allow(dead_code)]

pub mod server;

use std::process::{Command, Output};
use std::time::Duration;

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

/// Runs a command within `limit` ([`testkit::Running::output`]): its output and
/// process id.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> (Output, u32) {
    let child = testkit::Running::spawn(cmd);
    let pid = child.id();
    (child.output(limit), pid)
}
