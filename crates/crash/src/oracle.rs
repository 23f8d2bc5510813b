//! The oracle: mounts a crash image, reads back everything a crash must preserve, and
//! says whether it is a state the workload's model allows.
//!
//! After recovery from a crash image: mount succeeds; the namespace equals the model
//! after the operations that had returned, or — if one was in flight — after that one
//! too (all or nothing: write data old or new, renames atomic, link counts right, no
//! byte a file never held); the allocator hands out no block still in use (a probe
//! file is written before unmounting); and fsck after the unmount finds nothing.
//!
//! What each mode may leave differs in one point: only `async` commits a write's entry
//! before its copy is done, so only there may recovery drop a committed write whose SN
//! the completion records do not show done. In the modes whose caller is blocked
//! (`cpu`, `semaphore`, `delegate`, `dma-sync`) the entry is committed after the data is
//! durable, and a dropped write means an entry committed over a copy still running.

use std::collections::HashMap;
use std::sync::Arc;

use fs::{FileKind, FileSystem, OpenFlags};
use pmem::{MemPmem, Pmem};

use crate::error::ReadBackError;
use crate::model::{Node, Snapshot, Xattrs};
use fs::Mode;

/// Name of the file the oracle writes after recovery (outside every workload's names).
pub const PROBE: &str = "/.crash-probe";
/// Bytes the probe writes: a few blocks, so the allocator must find free ones.
const PROBE_BYTES: usize = 3 * fs::BLOCK_SIZE as usize + 100;
/// Bytes read per call while reading a file back.
const READ_CHUNK: usize = 64 * 1024;

/// What was wrong with a crash image.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// One line: which check failed.
    pub what: String,
    /// Expected versus found, one line per difference (empty if not a mismatch).
    pub diff: Vec<String>,
}

impl Problem {
    fn new(what: impl Into<String>) -> Problem {
        Problem {
            what: what.into(),
            diff: Vec::new(),
        }
    }
}

/// A failed call of the read-back.
fn call(call: &'static str, path: &str) -> impl FnOnce(fs::Error) -> ReadBackError {
    let path = path.to_string();
    move |source| ReadBackError::Call { call, path, source }
}

/// Reads the whole namespace of a mounted file system.
pub fn snapshot_of(fs: &FileSystem) -> Result<Snapshot, ReadBackError> {
    let mut found: Vec<(String, Node, u64)> = Vec::new();
    let mut dirs = vec![String::new()];
    while let Some(dir) = dirs.pop() {
        let at = if dir.is_empty() { "/" } else { &dir };
        let list = fs.readdir(at).map_err(call("readdir", at))?;
        for ent in list {
            let path = format!("{dir}/{}", ent.name);
            let st = fs.lstat(&path).map_err(call("lstat", &path))?;
            let node = match st.kind {
                FileKind::Dir => {
                    dirs.push(path.clone());
                    Node::Dir {
                        mode: st.mode & 0o7777,
                        xattrs: xattrs_of(fs, &path)?,
                    }
                }
                FileKind::Symlink => Node::Symlink {
                    target: fs.readlink(&path).map_err(call("readlink", &path))?,
                },
                FileKind::File => {
                    let data = read_all(fs, &path)?;
                    if data.len() as u64 != st.size {
                        return Err(ReadBackError::Size {
                            path,
                            size: st.size,
                            read: data.len(),
                        });
                    }
                    Node::File {
                        mode: st.mode & 0o7777,
                        nlink: st.nlink,
                        links: Vec::new(),
                        data: model::Data::from_bytes(&data),
                        xattrs: xattrs_of(fs, &path)?,
                    }
                }
                FileKind::Fifo | FileKind::Socket | FileKind::CharDev | FileKind::BlockDev => {
                    Node::Special {
                        kind: special_kind(st.kind),
                        mode: st.mode & 0o7777,
                        rdev: st.rdev,
                    }
                }
            };
            found.push((path, node, st.ino));
        }
    }
    let mut links: HashMap<u64, Vec<String>> = HashMap::new();
    for (p, n, ino) in &found {
        if matches!(n, Node::File { .. }) {
            links.entry(*ino).or_default().push(p.clone());
        }
    }
    let mut out = Snapshot::default();
    for (path, mut node, ino) in found {
        if let Node::File { links: l, .. } = &mut node {
            *l = links[&ino].clone();
            l.sort();
        }
        out.0.insert(path, node);
    }
    Ok(out)
}

