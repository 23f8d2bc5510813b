//! `model`: the reference file system of easyio's tests — an in-memory file system with
//! the semantics of Linux (as tmpfs shows them), each call answering the value or the
//! errno Linux answers.
//!
//! It is the one model of POSIX in the workspace: the fs property tests run random call
//! sequences against it, the crash checker derives the states a crash may leave from it,
//! and the crash workloads (and the fuzz targets' sample images) are generated on it. A
//! test in this crate (`tests/kernel.rs`) runs the same random sequences on a real tmpfs
//! directory and compares every answer, so the model is itself checked against Linux.
//!
//! What it holds: a namespace of inodes ([`Node`]: regular files, directories, symbolic
//! links, FIFOs, sockets, character and block devices with their `rdev`), hard links,
//! sparse file data with holes and allocated-but-unwritten pages ([`Data`]), attributes
//! (permission bits, owner, times where known), extended attributes with Linux's limits,
//! open file descriptors (an unlinked file lives while one is open), `renameat2` flags,
//! `fallocate` modes, `O_TMPFILE` and `linkat` of it, `SEEK_DATA`/`SEEK_HOLE`.
//!
//! What it does not hold: permission checks for non-root callers (every call is made as
//! one caller, whose uid and gid new inodes get; root's bypass is assumed), time values
//! it cannot know (an operation that sets a time to "now" forgets it: see
//! [`Node::mtime`]), directory sizes and symbolic-link block counts (each file system's
//! own choice). It must not depend on any easyio crate: the file system under test, the
//! crash harness and the fuzz targets all depend on it.
#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

mod attr;
mod data;
mod file;
mod namespace;
mod node;
mod path;
mod xattr;

use std::collections::BTreeMap;

pub use attr::Target;
pub use data::Data;
pub use file::{Access, OpenFile, OpenSpec, Whence, FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE};
pub use namespace::{RENAME_EXCHANGE, RENAME_NOREPLACE};
pub use node::{Body, Kind, Node, Stat};
pub use xattr::{XATTR_CREATE, XATTR_REPLACE};

/// An errno, as in `libc` (`libc::ENOENT`, ...).
pub type Errno = i32;
/// A call's answer: the value, or the errno Linux gives.
pub type R<T> = Result<T, Errno>;
/// A model inode: stable for the inode's life, never reused within one [`Model`].
pub type Id = usize;
/// A model file descriptor: the lowest free number, as `open(2)` gives.
pub type Fd = u32;

/// The root directory's [`Id`].
pub const ROOT: Id = 0;
/// Bytes of a page: the unit of allocation, holes and `SEEK_DATA`/`SEEK_HOLE`.
pub const PAGE: u64 = 4096;
/// Longest name of one path component (`NAME_MAX`).
pub const NAME_MAX: usize = 255;
/// Longest path, terminating NUL excluded (`PATH_MAX` - 1).
pub const PATH_MAX: usize = 4095;
/// Symbolic links followed in one resolution before `ELOOP` (Linux's `MAXSYMLINKS`).
pub const MAX_HOPS: usize = 40;
/// Longest extended-attribute name, prefix included (`XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended-attribute value (`XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 65536;

/// Who calls, and the limits of the file system modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Owner of new inodes.
    pub uid: u32,
    /// Group of new inodes (unless the parent directory is setgid).
    pub gid: u32,
    /// Bits cleared from the mode of new inodes.
    pub umask: u32,
    /// Largest file size: a write or `fallocate` past it fails with `EFBIG`.
    pub max_file: u64,
}

impl Default for Config {
    /// Root, no umask, files up to `i64::MAX` bytes (tmpfs's limit).
    fn default() -> Config {
        Config {
            uid: 0,
            gid: 0,
            umask: 0,
            max_file: i64::MAX as u64,
        }
    }
}

/// The model file system.
#[derive(Clone, Debug)]
pub struct Model {
    nodes: BTreeMap<Id, Node>,
    next: Id,
    fds: Vec<Option<OpenFile>>,
    cfg: Config,
}

impl Default for Model {
    fn default() -> Model {
        Model::new(Config::default())
    }
}

