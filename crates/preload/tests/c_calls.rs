//! `tests/c/compare.c`, built with `cc`, runs one sequence of intercepted calls under
//! the mount and in a tmpfs directory in the same shimmed process, and compares every
//! return value, errno and the data read back; `tests/c/uthread.c` shows a plain
//! `pread` in a uthread of the runtime the shim exports yielding while its copy runs.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{fsck_clean, host_file, need, ok, run, World};

#[test]
fn each_intercepted_call_answers_as_the_kernel_does() {
    let w = World::new("ccalls", 32);
    compare_calls(&w, None);
    fsck_clean(&w.img);
}

/// The same calls by a client of a server (`EASYIO_SERVER`): the server is this
/// test's thread, the program another process.
#[test]
fn each_intercepted_call_answers_as_the_kernel_does_through_a_server() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let w = World::new("ccalls-served", 32);
    let served = common::serve(&w, || STOP.load(Ordering::SeqCst));
    compare_calls(&w, Some(&served.socket));
    STOP.store(true, Ordering::SeqCst);
    served.end(&w);
}

/// Runs `compare.c` under the shim (joined to the server on `socket`, if given).
fn compare_calls(w: &World, socket: Option<&Path>) {
    need("cc", "gcc");
    let exe = common::build_c(w, "compare");
    let host = host_file(&w.dir, "host.txt", b"0123456789abcdefghij\n");
    let kernel = w.reference.to_str().unwrap().to_owned();
    let mut cmd = w.shim_cmd(
        exe.to_str().unwrap(),
        &["{R}", &kernel, host.to_str().unwrap()],
    );
    if let Some(s) = socket {
        cmd.env("EASYIO_SERVER", s);
    }
    let out = run(&mut cmd);
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
}

#[test]
fn a_plain_read_in_a_uthread_yields_while_its_copy_runs() {
    need("cc", "gcc");
    let w = World::new("uthread", 64);
    let exe = common::build_c(&w, "uthread");
    ok(&mut w.private_cmd(
        "python3",
        &[
            "-c",
            "import sys; open(sys.argv[1], 'wb').write(bytes([3]) * (8 << 20))",
            "{R}/big",
        ],
    ));
    // async mode copies on the engine, and emulated CXL memory makes the copy last;
    // the yield is the in-process file system's (EASYIO §5), so the image is
    // mounted in the process (`EASYIO_PRIVATE`).
    let mut cmd = w.private_cmd(exe.to_str().unwrap(), &["{R}/big"]);
    cmd.env("EASYIO_MODE", "async").env("EASYIO_EMULATE", "cxl");
    let out = run(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // In cpu mode the caller copies: nothing to yield for, and the program says so.
    let mut cmd = w.shim_cmd(exe.to_str().unwrap(), &["{R}/big"]);
    cmd.env("EASYIO_MODE", "cpu");
    let out = run(&mut cmd);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "yielded 0 of 5\n");
    fsck_clean(&w.img);
}
