//! The crash checker's side of the reference model: the workloads' operations applied
//! to the shared POSIX model (the `model` crate, which holds the semantics), and the
//! snapshot form in which the model's states and a recovered image are compared.
//!
//! A [`Snapshot`] is everything a crash must preserve, keyed by path: kind, permission
//! bits, link count, which paths share an inode, file bytes, symbolic-link targets,
//! device numbers, extended attributes. Timestamps are not compared (they are not
//! deterministic).

use std::collections::{BTreeMap, HashMap};

use model::{Access, Body, Data, Kind, OpenSpec, Target};

/// An inode's extended attributes: name → value.
pub type Xattrs = BTreeMap<String, Vec<u8>>;

/// What one path names, as a crash must preserve it.
#[derive(Clone, Debug)]
pub enum Node {
    /// A directory.
    Dir {
        /// Permission bits.
        mode: u32,
        /// Extended attributes.
        xattrs: Xattrs,
    },
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Link count.
        nlink: u32,
        /// Every path naming this inode, sorted (hard links).
        links: Vec<String>,
        /// The bytes (compared as read: holes and written zeros alike).
        data: Data,
        /// Extended attributes.
        xattrs: Xattrs,
    },
    /// A symbolic link.
    Symlink {
        /// Its target.
        target: String,
    },
    /// A FIFO, socket or device.
    Special {
        /// Which special file.
        kind: Kind,
        /// Permission bits.
        mode: u32,
        /// Device number.
        rdev: u64,
    },
}

impl PartialEq for Node {
    fn eq(&self, other: &Node) -> bool {
        match (self, other) {
            (
                Node::File {
                    mode,
                    nlink,
                    links,
                    data,
                    xattrs,
                },
                Node::File {
                    mode: m,
                    nlink: n,
                    links: l,
                    data: d,
                    xattrs: x,
                },
            ) => mode == m && nlink == n && links == l && data.same_bytes(d) && xattrs == x,
            (Node::Dir { mode, xattrs }, Node::Dir { mode: m, xattrs: x }) => {
                mode == m && xattrs == x
            }
            (Node::Symlink { target }, Node::Symlink { target: t }) => target == t,
            (
                Node::Special { kind, mode, rdev },
                Node::Special {
                    kind: k,
                    mode: m,
                    rdev: r,
                },
            ) => (kind, mode, rdev) == (k, m, r),
            _ => false,
        }
    }
}

impl Eq for Node {}

impl Node {
    /// The extended attributes of a file or directory (none for the other kinds,
    /// which the workloads give none).
    pub fn xattrs(&self) -> Option<&Xattrs> {
        match self {
            Node::Dir { xattrs, .. } | Node::File { xattrs, .. } => Some(xattrs),
            _ => None,
        }
    }
}

/// A whole namespace: path → node, the root excluded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot(pub BTreeMap<String, Node>);

/// Most differences a diff lists before summarising.
pub const DIFF_LINES: usize = 12;

impl Snapshot {
    /// How `found` differs from `self` (the expected state), one line per difference.
    pub fn diff(&self, found: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        for (path, want) in &self.0 {
            match found.0.get(path) {
                None => out.push(format!("{path}: missing (expected {})", describe(want))),
                Some(got) if got != want => out.push(format!("{path}: {}", node_diff(want, got))),
                Some(_) => {}
            }
        }
        for (path, got) in &found.0 {
            if !self.0.contains_key(path) {
                out.push(format!("{path}: unexpected {}", describe(got)));
            }
        }
        if out.len() > DIFF_LINES {
            let n = out.len();
            out.truncate(DIFF_LINES);
            out.push(format!("… {n} differences in all"));
        }
        out
    }
}

fn describe(n: &Node) -> String {
    match n {
        Node::Dir { mode, xattrs } => format!("directory mode {mode:o}{}", xattr_count(xattrs)),
        Node::File {
            mode,
            nlink,
            data,
            xattrs,
            ..
        } => format!(
            "file mode {mode:o}, {nlink} link(s), {} bytes{}",
            data.size(),
            xattr_count(xattrs)
        ),
        Node::Symlink { target } => format!("symlink to {target:?}"),
        Node::Special { kind, mode, rdev } => format!("{kind:?} mode {mode:o} device {rdev:#x}"),
    }
}

