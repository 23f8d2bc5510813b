//! Descriptor numbers are the kernel's contract: `tests/c/fds.c` runs the same
//! checks (dup, dup2, dup3, F_DUPFD, close-on-exec, descriptors 0-2 moved onto
//! files, offsets shared across fork, what stays open across exec, posix_spawn's
//! file actions) in a tmpfs directory without the shim and in the mount under it,
//! in both of the shim's multi-process modes: an image served on demand, and a
//! client of a server. Every line must agree.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{fsck_clean, run, World};

/// Runs the checks in `dir` by `cmd`; their output, with `dir` written `{D}`.
fn checks(mut cmd: std::process::Command, dir: &str) -> String {
    let out = run(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).replace(dir, "{D}");
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn kernel_checks(w: &World, exe: &str) -> String {
    let dir = w.reference.to_str().unwrap().to_owned();
    let text = checks(w.ref_cmd(exe, &[&dir]), &dir);
    // The checks must have run: the child's view and the spawn's are in it.
    assert!(text.contains("child fd 20 reads"), "{text}");
    assert!(
        text.contains("posix_spawn                              0"),
        "{text}"
    );
    text
}

fn compare(kernel: &str, shim: &str, mode: &str) {
    if kernel != shim {
        let diff: Vec<String> = kernel
            .lines()
            .zip(shim.lines())
            .filter(|(k, s)| k != s)
            .map(|(k, s)| format!("  kernel: {k}\n  {mode}: {s}"))
            .collect();
        panic!(
            "{mode} differs from the kernel ({} vs {} lines):\n{}\n--- {mode} in full:\n{shim}",
            kernel.lines().count(),
            shim.lines().count(),
            diff.join("\n")
        );
    }
}

#[test]
fn descriptors_behave_as_the_kernels_on_an_image_served_on_demand() {
    let w = World::new("fds", 32);
    let exe = common::build_c(&w, "fds");
    let exe = exe.to_str().unwrap();
    let kernel = kernel_checks(&w, exe);
    let shim = checks(w.shim_cmd(exe, &["{R}"]), &w.mount);
    compare(&kernel, &shim, "image");
    // Wait for the on-demand server to let the image go, then check it.
    drop(common::open_when_free(&w.img));
    fsck_clean(&w.img);
}

#[test]
fn descriptors_behave_as_the_kernels_through_a_server() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let w = World::new("fds-served", 32);
    let exe = common::build_c(&w, "fds");
    let exe = exe.to_str().unwrap();
    let kernel = kernel_checks(&w, exe);
    let served = common::serve(&w, || STOP.load(Ordering::SeqCst));
    let mut cmd = w.shim_cmd(exe, &["{R}"]);
    cmd.env("EASYIO_SERVER", &served.socket);
    let shim = checks(cmd, &w.mount);
    STOP.store(true, Ordering::SeqCst);
    served.end(&w);
    compare(&kernel, &shim, "server");
}
