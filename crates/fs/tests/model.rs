//! Model-based property test: random sequences of every operation, with clean remounts
//! and crashes (abandon + mount) interleaved, checked after every step against an
//! in-memory model of POSIX (Linux) semantics written independently of the file system.
//!
//! Cases: `EASYIO_PROPTEST_CASES` (default 24).

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use common::*;
use fs::{Fd, FileKind, FileSystem, OpenFlags, Stat, Whence};
use pmem::Pmem;
use proptest::prelude::*;

const PAGE: u64 = 4096;
const MAX_NAME: usize = 255;
const MAX_PATH: usize = 4096;
const MAX_HOPS: usize = 40;
const MAX_FILE: u64 = 1 << 44;

type Id = usize;
const ROOT: Id = 0;
type R<T> = Result<T, i32>;

// ---------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Body {
    File {
        data: Vec<u8>,
        pages: BTreeSet<u64>,
    },
    Dir {
        children: BTreeMap<String, Id>,
        parent: Id,
    },
    Sym {
        target: String,
    },
}

#[derive(Clone, Debug)]
struct Node {
    body: Body,
    perm: u32,
    uid: u32,
    gid: u32,
    /// Directory entries naming a non-directory.
    links: u32,
    /// A directory that was removed (kept while a descriptor holds it).
    dead: bool,
    /// Known values; `None` after an operation that sets them to "now".
    atime: Option<i64>,
    mtime: Option<i64>,
    /// The file system's inode number, learnt on first sight.
    ino: Option<u64>,
}

#[derive(Clone, Debug)]
struct MFd {
    id: Id,
    read: bool,
    write: bool,
    append: bool,
    pos: u64,
}

struct Model {
    nodes: HashMap<Id, Node>,
    next: Id,
    fds: Vec<Option<MFd>>,
    uid: u32,
    gid: u32,
}

fn kind_of(n: &Node) -> FileKind {
    match n.body {
        Body::File { .. } => FileKind::File,
        Body::Dir { .. } => FileKind::Dir,
        Body::Sym { .. } => FileKind::Symlink,
    }
}

struct Parent {
    dir: Id,
    name: String,
    slash: bool,
}