fn node_diff(want: &Node, got: &Node) -> String {
    let (
        Node::File {
            mode: wm,
            nlink: wn,
            links: wl,
            data: wd,
            xattrs: wx,
        },
        Node::File {
            mode: gm,
            nlink: gn,
            links: gl,
            data: gd,
            xattrs: gx,
        },
    ) = (want, got)
    else {
        return match (want.xattrs(), got.xattrs()) {
            (Some(w), Some(g)) if w != g && describe(want) == describe(got) => xattr_diff(w, g),
            _ => format!("{}, expected {}", describe(got), describe(want)),
        };
    };
    let mut parts = Vec::new();
    if wx != gx {
        parts.push(xattr_diff(wx, gx));
    }
    if wm != gm {
        parts.push(format!("mode {gm:o}, expected {wm:o}"));
    }
    if wn != gn {
        parts.push(format!("{gn} link(s), expected {wn}"));
    }
    if wl != gl {
        parts.push(format!("linked as {gl:?}, expected {wl:?}"));
    }
    if wd.size() != gd.size() {
        parts.push(format!("{} bytes, expected {}", gd.size(), wd.size()));
    }
    let (wd, gd) = (wd.to_vec(), gd.to_vec());
    if let Some(at) = wd.iter().zip(gd.iter()).position(|(a, b)| a != b) {
        let end = (at + 8).min(wd.len()).min(gd.len());
        parts.push(format!(
            "data differs from byte {at}: found {:02x?}, expected {:02x?}",
            &gd[at..end],
            &wd[at..end]
        ));
    }
    parts.join("; ")
}

/// How many extended attributes a node has, as a description says it (nothing if
/// none).
fn xattr_count(x: &Xattrs) -> String {
    match x.len() {
        0 => String::new(),
        n => format!(", {n} extended attribute(s)"),
    }
}

fn xattr_diff(want: &Xattrs, got: &Xattrs) -> String {
    let names = |x: &Xattrs| {
        x.iter()
            .map(|(n, v)| format!("{n} ({} bytes)", v.len()))
            .collect::<Vec<_>>()
    };
    format!(
        "extended attributes {:?}, expected {:?}",
        names(got),
        names(want)
    )
}

/// An errno the model answers (`libc::ENOENT`, ...): the operation would fail on a
/// correct file system.
pub type ModelResult<T> = Result<T, model::Errno>;

/// The shadow of the file system under test: the shared POSIX model the workload's
/// operations are applied to, and the workload's descriptor slots mapped to its
/// descriptors. It holds no semantics of its own.
#[derive(Clone, Debug, Default)]
pub struct Shadow {
    posix: model::Model,
    slots: HashMap<u32, model::Fd>,
}

impl Shadow {
    /// An empty file system.
    pub fn new() -> Shadow {
        Shadow::default()
    }

    /// The shared model underneath.
    pub fn posix(&self) -> &model::Model {
        &self.posix
    }

    fn kind(&self, path: &str) -> Option<Kind> {
        let id = self.posix.resolve(path, false).ok()?;
        Some(self.posix.node(id).kind())
    }

    /// Whether `path` exists (a final symbolic link not followed).
    pub fn exists(&self, path: &str) -> bool {
        self.kind(path).is_some()
    }

    /// Whether `path` is a directory.
    pub fn is_dir(&self, path: &str) -> bool {
        self.kind(path) == Some(Kind::Dir)
    }

    /// Whether `path` is a regular file.
    pub fn is_file(&self, path: &str) -> bool {
        self.kind(path) == Some(Kind::File)
    }

    /// Whether `path` is an empty directory.
    pub fn is_empty_dir(&self, path: &str) -> bool {
        self.is_dir(path) && self.posix.readdir(path).is_ok_and(|v| v.is_empty())
    }

    /// Size of the file at `path` (0 if none).
    pub fn size(&self, path: &str) -> u64 {
        match self.kind(path) {
            Some(Kind::File) => self.posix.stat(Target::Link(path)).map_or(0, |s| s.size),
            _ => 0,
        }
    }

    /// Size of the file open in `slot` (0 if none).
    pub fn fd_size(&self, slot: u32) -> u64 {
        self.slots
            .get(&slot)
            .and_then(|&fd| self.posix.stat(Target::Fd(fd)).ok())
            .map_or(0, |s| s.size)
    }

    /// Whether descriptor slot `slot` is open.
    pub fn fd_open(&self, slot: u32) -> bool {
        self.slots.contains_key(&slot)
    }

    /// `open(path, flags)`, `f(descriptor)`, `close`, as the workloads' one-shot
    /// operations run them.
    fn with_file<T>(
        &mut self,
        path: &str,
        spec: OpenSpec,
        f: impl FnOnce(&mut model::Model, model::Fd) -> ModelResult<T>,
    ) -> ModelResult<T> {
        let fd = self.posix.open(path, &spec)?;
        let r = f(&mut self.posix, fd);
        self.posix.close(fd)?;
        r
    }

