//! Compatibility: a region image of the current on-region format, made once and checked
//! in (`tests/data/format-v2.img.sz`, see `tests/data/README.md`), must still check
//! clean, mount, and read back every file, directory, symbolic link and attribute it
//! was made with. A change of the format version, of the region header, of the layout
//! or of how log entries, inodes or the saved allocator are read fails here unless the
//! image is regenerated deliberately:
//!
//! ```sh
//! EASYIO_REGENERATE_GOLDEN=1 cargo test -p fs --test golden_image -- --ignored regenerate
//! ```
//!
//! which writes `tests/data/format-vN.img.sz` for the version this build writes.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fs::layout::FORMAT_VERSION;
use fs::{FileKind, FileSystem, FormatOptions, MountOptions, OpenFlags, ROOT_INO};
use pmem::{Pmem, Region, HEADER_LEN};

/// The format version of the checked-in image.
const GOLDEN_VERSION: u32 = 2;
/// Bytes of the region file, header included.
const REGION_BYTES: u64 = 1 << 20;
/// Owner and group every node of the image was given.
const UID: u32 = 1000;
const GID: u32 = 100;
/// Modification and access times given to every node (ns since the epoch).
const MTIME: i64 = 1_700_000_000_123_456_789;
const ATIME: i64 = 1_700_000_100_987_654_321;
/// Bytes of the multi-block file, and of the write over its middle.
const BIG_BYTES: usize = 3 * 4096 + 1234;
const BIG_OVERWRITE: (u64, usize) = (3000, 5000);
/// The truncated file: written this long, then cut to this length.
const TRUNC_FROM: usize = 10_000;
const TRUNC_TO: u64 = 5_000;
/// The sparse file: written at this offset only.
const SPARSE_AT: u64 = 9_000;

/// What fsck counts in the image: inodes, log entries, pool blocks in use.
const FACTS: (u64, u64, u64) = (12, 66, 23);

fn golden_path(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/format-v{version}.img.sz"))
}

/// `len` bytes that differ from block to block and from `seed` to `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A node of the image as it must read back.
struct Node {
    path: &'static str,
    body: Body,
    perm: u32,
    nlink: u32,
}

