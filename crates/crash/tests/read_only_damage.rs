//! A damaged image is still readable: every field of the fuzz targets' valid images
//! (one cleanly unmounted, one left by a crash) damaged in turn, as real damage looks —
//! a flipped bit, its checksum left stale — then mounted read-only. Either the mount
//! fails with an error that says the image is corrupt, or it mounts, and then every
//! file reads back equal to the undamaged image or fails with EUCLEAN (the damaged
//! inodes only). Fields no checksum covers (pointers checked only for range, counters)
//! can change what a file holds without any check noticing; for those the property is
//! the weaker one: no panic, and errors are EUCLEAN or ENOENT. The region is never
//! written. (A directory listing shows the entries it cannot read with no kind; each
//! is EUCLEAN when named.)

use std::sync::Arc;

use crash::fuzz::{targets, Field};
use fs::{FileKind, FileSystem, MountOptions, OpenFlags};
use pmem::{MemPmem, Pmem};

/// What a path of the sample image holds, as read back.
#[derive(Debug, PartialEq, Eq)]
enum Content {
    File(Vec<u8>),
    Dir(Vec<String>),
    Link(String),
}

const PATHS: [&str; 6] = ["/", "/a", "/d", "/d/a2", "/c", "/s"];

fn read_path(fs: &FileSystem, path: &str) -> fs::Result<Content> {
    let st = fs.lstat(path)?;
    Ok(match st.kind {
        FileKind::Dir => {
            let mut names = Vec::new();
            for e in fs.readdir(path)? {
                if e.kind.is_some() {
                    names.push(e.name);
                    continue;
                }
                // Listed with no kind: its inode cannot be read, and naming it says so.
                let child = format!("{}/{}", path.trim_end_matches('/'), e.name);
                let err = fs.lstat(&child).unwrap_err();
                assert!(matches!(err, fs::Error::Corrupt(_)), "{child}: {err}");
            }
            Content::Dir(names)
        }
        FileKind::Symlink => Content::Link(fs.readlink(path)?),
        // Regular files (the tests make no special files).
        _ => {
            let fd = fs.open(path, OpenFlags::RDONLY, 0)?;
            let mut buf = vec![0u8; st.size.min(1 << 20) as usize];
            let n = fs.pread(fd, &mut buf, 0);
            fs.close(fd)?;
            buf.truncate(n?);
            Content::File(buf)
        }
    })
}

fn read_only() -> MountOptions {
    MountOptions {
        read_only: true,
        ..MountOptions::default()
    }
}

fn mount_view(image: Vec<u8>) -> (Arc<MemPmem>, fs::Result<(FileSystem, fs::MountReport)>) {
    let pm = Arc::new(MemPmem::from_image(image));
    let m = FileSystem::mount(pm.clone() as Arc<dyn Pmem>, read_only());
    (pm, m)
}

#[test]
fn every_damaged_field_mounts_read_only_or_names_the_damage() {
    let (mut mounted, mut refused, mut damaged_files) = (0, 0, 0);
    for target in targets() {
        let (_, m) = mount_view(target.image.clone());
        let (fs, _) = m.expect("the undamaged image mounts read-only");
        let want: Vec<(&str, Content)> = PATHS
            .iter()
            .map(|&p| (p, read_path(&fs, p).unwrap()))
            .collect();
        drop(fs);
        for &Field { off, width, csum } in &target.fields {
            for bit in [0u8, 7] {
                let mut image = target.image.clone();
                image[off as usize + (bit as usize % width as usize)] ^= 1 << bit;
                let before = image.clone();
                let (pm, m) = mount_view(image);
                let what = format!("field at {off:#x} (width {width}), bit {bit}");
                match m {
                    Err(e) => {
                        refused += 1;
                        assert!(matches!(e, fs::Error::Corrupt(_)), "{what}: {e}");
                        assert!(e.to_string().contains("corrupt"), "{what}: {e}");
                    }
                    Ok((fs, _)) => {
                        mounted += 1;
                        assert!(fs.is_read_only());
                        for (path, content) in &want {
                            match read_path(&fs, path) {
                                // A listing leaves out the entries it cannot read;
                                // each of those is EUCLEAN when named.
                                Ok(Content::Dir(got)) if csum.is_some() => {
                                    let Content::Dir(all) = content else { panic!() };
                                    for name in all {
                                        if got.contains(name) {
                                            continue;
                                        }
                                        let child =
                                            format!("{}/{name}", path.trim_end_matches('/'));
                                        let e = fs.lstat(&child).unwrap_err();
                                        assert!(
                                            matches!(e, fs::Error::Corrupt(_)),
                                            "{what}: {child}: {e}"
                                        );
                                    }
                                    assert!(
                                        got.iter().all(|n| all.contains(n)),
                                        "{what}: {path}: {got:?}"
                                    );
                                }
                                Ok(got) if csum.is_some() => {
                                    assert_eq!(&got, content, "{what}: {path} read back wrong")
                                }
                                Ok(_) => {}
                                Err(e) => {
                                    damaged_files += 1;
                                    let ok = matches!(e, fs::Error::Corrupt(_))
                                        || (csum.is_none() && matches!(e, fs::Error::NotFound));
                                    assert!(ok, "{what}: {path}: {e}");
                                }
                            }
                        }
                        assert!(matches!(fs.mkdir("/new", 0o755), Err(fs::Error::ReadOnly)));
                        fs.unmount().unwrap();
                    }
                }
                let after = Arc::try_unwrap(pm).expect("unshared").into_image();
                assert!(
                    after == before,
                    "{what}: a read-only mount wrote to the region"
                );
            }
        }
    }
    eprintln!(
        "{mounted} damaged images mounted read-only ({damaged_files} unreadable paths, each \
         EUCLEAN), {refused} refused with a corruption error"
    );
    assert!(mounted > 0 && refused > 0);
}

/// The checked-in fuzz corpus and seeded corruptions (checksums fixed or not, so the
/// damage may pass every check): mounted read-only, walked, never written; an error
/// is a typed one, never a panic.
#[test]
fn the_fuzz_corpus_mounts_read_only_without_writing() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut images = Vec::new();
    for (target, decode) in [
        (
            "mount_image",
            crash::fuzz::decode_patches as fn(&[u8]) -> Vec<u8>,
        ),
        ("corrupt_field", crash::fuzz::corrupt),
    ] {
        for f in std::fs::read_dir(dir.join(target)).unwrap() {
            images.push(decode(&std::fs::read(f.unwrap().path()).unwrap()));
        }
    }
    images.extend(crash::fuzz::seeded_corruptions(0x5EED, 300).map(|i| crash::fuzz::corrupt(&i)));
    let mut mounted = 0;
    for image in images {
        let before = image.clone();
        let (pm, m) = mount_view(image);
        if let Ok((fs, _)) = m {
            mounted += 1;
            for p in PATHS {
                let _ = read_path(&fs, p);
            }
            fs.unmount().unwrap();
        }
        let after = Arc::try_unwrap(pm).expect("unshared").into_image();
        assert!(after == before, "a read-only mount wrote to the region");
    }
    assert!(mounted > 0);
}
