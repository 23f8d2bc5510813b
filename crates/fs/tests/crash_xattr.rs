//! Crash consistency of `setxattr`, `removexattr` and hole punching on a tracing
//! region: at every point of the operation's trace — the durable image, the image with
//! every store made so far, and seeded samples in between — recovery leaves the file
//! exactly as it was before the operation or as it is after it, never a mix, and fsck
//! finds nothing wrong.

use std::sync::Arc;

use fs::{
    FileSystem, FormatOptions, MountOptions, OpenFlags, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE,
    XATTR_CREATE,
};
use pmem::crash::CrashCursor;
use pmem::{MemPmem, Pmem, TracePmem};
use testkit::pattern;

const REGION: usize = 2 << 20;
/// Seeded samples of the pending stores per crash point, besides none and all.
const SAMPLES: usize = 3;

/// What a crash may not tear: the file's extended attributes, contents and blocks.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    xattrs: Vec<(String, Vec<u8>)>,
    data: Vec<u8>,
    blocks: u64,
}

impl Snapshot {
    /// Names, lengths and checksums: short enough for a failure message.
    fn summary(&self) -> String {
        let crc = |b: &[u8]| crc32c::crc32c(b);
        let xattrs: Vec<String> = self
            .xattrs
            .iter()
            .map(|(n, v)| format!("{n}={}b/{:08x}", v.len(), crc(v)))
            .collect();
        format!(
            "[{}] data {}b/{:08x} blocks {}",
            xattrs.join(" "),
            self.data.len(),
            crc(&self.data),
            self.blocks
        )
    }
}

fn snapshot(fs: &FileSystem, path: &str) -> Snapshot {
    let mut list = vec![0u8; 64 << 10];
    let n = fs.listxattr(path, &mut list).unwrap();
    let mut xattrs = Vec::new();
    for name in list[..n].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let name = String::from_utf8(name.to_vec()).unwrap();
        let mut value = vec![0u8; 64 << 10];
        let len = fs.getxattr(path, &name, &mut value).unwrap();
        value.truncate(len);
        xattrs.push((name, value));
    }
    let st = fs.stat(path).unwrap();
    let fd = fs.open(path, OpenFlags::RDONLY, 0).unwrap();
    let mut data = vec![0u8; st.size as usize];
    assert_eq!(fs.pread(fd, &mut data, 0).unwrap(), data.len());
    fs.close(fd).unwrap();
    Snapshot {
        xattrs,
        data,
        blocks: st.blocks,
    }
}

/// Runs `setup` then `op` on a tracing region, and checks every crash state `op`
/// can leave.
fn every_crash_leaves_before_or_after(
    name: &str,
    setup: impl Fn(&FileSystem),
    op: impl Fn(&FileSystem),
) {
    let tp = Arc::new(TracePmem::new(vec![0u8; REGION]));
    FileSystem::format(&*tp, &FormatOptions::default()).unwrap();
    let (fs, _) = FileSystem::mount(tp.clone() as Arc<dyn Pmem>, MountOptions::default()).unwrap();
    setup(&fs);
    let before = snapshot(&fs, "/f");
    let start = tp.position();
    op(&fs);
    let end = tp.position();
    let after = snapshot(&fs, "/f");
    assert_ne!(before, after, "{name}: the operation changes nothing");
    fs.abandon();
    let trace = tp.trace();
    let mut cursor = CrashCursor::new(&trace);
    let (mut saw_before, mut saw_after) = (0, 0);
    for pos in start..=end {
        cursor.advance_to(pos);
        for choice in cursor.choices(SAMPLES, 0x5EED) {
            let image: Arc<dyn Pmem> = Arc::new(MemPmem::from_image(cursor.image(choice)));
            let (fs, _) = FileSystem::mount(image.clone(), MountOptions::default())
                .unwrap_or_else(|e| panic!("{name}: crash at {pos} ({choice}): mount: {e}"));
            let got = snapshot(&fs, "/f");
            if got == before {
                saw_before += 1;
            } else if got == after {
                saw_after += 1;
            } else {
                panic!(
                    "{name}: crash at {pos} ({choice}) left neither state: {}; before: {}; \
                     after: {}",
                    got.summary(),
                    before.summary(),
                    after.summary()
                );
            }
            fs.unmount().unwrap();
            let report = fs::fsck::check(&*image).unwrap();
            assert!(
                report.ok(),
                "{name}: crash at {pos} ({choice}): fsck {:#?}",
                report.problems
            );
        }
    }
    assert!(
        saw_before > 0 && saw_after > 0,
        "{name}: every crash state was one side ({saw_before} before, {saw_after} after)"
    );
}

fn file_with_xattrs(fs: &FileSystem) {
    let fd = fs
        .open("/f", OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
        .unwrap();
    fs.write(fd, &pattern(1, 3 * 4096 + 500)).unwrap();
    fs.fsetxattr(fd, "user.small", b"small value", 0).unwrap();
    fs.fsetxattr(fd, "user.big", &pattern(2, 6000), 0).unwrap();
    fs.fsetxattr(fd, "trusted.t", b"t", 0).unwrap();
    fs.close(fd).unwrap();
}

#[test]
fn a_crash_during_setxattr_leaves_the_old_set_or_the_new_one() {
    every_crash_leaves_before_or_after("replace", file_with_xattrs, |fs| {
        fs.setxattr("/f", "user.big", &pattern(3, 9000), 0).unwrap()
    });
    every_crash_leaves_before_or_after("create", file_with_xattrs, |fs| {
        fs.setxattr("/f", "user.new", b"new", XATTR_CREATE).unwrap()
    });
    every_crash_leaves_before_or_after(
        "first",
        |fs| {
            let fd = fs
                .open("/f", OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
                .unwrap();
            fs.close(fd).unwrap();
        },
        |fs| fs.setxattr("/f", "user.first", b"1", 0).unwrap(),
    );
}

#[test]
fn a_crash_during_removexattr_leaves_the_old_set_or_the_new_one() {
    every_crash_leaves_before_or_after("remove", file_with_xattrs, |fs| {
        fs.removexattr("/f", "user.big").unwrap()
    });
    every_crash_leaves_before_or_after(
        "remove-last",
        |fs| {
            let fd = fs
                .open("/f", OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
                .unwrap();
            fs.fsetxattr(fd, "user.only", b"only", 0).unwrap();
            fs.close(fd).unwrap();
        },
        |fs| fs.removexattr("/f", "user.only").unwrap(),
    );
}

#[test]
fn a_crash_during_a_punch_leaves_the_file_whole_or_punched() {
    let punch = |off: u64, len: u64| {
        move |fs: &FileSystem| {
            let fd = fs.open("/f", OpenFlags::RDWR, 0).unwrap();
            let mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
            fs.fallocate(fd, mode, off, len).unwrap();
            fs.close(fd).unwrap();
        }
    };
    // Partial pages at both ends and a whole page between: one commit.
    every_crash_leaves_before_or_after("punch", file_with_xattrs, punch(100, 2 * 4096));
    every_crash_leaves_before_or_after("punch-whole", file_with_xattrs, punch(4096, 4096));
    every_crash_leaves_before_or_after("allocate", file_with_xattrs, |fs| {
        let fd = fs.open("/f", OpenFlags::RDWR, 0).unwrap();
        fs.fallocate(fd, 0, 2 * 4096, 5 * 4096).unwrap();
        fs.close(fd).unwrap();
    });
}