enum Body {
    Dir,
    File(Vec<u8>),
    Symlink(&'static str),
}

const README: &[u8] = b"easyio golden image, format version 2\n";

/// Every node of the image, root first.
fn expected() -> Vec<Node> {
    let mut big = pattern(1, BIG_BYTES);
    let (at, n) = BIG_OVERWRITE;
    big[at as usize..at as usize + n].copy_from_slice(&pattern(2, n));
    let mut sparse = vec![0u8; SPARSE_AT as usize];
    sparse.extend_from_slice(b"after the hole");
    let file = |path, data, perm, nlink| Node {
        path,
        body: Body::File(data),
        perm,
        nlink,
    };
    let dir = |path, perm, nlink| Node {
        path,
        body: Body::Dir,
        perm,
        nlink,
    };
    vec![
        dir("/", 0o755, 4),
        dir("/docs", 0o755, 3),
        dir("/docs/sub", 0o700, 2),
        dir("/empty-dir", 0o751, 2),
        file("/docs/readme.txt", README.to_vec(), 0o644, 2),
        file("/docs/big.bin", big, 0o640, 1),
        file("/docs/sub/deep.txt", b"deep\n".to_vec(), 0o600, 1),
        file("/hard-readme", README.to_vec(), 0o644, 2),
        file(
            "/renamed.txt",
            b"this file was called old-name.txt\n".to_vec(),
            0o444,
            1,
        ),
        file(
            "/truncated.bin",
            pattern(3, TRUNC_FROM)[..TRUNC_TO as usize].to_vec(),
            0o644,
            1,
        ),
        file("/sparse.bin", sparse, 0o644, 1),
        file("/empty", Vec::new(), 0o600, 1),
        Node {
            path: "/link-to-readme",
            body: Body::Symlink("docs/readme.txt"),
            perm: 0o777,
            nlink: 1,
        },
    ]
}

/// Builds the image's tree on a freshly formatted file system.
fn build(fs: &FileSystem) {
    let put = |path: &str, data: &[u8]| {
        let fd = fs
            .open(path, OpenFlags::WRONLY | OpenFlags::CREAT, 0o644)
            .unwrap();
        assert_eq!(fs.write(fd, data).unwrap(), data.len());
        fs.close(fd).unwrap();
    };
    fs.mkdir("/docs", 0o755).unwrap();
    fs.mkdir("/docs/sub", 0o700).unwrap();
    fs.mkdir("/empty-dir", 0o751).unwrap();
    put("/docs/readme.txt", README);
    put("/docs/big.bin", &pattern(1, BIG_BYTES));
    let fd = fs.open("/docs/big.bin", OpenFlags::WRONLY, 0).unwrap();
    let (at, n) = BIG_OVERWRITE;
    fs.pwrite(fd, &pattern(2, n), at).unwrap();
    fs.close(fd).unwrap();
    put("/docs/sub/deep.txt", b"deep\n");
    fs.link("/docs/readme.txt", "/hard-readme").unwrap();
    put("/old-name.txt", b"this file was called old-name.txt\n");
    fs.rename("/old-name.txt", "/renamed.txt").unwrap();
    put("/truncated.bin", &pattern(3, TRUNC_FROM));
    fs.truncate("/truncated.bin", TRUNC_TO).unwrap();
    let fd = fs
        .open("/sparse.bin", OpenFlags::WRONLY | OpenFlags::CREAT, 0o644)
        .unwrap();
    fs.pwrite(fd, b"after the hole", SPARSE_AT).unwrap();
    fs.close(fd).unwrap();
    put("/gone", b"removed before the image was saved");
    fs.unlink("/gone").unwrap();
    put("/empty", b"");
    fs.symlink("docs/readme.txt", "/link-to-readme").unwrap();
    // Attributes last, so that nothing after them moves a time.
    for n in expected() {
        if matches!(n.body, Body::Symlink(_)) {
            continue;
        }
        fs.chmod(n.path, n.perm).unwrap();
        fs.chown(n.path, Some(UID), Some(GID)).unwrap();
        fs.utimens(n.path, Some(ATIME), Some(MTIME)).unwrap();
    }
}

/// Every path under `dir`, depth first.
fn walk(fs: &FileSystem, dir: &str, out: &mut Vec<String>) {
    for e in fs.readdir(dir).unwrap() {
        let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
        out.push(path.clone());
        if e.kind == Some(FileKind::Dir) {
            walk(fs, &path, out);
        }
    }
}

fn read_all(fs: &FileSystem, path: &str) -> Vec<u8> {
    let fd = fs.open(path, OpenFlags::RDONLY, 0).unwrap();
    let mut data = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = fs.read(fd, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
    }
    fs.close(fd).unwrap();
    data
}

/// Checks every node of the mounted image; the times of the paths in `touched` only if
/// it is empty (they were changed since).
fn check_tree(fs: &FileSystem, touched: &[&str]) {
    let want = expected();
    let mut found = vec!["/".to_string()];
    walk(fs, "/", &mut found);
    found.sort();
    let mut names: Vec<String> = want.iter().map(|n| n.path.to_string()).collect();
    names.sort();
    assert_eq!(found, names, "the image's namespace");
    for n in &want {
        let st = fs.lstat(n.path).unwrap();
        let what = n.path;
        assert_eq!(st.mode & 0o7777, n.perm, "{what}: permission bits");
        assert_eq!(st.nlink, n.nlink, "{what}: link count");
        match &n.body {
            Body::Dir => assert_eq!(st.kind, FileKind::Dir, "{what}"),
            Body::File(data) => {
                assert_eq!(st.kind, FileKind::File, "{what}");
                assert_eq!(st.size, data.len() as u64, "{what}: size");
                assert!(read_all(fs, n.path) == *data, "{what}: content differs");
            }
            Body::Symlink(target) => {
                assert_eq!(st.kind, FileKind::Symlink, "{what}");
                assert_eq!(fs.readlink(n.path).unwrap(), *target, "{what}: target");
            }
        }
        if !matches!(n.body, Body::Symlink(_)) {
            assert_eq!((st.uid, st.gid), (UID, GID), "{what}: owner");
            if !touched.contains(&n.path) {
                assert_eq!((st.mtime_ns, st.atime_ns), (MTIME, ATIME), "{what}: times");
            }
        }
    }
    assert_eq!(fs.lstat("/").unwrap().ino, ROOT_INO);
    let (a, b) = (
        fs.lstat("/docs/readme.txt").unwrap(),
        fs.lstat("/hard-readme").unwrap(),
    );
    assert_eq!(a.ino, b.ino, "a hard link shares its inode");
    assert_eq!(
        fs.stat("/link-to-readme").unwrap().ino,
        a.ino,
        "the symbolic link leads to the file"
    );
}

/// The decompressed region file of the checked-in image.
fn golden_bytes() -> Vec<u8> {
    let path = golden_path(GOLDEN_VERSION);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bytes = Vec::new();
    snap::read::FrameDecoder::new(file)
        .read_to_end(&mut bytes)
        .unwrap();
    bytes
}

/// A region file holding `bytes`, removed on drop.
struct TempRegionFile(PathBuf);

impl TempRegionFile {
    fn new(bytes: &[u8], tag: &str) -> TempRegionFile {
        let dir = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!("easyio-golden-{tag}-{}.region", std::process::id()));
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, bytes).unwrap();
        TempRegionFile(path)
    }
}