impl Model {
    fn new() -> Model {
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                body: Body::Dir {
                    children: BTreeMap::new(),
                    parent: ROOT,
                },
                perm: 0o755,
                uid,
                gid,
                links: 0,
                dead: false,
                atime: None,
                mtime: None,
                ino: Some(fs::ROOT_INO),
            },
        );
        Model {
            nodes,
            next: 1,
            fds: Vec::new(),
            uid,
            gid,
        }
    }

    fn node(&self, id: Id) -> &Node {
        &self.nodes[&id]
    }

    fn node_mut(&mut self, id: Id) -> &mut Node {
        self.nodes.get_mut(&id).unwrap()
    }

    fn is_dir(&self, id: Id) -> bool {
        matches!(self.node(id).body, Body::Dir { .. })
    }

    fn children(&self, id: Id) -> &BTreeMap<String, Id> {
        match &self.node(id).body {
            Body::Dir { children, .. } => children,
            _ => panic!("not a dir"),
        }
    }

    fn children_mut(&mut self, id: Id) -> &mut BTreeMap<String, Id> {
        match &mut self.node_mut(id).body {
            Body::Dir { children, .. } => children,
            _ => panic!("not a dir"),
        }
    }

    fn parent(&self, id: Id) -> Id {
        match &self.node(id).body {
            Body::Dir { parent, .. } => *parent,
            _ => panic!("not a dir"),
        }
    }

    fn nlink(&self, id: Id) -> u32 {
        match &self.node(id).body {
            Body::Dir { children, .. } => {
                if self.node(id).dead {
                    return 0;
                }
                2 + children.values().filter(|&&c| self.is_dir(c)).count() as u32
            }
            _ => self.node(id).links,
        }
    }

    fn new_node(&mut self, body: Body, perm: u32) -> Id {
        let id = self.next;
        self.next += 1;
        let links = if matches!(body, Body::Dir { .. }) {
            0
        } else {
            1
        };
        self.nodes.insert(
            id,
            Node {
                body,
                perm: perm & 0o7777,
                uid: self.uid,
                gid: self.gid,
                links,
                dead: false,
                atime: None,
                mtime: None,
                ino: None,
            },
        );
        id
    }

    fn touch_dir(&mut self, id: Id) {
        self.node_mut(id).mtime = None;
    }

    fn open_count(&self, id: Id) -> usize {
        self.fds.iter().flatten().filter(|f| f.id == id).count()
    }

    /// Drops an inode with no links and no descriptors.
    fn gc(&mut self, id: Id) {
        let n = self.node(id);
        let unlinked = if matches!(n.body, Body::Dir { .. }) {
            n.dead
        } else {
            n.links == 0
        };
        if unlinked && self.open_count(id) == 0 {
            self.nodes.remove(&id);
        }
    }

    // --- path resolution (Linux semantics) ---

    fn walk(&self, base: Id, path: &str, hops: &mut usize) -> R<Parent> {
        let slash = path.len() > 1 && path.ends_with('/');
        let mut comps: Vec<&str> = path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        let Some(last) = comps.pop() else {
            return Ok(Parent {
                dir: base,
                name: String::new(),
                slash,
            });
        };
        let mut dir = base;
        for c in comps {
            if c.len() > MAX_NAME {
                return Err(libc::ENAMETOOLONG);
            }
            let next = if c == ".." {
                self.parent(dir)
            } else {
                *self.children(dir).get(c).ok_or(libc::ENOENT)?
            };
            dir = match &self.node(next).body {
                Body::Dir { .. } => next,
                Body::Sym { target } => {
                    *hops += 1;
                    if *hops > MAX_HOPS {
                        return Err(libc::ELOOP);
                    }
                    let b = if target.starts_with('/') { ROOT } else { dir };
                    let t = self.resolve_from(b, &target.clone(), true, hops)?;
                    if !self.is_dir(t) {
                        return Err(libc::ENOTDIR);
                    }
                    t
                }
                Body::File { .. } => return Err(libc::ENOTDIR),
            };
        }
        if last.len() > MAX_NAME {
            return Err(libc::ENAMETOOLONG);
        }
        if last == ".." {
            return Ok(Parent {
                dir: self.parent(dir),
                name: String::new(),
                slash,
            });
        }
        Ok(Parent {
            dir,
            name: last.to_string(),
            slash,
        })
    }

    fn resolve_from(&self, base: Id, path: &str, follow: bool, hops: &mut usize) -> R<Id> {
        let p = self.walk(base, path, hops)?;
        if p.name.is_empty() {
            return Ok(p.dir);
        }
        let child = *self.children(p.dir).get(&p.name).ok_or(libc::ENOENT)?;
        let out = match &self.node(child).body {
            Body::Sym { target } if follow || p.slash => {
                *hops += 1;
                if *hops > MAX_HOPS {
                    return Err(libc::ELOOP);
                }
                let b = if target.starts_with('/') { ROOT } else { p.dir };
                self.resolve_from(b, &target.clone(), true, hops)?
            }
            _ => child,
        };
        if p.slash && !self.is_dir(out) {
            return Err(libc::ENOTDIR);
        }
        Ok(out)
    }

    fn check_path(path: &str) -> R<()> {
        if path.len() > MAX_PATH {
            return Err(libc::ENAMETOOLONG);
        }
        if path.is_empty() {
            return Err(libc::ENOENT);
        }
        Ok(())
    }

    fn parent_of(&self, path: &str) -> R<Parent> {
        Self::check_path(path)?;
        self.walk(ROOT, path, &mut 0)
    }

    fn resolve(&self, path: &str, follow: bool) -> R<Id> {
        Self::check_path(path)?;
        self.resolve_from(ROOT, path, follow, &mut 0)
    }

    // --- operations ---

    fn alloc_fd(&mut self, fd: MFd) -> u32 {
        let slot = match self.fds.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.fds.push(None);
                self.fds.len() - 1
            }
        };
        self.fds[slot] = Some(fd);
        slot as u32
    }

    fn fd(&self, fd: u32) -> R<&MFd> {
        self.fds
            .get(fd as usize)
            .and_then(Option::as_ref)
            .ok_or(libc::EBADF)
    }

    fn open(&mut self, path: &str, f: &OpenSpec) -> R<u32> {
        let (read, write) = match f.acc {
            0 => (true, false),
            1 => (false, true),
            _ => (true, true),
        };
        let mut created = false;
        let id = if f.creat {
            // The name is looked up from `base`: the path, then the target of each
            // symbolic link that leads nowhere, from the link's directory; the last
            // missing name is created (open(2) creates a dangling link's target).
            Self::check_path(path)?;
            let (mut base, mut rel, mut hops) = (ROOT, path.to_string(), 0usize);
            let first = self.parent_of(path)?;
            if first.slash && !first.name.is_empty() {
                return Err(libc::EISDIR);
            }
            loop {
                let p = self.walk(base, &rel, &mut hops.clone())?;
                if p.name.is_empty() {
                    break p.dir;
                }
                let Some(child) = self.children(p.dir).get(&p.name).copied() else {
                    if p.slash {
                        return Err(libc::EISDIR);
                    }
                    created = true;
                    let id = self.new_node(
                        Body::File {
                            data: Vec::new(),
                            pages: BTreeSet::new(),
                        },
                        f.mode,
                    );
                    self.children_mut(p.dir).insert(p.name.clone(), id);
                    self.touch_dir(p.dir);
                    break id;
                };
                if f.excl {
                    return Err(libc::EEXIST);
                }
                match self.resolve_from(base, &rel, true, &mut hops.clone()) {
                    Err(libc::ENOENT) if !p.slash => {
                        let Body::Sym { target } = &self.node(child).body else {
                            return Err(libc::ENOENT);
                        };
                        hops += 1;
                        if hops > MAX_HOPS {
                            return Err(libc::ELOOP);
                        }
                        base = if target.starts_with('/') { ROOT } else { p.dir };
                        rel = target.clone();
                    }
                    r => break r?,
                }
            }
        } else {
            self.resolve(path, true)?
        };
        if self.is_dir(id) && (write || f.creat) {
            return Err(libc::EISDIR);
        }
        if f.trunc && write && !created {
            self.truncate_id(id, 0)?;
        }
        Ok(self.alloc_fd(MFd {
            id,
            read,
            write,
            append: f.append,
            pos: 0,
        }))
    }

    fn close(&mut self, fd: u32) -> R<()> {
        let f = self
            .fds
            .get_mut(fd as usize)
            .and_then(Option::take)
            .ok_or(libc::EBADF)?;
        self.gc(f.id);
        Ok(())
    }

    fn read_at(&self, id: Id, off: u64, len: usize) -> R<Vec<u8>> {
        match &self.node(id).body {
            Body::Dir { .. } => Err(libc::EISDIR),
            Body::File { data, .. } => {
                let start = (off as usize).min(data.len());
                let end = (start + len).min(data.len());
                Ok(data[start..end].to_vec())
            }
            Body::Sym { .. } => unreachable!(),
        }
    }

    fn read(&mut self, fd: u32, len: usize) -> R<Vec<u8>> {
        let f = self.fd(fd)?.clone();
        if !f.read {
            return Err(libc::EBADF);
        }
        let out = self.read_at(f.id, f.pos, len)?;
        self.fds[fd as usize].as_mut().unwrap().pos += out.len() as u64;
        Ok(out)
    }

    fn pread(&self, fd: u32, off: u64, len: usize) -> R<Vec<u8>> {
        let f = self.fd(fd)?;
        if !f.read {
            return Err(libc::EBADF);
        }
        self.read_at(f.id, off, len)
    }

    fn write_at(&mut self, id: Id, off: u64, buf: &[u8]) -> R<u64> {
        if buf.is_empty() {
            return Ok(off);
        }
        let end = off + buf.len() as u64;
        if end > MAX_FILE {
            return Err(libc::EFBIG);
        }
        let n = self.node_mut(id);
        n.mtime = None;
        let Body::File { data, pages } = &mut n.body else {
            unreachable!()
        };
        if data.len() < end as usize {
            data.resize(end as usize, 0);
        }
        data[off as usize..end as usize].copy_from_slice(buf);
        pages.extend(off / PAGE..end.div_ceil(PAGE));
        Ok(end)
    }

    fn write(&mut self, fd: u32, buf: &[u8]) -> R<usize> {
        let f = self.fd(fd)?.clone();
        if !f.write {
            return Err(libc::EBADF);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let at = if f.append { self.size(f.id) } else { f.pos };
        let end = self.write_at(f.id, at, buf)?;
        self.fds[fd as usize].as_mut().unwrap().pos = end;
        Ok(buf.len())
    }

    fn pwrite(&mut self, fd: u32, buf: &[u8], off: u64) -> R<usize> {
        let f = self.fd(fd)?.clone();
        if !f.write {
            return Err(libc::EBADF);
        }
        let at = if f.append { self.size(f.id) } else { off };
        self.write_at(f.id, at, buf)?;
        Ok(buf.len())
    }

    fn size(&self, id: Id) -> u64 {
        match &self.node(id).body {
            Body::File { data, .. } => data.len() as u64,
            Body::Sym { target } => target.len() as u64,
            Body::Dir { .. } => 0,
        }
    }

    fn lseek(&mut self, fd: u32, off: i64, whence: u8) -> R<u64> {
        let f = self.fd(fd)?.clone();
        let base = match whence {
            0 => 0,
            1 => f.pos as i64,
            _ => self.size(f.id) as i64,
        };
        let new = base + off;
        if new < 0 {
            return Err(libc::EINVAL);
        }
        self.fds[fd as usize].as_mut().unwrap().pos = new as u64;
        Ok(new as u64)
    }

    fn truncate_id(&mut self, id: Id, len: u64) -> R<()> {
        let n = self.node_mut(id);
        let Body::File { data, pages } = &mut n.body else {
            return Err(libc::EISDIR);
        };
        data.resize(len as usize, 0);
        let keep = len.div_ceil(PAGE);
        pages.retain(|&p| p < keep);
        n.mtime = None;
        Ok(())
    }

    fn truncate(&mut self, path: &str, len: u64) -> R<()> {
        let id = self.resolve(path, true)?;
        self.truncate_id(id, len)
    }

    fn ftruncate(&mut self, fd: u32, len: u64) -> R<()> {
        let f = self.fd(fd)?.clone();
        if !f.write {
            return Err(libc::EINVAL);
        }
        self.truncate_id(f.id, len)
    }

    fn create(&mut self, path: &str, body: Body, perm: u32) -> R<()> {
        let p = self.parent_of(path)?;
        if p.name.is_empty() || self.children(p.dir).contains_key(&p.name) {
            return Err(libc::EEXIST);
        }
        if p.slash && !matches!(body, Body::Dir { .. }) {
            return Err(libc::ENOENT);
        }
        let body = match body {
            Body::Dir { children, .. } => Body::Dir {
                children,
                parent: p.dir,
            },
            b => b,
        };
        let id = self.new_node(body, perm);
        self.children_mut(p.dir).insert(p.name, id);
        self.touch_dir(p.dir);
        Ok(())
    }

    fn mkdir(&mut self, path: &str, perm: u32) -> R<()> {
        self.create(
            path,
            Body::Dir {
                children: BTreeMap::new(),
                parent: ROOT,
            },
            perm,
        )
    }

    fn symlink(&mut self, target: &str, path: &str) -> R<()> {
        self.create(
            path,
            Body::Sym {
                target: target.to_string(),
            },
            0o777,
        )
    }

    fn readlink(&self, path: &str) -> R<String> {
        let id = self.resolve(path, false)?;
        match &self.node(id).body {
            Body::Sym { target } => Ok(target.clone()),
            _ => Err(libc::EINVAL),
        }
    }

    fn unlink(&mut self, path: &str) -> R<()> {
        let p = self.parent_of(path)?;
        if p.name.is_empty() {
            return Err(libc::EISDIR);
        }
        let c = *self.children(p.dir).get(&p.name).ok_or(libc::ENOENT)?;
        if self.is_dir(c) {
            return Err(libc::EISDIR);
        }
        if p.slash {
            return Err(libc::ENOTDIR);
        }
        self.children_mut(p.dir).remove(&p.name);
        self.touch_dir(p.dir);
        self.node_mut(c).links -= 1;
        self.gc(c);
        Ok(())
    }

    fn rmdir(&mut self, path: &str) -> R<()> {
        let p = self.parent_of(path)?;
        let c = *self.children(p.dir).get(&p.name).ok_or(libc::ENOENT)?;
        if !self.is_dir(c) {
            return Err(libc::ENOTDIR);
        }
        if !self.children(c).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.children_mut(p.dir).remove(&p.name);
        self.touch_dir(p.dir);
        self.node_mut(c).dead = true;
        self.gc(c);
        Ok(())
    }

    fn link(&mut self, old: &str, new: &str) -> R<()> {
        let t = self.resolve(old, false)?;
        let p = self.parent_of(new)?;
        if p.name.is_empty() || self.children(p.dir).contains_key(&p.name) {
            return Err(libc::EEXIST);
        }
        if p.slash {
            return Err(libc::ENOENT);
        }
        if self.is_dir(t) {
            return Err(libc::EPERM);
        }
        self.children_mut(p.dir).insert(p.name, t);
        self.touch_dir(p.dir);
        self.node_mut(t).links += 1;
        Ok(())
    }

    fn is_ancestor_or_self(&self, anc: Id, mut of: Id) -> bool {
        loop {
            if of == anc {
                return true;
            }
            if of == ROOT {
                return false;
            }
            of = self.parent(of);
        }
    }

    fn rename(&mut self, old: &str, new: &str) -> R<()> {
        let from = self.parent_of(old)?;
        let to = self.parent_of(new)?;
        let src = *self
            .children(from.dir)
            .get(&from.name)
            .ok_or(libc::ENOENT)?;
        let src_dir = self.is_dir(src);
        if !src_dir && (from.slash || to.slash) {
            return Err(libc::ENOTDIR);
        }
        let victim = self.children(to.dir).get(&to.name).copied();
        if src_dir && self.is_ancestor_or_self(src, to.dir) {
            return Err(libc::EINVAL);
        }
        if let Some(v) = victim {
            if self.is_dir(v) && self.is_ancestor_or_self(v, from.dir) {
                return Err(libc::ENOTEMPTY);
            }
            if v == src {
                return Ok(());
            }
            match (src_dir, self.is_dir(v)) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !self.children(v).is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
        }
        self.children_mut(from.dir).remove(&from.name);
        self.children_mut(to.dir).insert(to.name.clone(), src);
        self.touch_dir(from.dir);
        self.touch_dir(to.dir);
        if src_dir {
            if let Body::Dir { parent, .. } = &mut self.node_mut(src).body {
                *parent = to.dir;
            }
        }
        if let Some(v) = victim {
            if self.is_dir(v) {
                self.node_mut(v).dead = true;
            } else {
                self.node_mut(v).links -= 1;
            }
            self.gc(v);
        }
        Ok(())
    }

    fn set_attr(&mut self, path: &str, f: impl FnOnce(&mut Node)) -> R<()> {
        let id = self.resolve(path, true)?;
        f(self.node_mut(id));
        Ok(())
    }

    /// Closes every descriptor, as an unmount or a crash does.
    fn drop_fds(&mut self) {
        let fds: Vec<u32> = (0..self.fds.len() as u32)
            .filter(|&i| self.fds[i as usize].is_some())
            .collect();
        for fd in fds {
            self.close(fd).unwrap();
        }
        self.fds.clear();
    }
}

