//! One client's requests, answered with its credentials. The connection owns the
//! descriptors it opened: a request naming any other is `EBADF`, and when the
//! connection ends — the client closed it, died, or sent what cannot be framed —
//! every descriptor it left open is closed, so an unlinked file it held is freed.
//!
//! The rooms: [`dispatch`] answers each request (or sends it to the room that
//! does), [`files`] holds the descriptors and what they name, [`staging`] the
//! shared buffers and the calls that carry data through them, [`handoff`] the
//! descriptors kept across a `fork` or an `exec`, [`locks`] the advisory locks
//! between processes, and [`proc`] what `/proc` says of a client's process.

mod dispatch;
mod files;
mod handoff;
mod locks;
mod proc;
mod staging;
#[cfg(test)]
mod testing;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use fs::{Cred, Fd, FileSystem};

use crate::direct::{At, Direct, PageTable, TABLE_PAGES};
use crate::submitted::Submitted;
use crate::wire::{self, Answer, Request};

use files::Open;
use handoff::Handoffs;
use locks::ProcessLocks;

/// What every connection of a server shares.
#[derive(Default)]
pub(crate) struct Common {
    /// What is open and held, counted.
    pub counts: Counts,
    /// Descriptors kept for a process that will adopt them.
    pub handoffs: Handoffs,
    /// Advisory locks between processes.
    pub locks: ProcessLocks,
}

impl Common {
    /// Closes what was kept for processes that are gone (an heir that exited, or
    /// execed a program that never adopted; an owner that died before naming it),
    /// and drops the record locks of processes gone since their connection ended.
    pub fn sweep(&self, fs: &FileSystem) {
        self.handoffs.sweep(fs, self);
        self.locks.sweep();
    }
}

/// What the connections of a server hold, counted.
#[derive(Default)]
pub(crate) struct Counts {
    /// Connections open.
    pub clients: AtomicU32,
    /// Descriptors open over all connections.
    pub open: AtomicU32,
    /// The last connection's number.
    last_conn: AtomicU64,
    /// Bytes of staging buffers all connections hold.
    staging_bytes: AtomicU64,
    /// Staging buffers all connections hold.
    staging_buffers: AtomicU64,
}

/// A client's view of the file system.
pub(crate) struct Conn<'a> {
    fs: &'a FileSystem,
    cred: Cred,
    /// The client's process (0: unknown, as in tests; it may adopt nothing).
    pub pid: u32,
    /// This connection's number (the owner of its record locks when its process is
    /// unknown).
    id: u64,
    /// Descriptors this connection holds.
    fds: BTreeMap<u32, Open>,
    /// What every connection of the server shares.
    common: &'a Common,
    /// Page tables and epochs, when clients read directly: every change of a file's
    /// data goes through it.
    direct: Option<&'a Direct>,
    /// Whether this client reads directly (it was given the image): only then does
    /// it get page tables.
    pub reads_directly: bool,
    /// Submitted writes whose copies run, each from the server's own copy of its
    /// bytes; dropping it waits for them.
    submitted: Submitted<'a>,
    /// The staging buffers this connection holds, by number.
    staging: HashMap<u32, crate::staging::Buffer>,
    /// The number of the last staging buffer made.
    last_staging: u32,
    /// The server's own copy of a staged call's bytes (never the shared ones).
    scratch: Vec<u8>,
}

/// What an answer carries over the socket beside it.
pub(crate) enum Attached {
    /// No descriptor.
    Nothing,
    /// A page table: its segment's descriptor.
    Table(Arc<PageTable>),
    /// A new staging buffer's descriptor.
    Staging(std::os::fd::OwnedFd),
}

impl Attached {
    /// The descriptor to send with the answer.
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match self {
            Attached::Nothing => None,
            Attached::Table(t) => t.words().fd().map(|f| f.as_fd()),
            Attached::Staging(fd) => Some(fd.as_fd()),
        }
    }
}

