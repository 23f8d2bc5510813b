//! Path resolution as Linux does it: components walked from the root, `.` and `..`,
//! symbolic links followed (at most [`MAX_HOPS`]), trailing slashes, name and path
//! length limits.

use crate::{Body, Id, Model, MAX_HOPS, NAME_MAX, PATH_MAX, R, ROOT};

/// Where a path's last component lives.
#[derive(Clone, Debug)]
pub(crate) struct Parent {
    /// The directory holding the last component.
    pub dir: Id,
    /// The last component; empty when the path names a directory itself (`/`, `..`).
    pub name: String,
    /// Whether the path ends with a slash (the result must be a directory).
    pub slash: bool,
}

impl Model {
    /// Walks every component but the last from `base`, following symbolic links; the
    /// last must fit `NAME_MAX`.
    pub(crate) fn walk(&self, base: Id, path: &str, hops: &mut usize) -> R<Parent> {
        let p = self.walk_parent(base, path, hops)?;
        if p.name.len() > NAME_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        Ok(p)
    }

    /// [`Model::walk`] without the check of the last name, which Linux makes only when
    /// it looks that name up (after walking a second path, in `rename`).
    pub(crate) fn walk_parent(&self, base: Id, path: &str, hops: &mut usize) -> R<Parent> {
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
            dir = self.step(dir, c, hops)?;
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

    /// One inner component: the directory it leads to.
    fn step(&self, dir: Id, c: &str, hops: &mut usize) -> R<Id> {
        if c.len() > NAME_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        let next = if c == ".." {
            self.parent(dir)
        } else {
            *self.children(dir).get(c).ok_or(libc::ENOENT)?
        };
        match &self.node(next).body {
            Body::Dir { .. } => Ok(next),
            Body::Symlink(target) => {
                let t = self.follow(dir, target, hops)?;
                if !self.is_dir(t) {
                    return Err(libc::ENOTDIR);
                }
                Ok(t)
            }
            _ => Err(libc::ENOTDIR),
        }
    }

    /// Follows the symbolic link in `dir` whose target is `target`.
    fn follow(&self, dir: Id, target: &str, hops: &mut usize) -> R<Id> {
        *hops += 1;
        if *hops > MAX_HOPS {
            return Err(libc::ELOOP);
        }
        let base = if target.starts_with('/') { ROOT } else { dir };
        self.resolve_from(base, target, true, hops)
    }

    /// The inode `path` names from `base`; a final symbolic link is followed if
    /// `follow` (or if the path ends with a slash).
    pub(crate) fn resolve_from(
        &self,
        base: Id,
        path: &str,
        follow: bool,
        hops: &mut usize,
    ) -> R<Id> {
        let p = self.walk(base, path, hops)?;
        if p.name.is_empty() {
            return Ok(p.dir);
        }
        let child = *self.children(p.dir).get(&p.name).ok_or(libc::ENOENT)?;
        let out = match &self.node(child).body {
            Body::Symlink(target) if follow || p.slash => self.follow(p.dir, target, hops)?,
            _ => child,
        };
        if p.slash && !self.is_dir(out) {
            return Err(libc::ENOTDIR);
        }
        Ok(out)
    }

    pub(crate) fn check_path(path: &str) -> R<()> {
        if path.len() > PATH_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        if path.is_empty() {
            return Err(libc::ENOENT);
        }
        Ok(())
    }

    /// The directory and last name of an absolute `path`.
    pub(crate) fn parent_of(&self, path: &str) -> R<Parent> {
        Self::check_path(path)?;
        self.walk(ROOT, path, &mut 0)
    }

    /// The inode an absolute `path` names; a final symbolic link is followed if
    /// `follow` (`stat` versus `lstat`).
    pub fn resolve(&self, path: &str, follow: bool) -> R<Id> {
        Self::check_path(path)?;
        self.resolve_from(ROOT, path, follow, &mut 0)
    }

    /// The name of `id`'s parent entry: an absolute path naming it, if it has one.
    pub fn path_of(&self, id: Id) -> Option<String> {
        if id == ROOT {
            return Some("/".into());
        }
        self.walk_tree()
            .into_iter()
            .find(|&(_, i)| i == id)
            .map(|(p, _)| p)
    }
}