/// The extended attributes of the inode at `path` (a final link not followed), read
/// back through the file system.
fn xattrs_of(fs: &FileSystem, path: &str) -> Result<Xattrs, ReadBackError> {
    let mut names = vec![0u8; fs::xattr::MAX_XATTR_LIST];
    let n = fs
        .llistxattr(path, &mut names)
        .map_err(call("llistxattr", path))?;
    let mut out = Xattrs::new();
    for name in names[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        let mut value = vec![0u8; fs::xattr::MAX_XATTR_VALUE];
        let len = fs
            .lgetxattr(path, &name, &mut value)
            .map_err(call("lgetxattr", path))?;
        value.truncate(len);
        out.insert(name, value);
    }
    Ok(out)
}

fn read_all(fs: &FileSystem, path: &str) -> Result<Vec<u8>, ReadBackError> {
    let fd = fs
        .open(path, OpenFlags::RDONLY, 0)
        .map_err(call("open", path))?;
    let mut data = Vec::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let r = loop {
        match fs.read(fd, &mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) => break Err(call("read", path)(e)),
        }
    };
    fs.close(fd).map_err(call("close", path))?;
    r.map(|()| data)
}

/// Checks one crash image against the states the model allows (`allowed`, the first
/// being the state if the operation in flight did not happen).
pub fn check_image(image: Vec<u8>, allowed: &[&Snapshot], mode: Mode) -> Result<(), Problem> {
    let pm = Arc::new(MemPmem::from_image(image));
    let (fs, report) = FileSystem::mount(
        pm.clone() as Arc<dyn Pmem>,
        fs::MountOptions::with_mode(mode),
    )
    .map_err(|e| Problem::new(format!("mount failed: {e}")))?;
    if report.pending_writes_dropped > 0 && !mode.commits_before_copy() {
        return Err(Problem::new(format!(
            "recovery dropped {} committed write(s) whose copy had not completed: in {} mode \
             the caller waits for its data before committing, so none may be pending",
            report.pending_writes_dropped,
            mode.name()
        )));
    }
    let found = snapshot_of(&fs).map_err(|e| Problem::new(format!("reading back: {e}")))?;
    if !allowed.iter().any(|s| **s == found) {
        let diffs: Vec<Vec<String>> = allowed.iter().map(|s| s.diff(&found)).collect();
        let closest = diffs.into_iter().min_by_key(Vec::len).unwrap_or_default();
        let what = if allowed.len() > 1 {
            "namespace is neither the state before nor after the operation in flight \
             (diff against the closer one)"
        } else {
            "namespace differs from the state after the operations that returned"
        };
        return Err(Problem {
            what: what.into(),
            diff: closest,
        });
    }
    probe(&fs).map_err(|e| Problem::new(format!("writing after recovery: {e}")))?;
    fs.unmount()
        .map_err(|e| Problem::new(format!("unmount: {e}")))?;
    let report = fs::fsck::check(&*pm).map_err(|e| Problem::new(format!("fsck failed: {e}")))?;
    if !report.ok() {
        return Err(Problem {
            what: "fsck after recovery found problems".into(),
            diff: report.problems,
        });
    }
    Ok(())
}

fn probe(fs: &FileSystem) -> fs::Result<()> {
    let fd = fs.open(
        PROBE,
        OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY,
        0o600,
    )?;
    let r = fs.write(fd, &crate::ops::pattern(u64::MAX, PROBE_BYTES));
    fs.close(fd)?;
    r.map(drop)
}

/// The model's name for a special file's kind.
fn special_kind(kind: FileKind) -> model::Kind {
    match kind {
        FileKind::Fifo => model::Kind::Fifo,
        FileKind::Socket => model::Kind::Socket,
        FileKind::CharDev => model::Kind::CharDev,
        FileKind::BlockDev => model::Kind::BlockDev,
        FileKind::File => model::Kind::File,
        FileKind::Dir => model::Kind::Dir,
        FileKind::Symlink => model::Kind::Symlink,
    }
}
