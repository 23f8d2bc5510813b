//! One client's requests, answered with its credentials. The connection owns the
//! descriptors it opened: a request naming any other is `EBADF`, and when the
//! connection ends — the client closed it, died, or sent what cannot be framed —
//! every descriptor it left open is closed, so an unlinked file it held is freed.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use fs::{Cred, Fd, FileKind, FileSystem, OpenFlags, SetAttr, Whence};
use parking_lot::Mutex;

use crate::direct::{At, Direct, PageTable, TABLE_PAGES};
use crate::locks::{Kind, LockOwner, Locks, Owner};
use crate::staging;
use crate::submitted::Submitted;
use crate::wire::{self, Answer, On, Request, Status, MAX_ENTRIES, MAX_IO};

/// What every connection of a server shares: counts, and the descriptors kept for a
/// process that will adopt them.
#[derive(Default)]
pub(crate) struct Counts {
    /// Connections open.
    pub clients: AtomicU32,
    /// Descriptors open over all connections.
    pub open: AtomicU32,
    /// Handoffs made and not yet adopted, by token.
    kept: Mutex<HashMap<u64, Kept>>,
    /// Handoffs made, for tokens.
    handoffs: AtomicU64,
    /// The last connection's number.
    last_conn: AtomicU64,
    /// Advisory locks.
    locks: Locks,
    /// Processes whose connection ended while they still ran: their record locks
    /// go when they do.
    lock_holders: Mutex<std::collections::HashSet<u32>>,
    /// Bytes of staging buffers all connections hold.
    staging_bytes: AtomicU64,
    /// Staging buffers all connections hold.
    staging_buffers: AtomicU64,
}

/// Descriptors kept by a [`Request::Handoff`] until they are adopted.
struct Kept {
    /// The process that made the handoff.
    owner: u32,
    /// The process expected to adopt them, once known.
    heir: Option<u32>,
    fds: Vec<(u32, Open)>,
}

impl Counts {
    /// Closes what was kept for processes that are gone (an heir that exited, or
    /// execed a program that never adopted; an owner that died before naming it).
    pub fn sweep(&self, fs: &FileSystem) {
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
                let _ = let_go(fs, self, o.file);
            }
        }
        let holders: Vec<u32> = self.lock_holders.lock().iter().copied().collect();
        for pid in holders.into_iter().filter(|&p| !alive(p)) {
            self.lock_holders.lock().remove(&pid);
            self.locks.release(Owner::Process(pid as u64), None);
        }
    }

    /// A new handoff token: not guessable by another client (the keys of a hasher
    /// seeded at random, over a counter).
    fn token(&self) -> u64 {
        use std::hash::BuildHasher;
        static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        let n = self.handoffs.fetch_add(1, Ordering::SeqCst);
        KEYS.get_or_init(std::hash::RandomState::new).hash_one(n)
    }

    /// Handoffs not yet adopted.
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.kept.lock().len()
    }
}

/// Whether process `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// The parent of process `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// A descriptor of the file system, open while a connection or a handoff holds it:
/// after a `fork` the parent's and the child's connections share one, as processes
/// share an open file description.
pub(crate) struct Held(Fd);

/// Lets `file` go; the last holder closes it (and its open-file locks go).
fn let_go(fs: &FileSystem, counts: &Counts, file: Arc<Held>) -> fs::Result<()> {
    let id = file_id(&file);
    match Arc::into_inner(file) {
        Some(Held(fd)) => {
            counts.locks.release(Owner::File(id), None);
            counts.locks.release(Owner::Flock(id), None);
            counts.open.fetch_sub(1, Ordering::SeqCst);
            fs.close(fd)
        }
        None => Ok(()),
    }
}

/// The number that names an open file as the owner of its locks.
fn file_id(file: &Arc<Held>) -> usize {
    Arc::as_ptr(file) as usize
}

/// A descriptor a connection holds.
#[derive(Clone)]
struct Open {
    file: Arc<Held>,
    ino: u64,
    readable: bool,
    writable: bool,
    append: bool,
    /// Whether the client was given the file's page table (released at close).
    table: bool,
}

/// The longest extended-attribute value or list of names, as in Linux.
const XATTR_MAX: usize = 64 << 10;

/// An extended-attribute request's file, its descriptor checked.
enum Target {
    Path(String),
    Link(String),
    Fd(Fd),
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
    counts: &'a Counts,
    /// Page tables and epochs, when clients read directly: every change of a file's
    /// data goes through it.
    direct: Option<&'a Direct>,
    /// Whether this client reads directly (it was given the image): only then does
    /// it get page tables.
    pub reads_directly: bool,
    /// Submitted writes whose copies run. Declared before the staging buffers their
    /// copies read, so that it drops (waiting for them) first even if `Drop` did not
    /// finish them.
    submitted: Submitted<'a>,
    /// The staging buffers this connection holds, by number.
    staging: HashMap<u32, staging::Buffer>,
    /// The number of the last staging buffer made.
    last_staging: u32,
    /// The server's own copy of a staged call's bytes (never the shared ones).
    scratch: Vec<u8>,
}

/// The largest scratch buffer kept between staged calls, bytes.
const SCRATCH_KEPT: usize = 1 << 20;