impl<'a> Conn<'a> {
    /// A connection of a client with credentials `cred` (its process unknown until
    /// [`Conn::pid`] is set), counted in `common`.
    pub fn new(
        fs: &'a FileSystem,
        cred: Cred,
        common: &'a Common,
        direct: Option<&'a Direct>,
    ) -> Conn<'a> {
        common.counts.clients.fetch_add(1, Ordering::SeqCst);
        Conn {
            fs,
            cred,
            pid: 0,
            id: common.counts.last_conn.fetch_add(1, Ordering::SeqCst) + 1,
            fds: BTreeMap::new(),
            common,
            direct,
            reads_directly: direct.is_some(),
            submitted: Submitted::default(),
            staging: HashMap::new(),
            last_staging: 0,
            scratch: Vec::new(),
        }
    }

    /// The answer to one frame's payload (`EBADMSG` if it is not a request), and the
    /// descriptor to send with it.
    pub fn answer_bytes(&mut self, payload: &[u8]) -> (Answer, Attached) {
        match wire::decode::<Request>(payload) {
            Some(Request::Table { fd }) => match self.table(fd) {
                Ok((ino, t)) => (
                    Answer::Table {
                        ino,
                        pages: TABLE_PAGES,
                    },
                    Attached::Table(t),
                ),
                Err(errno) => (Answer::Error(errno), Attached::Nothing),
            },
            Some(Request::Staging { len }) => match self.new_staging(len) {
                Ok((id, len, fd)) => (Answer::Staging { id, len }, Attached::Staging(fd)),
                Err(errno) => (Answer::Error(errno), Attached::Nothing),
            },
            Some(req) => (self.answer(req), Attached::Nothing),
            None => (Answer::Error(libc::EBADMSG), Attached::Nothing),
        }
    }

    /// The answer to `req`.
    pub fn answer(&mut self, req: Request) -> Answer {
        let a = self.call(req).unwrap_or_else(|e| Answer::Error(e.errno()));
        // Caches of the change elsewhere (a FUSE mount of this process) are dropped
        // before the client hears it is made.
        self.fs.settle_changes();
        a
    }

    /// Waits for every write this connection submitted (before its thread sleeps).
    pub fn settle_all(&mut self) {
        self.submitted.settle_all(self.fs, self.direct);
    }

    /// The directory handle a `*at` request names (`EBADF` if not this
    /// connection's).
    fn dir(&self, dir: Option<u32>) -> fs::Result<Option<Fd>> {
        dir.map(|d| self.own(d).map(|(fd, _)| fd)).transpose()
    }

    /// Runs `f`, a write of `len` bytes `at` file `ino`, through the page tables when
    /// clients read directly.
    fn writing<R>(&self, ino: u64, at: At, len: usize, f: impl FnOnce() -> R) -> R {
        match self.direct {
            Some(d) => d.write(self.fs, ino, at, len as u64, f),
            None => f(),
        }
    }

    /// Runs `f`, which sets file `ino`'s size to `len`, through the page tables when
    /// clients read directly.
    fn truncating<R>(&self, ino: u64, len: u64, f: impl FnOnce() -> R) -> R {
        match self.direct {
            Some(d) => d.truncate(self.fs, ino, len, f),
            None => f(),
        }
    }

    /// `fd` and what is known of it if this connection opened it; `EBADF` otherwise.
    fn own(&self, fd: u32) -> fs::Result<(Fd, Open)> {
        self.fds
            .get(&fd)
            .map(|o| (Fd(fd), o.clone()))
            .ok_or(fs::Error::BadFd)
    }
}

impl Drop for Conn<'_> {
    /// Closes what the client left open.
    fn drop(&mut self) {
        // The copies of its submitted writes first: they finish, and their pages are
        // published, before its files close.
        self.settle_all();
        // A process's record locks outlive its connection while it runs (across an
        // `exec`, as POSIX keeps them); the sweep drops them once it is gone.
        match self.pid {
            0 => self.common.locks.release(self.process(), None),
            pid => self.common.locks.outlive(pid),
        }
        for (fd, o) in std::mem::take(&mut self.fds) {
            let _ = self.forget(fd, o);
        }
        for (_, b) in std::mem::take(&mut self.staging) {
            self.uncount_staging(b.len() as u64);
        }
        self.common.counts.clients.fetch_sub(1, Ordering::SeqCst);
    }
}
