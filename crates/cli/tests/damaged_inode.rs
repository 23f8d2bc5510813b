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
    let ino = damage(&image.0, "/d/bad");
    (image, ino)
}

/// Flips one bit of the inode record of `path` (its checksum left stale); returns
/// the inode.
fn damage(image: &Path, path: &str) -> u64 {
    let stat: serde_json::Value =
        serde_json::from_str(&ok(&run(image, &["stat", path, "--json"]))).unwrap();
    let ino = stat["ino"].as_u64().unwrap();
    let region = pmem::Region::open(image).unwrap();
    let (geo, _) = fs::layout::Geometry::read(&region).unwrap();
    let off = geo.inode_off(ino) + 33;
    let mut b = [0u8];
    region.read(off, &mut b);
    region.write_persist(off, &[b[0] ^ 1]);
    ino
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

/// Runs `easyio fsck [--repair]`; returns its exit code and standard output.
fn fsck(image: &Path, repair: bool) -> (Option<i32>, String) {
    let mut args = vec!["fsck"];
    if repair {
        args.push("--repair");
    }
    let out = run(image, &args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn fsck_repair_drops_the_damaged_inode_and_leaves_a_clean_image() {
    let (image, ino) = damaged_image("repair");
    let (code, out) = fsck(&image.0, false);
    assert_eq!(code, Some(4), "{out}");
    assert!(
        out.contains(&format!("inode {ino}: checksum mismatch")),
        "{out}"
    );

    let (code, out) = fsck(&image.0, true);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!("repaired: dropped inode {ino}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("repaired: removed entry \"bad\" (inode {ino})")),
        "{out}"
    );
    assert!(out.contains("no problems found after repair"), "{out}");

    let (code, out) = fsck(&image.0, false);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("no problems found"), "{out}");
    assert_eq!(ok(&run(&image.0, &["ls", "/d"])), "");
    assert_eq!(ok(&run(&image.0, &["cat", "/keep"])), "kept\n");
    ok(&run(&image.0, &["mkdir", "/d/new"]));
    assert_eq!(fsck(&image.0, false).0, Some(0));

    // A clean image: nothing to do.
    let (code, out) = fsck(&image.0, true);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("nothing to repair"), "{out}");
}

#[test]
fn fsck_repair_reports_as_json() {
    let (image, ino) = damaged_image("repair-json");
    let out = run(&image.0, &["fsck", "--repair", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!r["before"]["problems"].as_array().unwrap().is_empty());
    assert!(r["after"]["problems"].as_array().unwrap().is_empty());
    let actions = r["actions"].as_array().unwrap();
    assert!(
        actions.iter().any(|a| a
            .as_str()
            .unwrap()
            .starts_with(&format!("dropped inode {ino}"))),
        "{actions:?}"
    );
}

#[test]
fn fsck_repair_refuses_an_image_whose_superblocks_are_both_damaged() {
    let (image, _) = damaged_image("repair-refused");
    {
        let region = pmem::Region::open(&image.0).unwrap();
        for off in [0, fs::BLOCK_SIZE] {
            let mut b = [0u8];
            region.read(off + 20, &mut b);
            region.write_persist(off + 20, &[b[0] ^ 0x10]);
        }
    }
    let before = std::fs::read(&image.0).unwrap();
    let (code, out) = fsck(&image.0, true);
    assert_eq!(code, Some(4), "{out}");
    assert!(out.contains("REFUSED: no superblock reads"), "{out}");
    assert!(
        out.contains("not repaired; the image was not changed"),
        "{out}"
    );
    assert!(
        std::fs::read(&image.0).unwrap() == before,
        "a refused repair changed the image"
    );
}

#[test]
fn fsck_repair_keeps_a_damaged_directorys_files_in_lost_found() {
    let (image, bad) = damaged_image("repair-lost");
    // Repair the file first, then damage the directory that held it.
    assert_eq!(fsck(&image.0, true).0, Some(0));
    let local = PathBuf::from(format!("{}.txt", image.0.display()));
    std::fs::write(&local, b"in d\n").unwrap();
    let put = easyio()
        .args(["put", "--image"])
        .arg(&image.0)
        .arg(&local)
        .arg("/d/f")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&local);
    ok(&put);
    let f: serde_json::Value =
        serde_json::from_str(&ok(&run(&image.0, &["stat", "/d/f", "--json"]))).unwrap();
    let f = f["ino"].as_u64().unwrap();
    let d = damage(&image.0, "/d");
    assert_ne!(d, bad);
    let (code, out) = fsck(&image.0, true);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!("repaired: dropped inode {d}")),
        "{out}"
    );
    assert!(out.contains("repaired: created /lost+found"), "{out}");
    assert!(
        out.contains(&format!(
            "repaired: kept inode {f}, which only a dropped directory reached, as /lost+found/#{f}"
        )),
        "{out}"
    );
    assert_eq!(ok(&run(&image.0, &["ls", "/"])), "keep\nlost+found\n");
    let kept = format!("/lost+found/#{f}");
    assert_eq!(ok(&run(&image.0, &["cat", &kept])), "in d\n");
    assert_eq!(fsck(&image.0, false).0, Some(0));
}
