//! An image on a host file system too small for it, as a user meets it: a real tmpfs
//! mounted with `size=8m` (needs root; skipped with a message otherwise, failing
//! when `CI` is set) and a 16 MiB
//! image. `mkfs` fails with ENOSPC and a one-line message and leaves no file; a sparse
//! copy of a 16 MiB image placed there is refused by `ls` and `put` the same way, before
//! any page is touched. No command dies of a signal (SIGBUS).

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use common::easyio;
use testkit::SmallTmpfs;

/// The size of the small file system.
const SMALL: &str = "8m";

/// Runs `easyio ARGS --image IMAGE`.
fn run(image: &Path, args: &[&str]) -> Output {
    easyio()
        .args(args)
        .arg("--image")
        .arg(image)
        .output()
        .unwrap()
}

/// Requires that the command failed with ENOSPC as its exit code, not a signal, and
/// printed one line naming the image; returns that line.
fn no_space(out: &Output, image: &Path) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.signal(), None, "killed by a signal: {err}");
    assert_eq!(out.status.code(), Some(libc::ENOSPC), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.contains(image.to_str().unwrap()), "{err}");
    err
}

#[test]
fn mkfs_on_a_full_host_file_system_is_enospc_in_one_line_and_leaves_nothing() {
    let Some(fs) = SmallTmpfs::mount("mkfs", SMALL) else {
        return;
    };
    let image = fs.path("image");
    let err = no_space(&run(&image, &["mkfs", "--size", "16M"]), &image);
    assert!(err.contains("No space left"), "{err}");
    assert!(!image.exists(), "a failed mkfs left the image behind");
}

#[test]
fn a_sparse_image_larger_than_its_file_system_is_refused_before_any_touch() {
    let Some(fs) = SmallTmpfs::mount("sparse", SMALL) else {
        return;
    };
    let scratch = std::env::temp_dir().join(format!("easyio-cli-sparse-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let made = scratch.join("image");
    assert!(run(&made, &["mkfs", "--size", "16M"]).status.success());
    // A copy with holes: only the pages mkfs wrote take space on the small file system.
    let image = fs.path("image");
    let cp = Command::new("cp")
        .arg("--sparse=always")
        .arg(&made)
        .arg(&image)
        .status()
        .unwrap();
    assert!(cp.success());
    let local = scratch.join("local.txt");
    std::fs::write(&local, b"some bytes\n").unwrap();
    let before = std::fs::read(&image).unwrap();
    no_space(&run(&image, &["ls", "/"]), &image);
    no_space(
        &run(&image, &["put", local.to_str().unwrap(), "/f"]),
        &image,
    );
    assert_eq!(
        std::fs::read(&image).unwrap(),
        before,
        "a refused command changed the image"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
