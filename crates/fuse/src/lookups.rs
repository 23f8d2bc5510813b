//! The kernel's lookup counts: which inodes the kernel holds, and under which names it
//! was given them (what the `inval` module invalidates).

use std::collections::HashMap;
use std::sync::Arc;

use fs::Stat;
use parking_lot::Mutex;

/// The kernel's lookup count of each inode it holds: one for every entry a reply gave
/// it, less what it gave back with `forget`; and the names (directory, name) it was
/// given the inode under, which are invalidated with the inode (see the `inval` module).
/// An inode leaves the table at zero.
#[derive(Clone, Default)]
pub struct LookupCounts(Arc<Mutex<HashMap<u64, Held>>>);

/// What the kernel holds of one inode.
#[derive(Default)]
struct Held {
    count: u64,
    /// The names it was given under, kept for files only: invalidating a directory's
    /// entry would also detach whatever is mounted below it.
    names: Vec<(u64, Box<str>)>,
}

/// Names kept per inode at most. The names matter while the kernel is installing the
/// inode from its first replies; an inode given under more names is held already.
const NAMES_PER_INODE: usize = 8;

impl LookupCounts {
    /// One more lookup of `st`'s inode, given as `name` in directory `dir`; whether it
    /// is the first (the kernel did not hold the inode).
    pub(crate) fn add(&self, st: &Stat, dir: u64, name: &str) -> bool {
        let mut map = self.0.lock();
        let held = map.entry(st.ino).or_default();
        held.count += 1;
        let first = held.count == 1;
        if st.kind == fs::FileKind::Dir {
            return first;
        }
        let known = held.names.iter().any(|(d, n)| *d == dir && &**n == name);
        if !known && held.names.len() < NAMES_PER_INODE {
            held.names.push((dir, name.into()));
        }
        first
    }

    pub(crate) fn forget(&self, ino: u64, n: u64) {
        let mut map = self.0.lock();
        if let Some(held) = map.get_mut(&ino) {
            held.count = held.count.saturating_sub(n);
            if held.count == 0 {
                map.remove(&ino);
            }
        }
    }

    /// The names the kernel was given inode `ino` under.
    pub(crate) fn names(&self, ino: u64) -> Vec<(u64, String)> {
        self.0.lock().get(&ino).map_or_else(Vec::new, |h| {
            h.names.iter().map(|(d, n)| (*d, n.to_string())).collect()
        })
    }

    /// Inodes the kernel holds at least one lookup of.
    pub fn inodes(&self) -> usize {
        self.0.lock().len()
    }

    /// The lookup count of `ino`.
    pub fn count(&self, ino: u64) -> u64 {
        self.0.lock().get(&ino).map_or(0, |h| h.count)
    }
}

/// The attributes of an empty file or directory `ino` of this kind, for the tests of
/// the crate's rooms.
#[cfg(test)]
pub(crate) fn test_stat(ino: u64, kind: fs::FileKind) -> Stat {
    Stat {
        ino,
        generation: 1,
        kind,
        mode: 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        size: 0,
        blocks: 0,
        blksize: 4096,
        atime_ns: 0,
        mtime_ns: 0,
        ctime_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_keep_names_of_files_and_say_which_is_first() {
        let st = test_stat;
        let l = LookupCounts::default();
        assert!(l.add(&st(5, fs::FileKind::File), 1, "a"));
        assert!(!l.add(&st(5, fs::FileKind::File), 1, "a"));
        assert!(!l.add(&st(5, fs::FileKind::File), 2, "b"));
        assert_eq!(l.names(5), [(1, "a".to_string()), (2, "b".to_string())]);
        assert!(l.add(&st(6, fs::FileKind::Dir), 1, "d"));
        assert!(
            l.names(6).is_empty(),
            "a directory's entry is never invalidated"
        );
        l.forget(5, 3);
        assert_eq!((l.count(5), l.names(5).len()), (0, 0));
    }
}
