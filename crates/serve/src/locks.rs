//! Advisory locks between client processes, as the kernel keeps them: POSIX record
//! locks (`F_SETLK`, owned by a process, whatever connection of it asks, and kept
//! across its `exec`) and open-file locks
//! (`F_OFD_SETLK`, owned by an open file, which a forked child shares) conflict with
//! each other; `flock` locks (owned by an open file too) only with `flock` locks, as
//! in Linux. A lock conflicts with another owner's overlapping lock of the same
//! family when either is a write lock. Waiting (`F_SETLKW`, `flock` without `LOCK_NB`) is the client's: it asks
//! again until the lock is granted. There is no deadlock detection (`EDEADLK`).

use std::collections::HashMap;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// Who holds a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A process (by pid): POSIX record locks, released when it closes any descriptor
    /// of the file or ends.
    Process(u64),
    /// An open file: `F_OFD_*` locks, released with its last descriptor.
    File(usize),
    /// An open file's `flock` lock (whole file), released with its last descriptor.
    Flock(usize),
}

impl Owner {
    /// `flock` locks and `fcntl` locks never conflict with each other.
    fn is_flock(self) -> bool {
        matches!(self, Owner::Flock(_))
    }
}

/// Who a client asks to own a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockOwner {
    /// The calling process (`F_SETLK`).
    Process,
    /// The open file (`F_OFD_SETLK`).
    OpenFile,
    /// The open file, a `flock` lock.
    Flock,
}

/// A lock's kind, as `l_type` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// `F_RDLCK`: shared.
    Read,
    /// `F_WRLCK`: exclusive.
    Write,
    /// `F_UNLCK`: no lock.
    Unlock,
}

/// A lock another owner holds, as `F_GETLK` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Read or write.
    pub kind: Kind,
    /// First byte.
    pub start: u64,
    /// Bytes; 0 to the end of any file.
    pub len: u64,
    /// The holder's process (-1 for an open file's lock, as Linux reports OFD locks).
    pub pid: i32,
}

struct Lock {
    owner: Owner,
    pid: i32,
    write: bool,
    start: u64,
    /// One past the last byte; `u64::MAX` to the end of any file.
    end: u64,
}

impl Lock {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start < end && start < self.end
    }
}

/// Every lock, by inode.
#[derive(Default)]
pub(crate) struct Locks(Mutex<HashMap<u64, Vec<Lock>>>);

impl Locks {
    /// Sets (or with [`Kind::Unlock`] clears) `owner`'s lock on `[start, end)` of
    /// `ino`; `EAGAIN` if another owner's lock conflicts (nothing changes then).
    pub fn set(
        &self,
        ino: u64,
        (owner, pid): (Owner, i32),
        kind: Kind,
        (start, end): (u64, u64),
    ) -> Result<(), i32> {
        let mut all = self.0.lock();
        let locks = all.entry(ino).or_default();
        if kind != Kind::Unlock && conflict(locks, owner, kind, start, end).is_some() {
            return Err(libc::EAGAIN);
        }
        // The owner's locks in the range go (cut around it); the new one takes it.
        let mut kept = Vec::with_capacity(locks.len() + 1);
        for l in locks.drain(..) {
            if l.owner != owner || !l.overlaps(start, end) {
                kept.push(l);
                continue;
            }
            if l.start < start {
                kept.push(Lock { end: start, ..l });
            }
            if end < l.end {
                kept.push(Lock { start: end, ..l });
            }
        }
        if kind != Kind::Unlock {
            kept.push(Lock {
                owner,
                pid,
                write: kind == Kind::Write,
                start,
                end,
            });
        }
        if kept.is_empty() {
            all.remove(&ino);
        } else {
            *locks = kept;
        }
        Ok(())
    }