/// What an answer carries over the socket beside it.
pub(crate) enum Attached {
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
    pub fn new(
        fs: &'a FileSystem,
        cred: Cred,
        counts: &'a Counts,
        direct: Option<&'a Direct>,
    ) -> Conn<'a> {
        counts.clients.fetch_add(1, Ordering::SeqCst);
        Conn {
            fs,
            cred,
            pid: 0,
            id: counts.last_conn.fetch_add(1, Ordering::SeqCst) + 1,
            fds: BTreeMap::new(),
            counts,
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

    /// A new staging buffer of at least `len` bytes: its number, its length and its
    /// descriptor; `EINVAL` for a length of 0 or past the largest, `ENOMEM` past
    /// what a connection may hold.
    fn new_staging(&mut self, len: u64) -> Result<(u32, u64, std::os::fd::OwnedFd), i32> {
        if len == 0 || len > staging::MAX_BYTES {
            return Err(libc::EINVAL);
        }
        let held: u64 = self.staging.values().map(|b| b.len() as u64).sum();
        if self.staging.len() >= staging::MAX_COUNT || held + len > staging::MAX_TOTAL {
            return Err(libc::ENOMEM);
        }
        let (buffer, fd) =
            staging::Buffer::create(len).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let len = buffer.len() as u64;
        // The server's limits, over all connections.
        let c = self.counts;
        let bytes = c.staging_bytes.fetch_add(len, Ordering::SeqCst) + len;
        let count = c.staging_buffers.fetch_add(1, Ordering::SeqCst) + 1;
        if bytes > staging::SERVER_BYTES || count > staging::SERVER_COUNT {
            self.uncount_staging(len);
            return Err(libc::ENOMEM);
        }
        // A number no buffer of this connection has (after 2^32 buffers they wrap).
        loop {
            self.last_staging = self.last_staging.wrapping_add(1).max(1);
            if !self.staging.contains_key(&self.last_staging) {
                break;
            }
        }
        let id = self.last_staging;
        self.staging.insert(id, buffer);
        Ok((id, len, fd))
    }

    /// Lets staging buffer `id` go; `EINVAL` if this connection holds none.
    fn drop_staging(&mut self, id: u32) -> fs::Result<()> {
        if self.submitted.uses(id) {
            self.settle_all();
        }
        let b = self
            .staging
            .remove(&id)
            .ok_or(fs::Error::Errno(libc::EINVAL))?;
        self.uncount_staging(b.len() as u64);
        Ok(())
    }

    fn uncount_staging(&self, len: u64) {
        self.counts.staging_bytes.fetch_sub(len, Ordering::SeqCst);
        self.counts.staging_buffers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Staging buffer `id` of this connection (`EINVAL` if it holds none).
    fn staging(&self, id: u32) -> fs::Result<&staging::Buffer> {
        self.staging.get(&id).ok_or(fs::Error::Errno(libc::EINVAL))
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

    fn call(&mut self, req: Request) -> fs::Result<Answer> {
        if !self.submitted.is_empty() {
            self.submitted.reap(self.fs, self.direct);
        }
        let s = self.fs.as_user(&self.cred);
        let fs = self.fs;
        Ok(match req {
            Request::Open { path, flags, mode } => Answer::Fd(self.open(None, &path, flags, mode)?),
            Request::Openat {
                dir,
                path,
                flags,
                mode,
            } => {
                let dir = self.dir(dir)?;
                Answer::Fd(self.open(dir, &path, flags, mode)?)
            }
            Request::Close { fd } => {
                let (_, o) = self.own(fd)?;
                // Closing any descriptor of a file drops the process's record locks
                // on it, as POSIX says.
                self.counts.locks.release(self.process(), Some(o.ino));
                self.forget(fd, o)?;
                Answer::Done
            }
            Request::Lock {
                fd,
                test,
                owner,
                kind,
                start,
                len,
            } => self.lock(fd, (test, owner), kind, (start, len))?,
            Request::Read { fd, len } => {
                let mut buf = vec![0u8; (len as usize).min(MAX_IO)];
                let n = fs.read(self.own(fd)?.0, &mut buf)?;
                buf.truncate(n);
                Answer::Data(buf)
            }
            Request::Pread { fd, len, off } => {
                let (fd, o) = self.own(fd)?;
                let mut buf = vec![0u8; (len as usize).min(MAX_IO)];
                let n = fs.pread(fd, &mut buf, off)?;
                buf.truncate(n);
                if let (Some(d), true) = (self.direct, o.table) {
                    d.publish_read(fs, o.ino, off, n as u64);
                }
                Answer::Data(buf)
            }
            Request::Write { fd, data } => {
                let (fd, o) = self.own(fd)?;
                // An appending descriptor writes at the end, whatever its position.
                let at = match o.append {
                    true => At::End,
                    false => At::Cursor(fd),
                };
                let n = self.writing(o.ino, at, data.len(), || fs.write(fd, &data))?;
                Answer::Count(n as u64)
            }
            Request::Pwrite { fd, data, off } => {
                let (fd, o) = self.own(fd)?;
                // `pwrite` on an appending descriptor writes at the end too, as Linux.
                let at = if o.append { At::End } else { At::Offset(off) };
                let n = self.writing(o.ino, at, data.len(), || fs.pwrite(fd, &data, off))?;
                Answer::Count(n as u64)
            }
            Request::Ftruncate { fd, len } => {
                let (fd, o) = self.own(fd)?;
                done(self.truncating(o.ino, len, || s.ftruncate(fd, len)))?
            }
            Request::Truncate { path, len } => done(self.truncate_path(&path, len))?,
            Request::Fallocate { fd, mode, off, len } => {
                let (fd, o) = self.own(fd)?;
                // Punching a hole or collapsing a range changes which blocks hold
                // which pages: readers ask for every page until it is published again.
                done(self.truncating(o.ino, 0, || s.fallocate(fd, mode, off, len)))?
            }
            Request::Lseek { fd, off, whence } => {
                Answer::Count(fs.lseek(self.own(fd)?.0, off, whence_of(whence)?)?)
            }
            Request::Fsync { fd } => done(fs.fsync(self.own(fd)?.0))?,
            Request::Fstat { fd } => Answer::Stat(s.fstat(self.own(fd)?.0)?),
            Request::Handoff { fds } => Answer::Count(self.handoff(&fds)?),
            Request::Heir { token, pid } => {
                self.heir(token, pid);
                Answer::Done
            }
            Request::Adopt { token } => Answer::Fds(self.adopt(token)?),
            Request::Recredential => {
                self.cred = credentials_of(self.pid, self.cred.umask)?;
                Answer::Done
            }
            Request::DropStaging { id } => done(self.drop_staging(id))?,
            Request::WriteStaged {
                fd,
                id,
                at,
                len,
                off,
            } => Answer::Count(self.write_staged(fd, id, at, len, off)? as u64),
            Request::ReadStaged {
                fd,
                id,
                at,
                len,
                off,
            } => Answer::Count(self.read_staged(fd, id, at, len, off)? as u64),
            Request::SubmitStaged {
                fd,
                id,
                at,
                len,
                off,
            } => self.submit_staged(fd, (id, at, len), off)?,
            Request::Lookup { dir, name } => self.lookup(dir, &name)?,
            Request::Settle { sn, wait: true } => {
                let r = self.submitted.settle(fs, self.direct, sn);
                done(r.map_err(fs::Error::Errno))?
            }
            Request::Settle { sn, wait: false } => match self.submitted.poll(fs, self.direct, sn) {
                Ok(true) => Answer::Done,
                Ok(false) => Answer::Running,
                Err(errno) => return Err(fs::Error::Errno(errno)),
            },
            // Answered by `answer_bytes`, which sends their descriptors.
            Request::Table { .. } | Request::Staging { .. } => {
                return Err(fs::Error::Errno(libc::EPROTO))
            }
            req => self.path_call(req)?,
        })
    }
    /// A write from staging buffer `id`, as [`Request::WriteStaged`] says; `EFAULT`
    /// for bytes outside the buffer.
    fn write_staged(
        &mut self,
        fd: u32,
        id: u32,
        at: u64,
        len: u64,
        off: Option<u64>,
    ) -> fs::Result<usize> {
        let (fd, o) = self.own(fd)?;
        let fs = self.fs;
        // The bytes are copied out of the shared buffer first: the client may change
        // them meanwhile (tearing its own write, nothing else).
        let mut data = std::mem::take(&mut self.scratch);
        if !self.staging(id)?.read_into(at, len, &mut data) {
            self.scratch = data;
            return Err(fs::Error::Errno(libc::EFAULT));
        }
        let data_ = &data[..];
        // As `write` and `pwrite`: an appending descriptor writes at the end.
        let r = match (off, o.append) {
            (_, true) => self.writing(o.ino, At::End, data.len(), || match off {
                Some(off) => fs.pwrite(fd, data_, off),
                None => fs.write(fd, data_),
            }),
            (Some(off), false) => self.writing(o.ino, At::Offset(off), data.len(), || {
                fs.pwrite(fd, data_, off)
            }),
            (None, false) => {
                self.writing(o.ino, At::Cursor(fd), data.len(), || fs.write(fd, data_))
            }
        };
        self.keep_scratch(data);
        r
    }

    /// Keeps `buf` as the scratch buffer of the next staged call, unless it grew
    /// past what is worth keeping.
    fn keep_scratch(&mut self, buf: Vec<u8>) {
        if buf.capacity() <= SCRATCH_KEPT {
            self.scratch = buf;
        }
    }

    /// A submitted write from staging buffer `id`, as [`Request::SubmitStaged`] says;
    /// `EFAULT` for bytes outside the buffer. The answer carries the copy's SN only
    /// to a client that can poll it: one that maps the image and reads directly (not
    /// on emulated slow memory, where a record says done before the model does), of
    /// an engine that stores the records' durable counters (not a device);
    /// otherwise the copy is waited for here.
    fn submit_staged(
        &mut self,
        fd: u32,
        (id, at, len): (u32, u64, u64),
        off: u64,
    ) -> fs::Result<Answer> {
        let (fd, o) = self.own(fd)?;
        // Before the page table is touched: a descriptor that cannot write must not
        // send the file's readers to the server.
        if !o.writable {
            return Err(fs::Error::BadFd);
        }
        let fs = self.fs;
        // The copy runs from the server's own copy of the bytes (the client may
        // change the shared ones meanwhile), kept with the copy until it is done.
        let mut data = self.submitted.spare();
        if !self.staging(id)?.read_into(at, len, &mut data) {
            return Err(fs::Error::Errno(libc::EFAULT));
        }
        let at_ = if o.append { At::End } else { At::Offset(off) };
        // SAFETY: `data`'s heap bytes stay allocated and unchanged until the token is
        // done: the token is kept in `self.submitted` with `data` (dropped after it),
        // or waited for below before `data` goes.
        let start = || unsafe { fs.submit_pwrite_borrowed(fd, &data, off) };
        let (token, unpublished) = match self.direct {
            Some(d) => d.submit(fs, o.ino, at_, len, start),
            None => (start(), None),
        };
        let token = match token {
            Ok(t) => t,
            Err(e) => {
                if let (Some(d), Some(u)) = (self.direct, unpublished) {
                    d.finish(fs, u);
                }
                return Err(e);
            }
        };
        let count = data.len() as u64;
        match token.running_sn() {
            Some(sn) if self.may_poll() => {
                self.submitted.keep(token, data, sn, id, unpublished);
                Ok(Answer::Submitted { count, sn })
            }
            _ => {
                let r = token.wait();
                if let (Some(d), Some(u)) = (self.direct, unpublished) {
                    d.finish(fs, u);
                }
                self.submitted.give_back(data);
                Ok(Answer::Submitted {
                    count: r? as u64,
                    sn: 0,
                })
            }
        }
    }

    /// Whether this client can poll the completion records of this server's copies
    /// (see [`Conn::submit_staged`]).
    fn may_poll(&self) -> bool {
        self.reads_directly
            && self.direct.is_some()
            && self
                .fs
                .engine()
                .is_some_and(|e| e.publishes_durable_counter())
    }

    /// A read into staging buffer `id`, as [`Request::ReadStaged`] says; `EFAULT` for
    /// bytes outside the buffer.
    fn read_staged(
        &mut self,
        fd: u32,
        id: u32,
        at: u64,
        len: u64,
        off: Option<u64>,
    ) -> fs::Result<usize> {
        let (fd, o) = self.own(fd)?;
        if !self.staging(id)?.holds(at, len) {
            return Err(fs::Error::Errno(libc::EFAULT));
        }
        // Read into the server's own memory, then copied into the shared buffer.
        let len = len as usize;
        let mut buf = std::mem::take(&mut self.scratch);
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let read = match off {
            Some(off) => self.fs.pread(fd, &mut buf[..len], off).inspect(|&n| {
                if let (Some(d), true) = (self.direct, o.table) {
                    d.publish_read(self.fs, o.ino, off, n as u64);
                }
            }),
            None => self.fs.read(fd, &mut buf[..len]),
        };
        if let Ok(n) = read {
            let copied = self.staging(id).is_ok_and(|b| b.copy_from(at, &buf[..n]));
            debug_assert!(copied, "the range was checked above");
        }
        self.keep_scratch(buf);
        read
    }

    /// `open`. With direct reads, `O_TRUNC` of a regular file is a truncation of the
    /// file opened (checked as `truncate` is: write permission), so that its page
    /// table is kept honest.
    fn open(&mut self, dir: Option<Fd>, path: &str, flags: i32, mode: u32) -> fs::Result<u32> {
        let s = self.fs.as_user(&self.cred);
        // Flags the open refuses are refused before anything else looks at them.
        OpenFlags(flags).validate()?;
        let trunc =
            flags & (libc::O_TRUNC | libc::O_PATH) == libc::O_TRUNC && self.direct.is_some();
        let access = flags & libc::O_ACCMODE;
        // `O_TRUNC` does nothing, and checks nothing, to a file the open creates. On a
        // directory it is EISDIR before any permission is checked (Linux's may_open).
        let found = match trunc {
            true => s.fstatat(dir, path, 0).ok(),
            false => None,
        };
        let exclusive = flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL;
        let follows = flags & libc::O_NOFOLLOW == 0;
        if follows && !exclusive && found.as_ref().is_some_and(|st| st.kind == FileKind::Dir) {
            return Err(fs::Error::IsDir);
        }
        let existed = trunc && (flags & libc::O_CREAT == 0 || found.is_some());
        let fd = s.openat(
            dir,
            path,
            OpenFlags(flags & !if trunc { libc::O_TRUNC } else { 0 }),
            mode,
        )?;
        let opened = (|| {
            let st = self.fs.fstat(fd)?;
            match st.kind {
                FileKind::Dir if trunc => return Err(fs::Error::IsDir),
                // Open for writing: the open checked write permission already.
                FileKind::File if existed && access != libc::O_RDONLY => {
                    self.truncating(st.ino, 0, || self.fs.ftruncate(fd, 0))?
                }
                // `O_RDONLY | O_TRUNC` truncates too, as Linux does, if the caller
                // may write the file.
                FileKind::File if existed => {
                    let what = SetAttr {
                        size: Some(0),
                        ..SetAttr::default()
                    };
                    self.truncating(st.ino, 0, || s.setattr(st.ino, &what))?;
                }
                _ => {}
            }
            Ok(st.ino)
        })();
        let ino = match opened {
            Ok(ino) => ino,
            Err(e) => {
                let _ = self.fs.close(fd);
                return Err(e);
            }
        };
        self.counts.open.fetch_add(1, Ordering::SeqCst);
        self.fds.insert(
            fd.0,
            Open {
                file: Arc::new(Held(fd)),
                ino,
                readable: flags & libc::O_PATH == 0 && access != libc::O_WRONLY,
                writable: flags & libc::O_PATH == 0 && access != libc::O_RDONLY,
                append: flags & libc::O_APPEND != 0,
                table: false,
            },
        );
        Ok(fd.0)
    }

    /// `truncate(path, len)`, through the page tables when clients read directly.
    fn truncate_path(&self, path: &str, len: u64) -> fs::Result<()> {
        let s = self.fs.as_user(&self.cred);
        if self.direct.is_none() {
            return s.truncate(path, len);
        }
        let ino = s.stat(path)?.ino;
        let what = SetAttr {
            size: Some(len),
            ..SetAttr::default()
        };
        self.truncating(ino, len, || s.setattr(ino, &what).map(drop))
    }

    /// Keeps every descriptor of this connection for the process that will adopt
    /// them (a child after `fork`, this process after `exec`); the token to adopt by.
    fn handoff(&self, wanted: &[u32]) -> fs::Result<u64> {
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
        let mut all = self.counts.kept.lock();
        if all.values().filter(|k| k.owner == self.pid).count() >= wire::MAX_HANDOFFS {
            return Err(fs::Error::Errno(libc::EAGAIN));
        }
        let token = loop {
            let t = self.counts.token();
            if t != 0 && !all.contains_key(&t) {
                break t;
            }
        };
        all.insert(token, kept);
        Ok(token)
    }

    /// Names the process a handoff of this client's is for; a negative `pid` (the
    /// `fork` failed, the `exec` returned) gives it up.
    fn heir(&self, token: u64, pid: i32) {
        // Only a child of the maker may be named: naming another process would let it
        // adopt, or keep the files open as long as it lives.
        let child = pid > 0 && parent_of(pid as u32) == Some(self.pid);
        let mut kept = self.counts.kept.lock();
        match kept.get_mut(&token) {
            Some(k) if k.owner == self.pid && child => k.heir = Some(pid as u32),
            Some(k) if k.owner == self.pid && pid <= 0 => {
                let k = kept.remove(&token).expect("present");
                drop(kept);
                for (_, o) in k.fds {
                    let _ = let_go(self.fs, self.counts, o.file);
                }
            }
            _ => {}
        }
    }

    /// Adopts the descriptors of handoff `token`; the numbers adopted. Only the heir
    /// named may, or — none named yet — its maker (after an `exec`) or a child of
    /// its maker (`EPERM`); an unknown token is `ENOENT`. A number this connection
    /// holds already keeps its own file.
    fn adopt(&mut self, token: u64) -> fs::Result<Vec<u32>> {
        let mut kept = self.counts.kept.lock();
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
                    let _ = let_go(self.fs, self.counts, o.file);
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(o);
                    adopted.push(fd);
                }
            }
        }
        Ok(adopted)
    }

