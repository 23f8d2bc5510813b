//! Paths resolved by the client itself: KucoFS's collaborative indexing, for the
//! calls that only look (`stat`, `lstat`, `fstatat`, `access(F_OK)`, and a read-only
//! `open` of a path that what is kept shows missing).
//!
//! The server publishes one version word per inode (`Direct::versions`), moved each
//! time the inode is locked for a change: its attributes, its size, a directory's
//! entries. A client keeps what lookups told it — a directory's names, each with the
//! inode and kind it names or the error looking it up gave (`ENOENT`, `EACCES`,
//! `ENOTDIR`), and a file's attributes — each with the version it held at, and
//! resolves a path component by component from that, asking the server
//! ([`Request::Lookup`], one component) only for what it does not hold at the
//! current version. The server looks names up as this client's session, so search
//! permission is checked by the server, as for any call.
//!
//! A resolution is a versioned read (KucoFS §3): each fact it used is checked again
//! at the end, and one whose version moved meanwhile sends the whole call to the
//! server. What it returns thus held all at once, at the moment of that check. A
//! path the index does not resolve — relative, with `..`, a symbolic link on the way,
//! a trailing `/` — is one request, as before.

use std::collections::HashMap;

use fs::{FileKind, Stat};
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::shm::Words;
use crate::wire::{Answer, Request, UNSTABLE};

/// What a client keeps past which it forgets everything (a crude bound on memory).
const MAX_KEPT: usize = 1 << 16;

/// Errors of a lookup that depend only on the directory looked in (and on the
/// client's ids, fixed for the connection): kept like names.
const KEPT_ERRORS: [i32; 3] = [libc::ENOENT, libc::EACCES, libc::ENOTDIR];

/// What one directory's lookups said, while its version is `version`.
struct Names {
    version: u64,
    names: HashMap<String, Result<(u64, FileKind), i32>>,
}

#[derive(Default)]
struct Kept {
    /// Names and attributes kept since this was last emptied (at least as many as
    /// it holds).
    count: usize,
    dirs: HashMap<u64, Names>,
    /// Attributes by inode, with the version they hold at.
    stats: HashMap<u64, (u64, Stat)>,
}

/// The version table and what this client learnt of the namespace.
pub(crate) struct Index {
    versions: Words,
    kept: Mutex<Kept>,
}

/// Versions a resolution relied on, to check again at its end.
type Relied = SmallVec<[(u64, u64); 8]>;

impl Index {
    pub fn new(versions: Words) -> Index {
        Index {
            versions,
            kept: Mutex::new(Kept::default()),
        }
    }

    /// Inode `ino`'s version now ([`UNSTABLE`] past the table: matches nothing kept).
    fn version(&self, ino: u64) -> u64 {
        usize::try_from(ino)
            .ok()
            .and_then(|i| self.versions.get(i))
            .map_or(UNSTABLE, |w| w.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// The attributes of absolute `path` (following a final symbolic link when
    /// `follow`), resolved here, or the errno the resolution met; `None` when the
    /// server must resolve it (see the module). `ask` makes one lookup request.
    pub fn stat(
        &self,
        path: &str,
        follow: bool,
        ask: impl Fn(&Request) -> Option<Answer>,
    ) -> Option<Result<Stat, i32>> {
        let names = components(path)?;
        let mut kept = self.kept.lock();
        if kept.count > MAX_KEPT {
            *kept = Kept::default();
        }
        let mut walk = Walk {
            index: self,
            kept,
            relied: Relied::new(),
            ask,
        };
        // The directory the next name is looked up in, and what the last one named.
        let (mut dir, mut found) = (fs::ROOT_INO, fs::ROOT_INO);
        let last = names.len() - 1;
        for (i, name) in names.iter().enumerate() {
            let (ino, kind) = match walk.entry(dir, name)? {
                Ok(named) => named,
                Err(errno) => return walk.recheck().then_some(Err(errno)),
            };
            if kind == FileKind::Symlink && (i < last || follow) {
                return None;
            }
            match i < last {
                true => dir = ino,
                false => found = ino,
            }
        }
        let stat = walk.attributes(found, (dir, names[last]))?;
        walk.recheck().then_some(Ok(stat))
    }
}

/// One resolution: what it may use and what it relied on.
struct Walk<'a, F> {
    index: &'a Index,
    kept: parking_lot::MutexGuard<'a, Kept>,
    relied: Relied,
    /// Makes one lookup request.
    ask: F,
}

impl<F: Fn(&Request) -> Option<Answer>> Walk<'_, F> {
    /// Whether every version relied on is still the current one.
    fn recheck(&self) -> bool {
        let now = |ino| self.index.version(ino);
        self.relied.iter().all(|&(ino, v)| now(ino) == v)
    }

