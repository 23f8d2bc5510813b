//! Helpers shared by the command's end-to-end tests: running the built `easyio` binary.

#![allow(dead_code)]

use std::process::Command;

/// The `easyio` binary this test build produced.
pub fn easyio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_easyio"))
}

/// Runs `easyio ARGS`, requires success (showing its stderr otherwise) and parses its
/// standard output as JSON.
pub fn json(args: &[&str]) -> serde_json::Value {
    let out = easyio().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "easyio {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
