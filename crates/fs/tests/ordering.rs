//! The persistence order of a write on a tracing region: what reaches memory, and
//! how many fences the write waits for.

use std::sync::Arc;

use fs::{FileSystem, FormatOptions, MountOptions, OpenFlags};
use pmem::trace::EventKind;
use pmem::{Pmem, TracePmem};

#[test]
fn a_cpu_overwrite_issues_its_data_then_its_entry_under_one_fence_then_its_tail() {
    let tp = Arc::new(TracePmem::new(vec![0u8; 16 << 20]));
    FileSystem::format(&*tp, &FormatOptions::default()).unwrap();
    let (fs, _) = FileSystem::mount(tp.clone() as Arc<dyn Pmem>, MountOptions::default()).unwrap();
    let fd = fs
        .open("/f", OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
        .unwrap();
    let data = vec![7u8; 64 << 10];
    fs.pwrite(fd, &data, 0).unwrap();

    let start = tp.position();
    fs.pwrite(fd, &data, 0).unwrap();
    let trace = tp.trace();
    let events = &trace.events[start..];

    let fences: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].kind == EventKind::Fence)
        .collect();
    assert_eq!(
        fences.len(),
        2,
        "one fence for data and entry, one for the tail"
    );
    let (first, second) = (fences[0], fences[1]);
    // Before the first fence: the 64 KiB of data, then the entry, one 64-byte slot,
    // all non-temporal (an entry is whole aligned lines: no line is read in for it).
    let before = &events[..first];
    assert!(
        before.iter().all(|e| e.kind == EventKind::NtStore),
        "{before:?}"
    );
    let nt_bytes: u64 = before.iter().map(|e| e.len as u64).sum();
    assert_eq!(nt_bytes, (64 << 10) + 64);
    let entry = before.last().unwrap();
    assert_eq!((entry.off % 64, entry.len), (0, 64), "{entry:?}");
    assert!(
        before[..before.len() - 1]
            .iter()
            .all(|e| e.off != entry.off),
        "the entry's line follows the data"
    );
    // Between the fences: the tail word alone, stored and written back.
    let commit = &events[first + 1..second];
    assert_eq!(commit.len(), 2, "{commit:?}");
    assert_eq!((commit[0].kind, commit[0].len), (EventKind::Store, 8));
    assert_eq!(commit[1].kind, EventKind::Flush);
    assert_eq!(commit[1].off, commit[0].off & !63);
    assert_eq!(second, events.len() - 1, "nothing after the commit's fence");

    let mut back = vec![0u8; data.len()];
    assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), data.len());
    assert_eq!(back, data);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
}