    /// The owner of this client's record locks: its process (every connection of one
    /// process shares them, as POSIX says); a connection of its own when the process
    /// is unknown (tests).
    fn process(&self) -> Owner {
        match self.pid {
            0 => Owner::Process((1 << 63) | self.id),
            pid => Owner::Process(pid as u64),
        }
    }

    /// An advisory lock request on open file `fd`.
    fn lock(
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
        let locks = &self.counts.locks;
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

    /// Looks `name` up in directory `dir` for a client that resolves paths itself
    /// (collaborative indexing): the answer, as the client's session finds it, and
    /// the versions it holds at. Each version is read before what it guards is
    /// taken and again after; one that moved meanwhile is [`wire::UNSTABLE`], so
    /// the client uses that part of the answer once and keeps nothing of it.
    fn lookup(&self, dir: u64, name: &str) -> fs::Result<Answer> {
        let Some(d) = self.direct.filter(|_| self.reads_directly) else {
            return Err(fs::Error::Errno(libc::EOPNOTSUPP));
        };
        let s = self.fs.as_user(&self.cred);
        let stable = |before: u64, after: u64| match before == after {
            true => before,
            false => wire::UNSTABLE,
        };
        let dir_before = d.version(dir);
        let found = s.lookup(dir, name);
        let dir_version = stable(dir_before, d.version(dir));
        let first = match found {
            Ok(st) => st,
            Err(e) => {
                return Ok(Answer::NotThere {
                    dir_version,
                    errno: e.errno(),
                })
            }
        };
        // The attributes again, inside their own version's reads (an inode freed
        // meanwhile: the first ones, to be used once).
        let ino = first.ino;
        let before = d.version(ino);
        let (stat, version) = match s.getattr(ino) {
            Ok(st) => (st, stable(before, d.version(ino))),
            Err(_) => (first, wire::UNSTABLE),
        };
        Ok(Answer::Looked {
            dir_version,
            ino,
            version,
            stat,
        })
    }

    /// The page table of open file `fd`, for direct reads; an errno if it cannot be.
    fn table(&mut self, fd: u32) -> Result<(u64, Arc<PageTable>), i32> {
        let (_, o) = self.own(fd).map_err(|e| e.errno())?;
        let Some(d) = self.direct.filter(|_| self.reads_directly) else {
            return Err(libc::EOPNOTSUPP);
        };
        if !o.readable {
            return Err(libc::EBADF);
        }
        let t = d.table(self.fs, o.ino)?;
        if o.table {
            // The descriptor holds a table already: one user per descriptor.
            d.release(o.ino);
        }
        let ino = o.ino;
        self.fds.insert(fd, Open { table: true, ..o });
        Ok((ino, t))
    }

    /// Drops what this connection holds for descriptor `fd`; the file closes if no
    /// other connection holds it.
    fn forget(&mut self, fd: u32, o: Open) -> fs::Result<()> {
        self.fds.remove(&fd);
        if let (true, Some(d)) = (o.table, self.direct) {
            d.release(o.ino);
        }
        let_go(self.fs, self.counts, o.file)
    }

    /// The calls that name paths, not descriptors.
    fn path_call(&self, req: Request) -> fs::Result<Answer> {
        let s = self.fs.as_user(&self.cred);
        Ok(match req {
            Request::Stat { path } => Answer::Stat(s.stat(&path)?),
            Request::Lstat { path } => Answer::Stat(s.lstat(&path)?),
            Request::Mkdir { path, mode } => done(s.mkdir(&path, mode))?,
            Request::Rmdir { path } => done(s.rmdir(&path))?,
            Request::Unlink { path } => done(s.unlink(&path))?,
            Request::Rename { old, new, flags } => {
                done(s.renameat2(None, &old, None, &new, flags))?
            }
            Request::Link { old, new } => done(s.link(&old, &new))?,
            Request::Symlink { target, path } => done(s.symlink(&target, &path))?,
            Request::Readlink { path } => Answer::Text(s.readlink(&path)?),
            Request::Chmod { path, mode } => done(s.chmod(&path, mode))?,
            Request::Chown { path, uid, gid } => done(s.chown(&path, uid, gid))?,
            Request::Readdir { path } => Answer::Entries(s.readdir(&path)?),
            Request::Statfs => Answer::StatFs(self.fs.statfs()?),
            Request::Status => Answer::Status(Status {
                clients: self.counts.clients.load(Ordering::SeqCst),
                open_here: self.fds.len() as u32,
                open_total: self.counts.open.load(Ordering::SeqCst),
            }),
            req => self.at_call(req)?,
        })
    }

    /// The `*at` calls, the calls on a descriptor's attributes and the extended
    /// attributes.
    fn at_call(&self, req: Request) -> fs::Result<Answer> {
        let s = self.fs.as_user(&self.cred);
        Ok(match req {
            Request::Fstatat { dir, path, flags } => {
                Answer::Stat(s.fstatat(self.dir(dir)?, &path, flags)?)
            }
            Request::Faccessat {
                dir,
                path,
                mode,
                flags,
            } => done(s.faccessat(self.dir(dir)?, &path, mode, flags))?,
            Request::Mkdirat { dir, path, mode } => done(s.mkdirat(self.dir(dir)?, &path, mode))?,
            Request::Mknodat {
                dir,
                path,
                mode,
                rdev,
            } => done(s.mknodat(self.dir(dir)?, &path, mode, rdev))?,
            Request::Unlinkat { dir, path, flags } => {
                done(s.unlinkat(self.dir(dir)?, &path, flags))?
            }
            Request::Renameat {
                old_dir,
                old,
                new_dir,
                new,
                flags,
            } => done(s.renameat2(self.dir(old_dir)?, &old, self.dir(new_dir)?, &new, flags))?,
            Request::Linkat {
                old_dir,
                old,
                new_dir,
                new,
                flags,
            } => done(s.linkat(self.dir(old_dir)?, &old, self.dir(new_dir)?, &new, flags))?,
            Request::Symlinkat { target, dir, path } => {
                done(s.symlinkat(&target, self.dir(dir)?, &path))?
            }
            Request::Readlinkat { dir, path } => Answer::Text(s.readlinkat(self.dir(dir)?, &path)?),
            Request::Fchmodat {
                dir,
                path,
                mode,
                flags,
            } => done(s.fchmodat(self.dir(dir)?, &path, mode, flags))?,
            Request::Fchmod { fd, mode } => done(s.fchmod(self.own(fd)?.0, mode))?,
            Request::Fchownat {
                dir,
                path,
                uid,
                gid,
                flags,
            } => done(s.fchownat(self.dir(dir)?, &path, uid, gid, flags))?,
            Request::Fchown { fd, uid, gid } => done(s.fchown(self.own(fd)?.0, uid, gid))?,
            Request::Utimensat {
                dir,
                path,
                atime,
                mtime,
                flags,
            } => done(s.utimensat(self.dir(dir)?, &path, atime, mtime, flags))?,
            Request::Futimens { fd, atime, mtime } => {
                done(s.futimens(self.own(fd)?.0, atime, mtime))?
            }
            Request::ReaddirFd { fd, offset } => {
                let mut entries = self.fs.readdir_fd(self.own(fd)?.0, offset)?;
                entries.truncate(MAX_ENTRIES);
                Answer::EntriesAt(entries)
            }
            req => self.xattr_call(req)?,
        })
    }

    /// The extended-attribute calls.
    fn xattr_call(&self, req: Request) -> fs::Result<Answer> {
        let s = self.fs.as_user(&self.cred);
        // A value or a list of names is at most 64 KiB in Linux.
        let sized = |size: u32, f: &dyn Fn(&mut [u8]) -> fs::Result<usize>| {
            let mut buf = vec![0u8; (size as usize).min(XATTR_MAX)];
            let n = f(&mut buf)?;
            Ok::<_, fs::Error>(match size {
                0 => Answer::Count(n as u64),
                _ => {
                    buf.truncate(n);
                    Answer::Data(buf)
                }
            })
        };
        Ok(match req {
            Request::Getxattr { on, name, size } => match self.on(on)? {
                Target::Path(p) => sized(size, &|b| s.getxattr(&p, &name, b))?,
                Target::Link(p) => sized(size, &|b| s.lgetxattr(&p, &name, b))?,
                Target::Fd(fd) => sized(size, &|b| s.fgetxattr(fd, &name, b))?,
            },
            Request::Listxattr { on, size } => match self.on(on)? {
                Target::Path(p) => sized(size, &|b| s.listxattr(&p, b))?,
                Target::Link(p) => sized(size, &|b| s.llistxattr(&p, b))?,
                Target::Fd(fd) => sized(size, &|b| s.flistxattr(fd, b))?,
            },
            Request::Setxattr {
                on,
                name,
                value,
                flags,
            } => done(match self.on(on)? {
                Target::Path(p) => s.setxattr(&p, &name, &value, flags),
                Target::Link(p) => s.lsetxattr(&p, &name, &value, flags),
                Target::Fd(fd) => s.fsetxattr(fd, &name, &value, flags),
            })?,
            Request::Removexattr { on, name } => done(match self.on(on)? {
                Target::Path(p) => s.removexattr(&p, &name),
                Target::Link(p) => s.lremovexattr(&p, &name),
                Target::Fd(fd) => s.fremovexattr(fd, &name),
            })?,
            _ => unreachable!("every other request is answered by Conn::call"),
        })
    }

    /// What an extended-attribute request names, its descriptor checked.
    fn on(&self, on: On) -> fs::Result<Target> {
        Ok(match on {
            On::Path(p) => Target::Path(p),
            On::Link(p) => Target::Link(p),
            On::Fd(fd) => Target::Fd(self.own(fd)?.0),
        })
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
        // The copies of its submitted writes first: they read its staging buffers.
        self.settle_all();
        // A process's record locks outlive its connection while it runs (across an
        // `exec`, as POSIX keeps them); the sweep drops them once it is gone.
        match self.pid {
            0 => self.counts.locks.release(self.process(), None),
            pid => {
                self.counts.lock_holders.lock().insert(pid);
            }
        }
        for (fd, o) in std::mem::take(&mut self.fds) {
            let _ = self.forget(fd, o);
        }
        for (_, b) in std::mem::take(&mut self.staging) {
            self.uncount_staging(b.len() as u64);
        }
        self.counts.clients.fetch_sub(1, Ordering::SeqCst);
    }
}

fn done(r: fs::Result<()>) -> fs::Result<Answer> {
    r.map(|()| Answer::Done)
}

/// The [`Whence`] of a `SEEK_*` value.
fn whence_of(w: i32) -> fs::Result<Whence> {
    Ok(match w {
        libc::SEEK_SET => Whence::Set,
        libc::SEEK_CUR => Whence::Cur,
        libc::SEEK_END => Whence::End,
        libc::SEEK_DATA => Whence::Data,
        libc::SEEK_HOLE => Whence::Hole,
        _ => return Err(fs::Error::Invalid(format!("whence {w}"))),
    })
}

/// The file-system credentials process `pid` has now, as the kernel says
/// (`/proc/PID/status`: the fourth, file-system, ids of `Uid:` and `Gid:`, and
/// `Groups:`), with `umask`. ESRCH if the process cannot be read.
fn credentials_of(pid: u32, umask: u32) -> fs::Result<Cred> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| fs::Error::Errno(libc::ESRCH))?;
    let line = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.split_whitespace().filter_map(|n| n.parse::<u32>().ok()))
    };
    let fs_id = |key: &str| {
        line(key)
            .and_then(|mut ids| ids.nth(3))
            .ok_or(fs::Error::Errno(libc::ESRCH))
    };
    Ok(Cred {
        uid: fs_id("Uid:")?,
        gid: fs_id("Gid:")?,
        groups: line("Groups:").map(Iterator::collect).unwrap_or_default(),
        umask,
    })
}
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    /// A fresh file system of 16 MiB in memory.
    fn memory_fs() -> FileSystem {
        let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(16 << 20));
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        FileSystem::mount(pm, MountOptions::default()).unwrap().0
    }

    /// The page table of `ino` names exactly the blocks the file system has.
    fn assert_table_is_the_files(fs: &FileSystem, direct: &Direct, ino: u64) {
        use crate::direct::{HOLE, PAGE0, SIZE};
        let t = direct.table(fs, ino).unwrap();
        let (size, segs) = fs.map_inode(ino, 0, u64::MAX).unwrap();
        assert_eq!(t.words().at(SIZE).load(Ordering::SeqCst), size);
        let mut pg = 0;
        for (len, src) in segs {
            for k in 0..(len as u64).div_ceil(fs::BLOCK_SIZE) {
                let want = src.map_or(HOLE, |s| s / fs::BLOCK_SIZE + k);
                let got = t.words().at(PAGE0 + pg).load(Ordering::SeqCst);
                assert_eq!(got, want, "page {pg}");
                pg += 1;
            }
        }
        direct.release(ino);
    }

    /// Asks `c` for a staging buffer of `len` bytes: its number, and the client's
    /// mapping of it.
    fn staging_of(c: &mut Conn<'_>, len: u64) -> (u32, staging::Buffer) {
        let (answer, attached) =
            c.answer_bytes(&wire::frame(&Request::Staging { len }).unwrap()[4..]);
        let Answer::Staging { id, len } = answer else {
            panic!("{answer:?}")
        };
        let Attached::Staging(fd) = attached else {
            panic!("no descriptor")
        };
        (id, staging::Buffer::map(&fd, len as usize).unwrap())
    }

    #[test]
    fn a_submitted_write_keeps_its_pages_asking_until_its_copy_is_finished() {
        use crate::direct::{ASK, PAGE0, SIZE, UNKNOWN};
        let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(64 << 20));
        FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
        let options = MountOptions {
            mode: fs::Mode::Async,
            ..MountOptions::default()
        };
        let fs = FileSystem::mount(pm, options).unwrap().0;
        let direct = Direct::new(1 << 16).unwrap();
        let counts = Counts::default();
        let mut c = Conn::new(&fs, Cred::root(), &counts, Some(&direct));
        let Answer::Fd(fd) = c.answer(Request::Open {
            path: "/f".into(),
            flags: libc::O_CREAT | libc::O_RDWR,
            mode: 0o644,
        }) else {
            panic!()
        };
        let len = 8u64 << 20;
        let (id, client) = staging_of(&mut c, len);
        assert!(client.copy_from(0, &vec![0x5a; len as usize]));
        let ino = c.own(fd).unwrap().1.ino;
        let table = direct.table(&fs, ino).unwrap();
        let word = |i: usize| table.words().at(i).load(Ordering::SeqCst);
        let submit = Request::SubmitStaged {
            fd,
            id,
            at: 0,
            len,
            off: 0,
        };
        let mut running = 0;
        for _ in 0..8 {
            let Answer::Submitted { count, sn } = c.answer(submit.clone()) else {
                panic!()
            };
            assert_eq!(count, len);
            if sn != 0 && !c.submitted.is_empty() {
                running += 1;
                // While the copy runs, readers are sent to the server.
                assert_eq!(
                    (word(SIZE), word(PAGE0), word(PAGE0 + 2047)),
                    (UNKNOWN, ASK, ASK)
                );
            }
            assert_eq!(c.answer(Request::Settle { sn, wait: true }), Answer::Done);
            assert!(c.submitted.is_empty());
            assert_eq!(word(SIZE), len);
            assert_table_is_the_files(&fs, &direct, ino);
        }
        assert!(
            running > 0,
            "every copy was done when its write was answered"
        );
        // A buffer given back with a copy running waits for the copy.
        let _ = c.answer(submit.clone());
        assert_eq!(c.answer(Request::DropStaging { id }), Answer::Done);
        assert!(c.submitted.is_empty());
        assert_eq!(c.answer(submit), Answer::Error(libc::EINVAL));
        direct.release(ino);
        drop(c);
        fs.unmount().unwrap();
    }

    #[test]
    fn a_write_by_another_user_clears_setuid_submitted_or_not() {
        let fs = memory_fs();
        let counts = Counts::default();
        let mut root = Conn::new(&fs, Cred::root(), &counts, None);
        let mut user = Conn::new(&fs, Cred::user(1000, 1000), &counts, None);
        for (k, submit) in [false, true].into_iter().enumerate() {
            let path = format!("/suid{k}");
            let Answer::Fd(fd) = root.answer(Request::Open {
                path: path.clone(),
                flags: libc::O_CREAT | libc::O_RDWR,
                mode: 0o644,
            }) else {
                panic!()
            };
            assert_eq!(root.answer(Request::Close { fd }), Answer::Done);
            let chmod = Request::Chmod {
                path: path.clone(),
                mode: 0o6777,
            };
            assert_eq!(root.answer(chmod), Answer::Done);
            let Answer::Fd(fd) = user.answer(Request::Open {
                path: path.clone(),
                flags: libc::O_WRONLY,
                mode: 0,
            }) else {
                panic!()
            };
            let (id, _client) = staging_of(&mut user, 4096);
            let written = match submit {
                true => user.answer(Request::SubmitStaged {
                    fd,
                    id,
                    at: 0,
                    len: 100,
                    off: 0,
                }),
                false => user.answer(Request::WriteStaged {
                    fd,
                    id,
                    at: 0,
                    len: 100,
                    off: Some(0),
                }),
            };
            assert!(
                matches!(
                    written,
                    Answer::Submitted { count: 100, .. } | Answer::Count(100)
                ),
                "{written:?}"
            );
            let mode = fs.stat(&path).unwrap().mode;
            assert_eq!(mode & 0o7777, 0o777, "submitted: {submit}");
            assert_eq!(user.answer(Request::Close { fd }), Answer::Done);
        }
        drop((root, user));
        fs.unmount().unwrap();
    }

    #[test]
    fn staged_writes_and_reads_copy_between_the_clients_buffer_and_the_file() {
        let fs = memory_fs();
        let direct = Direct::new(1 << 16).unwrap();
        let counts = Counts::default();
        let mut c = Conn::new(&fs, Cred::root(), &counts, Some(&direct));
        let Answer::Fd(fd) = c.answer(Request::Open {
            path: "/f".into(),
            flags: libc::O_CREAT | libc::O_RDWR,
            mode: 0o644,
        }) else {
            panic!()
        };
        let (id, client) = staging_of(&mut c, 10_000);
        assert!(client.len() >= 10_000);
        let data: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
        assert!(client.copy_from(100, &data));
        let write = |c: &mut Conn<'_>, at, len, off| {
            c.answer(Request::WriteStaged {
                fd,
                id,
                at,
                len,
                off,
            })
        };
        assert_eq!(write(&mut c, 100, 9000, Some(50)), Answer::Count(9000));
        // At the position (0 after the open) as `write`: the first 10 bytes again.
        assert_eq!(write(&mut c, 100, 10, None), Answer::Count(10));
        let Answer::Data(got) = c.answer(Request::Pread {
            fd,
            len: 9050,
            off: 0,
        }) else {
            panic!()
        };
        assert_eq!(&got[..10], &data[..10]);
        assert_eq!(&got[10..50], &[0u8; 40]);
        assert_eq!(&got[50..], &data[..]);
        // Read back into the buffer's start: a short read at the end of the file.
        let read = c.answer(Request::ReadStaged {
            fd,
            id,
            at: 0,
            len: 100,
            off: Some(9000),
        });
        assert_eq!(read, Answer::Count(50));
        let mut got = vec![0u8; 50];
        assert!(client.copy_to(0, &mut got));
        assert_eq!(got, &data[8950..]);
        // Ranges outside the buffer, unknown buffers, descriptors not open.
        let past = client.len() as u64;
        assert_eq!(write(&mut c, past, 1, Some(0)), Answer::Error(libc::EFAULT));
        assert_eq!(
            write(&mut c, 1, u64::MAX, Some(0)),
            Answer::Error(libc::EFAULT)
        );
        let read = c.answer(Request::ReadStaged {
            fd,
            id,
            at: past - 1,
            len: 2,
            off: Some(0),
        });
        assert_eq!(read, Answer::Error(libc::EFAULT));
        let other = c.answer(Request::WriteStaged {
            fd,
            id: id + 1,
            at: 0,
            len: 1,
            off: None,
        });
        assert_eq!(other, Answer::Error(libc::EINVAL));
        let closed = c.answer(Request::WriteStaged {
            fd: fd + 7,
            id,
            at: 0,
            len: 1,
            off: None,
        });
        assert_eq!(closed, Answer::Error(libc::EBADF));
        assert_eq!(c.answer(Request::DropStaging { id }), Answer::Done);
        assert_eq!(write(&mut c, 0, 1, Some(0)), Answer::Error(libc::EINVAL));
        assert_eq!(
            c.answer(Request::DropStaging { id }),
            Answer::Error(libc::EINVAL)
        );
    }

    #[test]
    fn a_connection_holds_staging_buffers_within_its_limits() {
        let fs = memory_fs();
        let counts = Counts::default();
        let mut c = Conn::new(&fs, Cred::root(), &counts, None);
        let ask = |c: &mut Conn<'_>, len| {
            c.answer_bytes(&wire::frame(&Request::Staging { len }).unwrap()[4..])
                .0
        };
        assert_eq!(ask(&mut c, 0), Answer::Error(libc::EINVAL));
        assert_eq!(
            ask(&mut c, staging::MAX_BYTES + 1),
            Answer::Error(libc::EINVAL)
        );
        for _ in 0..staging::MAX_TOTAL / staging::MAX_BYTES {
            assert!(matches!(
                ask(&mut c, staging::MAX_BYTES),
                Answer::Staging { .. }
            ));
        }
        assert_eq!(ask(&mut c, 1), Answer::Error(libc::ENOMEM));
        // And the server's limits over all connections: buffers of other connections
        // count against this one's.
        assert_eq!(counts.staging_buffers.load(Ordering::SeqCst), 4);
        let mut others: Vec<Conn<'_>> = Vec::new();
        let mut made = 4;
        while made < staging::SERVER_COUNT {
            if others
                .last()
                .is_none_or(|o| o.staging.len() == staging::MAX_COUNT)
            {
                others.push(Conn::new(&fs, Cred::root(), &counts, None));
            }
            let o = others.last_mut().unwrap();
            assert!(
                matches!(ask(o, 4096), Answer::Staging { .. }),
                "buffer {made}"
            );
            made += 1;
        }
        let mut last = Conn::new(&fs, Cred::root(), &counts, None);
        assert_eq!(ask(&mut last, 4096), Answer::Error(libc::ENOMEM));
        // A connection that ends gives its buffers back.
        others.pop();
        assert!(matches!(ask(&mut last, 4096), Answer::Staging { .. }));
        drop((others, last));
        // Giving one back makes room again.
        let id = *c.staging.keys().next().unwrap();
        assert_eq!(c.answer(Request::DropStaging { id }), Answer::Done);
        assert!(matches!(ask(&mut c, 4096), Answer::Staging { .. }));
    }

    #[test]
    fn lookups_say_the_versions_they_hold_at_and_a_change_moves_them() {
        let fs = memory_fs();
        let direct = Arc::new(Direct::new(fs.geometry().inodes).unwrap());
        fs.set_inode_changes(direct.clone());
        let counts = Counts::default();
        let mut c = Conn::new(&fs, Cred::user(1000, 1000), &counts, Some(&direct));
        let look = |c: &mut Conn<'_>, dir: u64, name: &str| {
            c.answer(Request::Lookup {
                dir,
                name: name.into(),
            })
        };
        let root = fs::ROOT_INO;
        fs.mkdir("/d", 0o755).unwrap();
        let Answer::Looked {
            dir_version,
            ino: d,
            version,
            stat,
        } = look(&mut c, root, "d")
        else {
            panic!("no /d")
        };
        assert_eq!((stat.ino, stat.kind), (d, fs::FileKind::Dir));
        assert!(dir_version != wire::UNSTABLE && version != wire::UNSTABLE);
        // Nothing changed: the same versions.
        let same = look(&mut c, root, "d");
        assert!(
            matches!(same, Answer::Looked { dir_version: a, version: b, .. }
            if a == dir_version && b == version)
        );
        // A name made in /d moves its version, not the root's.
        fs.mkdir("/d/sub", 0o755).unwrap();
        let moved = look(&mut c, root, "d");
        assert!(
            matches!(moved, Answer::Looked { dir_version: a, version: b, .. }
            if a == dir_version && b > version)
        );
        assert!(matches!(look(&mut c, d, "nope"),
            Answer::NotThere { errno: libc::ENOENT, dir_version: v } if v == direct.version(d)));
        // Search permission is the client's, checked by the server.
        fs.chmod("/d", 0o700).unwrap();
        assert!(matches!(
            look(&mut c, d, "sub"),
            Answer::NotThere {
                errno: libc::EACCES,
                ..
            }
        ));
        // Inode numbers from a client are looked up, not trusted.
        fs.mknod("/file", 0o644, 0).unwrap();
        let file = fs.stat("/file").unwrap().ino;
        assert!(matches!(
            look(&mut c, file, "x"),
            Answer::NotThere {
                errno: libc::ENOTDIR,
                ..
            }
        ));
        for garbage in [0, file + 1000, u64::MAX] {
            assert!(
                matches!(look(&mut c, garbage, "x"), Answer::NotThere { .. }),
                "{garbage}"
            );
        }
        // A client that does not read directly resolves nothing itself.
        let mut plain = Conn::new(&fs, Cred::root(), &counts, None);
        assert_eq!(look(&mut plain, root, "d"), Answer::Error(libc::EOPNOTSUPP));
    }

    #[test]
    fn writes_on_an_appending_descriptor_are_published_where_they_land() {
        let fs = memory_fs();
        let direct = Direct::new(1 << 16).unwrap();
        let counts = Counts::default();
        let mut c = Conn::new(&fs, Cred::root(), &counts, Some(&direct));
        let flags = libc::O_CREAT | libc::O_RDWR | libc::O_APPEND;
        let Answer::Fd(fd) = c.answer(Request::Open {
            path: "/log".into(),
            flags,
            mode: 0o644,
        }) else {
            panic!()
        };
        c.answer(Request::Pwrite {
            fd,
            data: vec![1u8; 6000].into(),
            off: 0,
        });
        assert!(matches!(
            c.answer_bytes(&wire::frame(&Request::Table { fd }).unwrap()[4..])
                .0,
            Answer::Table { .. }
        ));
        let ino = fs.fstat(Fd(fd)).unwrap().ino;
        // `pwrite` at 0 on an appending descriptor lands at 6000, on page 1.
        c.answer(Request::Pwrite {
            fd,
            data: vec![2u8; 100].into(),
            off: 0,
        });
        assert_eq!(fs.fstat(Fd(fd)).unwrap().size, 6100);
        assert_table_is_the_files(&fs, &direct, ino);
        c.answer(Request::Write {
            fd,
            data: vec![3u8; 5000].into(),
        });
        assert_table_is_the_files(&fs, &direct, ino);
        c.answer(Request::Ftruncate { fd, len: 4097 });
        c.answer(Request::Write {
            fd,
            data: vec![4u8; 10].into(),
        });
        assert_table_is_the_files(&fs, &direct, ino);
    }

    /// `O_TRUNC` with direct reads on, as Linux does it: a file the open creates is
    /// not checked (mode 0444), a file the caller may not write is refused even
    /// read-only, a file it may write is truncated however it is opened.
    #[test]
    fn o_trunc_with_direct_reads_checks_and_truncates_as_linux_does() {
        let fs = memory_fs();
        let direct = Direct::new(1 << 16).unwrap();
        let counts = Counts::default();
        let mut root = Conn::new(&fs, Cred::root(), &counts, Some(&direct));
        let mut user = Conn::new(&fs, Cred::user(1000, 1000), &counts, Some(&direct));
        let open = |c: &mut Conn<'_>, path: &str, flags: i32, mode: u32| {
            c.answer(Request::Open {
                path: path.into(),
                flags,
                mode,
            })
        };
        assert!(matches!(
            open(&mut root, "/pub", libc::O_CREAT | libc::O_WRONLY, 0o644),
            Answer::Fd(_)
        ));
        root.answer(Request::Chmod {
            path: "/".into(),
            mode: 0o777,
        });
        let Answer::Fd(fd) = open(&mut root, "/roots", libc::O_CREAT | libc::O_WRONLY, 0o644)
        else {
            panic!()
        };
        root.answer(Request::Pwrite {
            fd,
            data: vec![1u8; 100].into(),
            off: 0,
        });
        let new = libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY;
        assert!(matches!(
            open(&mut user, "/mine", new, 0o444),
            Answer::Fd(_)
        ));
        let ro_trunc = libc::O_RDONLY | libc::O_TRUNC;
        assert_eq!(
            open(&mut user, "/roots", ro_trunc, 0),
            Answer::Error(libc::EACCES)
        );
        assert_eq!(
            fs.stat("/roots").unwrap().size,
            100,
            "refused, so untouched"
        );
        assert!(matches!(
            open(&mut root, "/roots", ro_trunc, 0),
            Answer::Fd(_)
        ));
        assert_eq!(fs.stat("/roots").unwrap().size, 0);
        root.answer(Request::Pwrite {
            fd,
            data: vec![1u8; 100].into(),
            off: 0,
        });
        assert!(matches!(
            open(&mut root, "/roots", libc::O_WRONLY | libc::O_TRUNC, 0),
            Answer::Fd(_)
        ));
        assert_eq!(fs.stat("/roots").unwrap().size, 0);
        assert_eq!(
            open(&mut root, "/", ro_trunc, 0),
            Answer::Error(libc::EISDIR)
        );
    }

    /// A handoff is adopted only by its maker (after `exec`) or a child of it; the
    /// adopting connection shares the open file (one offset, closed with the last
    /// holder); what was kept for a process that died goes at the next sweep.
    #[test]
    fn a_handoff_goes_to_a_child_shares_the_file_and_dies_with_its_heir() {
        let fs = memory_fs();
        let counts = Counts::default();
        let mut parent = Conn::new(&fs, Cred::root(), &counts, None);
        parent.pid = std::process::id();
        let Answer::Fd(fd) = parent.answer(Request::Open {
            path: "/f".into(),
            flags: libc::O_CREAT | libc::O_RDWR,
            mode: 0o644,
        }) else {
            panic!()
        };
        parent.answer(Request::Write {
            fd,
            data: b"ab".to_vec().into(),
        });
        let Answer::Count(token) = parent.answer(Request::Handoff { fds: vec![fd, 99] }) else {
            panic!()
        };
        let mut stranger = Conn::new(&fs, Cred::root(), &counts, None);
        stranger.pid = 1;
        assert_eq!(
            stranger.answer(Request::Adopt { token }),
            Answer::Error(libc::EPERM)
        );
        let mut process = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let mut child = Conn::new(&fs, Cred::root(), &counts, None);
        child.pid = process.id();
        // Named, the heir alone may adopt: another child of the maker may not.
        let mut sibling = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let mut other = Conn::new(&fs, Cred::root(), &counts, None);
        other.pid = sibling.id();
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
        assert_eq!(counts.open.load(Ordering::SeqCst), 1, "the child holds it");
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
        counts.sweep(&fs);
        assert_eq!((counts.kept(), counts.open.load(Ordering::SeqCst)), (1, 1));
        process.kill().unwrap();
        process.wait().unwrap();
        counts.sweep(&fs);
        assert_eq!((counts.kept(), counts.open.load(Ordering::SeqCst)), (0, 0));
    }

    use fs::{FormatOptions, MountOptions};

    use crate::locks::Kind as LockKind;
    use pmem::{MemPmem, Pmem};
    use proptest::prelude::*;

    use super::*;

    /// Requests a client could send, valid or not: paths from a few names, any
    /// descriptor, offsets and lengths up to the largest.
    fn request() -> impl Strategy<Value = Request<'static>> {
        let path =
            prop::sample::select(vec!["/a", "/b", "/d", "/d/a", "/a/x", "", "/", "//d/../b"])
                .prop_map(String::from);
        let fd = prop_oneof![8 => 0u32..3, 1 => any::<u32>()];
        let off = prop_oneof![0u64..100_000, any::<u64>()];
        prop_oneof![
            1 => (path.clone(), any::<i32>(), any::<u32>())
                .prop_map(|(path, flags, mode)| Request::Open { path, flags, mode }),
            4 => (path.clone(), 0..4i32).prop_map(|(path, f)| Request::Open {
                path,
                flags: [
                    libc::O_RDWR | libc::O_CREAT,
                    libc::O_RDONLY,
                    libc::O_WRONLY | libc::O_TRUNC,
                    libc::O_DIRECTORY
                ][f as usize],
                mode: 0o644
            }),
            1 => fd.clone().prop_map(|fd| Request::Close { fd }),
            1 => (fd.clone(), any::<u32>(), off.clone()).prop_map(|(fd, len, off)| Request::Pread {
                fd,
                len,
                off
            }),
            3 => (
                fd.clone(),
                prop::collection::vec(any::<u8>(), 0..9000),
                off.clone()
            )
                .prop_map(|(fd, data, off)| Request::Pwrite { fd, data: data.into(), off }),
            1 => (fd.clone(), any::<i64>(), any::<i32>()).prop_map(|(fd, off, whence)| Request::Lseek {
                fd,
                off,
                whence
            }),
            1 => (fd.clone(), off.clone()).prop_map(|(fd, len)| Request::Ftruncate { fd, len }),
            2 => fd.clone().prop_map(|fd| Request::Table { fd }),
            2 => (prop_oneof![Just(1u64), 0..64u64, any::<u64>()], prop_oneof![Just(".".to_string()), "[a-c]{1,2}", ".{0,300}"]).prop_map(|(dir, name)| Request::Lookup { dir, name }),
            1 => fd.clone().prop_map(|fd| Request::Fsync { fd }),
            1 => (path.clone(), any::<u32>()).prop_map(|(path, mode)| Request::Mkdir { path, mode }),
            1 => path.clone().prop_map(|path| Request::Unlink { path }),
            1 => path.clone().prop_map(|path| Request::Rmdir { path }),
            1 => (path.clone(), path.clone(), 0..3u32).prop_map(|(old, new, flags)| Request::Rename {
                old,
                new,
                flags
            }),
            1 => (path.clone(), path.clone()).prop_map(|(old, new)| Request::Link { old, new }),
            1 => (path.clone(), off.clone()).prop_map(|(path, len)| Request::Truncate { path, len }),
            1 => path.clone().prop_map(|path| Request::Readdir { path }),
            2 => (prop::option::of(fd.clone()), path.clone(), 0..4i32).prop_map(|(dir, path, f)| Request::Openat {
                dir,
                path,
                flags: [libc::O_RDWR | libc::O_CREAT, libc::O_RDONLY, libc::O_DIRECTORY, libc::O_PATH][f as usize],
                mode: 0o644,
            }),
            1 => (prop::option::of(fd.clone()), path.clone(), any::<i32>()).prop_map(|(dir, path, flags)| Request::Unlinkat { dir, path, flags }),
            1 => (fd.clone(), any::<bool>(), 0..3u8, 0..3u8, off.clone(), off.clone()).prop_map(|(fd, test, o, k, start, len)| Request::Lock {
                fd,
                test,
                owner: [LockOwner::Process, LockOwner::OpenFile, LockOwner::Flock][o as usize],
                kind: [LockKind::Read, LockKind::Write, LockKind::Unlock][k as usize],
                start,
                len,
            }),
            1 => prop::collection::vec(fd.clone(), 0..3).prop_map(|fds| Request::Handoff { fds }),
            1 => any::<u64>().prop_map(|token| Request::Adopt { token }),
            1 => (any::<u64>(), any::<i32>()).prop_map(|(token, pid)| Request::Heir { token, pid }),
            1 => (fd.clone(), any::<u64>()).prop_map(|(fd, offset)| Request::ReaddirFd { fd, offset }),
            1 => (fd.clone(), any::<i32>(), off.clone(), off.clone()).prop_map(|(fd, mode, off, len)| Request::Fallocate { fd, mode, off, len }),
            1 => (fd.clone(), any::<u32>()).prop_map(|(fd, size)| Request::Getxattr { on: On::Fd(fd), name: "user.a".into(), size }),
            1 => (path.clone(), prop::collection::vec(any::<u8>(), 0..100), any::<i32>()).prop_map(|(p, value, flags)| Request::Setxattr { on: On::Path(p), name: "user.a".into(), value, flags }),
            1 => path.prop_map(|p| Request::Listxattr { on: On::Link(p), size: 4096 }),
            1 => (0..20_000u64).prop_map(|len| Request::Staging { len }),
            1 => (0..4u32).prop_map(|id| Request::DropStaging { id }),
            2 => (fd.clone(), 0..4u32, off.clone(), 0..20_000u64, prop::option::of(off.clone())).prop_map(|(fd, id, at, len, off)| Request::WriteStaged { fd, id, at, len, off }),
            2 => (fd.clone(), 0..4u32, off.clone(), 0..20_000u64, prop::option::of(off.clone())).prop_map(|(fd, id, at, len, off)| Request::ReadStaged { fd, id, at, len, off }),
            2 => (fd.clone(), 0..4u32, off.clone(), 0..20_000u64, off.clone()).prop_map(|(fd, id, at, len, off)| Request::SubmitStaged { fd, id, at, len, off }),
            1 => (any::<u64>(), any::<bool>()).prop_map(|(sn, wait)| Request::Settle { sn, wait }),

        ]
    }

    /// A payload: a request, a request with bytes flipped or cut, or noise.
    fn payload() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            6 => request().prop_map(|r| wire::frame(&r).unwrap()[4..].to_vec()),
            1 => (request(), any::<usize>(), any::<u8>()).prop_map(|(r, at, x)| {
                let mut b = wire::frame(&r).unwrap()[4..].to_vec();
                let at = at % b.len();
                b[at] ^= x | 1;
                b
            }),
            1 => (request(), any::<usize>()).prop_map(|(r, cut)| {
                let b = wire::frame(&r).unwrap()[4..].to_vec();
                b[..cut % b.len()].to_vec()
            }),
            1 => prop::collection::vec(any::<u8>(), 0..64),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Whatever a client sends, it gets answers, the server does not panic, and
        /// the image is consistent once the connection ends and the image is unmounted.
        #[test]
        fn any_payloads_leave_the_image_consistent(
            payloads in prop::collection::vec(payload(), 1..120),
            with_direct in any::<bool>(),
            engine_copies in any::<bool>(),
        ) {
            let pm: Arc<dyn Pmem> = Arc::new(MemPmem::new(32 << 20));
            FileSystem::format(&*pm, &FormatOptions::default()).unwrap();
            // The async mode's copies run on after a submitted write is answered.
            let mode = if engine_copies { fs::Mode::Async } else { fs::Mode::Cpu };
            let options = MountOptions { mode, ..MountOptions::default() };
            let (fs, _) = FileSystem::mount(pm.clone(), options).unwrap();
            let counts = Counts::default();
            let direct = with_direct.then(|| Direct::new(1 << 16).unwrap());
            {
                let mut conn = Conn::new(&fs, Cred::root(), &counts, direct.as_ref());
                for p in &payloads {
                    let (a, _) = conn.answer_bytes(p);
                    prop_assert!(wire::frame(&a).is_ok(), "an answer too long to send");
                }
            }
            // What was handed to a process that never came (this test's pid is 0,
            // which no process has) goes at the server's next sweep.
            counts.sweep(&fs);
            prop_assert_eq!(counts.kept(), 0);
            prop_assert_eq!(counts.open.load(Ordering::SeqCst), 0);
            prop_assert_eq!(direct.as_ref().map_or(0, Direct::tables_published), 0);
            prop_assert_eq!(counts.clients.load(Ordering::SeqCst), 0);
            fs.unmount().unwrap();
            let report = fs::fsck::check(&*pm).unwrap();
            prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
        }
    }
}