impl Model {
    /// An empty file system: a root directory (mode 0755) owned by the caller.
    pub fn new(cfg: Config) -> Model {
        let root = Node::new(
            Body::Dir {
                children: BTreeMap::new(),
                parent: ROOT,
            },
            0o755,
            cfg.uid,
            cfg.gid,
        );
        Model {
            nodes: BTreeMap::from([(ROOT, root)]),
            next: ROOT + 1,
            fds: Vec::new(),
            cfg,
        }
    }

    /// The configuration the model was made with.
    pub fn config(&self) -> Config {
        self.cfg
    }

    /// The inode `id` (panics if it does not exist).
    pub fn node(&self, id: Id) -> &Node {
        &self.nodes[&id]
    }

    /// The inode `id`, for a test that learns values the model forgot (times).
    pub fn node_mut(&mut self, id: Id) -> &mut Node {
        self.nodes.get_mut(&id).expect("no such model inode")
    }

    /// Every live inode: named, or unnamed but held by a descriptor.
    pub fn ids(&self) -> impl Iterator<Item = Id> + '_ {
        self.nodes.keys().copied()
    }

    /// Live inodes (what a file system reports as inodes in use).
    pub fn inode_count(&self) -> usize {
        self.nodes.len()
    }

    /// The entries of directory `dir`, sorted by name (panics if not a directory).
    pub fn children(&self, dir: Id) -> &BTreeMap<String, Id> {
        match &self.node(dir).body {
            Body::Dir { children, .. } => children,
            _ => panic!("model inode {dir} is not a directory"),
        }
    }

    fn children_mut(&mut self, dir: Id) -> &mut BTreeMap<String, Id> {
        match &mut self.node_mut(dir).body {
            Body::Dir { children, .. } => children,
            _ => panic!("model inode {dir} is not a directory"),
        }
    }

    fn parent(&self, dir: Id) -> Id {
        match &self.node(dir).body {
            Body::Dir { parent, .. } => *parent,
            _ => panic!("model inode {dir} is not a directory"),
        }
    }

    /// Whether `id` is a directory.
    pub fn is_dir(&self, id: Id) -> bool {
        self.node(id).kind() == Kind::Dir
    }

    /// Link count as `stat` reports it: 2 plus subdirectories for a live directory, 0
    /// for a removed one, the names of anything else.
    pub fn nlink(&self, id: Id) -> u32 {
        let n = self.node(id);
        match &n.body {
            Body::Dir { .. } if n.dead => 0,
            Body::Dir { children, .. } => {
                2 + children.values().filter(|&&c| self.is_dir(c)).count() as u32
            }
            _ => n.links,
        }
    }

    /// Every name in the tree with its inode, as absolute paths sorted (a directory
    /// before what it holds; the root excluded).
    pub fn walk_tree(&self) -> Vec<(String, Id)> {
        let mut out = Vec::new();
        let mut stack = vec![(ROOT, String::new())];
        while let Some((dir, prefix)) = stack.pop() {
            for (name, &id) in self.children(dir).iter().rev() {
                let path = format!("{prefix}/{name}");
                if self.is_dir(id) {
                    stack.push((id, path.clone()));
                }
                out.push((path, id));
            }
        }
        out.sort();
        out
    }

    /// A new inode with permission bits `perm` (the caller has applied the umask).
    fn new_node(&mut self, body: Body, perm: u32, parent: Option<Id>) -> Id {
        let id = self.next;
        self.next += 1;
        let mut gid = self.cfg.gid;
        let mut perm = perm;
        if let Some(p) = parent {
            // A setgid directory gives its group to new inodes, and setgid to new
            // subdirectories.
            let pn = self.node(p);
            if pn.perm & libc::S_ISGID != 0 {
                gid = pn.gid;
                if matches!(body, Body::Dir { .. }) {
                    perm |= libc::S_ISGID;
                }
            }
        }
        self.nodes
            .insert(id, Node::new(body, perm, self.cfg.uid, gid));
        id
    }

    /// Drops an inode with no names and no descriptors.
    fn gc(&mut self, id: Id) {
        let n = self.node(id);
        let unnamed = if n.kind() == Kind::Dir {
            n.dead
        } else {
            n.links == 0
        };
        if unnamed && !self.fds.iter().flatten().any(|f| f.id == id) {
            self.nodes.remove(&id);
        }
    }
}