    /// The first lock of another owner that would conflict with `kind` on
    /// `[start, end)` of `ino`.
    pub fn get(
        &self,
        ino: u64,
        owner: Owner,
        kind: Kind,
        (start, end): (u64, u64),
    ) -> Option<Held> {
        let all = self.0.lock();
        let l = conflict(all.get(&ino)?, owner, kind, start, end)?;
        Some(Held {
            kind: if l.write { Kind::Write } else { Kind::Read },
            start: l.start,
            len: if l.end == u64::MAX {
                0
            } else {
                l.end - l.start
            },
            pid: l.pid,
        })
    }

    /// Drops the locks of `owner` (on `ino` only, if given).
    pub fn release(&self, owner: Owner, ino: Option<u64>) {
        let mut all = self.0.lock();
        all.retain(|&i, locks| {
            if ino.is_none_or(|x| x == i) {
                locks.retain(|l| l.owner != owner);
            }
            !locks.is_empty()
        });
    }

    /// Inodes with locks.
    #[cfg(test)]
    pub fn inodes(&self) -> usize {
        self.0.lock().len()
    }
}

fn conflict(locks: &[Lock], owner: Owner, kind: Kind, start: u64, end: u64) -> Option<&Lock> {
    let want_write = kind == Kind::Write;
    locks.iter().find(|l| {
        l.owner != owner
            && l.owner.is_flock() == owner.is_flock()
            && l.overlaps(start, end)
            && (l.write || want_write)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: (Owner, i32) = (Owner::Process(1), 10);
    const B: (Owner, i32) = (Owner::Process(2), 20);

    #[test]
    fn readers_share_and_a_writer_excludes_as_posix_says() {
        let l = Locks::default();
        l.set(7, A, Kind::Read, (0, 100)).unwrap();
        l.set(7, B, Kind::Read, (50, 150)).unwrap();
        assert_eq!(l.set(7, B, Kind::Write, (90, 95)), Err(libc::EAGAIN));
        let held = l.get(7, B.0, Kind::Write, (90, 95)).unwrap();
        assert_eq!(
            (held.kind, held.start, held.len, held.pid),
            (Kind::Read, 0, 100, 10)
        );
        // A's unlock of the middle leaves two pieces; B may then write there.
        l.set(7, A, Kind::Unlock, (40, 120)).unwrap();
        l.set(7, B, Kind::Write, (90, 95)).unwrap();
        l.set(7, A, Kind::Read, (30, 41)).unwrap();
        assert_eq!(l.set(7, A, Kind::Read, (85, 92)), Err(libc::EAGAIN));
        l.set(7, A, Kind::Read, (85, 90)).unwrap();
    }

    #[test]
    fn flock_locks_and_fcntl_locks_do_not_meet() {
        let l = Locks::default();
        l.set(3, (Owner::Flock(9), -1), Kind::Write, (0, u64::MAX))
            .unwrap();
        l.set(3, B, Kind::Write, (0, u64::MAX)).unwrap();
        l.set(3, (Owner::File(9), -1), Kind::Write, (0, 1))
            .expect_err("an OFD lock meets B's record lock");
        assert_eq!(
            l.set(3, (Owner::Flock(8), -1), Kind::Read, (0, u64::MAX)),
            Err(libc::EAGAIN),
            "another open file's flock meets the first"
        );
        l.release(Owner::Flock(9), None);
        l.set(3, (Owner::Flock(8), -1), Kind::Read, (0, u64::MAX))
            .unwrap();
    }

    #[test]
    fn a_lock_to_the_end_and_release_by_owner() {
        let l = Locks::default();
        l.set(1, A, Kind::Write, (10, u64::MAX)).unwrap();
        assert_eq!(
            l.set(1, B, Kind::Read, (1 << 40, (1 << 40) + 1)),
            Err(libc::EAGAIN)
        );
        assert!(l.get(1, B.0, Kind::Read, (0, 10)).is_none());
        assert_eq!(l.get(1, B.0, Kind::Read, (0, 11)).unwrap().len, 0);
        l.set(1, B, Kind::Read, (0, 10)).unwrap();
        l.release(A.0, None);
        l.set(1, B, Kind::Write, (0, u64::MAX)).unwrap();
        l.release(B.0, Some(1));
        assert_eq!(l.inodes(), 0);
    }
}