    /// What `name` in directory `dir` names, from what is kept at `dir`'s current
    /// version or from the server; `None` if the server did not say.
    fn entry(&mut self, dir: u64, name: &str) -> Option<Result<(u64, FileKind), i32>> {
        let now = self.index.version(dir);
        let kept = self.kept.dirs.get(&dir).filter(|d| d.version == now);
        if let Some(&found) = kept.and_then(|d| d.names.get(name)) {
            self.relied.push((dir, now));
            return Some(found);
        }
        self.look_up(dir, name)
    }

    /// The attributes of inode `ino` (named `name` in `dir`), kept at its current
    /// version or asked for again.
    fn attributes(&mut self, ino: u64, (dir, name): (u64, &str)) -> Option<Stat> {
        let now = self.index.version(ino);
        if let Some((_, st)) = self.kept.stats.get(&ino).filter(|(v, _)| *v == now) {
            self.relied.push((ino, now));
            return Some(st.clone());
        }
        // Asked again, the name may name another inode by now: that one's attributes
        // are the answer (the recheck covers the directory's entry).
        match self.look_up(dir, name)? {
            // Kept by the lookup, at the version it relied on.
            Ok((found, _)) => self.kept.stats.get(&found).map(|(_, st)| st.clone()),
            Err(_) => None,
        }
    }

    /// Asks the server for `name` in `dir`, keeping what holds at a version.
    fn look_up(&mut self, dir: u64, name: &str) -> Option<Result<(u64, FileKind), i32>> {
        let req = Request::Lookup {
            dir,
            name: name.to_owned(),
        };
        let (dir_version, found) = match (self.ask)(&req)? {
            Answer::Looked {
                dir_version,
                ino,
                version,
                stat,
            } => {
                if version == UNSTABLE {
                    return None;
                }
                let kind = stat.kind;
                self.relied.push((ino, version));
                self.kept.stats.insert(ino, (version, stat));
                self.kept.count += 1;
                (dir_version, Ok((ino, kind)))
            }
            Answer::NotThere { dir_version, errno } => (dir_version, Err(errno)),
            _ => return None,
        };
        if dir_version == UNSTABLE {
            return None;
        }
        self.relied.push((dir, dir_version));
        if found.is_ok() || found.is_err_and(|e| KEPT_ERRORS.contains(&e)) {
            self.keep(dir, dir_version, name, found);
        }
        Some(found)
    }

    /// Keeps what `name` in `dir` names while `dir` is at `version`.
    fn keep(&mut self, dir: u64, version: u64, name: &str, found: Result<(u64, FileKind), i32>) {
        let names = self.kept.dirs.entry(dir).or_insert_with(|| Names {
            version,
            names: HashMap::new(),
        });
        if names.version != version {
            names.version = version;
            names.names.clear();
        }
        names.names.insert(name.to_owned(), found);
        self.kept.count += 1;
    }
}