    /// `open(O_CREAT|O_EXCL|O_WRONLY, mode)`, `close`.
    pub fn create(&mut self, path: &str, mode: u32) -> ModelResult<()> {
        let spec = OpenSpec {
            creat: true,
            excl: true,
            mode,
            ..OpenSpec::new(Access::Write)
        };
        self.with_file(path, spec, |_, _| Ok(()))
    }

    /// `mkdir`.
    pub fn mkdir(&mut self, path: &str, mode: u32) -> ModelResult<()> {
        self.posix.mkdir(path, mode).map(drop)
    }

    /// `symlink`.
    pub fn symlink(&mut self, target: &str, path: &str) -> ModelResult<()> {
        self.posix.symlink(target, path).map(drop)
    }

    /// `open(O_WRONLY)`, `pwrite` at `off`, `close`; or with `off` `None`,
    /// `open(O_WRONLY|O_APPEND)`, `write`, `close`.
    pub fn write(&mut self, path: &str, off: Option<u64>, buf: &[u8]) -> ModelResult<()> {
        let spec = OpenSpec {
            append: off.is_none(),
            ..OpenSpec::new(Access::Write)
        };
        self.with_file(path, spec, |m, fd| match off {
            Some(off) => m.pwrite(fd, buf, off).map(drop),
            None => m.write(fd, buf).map(drop),
        })
    }

    /// `open(O_WRONLY|O_TRUNC)`, `close`.
    pub fn open_trunc(&mut self, path: &str) -> ModelResult<()> {
        let spec = OpenSpec {
            trunc: true,
            ..OpenSpec::new(Access::Write)
        };
        self.with_file(path, spec, |_, _| Ok(()))
    }

    /// `open(O_RDONLY)`, `fsync`, `close`.
    pub fn fsync(&mut self, path: &str) -> ModelResult<()> {
        self.with_file(path, OpenSpec::new(Access::Read), |_, _| Ok(()))
    }

    /// `pwrite` through the descriptor in `slot`.
    pub fn write_fd(&mut self, slot: u32, off: u64, buf: &[u8]) -> ModelResult<()> {
        let fd = *self.slots.get(&slot).ok_or(libc::EBADF)?;
        self.posix.pwrite(fd, buf, off).map(drop)
    }

    /// `truncate`.
    pub fn truncate(&mut self, path: &str, len: u64) -> ModelResult<()> {
        self.posix.truncate(path, len)
    }

    /// `chmod`.
    pub fn chmod(&mut self, path: &str, mode: u32) -> ModelResult<()> {
        self.posix.chmod(Target::Path(path), mode)
    }

    /// `unlink` (`dir` false) or `rmdir` (`dir` true).
    pub fn remove(&mut self, path: &str, dir: bool) -> ModelResult<()> {
        if dir {
            self.posix.rmdir(path)
        } else {
            self.posix.unlink(path)
        }
    }

    /// `link`.
    pub fn link(&mut self, old: &str, new: &str) -> ModelResult<()> {
        self.posix.link(old, new)
    }

    /// `rename`.
    pub fn rename(&mut self, old: &str, new: &str) -> ModelResult<()> {
        self.posix.rename(old, new, 0)
    }

    /// `open(O_RDWR)` of `path` into descriptor slot `slot` (a slot in use is `EBUSY`:
    /// a workload error, not a file-system one).
    pub fn open(&mut self, slot: u32, path: &str) -> ModelResult<()> {
        if self.slots.contains_key(&slot) {
            return Err(libc::EBUSY);
        }
        let fd = self.posix.open(path, &OpenSpec::new(Access::ReadWrite))?;
        self.slots.insert(slot, fd);
        Ok(())
    }

    /// `close` of descriptor slot `slot`: an unlinked file goes with its last one.
    pub fn close(&mut self, slot: u32) -> ModelResult<()> {
        let fd = self.slots.remove(&slot).ok_or(libc::EBADF)?;
        self.posix.close(fd)
    }

    /// `setxattr(path, name, value, flags)`.
    pub fn setxattr(
        &mut self,
        path: &str,
        name: &str,
        value: &[u8],
        flags: u32,
    ) -> ModelResult<()> {
        self.posix.setxattr(Target::Path(path), name, value, flags)
    }

    /// `removexattr(path, name)`.
    pub fn removexattr(&mut self, path: &str, name: &str) -> ModelResult<()> {
        self.posix.removexattr(Target::Path(path), name)
    }

    /// The extended attributes of the inode at `path` (a final link not followed).
    pub fn xattrs(&self, path: &str) -> Xattrs {
        self.posix
            .resolve(path, false)
            .map(|id| self.posix.node(id).xattrs.clone())
            .unwrap_or_default()
    }

