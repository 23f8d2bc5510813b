//! Images the user cannot write or whose header is damaged: `easyio fsck` opens the
//! region read-only, so it checks an image it cannot write (and changes nothing); the
//! image is made unwritable with the immutable attribute, which holds even for root (a
//! plain `chmod 444` does not stop root, who runs these tests in CI), and that test is
//! skipped where `chattr +i` does not work (failing when `CI` is set); `--read-only` mounts read it the same way.
//! `mkfs --force` reformats an image whatever its header says.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::easyio;

struct Image(PathBuf);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn fsck_and_read_only_mounts_read_an_image_they_cannot_write() {
    let image = Image(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("easyio-ro-{}.img", std::process::id())),
    );
    let mkfs = easyio()
        .args(["mkfs", "--size", "16M", "--image"])
        .arg(&image.0)
        .output()
        .unwrap();
    assert!(
        mkfs.status.success(),
        "{}",
        String::from_utf8_lossy(&mkfs.stderr)
    );
    let local = PathBuf::from(format!("{}.txt", image.0.display()));
    std::fs::write(&local, b"still readable\n").unwrap();
    let put = easyio()
        .args(["put", "--image"])
        .arg(&image.0)
        .arg(&local)
        .arg("/f")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&local);
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let before = std::fs::read(&image.0).unwrap();
    match Command::new("chattr").arg("+i").arg(&image.0).output() {
        Ok(o) if o.status.success() => {}
        other => {
            testkit::skip(format_args!(
                "cannot make the image immutable here with chattr +i ({other:?})"
            ));
            return;
        }
    }
    assert!(
        std::fs::OpenOptions::new()
            .write(true)
            .open(&image.0)
            .is_err(),
        "the image should not be writable now"
    );
    let out = easyio()
        .args(["fsck", "--image"])
        .arg(&image.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fsck of a read-only image: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("no problems found"));
    // A read-only mount reads it; a change is EROFS.
    let cat = easyio()
        .args(["cat", "--read-only", "--image"])
        .arg(&image.0)
        .arg("/f")
        .output()
        .unwrap();
    assert!(
        cat.status.success(),
        "{}",
        String::from_utf8_lossy(&cat.stderr)
    );
    assert_eq!(cat.stdout, b"still readable\n");
    let rm = easyio()
        .args(["rm", "--read-only", "--image"])
        .arg(&image.0)
        .arg("/f")
        .output()
        .unwrap();
    assert_eq!(
        rm.status.code(),
        Some(libc::EROFS),
        "{}",
        String::from_utf8_lossy(&rm.stderr)
    );
    assert_eq!(
        std::fs::read(&image.0).unwrap(),
        before,
        "fsck or a read-only mount changed the image"
    );
}

#[test]
fn mkfs_force_overwrites_a_damaged_header() {
    let image = Image(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("easyio-force-{}.img", std::process::id())),
    );
    let run = |args: &[&str]| {
        easyio()
            .args(args)
            .arg("--image")
            .arg(&image.0)
            .output()
            .unwrap()
    };
    assert!(run(&["mkfs", "--size", "16M"]).status.success());
    let mut bytes = std::fs::read(&image.0).unwrap();
    bytes[8] ^= 0xFF; // the region header's version
    std::fs::write(&image.0, &bytes).unwrap();
    let ls = run(&["ls"]);
    assert!(!ls.status.success());
    assert!(String::from_utf8_lossy(&ls.stderr).contains("region header"));
    let force = run(&["mkfs", "--force"]);
    assert!(
        force.status.success(),
        "{}",
        String::from_utf8_lossy(&force.stderr)
    );
    assert_eq!(std::fs::metadata(&image.0).unwrap().len(), 16 << 20);
    assert!(run(&["ls"]).status.success());
    assert!(run(&["fsck"]).status.success());
}
