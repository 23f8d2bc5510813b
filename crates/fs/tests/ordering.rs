//! The persistence order of a write on a tracing region: what reaches memory, and
//! how many fences the write waits for.

use std::sync::Arc;

use fs::{FileSystem, FormatOptions, MountOptions, OpenFlags};
use pmem::trace::EventKind;
use pmem::{Pmem, TracePmem};

#[test]
fn a_cpu_overwrite_issues_its_data_then_its_sealed_entry_under_one_fence() {
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
        fences,
        [events.len() - 1],
        "one fence for data and entry, and nothing after it: the entry commits itself"
    );
    // Before the fence: the 64 KiB of data (one run of blocks), then the sealed
    // entry, one 64-byte slot, all non-temporal (no line is read in for it).
    let before = &events[..fences[0]];
    assert!(
        before.iter().all(|e| e.kind == EventKind::NtStore),
        "{before:?}"
    );
    let nt_bytes: u64 = before.iter().map(|e| e.len as u64).sum();
    assert_eq!(nt_bytes, (64 << 10) + 64);
    let entry = before.last().unwrap();
    assert_eq!((entry.off % 64, entry.len), (0, 64), "{entry:?}");
    let mut first = [0u8; 64];
    tp.read(entry.off, &mut first);
    // The sealed write entry (`log.rs`): kind 9 (format version 5), first block at
    // 16, page count at 24, the seal of the data at 56.
    let word = |at: usize| u64::from_le_bytes(first[at..at + 8].try_into().unwrap());
    assert_eq!(first[0], 9, "a sealed write entry of format version 5");
    let (block, npages, seal) = (word(16), word(24) as u32, word(56));
    assert_eq!(npages, 16);
    let mut durable = vec![0u8; 64 << 10];
    tp.read(block * fs::BLOCK_SIZE, &mut durable);
    assert_eq!(
        seal,
        pmem::seal::seal_of(&durable),
        "the seal is the data's"
    );

    let mut back = vec![0u8; data.len()];
    assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), data.len());
    assert_eq!(back, data);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
}

#[test]
fn an_async_overwrite_still_commits_by_its_tail() {
    let tp = Arc::new(TracePmem::new(vec![0u8; 16 << 20]));
    FileSystem::format(&*tp, &FormatOptions::default()).unwrap();
    let opts = MountOptions::with_mode(mover::Mode::Async);
    let (fs, _) = FileSystem::mount(tp.clone() as Arc<dyn Pmem>, opts).unwrap();
    let fd = fs
        .open("/f", OpenFlags::RDWR | OpenFlags::CREAT, 0o644)
        .unwrap();
    let data = vec![9u8; 4096];
    fs.pwrite(fd, &data, 0).unwrap();
    let start = tp.position();
    fs.pwrite(fd, &data, 0).unwrap();
    let trace = tp.trace();
    let events = &trace.events[start..];
    // The tail store (a sealed word: the offset in its low 48 bits) commits the entry
    // just before the offset it names.
    let tail = events
        .iter()
        .find(|e| e.kind == EventKind::Store && e.len == 8)
        .expect("the tail store");
    let word = tp.load_u64(tail.off) & ((1 << 48) - 1);
    let mut first = [0u8; 64];
    tp.read(word - 64, &mut first);
    assert_eq!(first[0], 1, "an entry with an SN is a plain write entry");
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
}
