//! Compatibility: a region image of each on-region format this build reads, made once
//! and checked in (`tests/data/format-vN.img.sz`, see `tests/data/README.md`), must
//! still check clean, mount, and read back every file, directory, symbolic link,
//! attribute and extended attribute it was made with; an image of an older version is
//! upgraded by its first writable mount, never by a read-only one; an image of a newer
//! version is refused by name. A change of the format version, of the region header, of
//! the layout or of how log entries, inodes or the saved allocator are read fails here
//! unless the image is regenerated deliberately:
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
use fs::{
    FileKind, FileSystem, FormatOptions, MountOptions, OpenFlags, Whence, FALLOC_FL_KEEP_SIZE,
    FALLOC_FL_PUNCH_HOLE, ROOT_INO,
};
use pmem::crash::CrashCursor;
use pmem::{MemPmem, Pmem, Region, TracePmem, HEADER_LEN};

/// The format version of the newest checked-in image: the one this build writes.
const GOLDEN_VERSION: u32 = 5;
/// The older format versions this build still mounts, each with a checked-in image.
const OLDER_VERSIONS: [u32; 3] = [2, 3, 4];
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

/// What fsck counts in the image of each version: inodes, log entries, pool blocks in
/// use.
fn facts(version: u32) -> (u64, u64, u64) {
    match version {
        2 => (12, 66, 23),
        3 => FACTS_V3,
        4 => FACTS_V4,
        _ => FACTS_V5,
    }
}
const FACTS_V3: (u64, u64, u64) = (15, 94, 39);
/// Version 4 holds the same tree; its writes of one block run are sealed entries.
const FACTS_V4: (u64, u64, u64) = (15, 94, 39);
/// Version 5 holds the same tree; its sealed entries are of the second kind.
const FACTS_V5: (u64, u64, u64) = (15, 94, 39);
/// Version 3's extended attributes: (path, name, value).
fn xattrs() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    vec![
        ("/xattrs.txt", "trusted.t", b"trusted value".to_vec()),
        ("/xattrs.txt", "user.big", golden_fill(5, 5000)),
        ("/xattrs.txt", "user.color", b"blue".to_vec()),
        ("/xattrs.txt", "user.empty", Vec::new()),
        ("/docs", "user.dir", b"on a directory".to_vec()),
    ]
}
/// Version 3's punched file: written this long, then this range punched.
const PUNCH_FROM: usize = 5 * 4096;
const PUNCH: (u64, u64) = (4096 + 100, 2 * 4096 - 50);
/// Version 3's preallocated file: mode 0 over this many bytes, one write, and blocks
/// kept past the end.
const PREALLOC: u64 = 3 * 4096;
const PREALLOC_WRITE: (u64, &[u8]) = (5000, b"written into preallocated space");
const PREALLOC_KEEP: (u64, u64) = (3 * 4096, 2 * 4096);

fn golden_path(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/format-v{version}.img.sz"))
}

