//! Conformance through the shim, held to the kernel: `tests/conformance.py` makes
//! seeded random sequences of file-system calls (open with flag mixes, pread/pwrite,
//! truncate, rename, link, symlink, unlink, mkdir, rmdir, stat, chmod, lchown,
//! access, listdir, readlink) as root and as two other users (forked children that
//! change their ids, keeping the parent's descriptors), by absolute paths and by
//! relative ones after a chdir, with symbolic links and `.`/`..` in the way. Each
//! sequence runs in a tmpfs directory without the shim and in the mount under it,
//! on an image served on demand and through a server; every line must agree.
//!
//! Seeds: `EASYIO_CONFORMANCE_SEEDS` (default 4) sequences of
//! `EASYIO_CONFORMANCE_STEPS` (default 250) calls.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{fsck_clean, need, run, World};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance.py")
        .to_string_lossy()
        .into_owned()
}

/// Whether this process may change its ids (the users' calls need it).
fn root_or_skip() -> bool {
    !testkit::not_root("the shim's conformance test runs calls as other users")
}

/// The output of one sequence, with the root written `{R}`.
fn sequence(mut cmd: std::process::Command, root: &str) -> String {
    let out = run(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).replace(root, "{R}");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn compare(seed: u64, kernel: &str, shim: &str, mode: &str) {
    if kernel == shim {
        return;
    }
    let first = kernel
        .lines()
        .zip(shim.lines())
        .position(|(k, s)| k != s)
        .unwrap_or(kernel.lines().count().min(shim.lines().count()));
    let around = |t: &str| -> String {
        t.lines()
            .skip(first.saturating_sub(3))
            .take(6)
            .collect::<Vec<_>>()
            .join("\n")
    };
    panic!(
        "seed {seed}, {mode}: line {} differs (rerun: conformance.py ROOT {seed} STEPS)\nkernel:\n{}\n{mode}:\n{}",
        first + 1,
        around(kernel),
        around(shim)
    );
}

/// Runs every seed on tmpfs and through the shim (`socket`: joined to that server;
/// none: the image served on demand).
fn sequences_agree(w: &World, socket: Option<&Path>) {
    need("python3", "python3");
    let seeds = setting("EASYIO_CONFORMANCE_SEEDS", 4);
    let steps = setting("EASYIO_CONFORMANCE_STEPS", 250).to_string();
    for seed in 1..=seeds {
        let reference = w.reference.join(format!("s{seed}"));
        std::fs::create_dir_all(&reference).unwrap();
        std::fs::set_permissions(&reference, std::fs::Permissions::from_mode(0o755)).unwrap();
        let r = reference.to_str().unwrap().to_owned();
        let kernel = sequence(
            w.ref_cmd("python3", &[&script(), &r, &seed.to_string(), &steps]),
            &r,
        );
        // One line per call (the calls ran), then the tree.
        assert!(
            kernel.lines().filter(|l| !l.starts_with("tree ")).count() >= steps.parse().unwrap(),
            "{kernel}"
        );
        let dir = format!("{}/s{seed}", w.mount);
        let mut mk = w.shim_cmd("mkdir", &[&dir]);
        if let Some(s) = socket {
            mk.env("EASYIO_SERVER", s);
        }
        common::ok(&mut mk);
        let mut cmd = w.shim_cmd("python3", &[&script(), &dir, &seed.to_string(), &steps]);
        if let Some(s) = socket {
            cmd.env("EASYIO_SERVER", s);
        }
        let shim = sequence(cmd, &dir);
        compare(seed, &kernel, &shim, socket.map_or("image", |_| "server"));
    }
}

#[test]
fn calls_as_several_users_agree_with_the_kernel_on_an_image_served_on_demand() {
    if !root_or_skip() {
        return;
    }
    let w = World::new("conformance", 64);
    sequences_agree(&w, None);
    drop(common::open_when_free(&w.img));
    fsck_clean(&w.img);
}

#[test]
fn calls_as_several_users_agree_with_the_kernel_through_a_server() {
    static STOP: AtomicBool = AtomicBool::new(false);
    if !root_or_skip() {
        return;
    }
    let w = World::new("conformance-served", 64);
    let served = common::serve(&w, || STOP.load(Ordering::SeqCst));
    // The other users connect too: the socket is theirs to write.
    std::fs::set_permissions(&served.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    sequences_agree(&w, Some(&served.socket));
    STOP.store(true, Ordering::SeqCst);
    served.end(&w);
}