// ---------------------------------------------------------------------------------
// Operations and their generators
// ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct OpenSpec {
    acc: u8,
    creat: bool,
    excl: bool,
    trunc: bool,
    append: bool,
    mode: u32,
}

impl OpenSpec {
    fn flags(&self) -> OpenFlags {
        let mut f = match self.acc {
            0 => OpenFlags::RDONLY,
            1 => OpenFlags::WRONLY,
            _ => OpenFlags::RDWR,
        };
        for (on, flag) in [
            (self.creat, OpenFlags::CREAT),
            (self.excl, OpenFlags::EXCL),
            (self.trunc, OpenFlags::TRUNC),
            (self.append, OpenFlags::APPEND),
        ] {
            if on {
                f = f | flag;
            }
        }
        f
    }
}

#[derive(Clone, Debug)]
enum Op {
    Open(String, OpenSpec),
    Close(u32),
    Write(u32, usize, u8),
    Pwrite(u32, u64, usize, u8),
    Read(u32, usize),
    Pread(u32, u64, usize),
    Lseek(u32, i64, u8),
    Truncate(String, u64),
    Ftruncate(u32, u64),
    Fsync(u32),
    Fstat(u32),
    Unlink(String),
    Mkdir(String, u32),
    Rmdir(String),
    Rename(String, String),
    Link(String, String),
    Symlink(String, String),
    Readlink(String),
    Readdir(String),
    Stat(String),
    Lstat(String),
    Chmod(String, u32),
    Chown(String, Option<u32>, Option<u32>),
    Utimens(String, Option<i64>, Option<i64>),
    Remount,
    Crash,
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(str::to_string),
        1 => Just("n".repeat(MAX_NAME)),
        1 => Just("n".repeat(MAX_NAME + 1)),
    ]
}