/// `len` bytes that differ from block to block and from `seed` to `seed`: the contents
/// of the checked-in images, so they stay as they are (not `testkit::pattern`).
fn golden_fill(seed: u64, len: usize) -> Vec<u8> {
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

fn readme(version: u32) -> Vec<u8> {
    format!("easyio golden image, format version {version}\n").into_bytes()
}

fn punched() -> Vec<u8> {
    let mut data = golden_fill(6, PUNCH_FROM);
    let (at, len) = PUNCH;
    data[at as usize..(at + len) as usize].fill(0);
    data
}

fn preallocated() -> Vec<u8> {
    let mut data = vec![0u8; PREALLOC as usize];
    let (at, bytes) = PREALLOC_WRITE;
    data[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
    data
}

/// Every node of the image of `version`, root first.
fn expected(version: u32) -> Vec<Node> {
    let mut big = golden_fill(1, BIG_BYTES);
    let (at, n) = BIG_OVERWRITE;
    big[at as usize..at as usize + n].copy_from_slice(&golden_fill(2, n));
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
    let mut nodes = vec![
        dir("/", 0o755, 4),
        dir("/docs", 0o755, 3),
        dir("/docs/sub", 0o700, 2),
        dir("/empty-dir", 0o751, 2),
        file("/docs/readme.txt", readme(version), 0o644, 2),
        file("/docs/big.bin", big, 0o640, 1),
        file("/docs/sub/deep.txt", b"deep\n".to_vec(), 0o600, 1),
        file("/hard-readme", readme(version), 0o644, 2),
        file(
            "/renamed.txt",
            b"this file was called old-name.txt\n".to_vec(),
            0o444,
            1,
        ),
        file(
            "/truncated.bin",
            golden_fill(3, TRUNC_FROM)[..TRUNC_TO as usize].to_vec(),
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
    ];
    if version >= 3 {
        nodes.extend([
            file(
                "/xattrs.txt",
                b"a file with extended attributes\n".to_vec(),
                0o644,
                1,
            ),
            file("/punched.bin", punched(), 0o644, 1),
            file("/prealloc.bin", preallocated(), 0o644, 1),
        ]);
    }
    nodes
}

/// Builds the image's tree on a freshly formatted file system.
fn build(fs: &FileSystem) {
    let version = FORMAT_VERSION;
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
    put("/docs/readme.txt", &readme(version));
    put("/docs/big.bin", &golden_fill(1, BIG_BYTES));
    let fd = fs.open("/docs/big.bin", OpenFlags::WRONLY, 0).unwrap();
    let (at, n) = BIG_OVERWRITE;
    fs.pwrite(fd, &golden_fill(2, n), at).unwrap();
    fs.close(fd).unwrap();
    put("/docs/sub/deep.txt", b"deep\n");
    fs.link("/docs/readme.txt", "/hard-readme").unwrap();
    put("/old-name.txt", b"this file was called old-name.txt\n");
    fs.rename("/old-name.txt", "/renamed.txt").unwrap();
    put("/truncated.bin", &golden_fill(3, TRUNC_FROM));
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
    build_v3(fs, &put);
    // Attributes last, so that nothing after them moves a time.
    for n in expected(version) {
        if matches!(n.body, Body::Symlink(_)) {
            continue;
        }
        fs.chmod(n.path, n.perm).unwrap();
        fs.chown(n.path, Some(UID), Some(GID)).unwrap();
        fs.utimens(n.path, Some(ATIME), Some(MTIME)).unwrap();
    }
}

/// What version 3 added: extended attributes (one replaced, one removed), a punched
/// file, a preallocated one.
fn build_v3(fs: &FileSystem, put: &dyn Fn(&str, &[u8])) {
    put("/xattrs.txt", b"a file with extended attributes\n");
    fs.setxattr("/xattrs.txt", "user.color", b"red", 0).unwrap();
    fs.setxattr("/xattrs.txt", "user.removed", b"gone", 0)
        .unwrap();
    for (path, name, value) in xattrs() {
        fs.setxattr(path, name, &value, 0).unwrap();
    }
    fs.removexattr("/xattrs.txt", "user.removed").unwrap();
    put("/punched.bin", &golden_fill(6, PUNCH_FROM));
    let fd = fs.open("/punched.bin", OpenFlags::RDWR, 0).unwrap();
    let mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    fs.fallocate(fd, mode, PUNCH.0, PUNCH.1).unwrap();
    fs.close(fd).unwrap();
    let fd = fs
        .open("/prealloc.bin", OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
        .unwrap();
    fs.fallocate(fd, 0, 0, PREALLOC).unwrap();
    fs.pwrite(fd, PREALLOC_WRITE.1, PREALLOC_WRITE.0).unwrap();
    fs.fallocate(fd, FALLOC_FL_KEEP_SIZE, PREALLOC_KEEP.0, PREALLOC_KEEP.1)
        .unwrap();
    fs.close(fd).unwrap();
}

/// Checks what version 3 added beyond the tree: extended attributes, the punched
/// file's hole, the preallocated file's blocks.
fn check_v3(fs: &FileSystem) {
    let mut want: Vec<(&str, String)> = Vec::new();
    for (path, name, value) in xattrs() {
        let mut buf = vec![0u8; 64 << 10];
        let n = fs.getxattr(path, name, &mut buf).unwrap();
        assert_eq!(&buf[..n], &value[..], "{path}: {name}");
        want.push((path, name.to_string()));
    }
    for path in ["/xattrs.txt", "/docs"] {
        let mut buf = vec![0u8; 4096];
        let n = fs.listxattr(path, &mut buf).unwrap();
        let mut got: Vec<String> = buf[..n]
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8(s.to_vec()).unwrap())
            .collect();
        got.sort();
        let mut names: Vec<String> = want
            .iter()
            .filter(|(p, _)| *p == path)
            .map(|(_, n)| n.clone())
            .collect();
        names.sort();
        assert_eq!(got, names, "{path}: the names listed");
    }
    let e = fs
        .getxattr("/xattrs.txt", "user.removed", &mut [])
        .unwrap_err();
    assert_eq!(e.errno(), libc::ENODATA);
    let blocks = |p: &str| fs.stat(p).unwrap().blocks / 8;
    assert_eq!(
        blocks("/punched.bin"),
        4,
        "the wholly punched page has no block"
    );
    let fd = fs.open("/punched.bin", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(fs.lseek(fd, 0, Whence::Hole).unwrap(), 2 * 4096);
    assert_eq!(fs.lseek(fd, 2 * 4096, Whence::Data).unwrap(), 3 * 4096);
    fs.close(fd).unwrap();
    assert_eq!(
        blocks("/prealloc.bin"),
        5,
        "preallocated blocks past the end are kept"
    );
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

/// Checks every node of the mounted image of `version`; the times of the paths in
/// `touched` only if it is empty (they were changed since).
fn check_tree(fs: &FileSystem, version: u32, touched: &[&str]) {
    let want = expected(version);
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
    if version >= 3 {
        check_v3(fs);
    }
}

/// The decompressed region file of the checked-in image of `version`.
fn golden_bytes(version: u32) -> Vec<u8> {
    let path = golden_path(version);
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
    check_image(GOLDEN_VERSION);
}

#[test]
fn checked_in_images_of_older_formats_mount_and_are_upgraded_by_a_writable_mount() {
    for version in OLDER_VERSIONS {
        check_image(version);
    }
}

#[test]
fn an_image_of_a_newer_format_is_refused_naming_both_versions() {
    let mut bytes = golden_bytes(GOLDEN_VERSION);
    let sb = HEADER_LEN as usize;
    for copy in [sb, sb + 4096] {
        bytes[copy + 8..copy + 12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let crc = crc32c::crc32c(&bytes[copy..copy + 96]);
        bytes[copy + 96..copy + 100].copy_from_slice(&crc.to_le_bytes());
    }
    let file = TempRegionFile::new(&bytes, "newer");
    for read_only in [false, true] {
        let region: Arc<dyn Pmem> = Arc::new(Region::open(&file.0).unwrap());
        let opts = MountOptions {
            read_only,
            ..MountOptions::default()
        };
        let e = FileSystem::mount(region, opts).err().expect("refused");
        assert_eq!(e.errno(), libc::EINVAL, "not damage: {e}");
        let e = e.to_string();
        let newer = format!("version {}", FORMAT_VERSION + 1);
        let both = e.contains(&newer) && e.contains(&format!("to {FORMAT_VERSION}"));
        assert!(both && e.contains("newer"), "{e}");
    }
    assert_eq!(
        std::fs::read(&file.0).unwrap(),
        bytes,
        "nothing was written"
    );
}

#[test]
fn a_crash_during_the_upgrade_leaves_an_image_that_checks_clean_mounts_and_reads() {
    for version in OLDER_VERSIONS {
        let bytes = golden_bytes(version);
        let tp = Arc::new(TracePmem::new(bytes[HEADER_LEN as usize..].to_vec()));
        let (fs, mount) =
            FileSystem::mount(tp.clone() as Arc<dyn Pmem>, MountOptions::default()).unwrap();
        assert_eq!(mount.format_upgraded_from, Some(version));
        let end = tp.position();
        fs.abandon();
        let trace = tp.trace();
        let mut cursor = CrashCursor::new(&trace);
        let mut versions_seen = std::collections::BTreeSet::new();
        for pos in 0..=end {
            cursor.advance_to(pos);
            for choice in cursor.choices(2, 0x0516) {
                let image = Arc::new(MemPmem::from_image(cursor.image(choice)));
                versions_seen.insert(superblock_versions(&*image));
                let report = fs::fsck::check(&*image).unwrap();
                assert!(
                    report.ok(),
                    "crash at {pos} ({choice}): {:#?}",
                    report.problems
                );
                let (fs, _) =
                    FileSystem::mount(image.clone() as Arc<dyn Pmem>, MountOptions::default())
                        .unwrap_or_else(|e| panic!("crash at {pos} ({choice}): {e}"));
                assert_eq!(
                    superblock_versions(&*image),
                    (FORMAT_VERSION, FORMAT_VERSION)
                );
                check_tree(&fs, version, &[]);
                fs.unmount().unwrap();
            }
        }
        assert!(
            versions_seen.contains(&(version, FORMAT_VERSION)),
            "the crash between the replica's upgrade and the primary's was tried: \
             {versions_seen:?}"
        );
    }
}

/// The sealed write entries in `region` whose checksum holds, by kind: (format version
/// 4's kind 8, version 5's kind 9). A slot of file data that looks like one by chance
/// is as likely as a CRC-32C collision.
fn sealed_entries(region: &dyn Pmem) -> (usize, usize) {
    let mut img = vec![0u8; region.len() as usize];
    region.read(0, &mut img);
    let mut n = (0, 0);
    for slot in img.chunks_exact(64) {
        if slot[1] != 1 || !matches!(slot[0], 8 | 9) {
            continue;
        }
        let mut zeroed = slot.to_vec();
        zeroed[4..8].fill(0);
        if crc32c::crc32c(&zeroed) != u32::from_le_bytes(slot[4..8].try_into().unwrap()) {
            continue;
        }
        if slot[0] == 8 {
            n.0 += 1;
        } else {
            n.1 += 1;
        }
    }
    n
}

/// Whether the image of `version` holds sealed write entries of the kinds it should:
/// none before version 4, version 4's kind in version 4, version 5's kind after.
fn check_sealed_kinds(region: &dyn Pmem, version: u32) {
    let (v4, v5) = sealed_entries(region);
    match version {
        ..=3 => assert_eq!((v4, v5), (0, 0), "no sealed entries before version 4"),
        4 => assert!(v4 > 0 && v5 == 0, "version 4's kind only: {v4}, {v5}"),
        _ => assert!(v4 == 0 && v5 > 0, "version 5's kind only: {v4}, {v5}"),
    }
}

fn superblock_versions(region: &dyn Pmem) -> (u32, u32) {
    let mut b = [0u8; 4];
    region.read(8, &mut b);
    let primary = u32::from_le_bytes(b);
    region.read(4096 + 8, &mut b);
    (primary, u32::from_le_bytes(b))
}

/// Checks, mounts (read-only, then writable) and uses the image of `version`.
fn check_image(version: u32) {
    let bytes = golden_bytes(version);
    assert_eq!(bytes.len() as u64, REGION_BYTES);
    let sb = HEADER_LEN as usize;
    assert_eq!(&bytes[sb..sb + 8], b"EASYIOFS");
    let on_image = u32::from_le_bytes(bytes[sb + 8..sb + 12].try_into().unwrap());
    assert_eq!(on_image, version, "the image's superblock version");

    let file = TempRegionFile::new(&bytes, &format!("check-v{version}"));
    let region: Arc<dyn Pmem> = Arc::new(Region::open(&file.0).unwrap());
    let report = fs::fsck::check(&*region).unwrap();
    assert!(report.ok(), "fsck of the image: {:#?}", report.problems);
    assert!(report.notes.is_empty(), "{:#?}", report.notes);
    assert!(report.clean_unmount);
    check_sealed_kinds(&*region, version);
    let facts = facts(version);
    assert_eq!(
        (report.inodes, report.log_entries, report.used_blocks),
        facts,
        "inodes, log entries and pool blocks in use"
    );
    {
        // A read-only mount reads everything and writes nothing, the version included.
        let opts = MountOptions {
            read_only: true,
            ..MountOptions::default()
        };
        let (fs, mount) = FileSystem::mount(region.clone(), opts).unwrap();
        assert_eq!(mount.format_upgraded_from, None);
        check_tree(&fs, version, &[]);
        fs.unmount().unwrap();
        assert_eq!(superblock_versions(&*region), (version, version));
    }
    let (fs, mount) = FileSystem::mount(region.clone(), MountOptions::default()).unwrap();
    let upgraded = (version < FORMAT_VERSION).then_some(version);
    assert_eq!(mount.format_upgraded_from, upgraded);
    assert_eq!(
        superblock_versions(&*region),
        (FORMAT_VERSION, FORMAT_VERSION),
        "a writable mount upgrades both superblocks"
    );
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
        fs.geometry().pool_blocks() - facts.2,
        "the saved allocator agrees with what the logs use"
    );
    check_tree(&fs, version, &[]);
    // A write of one block after the upgrade is a sealed entry of version 5's kind.
    let fd = fs
        .open("/docs/one.bin", OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
        .unwrap();
    let before = sealed_entries(&*region);
    fs.write(fd, &golden_fill(7, 4096)).unwrap();
    let after = sealed_entries(&*region);
    assert_eq!((after.0, after.1), (before.0, before.1 + 1), "{before:?}");
    fs.close(fd).unwrap();
    fs.unlink("/docs/one.bin").unwrap();
    // The image takes new writes: the allocator hands out free blocks only; and, once
    // upgraded, what the new version added.
    let new = golden_fill(4, 2 * 4096 + 10);
    let fd = fs
        .open("/docs/new.bin", OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
        .unwrap();
    fs.write(fd, &new).unwrap();
    fs.fsetxattr(fd, "user.new", b"value", 0).unwrap();
    fs.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096)
        .unwrap();
    fs.close(fd).unwrap();
    let mut expect = new.clone();
    expect[..4096].fill(0);
    assert_eq!(read_all(&fs, "/docs/new.bin"), expect);
    fs.unlink("/docs/new.bin").unwrap();
    check_tree(&fs, version, &["/docs"]);
    fs.unmount().unwrap();
    let report = fs::fsck::check(&*region).unwrap();
    assert!(report.ok(), "fsck after use: {:#?}", report.problems);

    // And once more after that unmount.
    let (fs, mount) = FileSystem::mount(region, MountOptions::default()).unwrap();
    assert_eq!(mount.format_upgraded_from, None);
    check_tree(&fs, version, &["/docs"]);
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
        check_tree(&fs, FORMAT_VERSION, &[]);
        fs.unmount().unwrap();
        let report = fs::fsck::check(&*region).unwrap();
        assert!(report.ok(), "{:#?}", report.problems);
        eprintln!(
            "inodes, log entries, pool blocks in use: ({}, {}, {}) (FACTS_V{FORMAT_VERSION})",
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