    /// `mknod(path, mode, rdev)`.
    pub fn mknod(&mut self, path: &str, mode: u32, rdev: u64) -> ModelResult<()> {
        self.posix.mknod(path, mode, rdev).map(drop)
    }

    /// `renameat2(old, new, RENAME_EXCHANGE)`.
    pub fn exchange(&mut self, old: &str, new: &str) -> ModelResult<()> {
        self.posix.rename(old, new, model::RENAME_EXCHANGE)
    }

    /// `open(O_WRONLY)`, `fallocate(PUNCH_HOLE|KEEP_SIZE, off, len)`, `close`.
    pub fn punch(&mut self, path: &str, off: u64, len: u64) -> ModelResult<()> {
        let mode = model::FALLOC_PUNCH_HOLE | model::FALLOC_KEEP_SIZE;
        self.with_file(path, OpenSpec::new(Access::Write), |m, fd| {
            m.fallocate(fd, mode, off as i64, len as i64)
        })
    }

    /// `open(dir, O_TMPFILE|O_RDWR, mode)`, `write`, `linkat(fd, "", path,
    /// AT_EMPTY_PATH)`, `close`.
    pub fn tmpfile_link(
        &mut self,
        dir: &str,
        path: &str,
        mode: u32,
        buf: &[u8],
    ) -> ModelResult<()> {
        let spec = OpenSpec {
            tmpfile: true,
            directory: true,
            mode,
            ..OpenSpec::new(Access::ReadWrite)
        };
        let fd = self.posix.open(dir, &spec)?;
        let r = self
            .posix
            .write(fd, buf)
            .and_then(|_| self.posix.link_fd(fd, path));
        self.posix.close(fd)?;
        r
    }

    /// Every path, with whether it is a directory, sorted.
    pub fn paths(&self) -> Vec<(String, bool)> {
        self.posix
            .walk_tree()
            .into_iter()
            .map(|(p, id)| (p, self.posix.is_dir(id)))
            .collect()
    }

    /// The namespace as a crash must preserve it.
    pub fn snapshot(&self) -> Snapshot {
        let tree = self.posix.walk_tree();
        let mut links: HashMap<model::Id, Vec<String>> = HashMap::new();
        for (p, id) in &tree {
            links.entry(*id).or_default().push(p.clone());
        }
        let mut out = BTreeMap::new();
        for (path, id) in tree {
            let n = self.posix.node(id);
            let node = match &n.body {
                Body::Dir { .. } => Node::Dir {
                    mode: n.perm,
                    xattrs: n.xattrs.clone(),
                },
                Body::Symlink(t) => Node::Symlink { target: t.clone() },
                Body::File(d) => Node::File {
                    mode: n.perm,
                    nlink: self.posix.nlink(id),
                    links: links[&id].clone(),
                    data: d.clone(),
                    xattrs: n.xattrs.clone(),
                },
                Body::Special { kind, rdev } => Node::Special {
                    kind: *kind,
                    mode: n.perm,
                    rdev: *rdev,
                },
            };
            out.insert(path, node);
        }
        Snapshot(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_renames_and_removal() {
        let mut m = Shadow::new();
        m.mkdir("/d", 0o755).unwrap();
        m.create("/d/a", 0o644).unwrap();
        m.write("/d/a", Some(2), b"xy").unwrap();
        m.link("/d/a", "/b").unwrap();
        m.write("/b", None, b"z").unwrap();
        let s = m.snapshot();
        let Node::File {
            nlink, links, data, ..
        } = &s.0["/d/a"]
        else {
            panic!()
        };
        assert_eq!((*nlink, links.len()), (2, 2));
        assert_eq!(data.to_vec(), b"\0\0xyz");
        m.rename("/b", "/d/a").unwrap(); // same inode: nothing happens
        m.open(0, "/b").unwrap();
        m.remove("/b", false).unwrap();
        m.remove("/d/a", false).unwrap();
        assert!(m.remove("/", true).is_err());
        m.write_fd(0, 0, b"q").unwrap();
        m.close(0).unwrap();
        assert!(m.snapshot().0.keys().eq(["/d"]));
        m.mkdir("/e", 0o700).unwrap();
        assert_eq!(m.rename("/d", "/d/x"), Err(libc::EINVAL));
        m.rename("/d", "/e").unwrap();
        assert!(m.is_empty_dir("/e") && !m.exists("/d"));
        let diff = Snapshot::default().diff(&m.snapshot());
        assert_eq!(diff, vec!["/e: unexpected directory mode 755".to_string()]);
    }
}
