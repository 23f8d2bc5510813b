//! Descriptors kept across a `fork` or an `exec`: a connection hands them over
//! ([`Request::Handoff`](crate::wire::Request::Handoff)), names the child they are
//! for, and the process that adopts them gets them under the same numbers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use fs::FileSystem;
use parking_lot::Mutex;

use super::files::{let_go, Open};
use super::proc::{alive, parent_of};
use super::{Common, Conn};
use crate::wire;

/// The descriptors kept for processes that will adopt them, by token.
#[derive(Default)]
pub(crate) struct Handoffs {
    /// Handoffs made and not yet adopted, by token.
    kept: Mutex<HashMap<u64, Kept>>,
    /// Handoffs made, for tokens.
    made: AtomicU64,
}

/// Descriptors kept by a [`crate::wire::Request::Handoff`] until they are adopted.
struct Kept {
    /// The process that made the handoff.
    owner: u32,
    /// The process expected to adopt them, once known.
    heir: Option<u32>,
    fds: Vec<(u32, Open)>,
}

impl Handoffs {
    /// Closes what was kept for processes that are gone (an heir that exited, or
    /// execed a program that never adopted; an owner that died before naming it).
    pub fn sweep(&self, fs: &FileSystem, common: &Common) {
        // `/proc` is read without the lock: handoffs go on meanwhile.
        let waiting: Vec<(u64, u32)> = self
            .kept
            .lock()
            .iter()
            .map(|(&t, k)| (t, k.heir.unwrap_or(k.owner)))
            .collect();
        let dead: Vec<(u64, u32)> = waiting.into_iter().filter(|&(_, p)| !alive(p)).collect();
        let gone: Vec<Kept> = {
            let mut kept = self.kept.lock();
            let still: Vec<u64> = dead
                .iter()
                .filter(|(t, p)| kept.get(t).is_some_and(|k| k.heir.unwrap_or(k.owner) == *p))
                .map(|&(t, _)| t)
                .collect();
            still.iter().filter_map(|t| kept.remove(t)).collect()
        };
        for k in gone {
            for (_, o) in k.fds {
                let _ = let_go(fs, common, o.file);
            }
        }
    }

    /// A new handoff token: not guessable by another client (the keys of a hasher
    /// seeded at random, over a counter).
    fn token(&self) -> u64 {
        use std::hash::BuildHasher;
        static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        let n = self.made.fetch_add(1, Ordering::SeqCst);
        KEYS.get_or_init(std::hash::RandomState::new).hash_one(n)
    }

    /// Handoffs not yet adopted.
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.kept.lock().len()
    }
}