/// The components of absolute `path` ("." left out), or `None` for a path the index
/// does not resolve: relative, the root itself, with `..`, ending in `/` or `/.`
/// (which ask for a directory), as long as a path may not be, or with a component
/// longer than a name may be.
fn components(path: &str) -> Option<SmallVec<[&str; 8]>> {
    let rest = path.strip_prefix('/')?;
    if rest.ends_with('/') || rest.ends_with("/.") || path.len() >= fs::MAX_PATH {
        return None;
    }
    let names: SmallVec<[&str; 8]> = rest
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let plain = |c: &&str| *c != ".." && c.len() <= fs::MAX_NAME;
    (!names.is_empty() && names.iter().all(plain)).then_some(names)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::Arc;

    use fs::{Cred, FileSystem, FormatOptions, MountOptions};
    use pmem::{MemPmem, Pmem};

    use super::{components, Index};
    use crate::conn::{Common, Conn};
    use crate::direct::Direct;
    use crate::shm::Words;

    #[test]
    fn only_plain_absolute_paths_are_resolved_here() {
        assert_eq!(components("/a//b/./c").unwrap().as_slice(), ["a", "b", "c"]);
        assert_eq!(components("/a").unwrap().as_slice(), ["a"]);
        let long_name = format!("/{}", "x".repeat(300));
        let long_path = format!("/{}f", "./".repeat(2100));
        for refused in [
            "a/b", "/", "/a/", "/a/.", "/a/../b", "", "/.", &long_name, &long_path,
        ] {
            assert!(components(refused).is_none(), "{refused:?}");
        }
    }

    /// What the index answers for each of `paths` is what the server's own walk
    /// answers (or the index leaves it to the server), after each of `changes`.
    #[test]
    fn the_index_answers_as_the_servers_walk_between_changes() {
        let paths = [
            "/d", "/d/d", "/d/./d", "/d/f", "/f", "/f/x", "/l", "/l/f", "/nope", "/nope/x", "/p",
            "/p/q", "/p/q/r", "/f/.", "/l/.", "/d/.", "/d//f",
        ];
        let changes: [&dyn Fn(&FileSystem); 9] = [
            &|fs| fs.mkdir("/d", 0o755).unwrap(),
            // A name inside /d equal to its own: stat("/d") must stay /d.
            &|fs| fs.mkdir("/d/d", 0o700).unwrap(),
            &|fs| fs.mknod("/f", 0o644, 0).unwrap(),
            &|fs| fs.symlink("/d", "/l").unwrap(),
            &|fs| fs.mknod("/d/f", 0o600, 0).unwrap(),
            &|fs| fs.mkdir("/p", 0o700).unwrap(),
            &|fs| fs.mkdir("/p/q", 0o755).unwrap(),
            &|fs| fs.rename("/d/f", "/p/q/r").unwrap(),
            &|fs| fs.chmod("/p", 0o755).unwrap(),
        ];
        for cred in [Cred::root(), Cred::user(1000, 1000)] {
            let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
            FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
            let fs = FileSystem::mount(pm, MountOptions::default()).unwrap().0;
            let direct = Arc::new(Direct::new(fs.geometry().inodes).unwrap());
            fs.set_inode_changes(direct.clone());
            let common = Common::default();
            let versions = direct.versions();
            let conn = RefCell::new(Conn::new(&fs, cred.clone(), &common, Some(&direct)));
            let index =
                Index::new(Words::map(versions.fd().unwrap(), versions.len(), false).unwrap());
            let ask = |r: &crate::wire::Request| Some(conn.borrow_mut().answer(r.clone()));
            let user = fs.as_user(&cred);
            let mut resolved = 0;
            for change in changes {
                change(&fs);
                // Twice: the second time from what the index kept.
                for _ in 0..2 {
                    for p in paths {
                        for follow in [true, false] {
                            let Some(got) = index.stat(p, follow, ask) else {
                                continue;
                            };
                            resolved += 1;
                            let want = match follow {
                                true => user.stat(p),
                                false => user.lstat(p),
                            };
                            let key = |r: Result<fs::Stat, i32>| {
                                r.map(|s| (s.ino, s.mode, s.nlink, s.size))
                            };
                            assert_eq!(
                                key(got),
                                key(want.map_err(|e| e.errno())),
                                "{p} follow {follow} as {}",
                                cred.uid
                            );
                        }
                    }
                }
            }
            assert!(resolved > 100, "the index resolved {resolved} calls");
        }
    }
}