fn inner() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => name(),
        1 => Just(".".to_string()),
        1 => Just("..".to_string()),
    ]
}

/// Absolute paths of 1 to 3 components; the last is a plain name.
fn path() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(inner(), 0..=2),
        name(),
        prop::bool::weighted(0.04),
    )
        .prop_map(|(dirs, last, slash)| {
            let mut p = String::new();
            for d in dirs {
                p.push('/');
                p.push_str(&d);
            }
            p.push('/');
            p.push_str(&last);
            if slash {
                p.push('/');
            }
            p
        })
}

fn target() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => path(),
        1 => name(),
        1 => name().prop_map(|n| format!("../{n}")),
    ]
}

fn fd() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 0u32..4, 1 => 4u32..8]
}

fn len() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 1usize..64,
        3 => 1usize..5000,
        2 => 4000usize..13000,
        1 => Just(0usize),
        1 => Just(4096usize),
    ]
}

fn off() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..20000,
        2 => (0u64..5).prop_map(|p| p * PAGE),
        // Past the largest file: EFBIG (the model is not sparse).
        1 => (0u64..3).prop_map(|d| MAX_FILE + d),
    ]
}

fn time() -> impl Strategy<Value = Option<i64>> {
    prop::option::of(0i64..4_000_000_000_000_000_000)
}

