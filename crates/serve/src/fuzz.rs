//! Fuzzing the server's request decoder and dispatch: what the `serve_requests`
//! cargo-fuzz target in `fuzz/` and the corpus-replay test run.
//!
//! The input: one byte of settings (bit 0: clients read directly, so writes go
//! through the page tables; bit 1: the client is an unprivileged user, not root; bit
//! 2: the file system runs in `async` mode, so copies of submitted writes run on
//! after their answers), then
//! payloads, each a little-endian `u16` length and that many bytes, answered in order
//! by one connection on a fresh in-memory file system. Nothing may panic; when the
//! connection ends, nothing it opened may stay open and no page table may stay
//! published; the unmounted image must pass `fsck` with no problem.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fs::{Cred, FileSystem, FormatOptions, MountOptions};
use pmem::{MemPmem, Pmem};

use crate::conn::{Common, Conn};
use crate::direct::Direct;
use crate::wire;

/// Bytes of the fuzzed region.
const REGION: usize = 4 << 20;

/// Answers the payloads `data` holds (see the module's documentation); panics on any
/// violation.
pub fn requests(data: &[u8]) {
    let Some((&settings, mut rest)) = data.split_first() else {
        return;
    };
    let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(REGION));
    let format = FormatOptions {
        inodes: Some(64),
        ..FormatOptions::default()
    };
    FileSystem::format(&*pm, &format).expect("format");
    let mode = match settings & 4 {
        0 => fs::Mode::Cpu,
        _ => fs::Mode::Async,
    };
    let options = MountOptions {
        mode,
        ..MountOptions::default()
    };
    let (fs, _) = FileSystem::mount(pm.clone(), options).expect("mount");
    let direct = (settings & 1 != 0)
        .then(|| Arc::new(Direct::new(fs.geometry().inodes).expect("shared memory")));
    if let Some(d) = &direct {
        fs.set_external_readers(d.clone());
        fs.set_inode_changes(d.clone());
    }
    let cred = match settings & 2 {
        0 => Cred::root(),
        _ => Cred::user(1000, 1000),
    };
    let common = Common::default();
    {
        let mut conn = Conn::new(&fs, cred, &common, direct.as_deref());
        while rest.len() >= 2 {
            let len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
            let payload = &rest[2..(2 + len).min(rest.len())];
            rest = &rest[(2 + len).min(rest.len())..];
            let (answer, _) = conn.answer_bytes(payload);
            wire::frame(&answer).expect("every answer fits a frame");
        }
    }
    // Handed over to a process that never came (the fuzzed client has no pid): gone at
    // the server's next sweep.
    common.sweep(&fs);
    assert_eq!(
        common.counts.open.load(Ordering::SeqCst),
        0,
        "descriptors left open"
    );
    if let Some(d) = &direct {
        assert_eq!(d.tables_published(), 0, "page tables left published");
    }
    fs.unmount().expect("unmount");
    let report = fs::fsck::check(&*pm).expect("fsck");
    assert!(report.problems.is_empty(), "fsck: {:?}", report.problems);
}

/// One fuzz input from `settings` and the payloads of `requests`, as [`requests`]
/// reads them (for seeds and tests).
pub fn encode(settings: u8, requests: &[wire::Request<'_>]) -> Vec<u8> {
    let mut out = vec![settings];
    for r in requests {
        let frame = wire::frame(r).expect("a request fits a frame");
        let payload = &frame[4..];
        out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        out.extend_from_slice(payload);
    }
    out
}
