//! Paths resolved by the client itself: KucoFS's collaborative indexing, for the
//! calls that only look (`stat`, `lstat`, `fstatat`, `access(F_OK)`, and a read-only
//! `open` of a path that is not there).
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
        if kept.dirs.len() + kept.stats.len() > MAX_KEPT {
            *kept = Kept::default();
        }
        let mut relied = Relied::new();
        let mut dir = fs::ROOT_INO;
        let last = names.len() - 1;
        for (i, name) in names.iter().enumerate() {
            let (ino, kind) = match self.entry(&mut kept, dir, name, &mut relied, &ask)? {
                Ok(found) => found,
                Err(errno) => return self.recheck(&relied).then_some(Err(errno)),
            };
            if kind == FileKind::Symlink && (i < last || follow) {
                return None;
            }
            dir = ino;
        }
        let stat = self.attributes(&mut kept, dir, &mut relied, &ask, (dir, names[last]))?;
        self.recheck(&relied).then_some(Ok(stat))
    }

    /// Whether every version `relied` holds is still the current one.
    fn recheck(&self, relied: &Relied) -> bool {
        relied.iter().all(|&(ino, v)| self.version(ino) == v)
    }

    /// What `name` in directory `dir` names, from what is kept at `dir`'s current
    /// version or from the server; `None` if the server did not say.
    fn entry(
        &self,
        kept: &mut Kept,
        dir: u64,
        name: &str,
        relied: &mut Relied,
        ask: &impl Fn(&Request) -> Option<Answer>,
    ) -> Option<Result<(u64, FileKind), i32>> {
        let now = self.version(dir);
        if let Some(found) = kept
            .dirs
            .get(&dir)
            .filter(|d| d.version == now)
            .and_then(|d| d.names.get(name))
        {
            relied.push((dir, now));
            return Some(*found);
        }
        self.look_up(kept, dir, name, relied, ask)
    }

    /// The attributes of inode `ino` (named `name` in `dir`), kept at its current
    /// version or asked for again.
    fn attributes(
        &self,
        kept: &mut Kept,
        ino: u64,
        relied: &mut Relied,
        ask: &impl Fn(&Request) -> Option<Answer>,
        (dir, name): (u64, &str),
    ) -> Option<Stat> {
        let now = self.version(ino);
        if let Some((_, st)) = kept.stats.get(&ino).filter(|(v, _)| *v == now) {
            relied.push((ino, now));
            return Some(st.clone());
        }
        // Asked again, the name may name another inode by now: that one's attributes
        // are the answer (the recheck covers the directory's entry).
        match self.look_up(kept, dir, name, relied, ask)? {
            // Kept by the lookup, at the version it relied on.
            Ok((found, _)) => kept.stats.get(&found).map(|(_, st)| st.clone()),
            Err(_) => None,
        }
    }

    /// Asks the server for `name` in `dir`, keeping what holds at a version.
    fn look_up(
        &self,
        kept: &mut Kept,
        dir: u64,
        name: &str,
        relied: &mut Relied,
        ask: &impl Fn(&Request) -> Option<Answer>,
    ) -> Option<Result<(u64, FileKind), i32>> {
        let req = Request::Lookup {
            dir,
            name: name.to_owned(),
        };
        let (dir_version, found) = match ask(&req)? {
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
                relied.push((ino, version));
                kept.stats.insert(ino, (version, stat));
                (dir_version, Ok((ino, kind)))
            }
            Answer::NotThere { dir_version, errno } => (dir_version, Err(errno)),
            _ => return None,
        };
        if dir_version == UNSTABLE {
            return None;
        }
        relied.push((dir, dir_version));
        if found.is_ok() || found.is_err_and(|e| KEPT_ERRORS.contains(&e)) {
            let names = kept.dirs.entry(dir).or_insert_with(|| Names {
                version: dir_version,
                names: HashMap::new(),
            });
            if names.version != dir_version {
                names.version = dir_version;
                names.names.clear();
            }
            names.names.insert(name.to_owned(), found);
        }
        Some(found)
    }
}

/// The components of absolute `path` ("." left out), or `None` for a path the index
/// does not resolve: relative, the root itself, with `..`, ending in `/`, or with a
/// component longer than a name may be.
fn components(path: &str) -> Option<SmallVec<[&str; 8]>> {
    let rest = path.strip_prefix('/')?;
    if rest.ends_with('/') {
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
    use super::components;

    #[test]
    fn only_plain_absolute_paths_are_resolved_here() {
        assert_eq!(components("/a//b/./c").unwrap().as_slice(), ["a", "b", "c"]);
        assert_eq!(components("/a").unwrap().as_slice(), ["a"]);
        for refused in [
            "a/b",
            "/",
            "/a/",
            "/a/../b",
            "",
            "/.",
            &format!("/{}", "x".repeat(300)),
        ] {
            assert!(components(refused).is_none(), "{refused:?}");
        }
    }
}
