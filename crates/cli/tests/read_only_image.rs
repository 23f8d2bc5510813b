//! `easyio fsck` on an image the user cannot write: it opens the region read-only, so
//! the check works (and changes nothing). The image is made unwritable with the
//! immutable attribute, which holds even for root (a plain `chmod 444` does not stop
//! root, who runs these tests in CI); skipped where `chattr` is not available.

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
fn fsck_checks_an_image_it_cannot_write() {
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
    let before = std::fs::read(&image.0).unwrap();
    match Command::new("chattr").arg("+i").arg(&image.0).output() {
        Ok(o) if o.status.success() => {}
        other => {
            eprintln!("skip: cannot make the image immutable here ({other:?})");
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
    assert_eq!(
        std::fs::read(&image.0).unwrap(),
        before,
        "fsck changed the image"
    );
}