impl Drop for TempRegionFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_checked_in_image_of_the_current_format_mounts_and_reads() {
    assert_eq!(
        FORMAT_VERSION, GOLDEN_VERSION,
        "the on-region format version changed: an image of the old version no longer \
         mounts. Regenerate the golden image deliberately (see this file's header) and \
         say in the commit what changed in the format"
    );
    let bytes = golden_bytes();
    assert_eq!(bytes.len() as u64, REGION_BYTES);
    let sb = HEADER_LEN as usize;
    assert_eq!(&bytes[sb..sb + 8], b"EASYIOFS");
    let version = u32::from_le_bytes(bytes[sb + 8..sb + 12].try_into().unwrap());
    assert_eq!(version, GOLDEN_VERSION, "the image's superblock version");

    let file = TempRegionFile::new(&bytes, "check");
    let region: Arc<dyn Pmem> = Arc::new(Region::open(&file.0).unwrap());
    let report = fs::fsck::check(&*region).unwrap();
    assert!(report.ok(), "fsck of the image: {:#?}", report.problems);
    assert!(report.notes.is_empty(), "{:#?}", report.notes);
    assert!(report.clean_unmount);
    assert_eq!(
        (report.inodes, report.log_entries, report.used_blocks),
        FACTS,
        "inodes, log entries and pool blocks in use"
    );

    let (fs, mount) = FileSystem::mount(region.clone(), MountOptions::default()).unwrap();
    assert!(
        mount.clean,
        "the saved allocator of a clean unmount is used"
    );
    assert_eq!(mount.superblock_replica_used, None);
    assert_eq!(
        (
            mount.journals_rolled_back,
            mount.pending_writes_dropped,
            mount.orphans_freed
        ),
        (0, 0, 0)
    );
    assert_eq!(
        fs.usage().free_blocks,
        fs.geometry().pool_blocks() - FACTS.2,
        "the saved allocator agrees with what the logs use"
    );
    check_tree(&fs, &[]);
    // The image takes new writes: the allocator hands out free blocks only.
    let new = pattern(4, 2 * 4096 + 10);
    let fd = fs
        .open("/docs/new.bin", OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
        .unwrap();
    fs.write(fd, &new).unwrap();
    fs.close(fd).unwrap();
    assert_eq!(read_all(&fs, "/docs/new.bin"), new);
    fs.unlink("/docs/new.bin").unwrap();
    check_tree(&fs, &["/docs"]);
    fs.unmount().unwrap();
    let report = fs::fsck::check(&*region).unwrap();
    assert!(report.ok(), "fsck after use: {:#?}", report.problems);

    // And once more after that unmount.
    let (fs, _) = FileSystem::mount(region, MountOptions::default()).unwrap();
    check_tree(&fs, &["/docs"]);
    fs.unmount().unwrap();
}

/// Writes `tests/data/format-vN.img.sz` for the format this build writes. Not run by
/// default, and refuses unless `EASYIO_REGENERATE_GOLDEN=1`, so that an image is only
/// ever replaced on purpose.
#[test]
#[ignore = "regenerates the checked-in image; run deliberately"]
fn regenerate() {
    assert_eq!(
        std::env::var("EASYIO_REGENERATE_GOLDEN").as_deref(),
        Ok("1"),
        "set EASYIO_REGENERATE_GOLDEN=1 to overwrite the checked-in image"
    );
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("easyio-golden-make-{}.region", std::process::id()));
    let _ = std::fs::remove_file(&path);
    {
        let region: Arc<dyn Pmem> = Arc::new(Region::create(&path, REGION_BYTES).unwrap());
        FileSystem::format(&*region, &FormatOptions::default()).unwrap();
        let (fs, _) = FileSystem::mount(region.clone(), MountOptions::default()).unwrap();
        build(&fs);
        check_tree(&fs, &[]);
        fs.unmount().unwrap();
        let report = fs::fsck::check(&*region).unwrap();
        assert!(report.ok(), "{:#?}", report.problems);
        eprintln!(
            "inodes, log entries, pool blocks in use: ({}, {}, {}) (FACTS)",
            report.inodes, report.log_entries, report.used_blocks
        );
    }
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let out = golden_path(FORMAT_VERSION);
    let mut enc = snap::write::FrameEncoder::new(std::fs::File::create(&out).unwrap());
    enc.write_all(&bytes).unwrap();
    enc.flush().unwrap();
    eprintln!("wrote {}", out.display());
}
