//! The oracle's model: a file system in DRAM that applies the same operations as the
//! real one, and the snapshot form both are compared in.
//!
//! A [`Snapshot`] is everything a crash must preserve, keyed by path: kind, permission
//! bits, link count, which paths share an inode, file bytes, symbolic-link targets.
//! Timestamps are not compared (they are not deterministic).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What one path names, as a crash must preserve it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir { mode: u32 },
    /// A regular file.
    File {
        mode: u32,
        nlink: u32,
        /// Every path naming this inode, sorted (hard links).
        links: Vec<String>,
        data: Arc<Vec<u8>>,
    },
    /// A symbolic link.
    Symlink { target: String },
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
        Node::Dir { mode } => format!("directory mode {mode:o}"),
        Node::File {
            mode, nlink, data, ..
        } => format!("file mode {mode:o}, {nlink} link(s), {} bytes", data.len()),
        Node::Symlink { target } => format!("symlink to {target:?}"),
    }
}

fn node_diff(want: &Node, got: &Node) -> String {
    match (want, got) {
        (
            Node::File {
                mode: wm,
                nlink: wn,
                links: wl,
                data: wd,
            },
            Node::File {
                mode: gm,
                nlink: gn,
                links: gl,
                data: gd,
            },
        ) => {
            let mut parts = Vec::new();
            if wm != gm {
                parts.push(format!("mode {gm:o}, expected {wm:o}"));
            }
            if wn != gn {
                parts.push(format!("{gn} link(s), expected {wn}"));
            }
            if wl != gl {
                parts.push(format!("linked as {gl:?}, expected {wl:?}"));
            }
            if wd.len() != gd.len() {
                parts.push(format!("{} bytes, expected {}", gd.len(), wd.len()));
            }
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
        _ => format!("{}, expected {}", describe(got), describe(want)),
    }
}

/// Inode number of the model's root directory.
const ROOT: u64 = 1;

#[derive(Clone, Debug)]
enum Body {
    Dir(BTreeMap<String, u64>),
    File(Arc<Vec<u8>>),
    Symlink(String),
}

#[derive(Clone, Debug)]
struct MInode {
    mode: u32,
    nlink: u32,
    body: Body,
}

/// The model file system. Paths are absolute, `/`-separated, without `.`, `..` or
/// symbolic links inside them.
#[derive(Clone, Debug)]
pub struct Model {
    inodes: HashMap<u64, MInode>,
    next: u64,
    /// Open descriptors by slot: inode, and whether writes append.
    fds: HashMap<u32, u64>,
}

/// An error of the model: the operation would fail on a correct file system.
pub type ModelResult<T> = Result<T, String>;

impl Default for Model {
    fn default() -> Self {
        Model::new()
    }
}

impl Model {
    /// An empty file system.
    pub fn new() -> Model {
        let root = MInode {
            mode: 0o755,
            nlink: 2,
            body: Body::Dir(BTreeMap::new()),
        };
        Model {
            inodes: HashMap::from([(ROOT, root)]),
            next: ROOT + 1,
            fds: HashMap::new(),
        }
    }

    fn split(path: &str) -> ModelResult<(&str, &str)> {
        let i = path
            .rfind('/')
            .ok_or_else(|| format!("{path}: not absolute"))?;
        let name = &path[i + 1..];
        if name.is_empty() {
            return Err(format!("{path}: no final name"));
        }
        Ok((if i == 0 { "/" } else { &path[..i] }, name))
    }

    fn lookup(&self, path: &str) -> ModelResult<u64> {
        let mut at = ROOT;
        for c in path.split('/').filter(|c| !c.is_empty()) {
            match &self.inodes[&at].body {
                Body::Dir(ch) => at = *ch.get(c).ok_or_else(|| format!("{path}: not found"))?,
                _ => return Err(format!("{path}: not a directory on the way")),
            }
        }
        Ok(at)
    }

    fn dir_mut(&mut self, ino: u64) -> ModelResult<&mut BTreeMap<String, u64>> {
        match &mut self.inodes.get_mut(&ino).unwrap().body {
            Body::Dir(ch) => Ok(ch),
            _ => Err("not a directory".into()),
        }
    }

    /// Whether `path` exists.
    pub fn exists(&self, path: &str) -> bool {
        self.lookup(path).is_ok()
    }

    /// Whether `path` is a directory.
    pub fn is_dir(&self, path: &str) -> bool {
        self.lookup(path)
            .is_ok_and(|i| matches!(self.inodes[&i].body, Body::Dir(_)))
    }

    /// Whether `path` is a regular file.
    pub fn is_file(&self, path: &str) -> bool {
        self.lookup(path)
            .is_ok_and(|i| matches!(self.inodes[&i].body, Body::File(_)))
    }

    /// Whether `path` is an empty directory.
    pub fn is_empty_dir(&self, path: &str) -> bool {
        self.lookup(path)
            .is_ok_and(|i| matches!(&self.inodes[&i].body, Body::Dir(c) if c.is_empty()))
    }

    /// Size of the file at `path` (0 if none).
    pub fn size(&self, path: &str) -> u64 {
        match self.lookup(path).map(|i| &self.inodes[&i].body) {
            Ok(Body::File(d)) => d.len() as u64,
            _ => 0,
        }
    }

    /// Size of the file open in `slot` (0 if none).
    pub fn fd_size(&self, slot: u32) -> u64 {
        match self.fds.get(&slot).map(|i| &self.inodes[i].body) {
            Some(Body::File(d)) => d.len() as u64,
            _ => 0,
        }
    }

    /// Whether descriptor slot `slot` is open.
    pub fn fd_open(&self, slot: u32) -> bool {
        self.fds.contains_key(&slot)
    }

    fn add(&mut self, path: &str, body: Body, mode: u32) -> ModelResult<u64> {
        let (parent, name) = Self::split(path)?;
        let p = self.lookup(parent)?;
        if self.dir_mut(p)?.contains_key(name) {
            return Err(format!("{path}: exists"));
        }
        let ino = self.next;
        self.next += 1;
        let is_dir = matches!(body, Body::Dir(_));
        self.inodes.insert(
            ino,
            MInode {
                mode,
                nlink: if is_dir { 2 } else { 1 },
                body,
            },
        );
        self.dir_mut(p)?.insert(name.to_string(), ino);
        if is_dir {
            self.inodes.get_mut(&p).unwrap().nlink += 1;
        }
        Ok(ino)
    }

    /// `open(O_CREAT|O_EXCL)`.
    pub fn create(&mut self, path: &str, mode: u32) -> ModelResult<()> {
        self.add(path, Body::File(Arc::default()), mode & 0o7777)
            .map(|_| ())
    }

    /// `mkdir`.
    pub fn mkdir(&mut self, path: &str, mode: u32) -> ModelResult<()> {
        self.add(path, Body::Dir(BTreeMap::new()), mode & 0o7777)
            .map(|_| ())
    }

    /// `symlink`.
    pub fn symlink(&mut self, target: &str, path: &str) -> ModelResult<()> {
        self.add(path, Body::Symlink(target.to_string()), 0o777)
            .map(|_| ())
    }

    fn file_data(&mut self, ino: u64) -> ModelResult<&mut Arc<Vec<u8>>> {
        match &mut self.inodes.get_mut(&ino).unwrap().body {
            Body::File(d) => Ok(d),
            _ => Err("not a regular file".into()),
        }
    }

    fn write_ino(&mut self, ino: u64, off: Option<u64>, buf: &[u8]) -> ModelResult<()> {
        let d = Arc::make_mut(self.file_data(ino)?);
        let off = off.unwrap_or(d.len() as u64) as usize;
        if d.len() < off + buf.len() {
            d.resize(off + buf.len(), 0);
        }
        d[off..off + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    /// `pwrite` at `off`, or an append when `off` is `None`.
    pub fn write(&mut self, path: &str, off: Option<u64>, buf: &[u8]) -> ModelResult<()> {
        let ino = self.lookup(path)?;
        self.write_ino(ino, off, buf)
    }

    /// `pwrite` through an open descriptor.
    pub fn write_fd(&mut self, slot: u32, off: u64, buf: &[u8]) -> ModelResult<()> {
        let ino = *self.fds.get(&slot).ok_or("descriptor not open")?;
        self.write_ino(ino, Some(off), buf)
    }

    /// `truncate`.
    pub fn truncate(&mut self, path: &str, len: u64) -> ModelResult<()> {
        let ino = self.lookup(path)?;
        Arc::make_mut(self.file_data(ino)?).resize(len as usize, 0);
        Ok(())
    }

    /// `chmod`.
    pub fn chmod(&mut self, path: &str, mode: u32) -> ModelResult<()> {
        let ino = self.lookup(path)?;
        self.inodes.get_mut(&ino).unwrap().mode = mode & 0o7777;
        Ok(())
    }

    fn drop_link(&mut self, ino: u64) {
        let n = self.inodes.get_mut(&ino).unwrap();
        n.nlink = n.nlink.saturating_sub(1);
        self.gc(ino);
    }

    fn gc(&mut self, ino: u64) {
        let n = &self.inodes[&ino];
        let dead = match n.body {
            Body::Dir(_) => n.nlink < 2,
            _ => n.nlink == 0,
        };
        if dead && !self.fds.values().any(|&i| i == ino) {
            self.inodes.remove(&ino);
        }
    }

    /// `unlink` (`dir` false) or `rmdir` (`dir` true).
    pub fn remove(&mut self, path: &str, dir: bool) -> ModelResult<()> {
        let (parent, name) = Self::split(path)?;
        let p = self.lookup(parent)?;
        let ino = self.lookup(path)?;
        let is_dir = matches!(self.inodes[&ino].body, Body::Dir(_));
        if is_dir != dir {
            return Err(format!("{path}: wrong kind"));
        }
        if is_dir && !self.is_empty_dir(path) {
            return Err(format!("{path}: not empty"));
        }
        self.dir_mut(p)?.remove(name);
        if is_dir {
            self.inodes.get_mut(&p).unwrap().nlink -= 1;
            self.inodes.get_mut(&ino).unwrap().nlink = 0;
            self.gc(ino);
        } else {
            self.drop_link(ino);
        }
        Ok(())
    }

    /// `link`.
    pub fn link(&mut self, old: &str, new: &str) -> ModelResult<()> {
        let ino = self.lookup(old)?;
        if matches!(self.inodes[&ino].body, Body::Dir(_)) {
            return Err(format!("{old}: is a directory"));
        }
        let (parent, name) = Self::split(new)?;
        let p = self.lookup(parent)?;
        let dir = self.dir_mut(p)?;
        if dir.contains_key(name) {
            return Err(format!("{new}: exists"));
        }
        dir.insert(name.to_string(), ino);
        self.inodes.get_mut(&ino).unwrap().nlink += 1;
        Ok(())
    }

    /// `rename`, replacing a file by a non-directory or an empty directory by a
    /// directory.
    pub fn rename(&mut self, old: &str, new: &str) -> ModelResult<()> {
        let src = self.lookup(old)?;
        let (op, oname) = Self::split(old)?;
        let (np, nname) = Self::split(new)?;
        let (op, np) = (self.lookup(op)?, self.lookup(np)?);
        let src_dir = matches!(self.inodes[&src].body, Body::Dir(_));
        if src_dir && (new.starts_with(&format!("{old}/")) || new == old) {
            return Err(format!("{new}: inside {old}"));
        }
        if let Ok(victim) = self.lookup(new) {
            if victim == src {
                return Ok(());
            }
            let vdir = matches!(self.inodes[&victim].body, Body::Dir(_));
            if vdir != src_dir || (vdir && !self.is_empty_dir(new)) {
                return Err(format!("{new}: cannot be replaced"));
            }
            self.dir_mut(np)?.remove(nname);
            if vdir {
                self.inodes.get_mut(&np).unwrap().nlink -= 1;
                self.inodes.get_mut(&victim).unwrap().nlink = 0;
                self.gc(victim);
            } else {
                self.drop_link(victim);
            }
        }
        self.dir_mut(op)?.remove(oname);
        self.dir_mut(np)?.insert(nname.to_string(), src);
        if src_dir && op != np {
            self.inodes.get_mut(&op).unwrap().nlink -= 1;
            self.inodes.get_mut(&np).unwrap().nlink += 1;
        }
        Ok(())
    }

    /// `open` of an existing file into descriptor slot `slot`.
    pub fn open(&mut self, slot: u32, path: &str) -> ModelResult<()> {
        let ino = self.lookup(path)?;
        if !matches!(self.inodes[&ino].body, Body::File(_)) {
            return Err(format!("{path}: not a regular file"));
        }
        if self.fds.insert(slot, ino).is_some() {
            return Err(format!("slot {slot} already open"));
        }
        Ok(())
    }

    /// `close` of descriptor slot `slot`: an unlinked file goes with its last one.
    pub fn close(&mut self, slot: u32) -> ModelResult<()> {
        let ino = self.fds.remove(&slot).ok_or("descriptor not open")?;
        self.gc(ino);
        Ok(())
    }

    /// Every path, with whether it is a directory, sorted.
    pub fn paths(&self) -> Vec<(String, bool)> {
        self.snapshot()
            .0
            .into_iter()
            .map(|(p, n)| (p, matches!(n, Node::Dir { .. })))
            .collect()
    }

    /// The namespace as a crash must preserve it.
    pub fn snapshot(&self) -> Snapshot {
        let mut found = Vec::new();
        let mut stack = vec![(ROOT, String::new())];
        while let Some((dir, prefix)) = stack.pop() {
            let Body::Dir(children) = &self.inodes[&dir].body else {
                continue;
            };
            for (name, &ino) in children {
                let path = format!("{prefix}/{name}");
                if matches!(self.inodes[&ino].body, Body::Dir(_)) {
                    stack.push((ino, path.clone()));
                }
                found.push((path, ino));
            }
        }
        let mut links: HashMap<u64, Vec<String>> = HashMap::new();
        for (p, ino) in &found {
            links.entry(*ino).or_default().push(p.clone());
        }
        let mut out = BTreeMap::new();
        for (path, ino) in found {
            let n = &self.inodes[&ino];
            let node = match &n.body {
                Body::Dir(_) => Node::Dir { mode: n.mode },
                Body::Symlink(t) => Node::Symlink { target: t.clone() },
                Body::File(d) => {
                    let mut l = links[&ino].clone();
                    l.sort();
                    Node::File {
                        mode: n.mode,
                        nlink: n.nlink,
                        links: l,
                        data: d.clone(),
                    }
                }
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
        let mut m = Model::new();
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
        assert_eq!(data.as_slice(), b"\0\0xyz");
        m.rename("/b", "/d/a").unwrap(); // same inode: nothing happens
        m.open(0, "/b").unwrap();
        m.remove("/b", false).unwrap();
        m.remove("/d/a", false).unwrap();
        assert!(m.remove("/", true).is_err());
        m.write_fd(0, 0, b"q").unwrap();
        m.close(0).unwrap();
        assert!(m.snapshot().0.keys().eq(["/d"]));
        m.mkdir("/e", 0o700).unwrap();
        assert!(m.rename("/d", "/d/x").is_err());
        m.rename("/d", "/e").unwrap();
        assert!(m.is_empty_dir("/e") && !m.exists("/d"));
        let diff = Snapshot::default().diff(&m.snapshot());
        assert_eq!(diff, vec!["/e: unexpected directory mode 755".to_string()]);
    }
}