impl Conn<'_> {
    /// Keeps every descriptor of this connection for the process that will adopt
    /// them (a child after `fork`, this process after `exec`); the token to adopt by.
    pub(super) fn handoff(&self, wanted: &[u32]) -> fs::Result<u64> {
        let fds = wanted
            .iter()
            .filter_map(|fd| self.fds.get(fd).map(|o| (*fd, o)))
            .map(|(fd, o)| {
                let o = Open {
                    table: false,
                    ..o.clone()
                };
                (fd, o)
            })
            .collect();
        let kept = Kept {
            owner: self.pid,
            heir: None,
            fds,
        };
        let mut all = self.common.handoffs.kept.lock();
        if all.values().filter(|k| k.owner == self.pid).count() >= wire::MAX_HANDOFFS {
            return Err(fs::Error::Errno(libc::EAGAIN));
        }
        let token = loop {
            let t = self.common.handoffs.token();
            if t != 0 && !all.contains_key(&t) {
                break t;
            }
        };
        all.insert(token, kept);
        Ok(token)
    }

    /// Names the process a handoff of this client's is for; a negative `pid` (the
    /// `fork` failed, the `exec` returned) gives it up.
    pub(super) fn heir(&self, token: u64, pid: i32) {
        // Only a child of the maker may be named: naming another process would let it
        // adopt, or keep the files open as long as it lives.
        let child = pid > 0 && parent_of(pid as u32) == Some(self.pid);
        let mut kept = self.common.handoffs.kept.lock();
        match kept.get_mut(&token) {
            Some(k) if k.owner == self.pid && child => k.heir = Some(pid as u32),
            Some(k) if k.owner == self.pid && pid <= 0 => {
                let k = kept.remove(&token).expect("present");
                drop(kept);
                for (_, o) in k.fds {
                    let _ = let_go(self.fs, self.common, o.file);
                }
            }
            _ => {}
        }
    }

    /// Adopts the descriptors of handoff `token`; the numbers adopted. Only the heir
    /// named may, or — none named yet — its maker (after an `exec`) or a child of
    /// its maker (`EPERM`); an unknown token is `ENOENT`. A number this connection
    /// holds already keeps its own file.
    pub(super) fn adopt(&mut self, token: u64) -> fs::Result<Vec<u32>> {
        let mut kept = self.common.handoffs.kept.lock();
        let k = kept.get(&token).ok_or(fs::Error::NotFound)?;
        let mine = self.pid != 0
            && match k.heir {
                Some(heir) => heir == self.pid,
                None => k.owner == self.pid || parent_of(self.pid) == Some(k.owner),
            };
        if !mine {
            return Err(fs::Error::NotPermitted("a handoff of another process"));
        }
        let k = kept.remove(&token).expect("present");
        drop(kept);
        let mut adopted = Vec::new();
        for (fd, o) in k.fds {
            match self.fds.entry(fd) {
                std::collections::btree_map::Entry::Occupied(_) => {
                    let _ = let_go(self.fs, self.common, o.file);
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(o);
                    adopted.push(fd);
                }
            }
        }
        Ok(adopted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::testing::*;

    /// A handoff is adopted only by its maker (after `exec`) or a child of it; the
    /// adopting connection shares the open file (one offset, closed with the last
    /// holder); what was kept for a process that died goes at the next sweep.
    #[test]
    fn a_handoff_goes_to_a_child_shares_the_file_and_dies_with_its_heir() {
        let fs = memory_fs();
        let common = Common::default();
        let held = || {
            (
                common.handoffs.kept(),
                common.counts.open.load(Ordering::SeqCst),
            )
        };
        let mut parent = conn_of(&fs, &common, std::process::id());
        let fd = open_rw(&mut parent, "/f");
        parent.answer(Request::Write {
            fd,
            data: b"ab".to_vec().into(),
        });
        let Answer::Count(token) = parent.answer(Request::Handoff { fds: vec![fd, 99] }) else {
            panic!()
        };
        let mut stranger = conn_of(&fs, &common, 1);
        assert_eq!(
            stranger.answer(Request::Adopt { token }),
            Answer::Error(libc::EPERM)
        );
        let mut process = sleeper();
        let mut child = conn_of(&fs, &common, process.id());
        // Named, the heir alone may adopt: another child of the maker may not.
        let mut sibling = sleeper();
        let mut other = conn_of(&fs, &common, sibling.id());
        parent.answer(Request::Heir {
            token,
            pid: process.id() as i32,
        });
        assert_eq!(
            other.answer(Request::Adopt { token }),
            Answer::Error(libc::EPERM)
        );
        sibling.kill().unwrap();
        sibling.wait().unwrap();
        assert_eq!(
            child.answer(Request::Adopt { token }),
            Answer::Fds(vec![fd])
        );
        assert_eq!(
            child.answer(Request::Adopt { token }),
            Answer::Error(libc::ENOENT)
        );
        child.answer(Request::Write {
            fd,
            data: b"cd".to_vec().into(),
        });
        let at = |c: &mut Conn<'_>| {
            c.answer(Request::Lseek {
                fd,
                off: 0,
                whence: libc::SEEK_CUR,
            })
        };
        assert_eq!(at(&mut parent), Answer::Count(4), "one offset for both");
        drop(parent);
        assert_eq!(held(), (0, 1), "the child holds it");
        assert_eq!(
            child.answer(Request::Pread {
                fd,
                len: 10,
                off: 0
            }),
            Answer::Data(b"abcd".to_vec())
        );
        // Kept for the child's own heir, which dies before adopting.
        let Answer::Count(token) = child.answer(Request::Handoff { fds: vec![fd] }) else {
            panic!()
        };
        child.answer(Request::Heir {
            token,
            pid: process.id() as i32,
        });
        drop(child);
        common.sweep(&fs);
        assert_eq!(held(), (1, 1));
        process.kill().unwrap();
        process.wait().unwrap();
        common.sweep(&fs);
        assert_eq!(held(), (0, 0));
    }
}
