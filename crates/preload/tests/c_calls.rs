//! `tests/c/compare.c`, built with `cc`, runs one sequence of intercepted calls under
//! the mount and in a tmpfs directory in the same shimmed process, and compares every
//! return value, errno and the data read back.

mod common;

use std::path::Path;
use std::process::Command;

use common::{fsck_clean, host_file, need, ok, run, World};

#[test]
fn each_intercepted_call_answers_as_the_kernel_does() {
    need("cc", "gcc");
    let w = World::new("ccalls", 32);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/compare.c");
    let exe = w.dir.join("compare");
    ok(Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg(&src)
        .arg("-o")
        .arg(&exe));
    let host = host_file(&w.dir, "host.txt", b"0123456789abcdefghij\n");
    let kernel = w.reference.to_str().unwrap().to_owned();
    let out = run(&mut w.shim_cmd(
        exe.to_str().unwrap(),
        &["{R}", &kernel, host.to_str().unwrap()],
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let compared: usize = stdout
        .trim()
        .strip_suffix(" calls compared: same")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(compared > 150, "{stdout}");
    fsck_clean(&w.img);
}
