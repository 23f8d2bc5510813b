//! Advisory locks between processes: the table of them, and the processes whose
//! record locks outlive their connection (across an `exec`) until they are gone.

use std::collections::HashSet;

use parking_lot::Mutex;

use super::files::file_id;
use super::proc::alive;
use super::Conn;
use crate::locks::{Kind, LockOwner, Locks, Owner};
use crate::wire::Answer;

/// The advisory locks of a server's clients.
#[derive(Default)]
pub(crate) struct ProcessLocks {
    /// Every lock held.
    table: Locks,
    /// Processes whose connection ended while they still ran: their record locks
    /// go when they do.
    lingering: Mutex<HashSet<u32>>,
}

impl ProcessLocks {
    /// Drops `owner`'s locks on file `ino` (`None`: on every file).
    pub fn release(&self, owner: Owner, ino: Option<u64>) {
        self.table.release(owner, ino);
    }

    /// Keeps the record locks of process `pid`, whose connection ended, until it is
    /// gone.
    pub fn outlive(&self, pid: u32) {
        self.lingering.lock().insert(pid);
    }

    /// Drops the record locks of the processes gone since their connection ended.
    pub fn sweep(&self) {
        let holders: Vec<u32> = self.lingering.lock().iter().copied().collect();
        for pid in holders.into_iter().filter(|&p| !alive(p)) {
            self.lingering.lock().remove(&pid);
            self.table.release(Owner::Process(pid as u64), None);
        }
    }
}

impl Conn<'_> {
    /// The owner of this client's record locks: its process (every connection of one
    /// process shares them, as POSIX says); a connection of its own when the process
    /// is unknown (tests).
    pub(super) fn process(&self) -> Owner {
        match self.pid {
            0 => Owner::Process((1 << 63) | self.id),
            pid => Owner::Process(pid as u64),
        }
    }

    /// An advisory lock request on open file `fd`.
    pub(super) fn lock(
        &self,
        fd: u32,
        (test, who): (bool, LockOwner),
        kind: Kind,
        (start, len): (u64, u64),
    ) -> fs::Result<Answer> {
        let (_, o) = self.own(fd)?;
        // Offsets are `off_t`: a range past its largest is EOVERFLOW, as in Linux.
        let end = match len {
            0 => u64::MAX,
            n => start
                .checked_add(n)
                .filter(|&e| e <= i64::MAX as u64)
                .ok_or(fs::Error::Errno(libc::EOVERFLOW))?,
        };
        if start > i64::MAX as u64 {
            return Err(fs::Error::Errno(libc::EOVERFLOW));
        }
        let owner = match who {
            LockOwner::OpenFile => Owner::File(file_id(&o.file)),
            LockOwner::Flock => Owner::Flock(file_id(&o.file)),
            LockOwner::Process => self.process(),
        };
        let locks = &self.common.locks.table;
        if test {
            return Ok(Answer::Lock(locks.get(o.ino, owner, kind, (start, end))));
        }
        let pid = match who {
            LockOwner::Process => self.pid as i32,
            _ => -1,
        };
        locks
            .set(o.ino, (owner, pid), kind, (start, end))
            .map_err(fs::Error::Errno)?;
        Ok(Answer::Done)
    }
}