fn open_spec() -> impl Strategy<Value = OpenSpec> {
    (
        0u8..3,
        any::<bool>(),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        0u32..0o1000,
    )
        .prop_map(|(acc, creat, excl, trunc, append, mode)| OpenSpec {
            acc,
            creat,
            excl,
            // O_RDONLY | O_TRUNC is unspecified by POSIX.
            trunc: trunc && acc != 0,
            append,
            mode,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (path(), open_spec()).prop_map(|(p, s)| Op::Open(p, s)),
        5 => fd().prop_map(Op::Close),
        8 => (fd(), len(), any::<u8>()).prop_map(|(f, l, s)| Op::Write(f, l, s)),
        8 => (fd(), off(), len(), any::<u8>()).prop_map(|(f, o, l, s)| Op::Pwrite(f, o, l, s)),
        3 => (fd(), len()).prop_map(|(f, l)| Op::Read(f, l)),
        3 => (fd(), off(), len()).prop_map(|(f, o, l)| Op::Pread(f, o, l)),
        2 => (fd(), -5000i64..20000, 0u8..3).prop_map(|(f, o, w)| Op::Lseek(f, o, w)),
        3 => (path(), 0u64..20000).prop_map(|(p, l)| Op::Truncate(p, l)),
        3 => (fd(), 0u64..20000).prop_map(|(f, l)| Op::Ftruncate(f, l)),
        1 => fd().prop_map(Op::Fsync),
        1 => fd().prop_map(Op::Fstat),
        5 => path().prop_map(Op::Unlink),
        6 => (path(), 0u32..0o1000).prop_map(|(p, m)| Op::Mkdir(p, m)),
        3 => path().prop_map(Op::Rmdir),
        7 => (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        3 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        3 => (target(), path()).prop_map(|(t, p)| Op::Symlink(t, p)),
        1 => path().prop_map(Op::Readlink),
        2 => path().prop_map(Op::Readdir),
        2 => path().prop_map(Op::Stat),
        2 => path().prop_map(Op::Lstat),
        1 => (path(), 0u32..0o10000).prop_map(|(p, m)| Op::Chmod(p, m)),
        1 => (path(), prop::option::of(0u32..3000), prop::option::of(0u32..3000)).prop_map(|(p, u, g)| Op::Chown(p, u, g)),
        1 => (path(), time(), time()).prop_map(|(p, a, m)| Op::Utimens(p, a, m)),
        1 => Just(Op::Remount),
        1 => Just(Op::Crash),
    ]
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

// ---------------------------------------------------------------------------------
// Running a sequence against both
// ---------------------------------------------------------------------------------

fn errno<T>(r: fs::Result<T>) -> R<T> {
    r.map_err(|e| e.errno())
}

struct Harness {
    pm: Arc<dyn Pmem>,
    fs: Option<FileSystem>,
    m: Model,
}

impl Harness {
    fn fs(&self) -> &FileSystem {
        self.fs.as_ref().unwrap()
    }

    /// Compares one stat against the model node, learning inode numbers and times.
    fn check_stat(&mut self, id: Id, st: &Stat, what: &str) {
        let nlink = self.m.nlink(id);
        let size = self.m.size(id);
        let n = self.m.nodes.get_mut(&id).unwrap();
        let kind = kind_of(n);
        assert_eq!(st.kind, kind, "{what}: kind");
        assert_eq!(st.mode, kind.mode_bits() | n.perm, "{what}: mode");
        assert_eq!((st.uid, st.gid), (n.uid, n.gid), "{what}: owner");
        assert_eq!(st.nlink, nlink, "{what}: nlink");
        assert_eq!(st.size, size, "{what}: size");
        let blocks = match &n.body {
            Body::File { pages, .. } => pages.len() as u64 * 8,
            Body::Sym { target } => (target.len() as u64).div_ceil(PAGE) * 8,
            Body::Dir { .. } => 0,
        };
        assert_eq!(st.blocks, blocks, "{what}: blocks");
        match n.ino {
            Some(ino) => assert_eq!(st.ino, ino, "{what}: inode number changed"),
            None => n.ino = Some(st.ino),
        }
        match n.atime {
            Some(t) => assert_eq!(st.atime_ns, t, "{what}: atime"),
            None => n.atime = Some(st.atime_ns),
        }
        match n.mtime {
            Some(t) => assert_eq!(st.mtime_ns, t, "{what}: mtime"),
            None => n.mtime = Some(st.mtime_ns),
        }
    }

    /// Walks the whole model tree and compares every name, attribute and byte.
    fn check_all(&mut self) {
        let mut queue = vec![(ROOT, "/".to_string())];
        let mut seen_inos: HashMap<u64, Id> = HashMap::new();
        while let Some((dir, path)) = queue.pop() {
            let listing = self
                .fs()
                .readdir(&path)
                .unwrap_or_else(|e| panic!("readdir {path}: {e}"));
            let want: Vec<(String, Id)> = self
                .m
                .children(dir)
                .iter()
                .map(|(n, &i)| (n.clone(), i))
                .collect();
            let got: Vec<&str> = listing.iter().map(|e| e.name.as_str()).collect();
            let want_names: Vec<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(got, want_names, "listing of {path}");
            let st = self.fs().lstat(&path).unwrap();
            self.check_stat(dir, &st, &path);
            for ((name, id), ent) in want.iter().zip(&listing) {
                let p = if path == "/" {
                    format!("/{name}")
                } else {
                    format!("{path}/{name}")
                };
                let st = self
                    .fs()
                    .lstat(&p)
                    .unwrap_or_else(|e| panic!("lstat {p}: {e}"));
                assert_eq!(ent.ino, st.ino, "{p}: readdir inode");
                assert_eq!(ent.kind, Some(st.kind), "{p}: readdir kind");
                self.check_stat(*id, &st, &p);
                if let Some(&other) = seen_inos.get(&st.ino) {
                    assert_eq!(other, *id, "{p}: two model inodes share inode {}", st.ino);
                }
                seen_inos.insert(st.ino, *id);
                match &self.m.node(*id).body {
                    Body::Dir { .. } => queue.push((*id, p)),
                    Body::Sym { target } => {
                        assert_eq!(&self.fs().readlink(&p).unwrap(), target, "{p}: target")
                    }
                    Body::File { data, .. } => {
                        let data = data.clone();
                        let fd = self
                            .fs()
                            .open(&p, OpenFlags::RDONLY | OpenFlags::NOFOLLOW, 0)
                            .unwrap();
                        let mut buf = vec![0xAAu8; data.len() + 7];
                        let n = self.fs().pread(fd, &mut buf, 0).unwrap();
                        self.fs().close(fd).unwrap();
                        assert!(
                            buf[..n] == data[..],
                            "{p}: contents differ ({n} vs {} bytes)",
                            data.len()
                        );
                    }
                }
            }
        }
        // Open descriptors, including those of unlinked files.
        for (i, f) in self.m.fds.clone().iter().enumerate() {
            let Some(f) = f else { continue };
            let st = self.fs().fstat(Fd(i as u32)).unwrap();
            self.check_stat(f.id, &st, &format!("fd {i}"));
            if let Body::File { data, .. } = &self.m.node(f.id).body {
                if f.read {
                    let data = data.clone();
                    let mut buf = vec![0u8; data.len() + 1];
                    let n = self.fs().pread(Fd(i as u32), &mut buf, 0).unwrap();
                    assert!(buf[..n] == data[..], "fd {i}: contents differ");
                }
            }
        }
        let live = self.m.nodes.len() as u64;
        assert_eq!(self.fs().usage().inodes_used, live, "inodes in use");
    }

    fn remount(&mut self, crash: bool) {
        let fs = self.fs.take().unwrap();
        if crash {
            fs.abandon();
        } else {
            fs.unmount().unwrap();
            assert_fsck_clean(&self.pm);
        }
        self.m.drop_fds();
        let (fs, report) = FileSystem::mount(self.pm.clone(), fs::MountOptions::default()).unwrap();
        assert_eq!(report.clean, !crash, "mount report: {report:?}");
        assert_eq!(
            report.journals_rolled_back, 0,
            "no operation was in flight: {report:?}"
        );
        self.fs = Some(fs);
    }

    fn step(&mut self, op: &Op) {
        let fs = self.fs.as_ref().unwrap();
        let m = &mut self.m;
        macro_rules! same {
            ($got:expr, $want:expr) => {{
                let (g, w) = ($got, $want);
                assert_eq!(g, w, "{op:?}");
            }};
        }
        match op {
            Op::Open(p, s) => same!(
                errno(fs.open(p, s.flags(), s.mode)).map(|f| f.0),
                m.open(p, s)
            ),
            Op::Close(f) => same!(errno(fs.close(Fd(*f))), m.close(*f)),
            Op::Write(f, l, seed) => {
                let b = pattern(*l, *seed);
                same!(errno(fs.write(Fd(*f), &b)), m.write(*f, &b))
            }
            Op::Pwrite(f, o, l, seed) => {
                let b = pattern(*l, *seed);
                same!(errno(fs.pwrite(Fd(*f), &b, *o)), m.pwrite(*f, &b, *o))
            }
            Op::Read(f, l) => {
                let mut b = vec![0u8; *l];
                let got = errno(fs.read(Fd(*f), &mut b)).map(|n| b[..n].to_vec());
                same!(got, m.read(*f, *l))
            }
            Op::Pread(f, o, l) => {
                let mut b = vec![0u8; *l];
                let got = errno(fs.pread(Fd(*f), &mut b, *o)).map(|n| b[..n].to_vec());
                same!(got, m.pread(*f, *o, *l))
            }
            Op::Lseek(f, o, w) => {
                let whence = [Whence::Set, Whence::Cur, Whence::End][*w as usize];
                same!(errno(fs.lseek(Fd(*f), *o, whence)), m.lseek(*f, *o, *w))
            }
            Op::Truncate(p, l) => same!(errno(fs.truncate(p, *l)), m.truncate(p, *l)),
            Op::Ftruncate(f, l) => same!(errno(fs.ftruncate(Fd(*f), *l)), m.ftruncate(*f, *l)),
            Op::Fsync(f) => same!(errno(fs.fsync(Fd(*f))), m.fd(*f).map(|_| ())),
            Op::Fstat(f) => {
                let got = errno(fs.fstat(Fd(*f)));
                match m.fd(*f) {
                    Ok(mf) => {
                        let id = mf.id;
                        let st = got.unwrap_or_else(|e| panic!("{op:?}: errno {e}"));
                        self.check_stat(id, &st, "fstat");
                    }
                    Err(e) => same!(got.map(|_| ()), Err(e)),
                }
            }
            Op::Unlink(p) => same!(errno(fs.unlink(p)), m.unlink(p)),
            Op::Mkdir(p, mode) => same!(errno(fs.mkdir(p, *mode)), m.mkdir(p, *mode)),
            Op::Rmdir(p) => same!(errno(fs.rmdir(p)), m.rmdir(p)),
            Op::Rename(a, b) => same!(errno(fs.rename(a, b)), m.rename(a, b)),
            Op::Link(a, b) => same!(errno(fs.link(a, b)), m.link(a, b)),
            Op::Symlink(t, p) => same!(errno(fs.symlink(t, p)), m.symlink(t, p)),
            Op::Readlink(p) => same!(errno(fs.readlink(p)), m.readlink(p)),
            Op::Readdir(p) => {
                let got =
                    errno(fs.readdir(p)).map(|v| v.into_iter().map(|e| e.name).collect::<Vec<_>>());
                let want = m.resolve(p, true).and_then(|id| match &m.node(id).body {
                    Body::Dir { children, .. } => Ok(children.keys().cloned().collect()),
                    _ => Err(libc::ENOTDIR),
                });
                same!(got, want)
            }
            Op::Stat(p) | Op::Lstat(p) => {
                let follow = matches!(op, Op::Stat(_));
                let got = errno(if follow { fs.stat(p) } else { fs.lstat(p) });
                match m.resolve(p, follow) {
                    Ok(id) => {
                        let st = got.unwrap_or_else(|e| panic!("{op:?}: errno {e}"));
                        self.check_stat(id, &st, p);
                    }
                    Err(e) => same!(got.map(|_| ()), Err(e)),
                }
            }
            Op::Chmod(p, mode) => same!(
                errno(fs.chmod(p, *mode)),
                m.set_attr(p, |n| n.perm = mode & 0o7777)
            ),
            Op::Chown(p, u, g) => same!(
                errno(fs.chown(p, *u, *g)),
                m.set_attr(p, |n| {
                    n.uid = u.unwrap_or(n.uid);
                    n.gid = g.unwrap_or(n.gid);
                })
            ),
            Op::Utimens(p, a, t) => same!(
                errno(fs.utimens(p, *a, *t)),
                m.set_attr(p, |n| {
                    n.atime = a.or(n.atime);
                    n.mtime = t.or(n.mtime);
                })
            ),
            Op::Remount => self.remount(false),
            Op::Crash => self.remount(true),
        }
    }
}

fn run(ops: &[Op]) {
    let pm = fresh(8 * MIB);
    let fs = mount(&pm);
    let mut h = Harness {
        pm,
        fs: Some(fs),
        m: Model::new(),
    };
    h.check_all();
    for op in ops {
        h.step(op);
        h.check_all();
    }
    h.remount(true);
    h.check_all();
    h.remount(false);
    h.check_all();
    let pm = h.pm.clone();
    h.fs.take().unwrap().unmount().unwrap();
    assert_fsck_clean(&pm);
}

fn cases() -> u32 {
    std::env::var("EASYIO_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn operations_agree_with_posix_model(ops in prop::collection::vec(op(), 1..120)) {
        run(&ops);
    }
}

/// Deep trees and many entries: directory logs that span pages and get cleaned.
#[test]
fn many_entries_and_log_cleaning_survive_remounts() {
    let mut ops = Vec::new();
    for round in 0..6u32 {
        for i in 0..4u32 {
            ops.push(Op::Mkdir(
                format!("/{}", ["a", "b", "c", "d"][i as usize]),
                0o755,
            ));
        }
        for i in 0..60u32 {
            let p = format!(
                "/{}/{}",
                ["a", "b", "c", "d"][(i % 4) as usize],
                ["a", "b", "c", "d"][((i / 4) % 4) as usize]
            );
            ops.push(Op::Open(
                p.clone(),
                OpenSpec {
                    acc: 2,
                    creat: true,
                    excl: false,
                    trunc: false,
                    append: true,
                    mode: 0o644,
                },
            ));
            ops.push(Op::Write(0, (i as usize * 97) % 9000 + 1, i as u8));
            ops.push(Op::Close(0));
            ops.push(Op::Rename(
                p,
                format!("/{}/x{}", ["b", "c", "d", "a"][(i % 4) as usize], i % 3),
            ));
        }
        ops.push(if round % 2 == 0 {
            Op::Crash
        } else {
            Op::Remount
        });
        for d in ["a", "b", "c", "d"] {
            for n in ["a", "b", "c", "d", "x0", "x1", "x2"] {
                ops.push(Op::Unlink(format!("/{d}/{n}")));
            }
            ops.push(Op::Rmdir(format!("/{d}")));
        }
    }
    run(&ops);
}
