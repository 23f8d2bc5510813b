//! An image with one damaged inode, run through the binary as a user would: `ls`
//! shows the damaged entry with kind `?` and naming it is EUCLEAN, while the other
//! files read back.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::easyio;
use pmem::Pmem;

/// An image file removed when the test ends.
pub struct Image(pub PathBuf);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn run(image: &Path, args: &[&str]) -> Output {
    easyio()
        .arg(args[0])
        .arg("--image")
        .arg(image)
        .args(&args[1..])
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A 16 MiB image holding `/keep` and `/d/bad`, whose inode record is then damaged
/// (one bit flipped, its checksum left stale). Returns the image and that inode.
pub fn damaged_image(name: &str) -> (Image, u64) {
    let image = Image(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("easyio-{name}-{}.img", std::process::id())),
    );
    ok(&run(&image.0, &["mkfs", "--size", "16M"]));
    let local = PathBuf::from(format!("{}.txt", image.0.display()));
    std::fs::write(&local, b"kept\n").unwrap();
    ok(&run(&image.0, &["mkdir", "/d"]));
    for dst in ["/keep", "/d/bad"] {
        let out = easyio()
            .args(["put", "--image"])
            .arg(&image.0)
            .arg(&local)
            .arg(dst)
            .output()
            .unwrap();
        ok(&out);
    }
    let _ = std::fs::remove_file(&local);
    let stat: serde_json::Value =
        serde_json::from_str(&ok(&run(&image.0, &["stat", "/d/bad", "--json"]))).unwrap();
    let ino = stat["ino"].as_u64().unwrap();
    let region = pmem::Region::open(&image.0).unwrap();
    let (geo, _) = fs::layout::Geometry::read(&region).unwrap();
    let off = geo.inode_off(ino) + 33;
    let mut b = [0u8];
    region.read(off, &mut b);
    region.write_persist(off, &[b[0] ^ 1]);
    (image, ino)
}

#[test]
fn ls_shows_a_damaged_entry_as_unknown_and_naming_it_is_euclean() {
    let (image, _) = damaged_image("ls-damaged");
    let long = ok(&run(&image.0, &["ls", "-l", "/d"]));
    let line = long
        .lines()
        .find(|l| l.ends_with(" bad"))
        .unwrap_or_else(|| {
            panic!("ls -l /d does not list the damaged entry:\n{long}");
        });
    assert!(line.starts_with('?'), "{line}");
    assert_eq!(ok(&run(&image.0, &["ls", "/d"])), "bad\n");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&run(&image.0, &["ls", "/d", "--json"]))).unwrap();
    assert_eq!(json[0]["name"], "bad");
    assert!(json[0]["kind"].is_null(), "{json}");
    let stat = run(&image.0, &["stat", "/d/bad"]);
    assert_eq!(stat.status.code(), Some(libc::EUCLEAN), "{stat:?}");
    assert_eq!(ok(&run(&image.0, &["cat", "/keep"])), "kept\n");
}
