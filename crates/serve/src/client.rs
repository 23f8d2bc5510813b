//! A client of `easyio serve`: connects, maps the image read-only when the server
//! sends it, and makes file system calls as requests.

use std::collections::HashMap;
use std::io::{self, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fs::{DirEntry, Stat, StatFs};
use parking_lot::Mutex;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

use crate::direct::{ASK, HOLE, PAGE0, SIZE, TABLE_PAGES, UNKNOWN};
use crate::error::{Error, Result};
use crate::mailbox::{self, Mailbox, Side};
use crate::shm::Words;
use crate::wire::{self, Answer, Hello, Request, Status, Welcome, MAX_IO};

pub use region::RegionView;

mod at;
mod index;
mod region;
mod session;
mod staged;
mod submit;

pub use staged::StagingBuf;
pub use submit::Submitted;

pub use session::Remote;

/// A connection to a server. Calls may come from several threads; they are made
/// one at a time.
pub struct Client {
    /// `None` once the server is gone: every call then fails at once.
    channel: Mutex<Option<Channel>>,
    region: Option<RegionView>,
    direct: Option<Direct>,
    server_pid: u32,
    /// [`FORKS`] when it connected: a connection is its process's own.
    forks: u64,
    /// Staging buffers mapped, by the server's number for each.
    staging: Mutex<Vec<(u32, Arc<crate::staging::Buffer>)>>,
    /// Whether any was ever mapped (calls of a client with none skip the lock).
    has_staging: std::sync::atomic::AtomicBool,
    /// Data calls carried by staging buffers.
    staged_calls: AtomicU64,
}

/// Forks this process descends from (raised in every child of `fork`): a
/// connection made before a fork is the parent's — its socket and mailbox are
/// shared with the parent — and the child's calls on it fail.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn forked() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Counts forks from now on (once per process).
fn watch_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: `forked` is a plain function that lives as long as the process.
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forked));
    });
}

/// How calls travel: frames on the socket, or the mailbox (the socket then rings).
struct Channel {
    stream: UnixStream,
    mailbox: Option<Mailbox>,
    /// Descriptors that came over the socket and were not yet taken by an answer.
    fds: Vec<OwnedFd>,
}

/// How long a client spins for an answer before it sleeps.
const CLIENT_SPIN: Duration = Duration::from_micros(50);
/// How often direct reads look whether the server is still there.
const ALIVE_EVERY: Duration = Duration::from_millis(1);

impl Channel {
    /// Whether the server's end of the socket is still open (a look, not a read:
    /// bytes waiting there stay for the next call). `POLLRDHUP` says the other end
    /// closed even when bytes it sent before (a ring) still wait to be read.
    fn server_alive(&self) -> bool {
        use rustix::event::{PollFd, PollFlags};
        let mut fds = [PollFd::new(&self.stream, PollFlags::RDHUP)];
        match rustix::event::poll(&mut fds, Some(&rustix::time::Timespec::default())) {
            Ok(_) => !fds[0]
                .revents()
                .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
            Err(e) => e == rustix::io::Errno::INTR,
        }
    }

    /// Sends `req`, returns the answer's payload and the descriptors sent with it.
    fn exchange(&mut self, req: &Request) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
        let Some(m) = &self.mailbox else {
            wire::send(&mut self.stream, req)?;
            return receive_with_fds(&self.stream);
        };
        m.post(req, mailbox::POSTED, false, &self.stream)?;
        m.wait(mailbox::ANSWERED, CLIENT_SPIN, &self.stream, &mut self.fds)?;
        let payload = m
            .take()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "an answer too long"))?;
        let fds_came = m.fds_came();
        // Descriptors sent with the answer are on the socket before it, and the
        // answer says so; with none, the socket is left alone (no system call). The
        // end of the stream here is the next call's to report: this one was answered.
        if fds_came {
            match mailbox::listen(&self.stream, &mut self.fds, false) {
                Err(e) if e.kind() != io::ErrorKind::UnexpectedEof => return Err(e),
                _ => {}
            }
        }
        Ok((payload, std::mem::take(&mut self.fds)))
    }
}

/// A client's half of direct reads (see the server's `direct` module).
struct Direct {
    /// The epoch the server published, read-only.
    epoch: Words,
    /// This client's epoch slot.
    slot: Words,
    /// The page table of each descriptor (`None`: it has none, e.g. write-only). The
    /// lock also makes direct reads run one at a time: the client has one slot.
    tables: Mutex<HashMap<u32, Option<Arc<Words>>>>,
    /// Reads copied from the mapping.
    reads: AtomicU64,
    /// Path calls resolved by the index.
    resolved: AtomicU64,
    /// Reads that found a page being changed and asked the server instead.
    asked: AtomicU64,
    /// Paths this client resolves itself; `None` from a server that publishes no
    /// version table.
    index: Option<index::Index>,
    /// When this client connected; [`Direct::checked`] counts from it.
    born: std::time::Instant,
    /// When direct reads last saw the server alive, ns after [`Direct::born`].
    checked: AtomicU64,
}

impl Direct {
    /// Maps what a client that reads directly is sent, in the order sent: the
    /// published epoch, its epoch slot, and the version table if it has `versions`
    /// words.
    fn map(next: &mut impl FnMut() -> Result<OwnedFd>, versions: u64) -> Result<Direct> {
        let shared = |e| Error::os("mapping the shared epoch", e);
        let epoch = Words::map(&next()?, 1, false).map_err(shared)?;
        let slot = Words::map(&next()?, 1, true).map_err(shared)?;
        let index = match versions {
            0 => None,
            n => Some(index::Index::new(
                Words::map(&next()?, n as usize, false)
                    .map_err(|e| Error::os("mapping the version table", e))?,
            )),
        };
        Ok(Direct {
            epoch,
            slot,
            index,
            tables: Mutex::new(HashMap::new()),
            reads: AtomicU64::new(0),
            resolved: AtomicU64::new(0),
            asked: AtomicU64::new(0),
            born: std::time::Instant::now(),
            checked: AtomicU64::new(0),
        })
    }
}

/// The registration of a direct read in the epoch, dropped when it is done.
struct Pinned<'a>(&'a Words);

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        self.0.at(0).store(0, Ordering::SeqCst);
    }
}

impl Direct {
    /// Registers in the epoch the server published last.
    fn pin(&self) -> Pinned<'_> {
        let published = self.epoch.at(0);
        loop {
            let e = published.load(Ordering::SeqCst);
            self.slot.at(0).store(e, Ordering::SeqCst);
            if published.load(Ordering::SeqCst) == e {
                return Pinned(&self.slot);
            }
        }
    }
}

/// Copies bytes `[off, off + buf.len())` of the file page table `t` publishes, up to
/// its size, from the mapping into `buf`; `None` if a page or the size is being
/// changed (then ask the server). Call registered in the epoch.
fn copy_published(r: &RegionView, t: &Words, off: u64, buf: &mut [u8]) -> Option<usize> {
    let size = t.get(SIZE)?.load(Ordering::SeqCst);
    if size == UNKNOWN {
        return None;
    }
    let n = size.saturating_sub(off).min(buf.len() as u64) as usize;
    let block = fs::BLOCK_SIZE;
    let mut done = 0;
    while done < n {
        let pos = off + done as u64;
        let (pg, in_page) = (pos / block, pos % block);
        let take = ((block - in_page) as usize).min(n - done);
        let dst = &mut buf[done..done + take];
        if pg >= TABLE_PAGES {
            return None;
        }
        match t.get(PAGE0 + pg as usize)?.load(Ordering::SeqCst) {
            ASK => return None,
            HOLE => dst.fill(0),
            b => {
                if !r.read_region(b.checked_mul(block)? + in_page, dst) {
                    return None;
                }
            }
        }
        done += take;
    }
    // Read-ahead: the page after the last one read is where a sequential reader goes
    // next. Touching its first line now starts the walk of the mapping's page tables
    // (a block of a file overwritten in place of others lies anywhere in the region)
    // while the caller uses these bytes.
    let next = (off + n as u64).div_ceil(block);
    if n > 0 && next < TABLE_PAGES {
        if let Some(b) = t
            .get(PAGE0 + next as usize)
            .map(|w| w.load(Ordering::Relaxed))
        {
            if b != ASK && b != HOLE {
                r.prefetch(b.saturating_mul(block));
            }
        }
    }
    Some(n)
}

impl Client {
    /// Connects to the server listening on `socket`, as this process's user, creating
    /// with the process's umask; calls go through a mailbox of shared memory.
    pub fn connect(socket: impl AsRef<Path>) -> Result<Client> {
        Client::connect_with(socket, true)
    }

    /// [`Client::connect`], with calls through the mailbox or as frames on the socket.
    pub fn connect_with(socket: impl AsRef<Path>, mailbox: bool) -> Result<Client> {
        Client::connect_full(socket.as_ref(), mailbox, None)
    }

    /// [`Client::connect`], keeping the descriptors the connection holds for its
    /// life (the socket, the mailbox) at numbers from `floor` up where the process's
    /// limit allows: a library inside a program (the LD_PRELOAD shim) must leave the
    /// low numbers to the program, which may name them (`exec 3> file` in a shell).
    /// The server applies no umask to this connection's creations: the caller (the
    /// shim, which follows the program's `umask` calls) clears the bits itself.
    pub fn connect_above(socket: impl AsRef<Path>, floor: i32) -> Result<Client> {
        Client::connect_full(socket.as_ref(), true, Some(floor))
    }

    /// A connection to the server at `socket`, with a mailbox or not, keeping its
    /// descriptors from `floor` up (see [`Client::connect_above`]).
    fn connect_full(socket: &Path, mailbox: bool, floor: Option<i32>) -> Result<Client> {
        let umask = if floor.is_some() { 0 } else { process_umask() };
        watch_forks();
        let stream = UnixStream::connect(socket)
            .map_err(|e| Error::os(format!("connecting to {}", socket.display()), e))?;
        let mut stream = UnixStream::from(above(stream.into(), floor));
        let hello = Hello {
            version: wire::VERSION,
            umask,
            mailbox,
        };
        wire::send(&mut stream, &hello).map_err(Error::Disconnected)?;
        let (welcome, fds) = receive_welcome(&stream)?;
        match welcome {
            Welcome::Accepted {
                mapped,
                direct,
                mailbox,
                versions,
                region_offset,
                region_len,
                server_pid,
                ..
            } => {
                let mut fds = fds.into_iter();
                let mut next = || {
                    fds.next()
                        .ok_or_else(|| Error::Protocol("a descriptor was not sent".into()))
                };
                let region = match mapped {
                    true => Some(RegionView::map(&next()?, region_offset, region_len)?),
                    false => None,
                };
                let direct = match direct && mapped {
                    true => Some(Direct::map(&mut next, versions)?),
                    false => None,
                };
                let mailbox = match mailbox {
                    true => Some(
                        Mailbox::map(above(next()?, floor), Side::Client)
                            .map_err(|e| Error::os("mapping the mailbox", e))?,
                    ),
                    false => None,
                };
                Ok(Client {
                    channel: Mutex::new(Some(Channel {
                        stream,
                        mailbox,
                        fds: Vec::new(),
                    })),
                    region,
                    direct,
                    server_pid,
                    forks: FORKS.load(Ordering::Relaxed),
                    staging: Mutex::new(Vec::new()),
                    has_staging: std::sync::atomic::AtomicBool::new(false),
                    staged_calls: AtomicU64::new(0),
                })
            }
            Welcome::Refused(errno) => Err(Error::Fs(errno)),
        }
    }

    /// The image, mapped read-only; `None` when this client's user may not read the
    /// image file (its data then only comes through requests).
    pub fn region(&self) -> Option<&RegionView> {
        self.region.as_ref()
    }

    /// Whether the server that answered this connection still runs (a look at the
    /// socket; false once the connection is known gone).
    pub(crate) fn server_alive(&self) -> bool {
        self.channel
            .lock()
            .as_ref()
            .is_some_and(Channel::server_alive)
    }

    /// The server's process id.
    pub fn server_pid(&self) -> u32 {
        self.server_pid
    }

    /// Makes one call. A server that is gone fails this call and every later one
    /// with [`Error::Disconnected`].
    pub fn call(&self, req: &Request) -> Result<Answer> {
        self.call_with_fds(req).map(|(a, _)| a)
    }

    /// Makes one call whose answer may carry descriptors.
    fn call_with_fds(&self, req: &Request) -> Result<(Answer, Vec<OwnedFd>)> {
        self.own_process()?;
        let mut guard = self.channel.lock();
        let Some(channel) = guard.as_mut() else {
            return Err(Error::Disconnected(io::ErrorKind::NotConnected.into()));
        };
        match channel.exchange(req) {
            Ok((bytes, fds)) => wire::decode::<Answer>(&bytes)
                .map(|a| (a, fds))
                .ok_or_else(|| Error::Protocol("an answer that does not decode".into())),
            Err(e) => {
                *guard = None;
                Err(Error::Disconnected(e))
            }
        }
    }

    /// Makes one call whose answer is [`Answer::Done`].
    fn done(&self, req: Request) -> Result<()> {
        match self.call(&req)? {
            Answer::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// `open(path, flags, mode)`: a descriptor of this connection.
    pub fn open(&self, path: &str, flags: i32, mode: u32) -> Result<u32> {
        if let Some(e) = self.open_refused(path, flags) {
            return Err(e);
        }
        let path = path.to_string();
        match self.call(&Request::Open { path, flags, mode })? {
            Answer::Fd(fd) => {
                self.forget_table(fd);
                Ok(fd)
            }
            other => Err(unexpected(other)),
        }
    }

    /// `ENOTCONN` in a child of the process that connected: the connection is the
    /// parent's (connect anew).
    fn own_process(&self) -> Result<()> {
        match FORKS.load(Ordering::Relaxed) == self.forks {
            true => Ok(()),
            false => Err(Error::Disconnected(io::Error::other(
                "this connection is the parent process's (made before fork)",
            ))),
        }
    }

    /// Forgets a page table cached for descriptor number `fd` (reused by a new open).
    fn forget_table(&self, fd: u32) {
        if let Some(d) = &self.direct {
            d.tables.lock().remove(&fd);
        }
    }

    /// In a child after `fork`: lets the parent's connection go without a word to
    /// the server (closing this process's copy of the socket and unmapping the
    /// mailbox). Every later call of this client fails; connect anew. (If another
    /// thread of the parent was inside a call when it forked, the lock it held is
    /// held for ever in the child: the copy of the socket then stays open.)
    pub fn abandon(&self) {
        if let Some(mut channel) = self.channel.try_lock() {
            channel.take();
        }
    }

    /// `close(fd)`. The descriptor's page table is forgotten under the lock direct
    /// reads take, held until the server closed it: a read racing the close cannot
    /// cache the table again for a number the next `open` may return.
    pub fn close(&self, fd: u32) -> Result<()> {
        let _tables = self.direct.as_ref().map(|d| {
            let mut tables = d.tables.lock();
            tables.remove(&fd);
            tables
        });
        self.done(Request::Close { fd })
    }

    /// Reads copied from the mapping with no request, and reads that found a page
    /// being changed and asked the server; `None` when this client reads through
    /// requests only.
    pub fn direct_stats(&self) -> Option<(u64, u64)> {
        let d = self.direct.as_ref()?;
        Some((
            d.reads.load(Ordering::Relaxed),
            d.asked.load(Ordering::Relaxed),
        ))
    }

    /// `pread`: fills `buf` from `off` up to the end of the file; the bytes read.
    /// Copied straight from the mapping when the server allows direct reads (a
    /// request only when the file changed since its map was fetched).
    pub fn pread(&self, fd: u32, buf: &mut [u8], off: u64) -> Result<usize> {
        self.own_process()?;
        match (&self.direct, &self.region) {
            (Some(d), Some(r)) => self.pread_direct(d, r, fd, buf, off),
            _ => self.pread_requested(fd, buf, off),
        }
    }

    /// A direct read: registered in the epoch, the bytes are copied from the mapping
    /// where the file's page table shows them; from the server where a page is being
    /// changed.
    fn pread_direct(
        &self,
        d: &Direct,
        r: &RegionView,
        fd: u32,
        buf: &mut [u8],
        off: u64,
    ) -> Result<usize> {
        let mut tables = d.tables.lock();
        self.check_alive(d)?;
        let table = match tables.get(&fd) {
            Some(t) => t.clone(),
            None => {
                let t = self.fetch_table(fd)?;
                tables.insert(fd, t.clone());
                t
            }
        };
        let copied = table.and_then(|t| {
            let _pinned = d.pin();
            copy_published(r, &t, off, buf)
        });
        drop(tables);
        match copied {
            Some(n) => {
                d.reads.fetch_add(1, Ordering::Relaxed);
                Ok(n)
            }
            None => {
                d.asked.fetch_add(1, Ordering::Relaxed);
                self.pread_requested(fd, buf, off)
            }
        }
    }

    /// Fails with [`Error::Disconnected`] once the server is gone. Direct reads make
    /// no request, so they look at the socket themselves, at most once every
    /// [`ALIVE_EVERY`]: after the server's death they go on for at most that long.
    fn check_alive(&self, d: &Direct) -> Result<()> {
        let now = d.born.elapsed().as_nanos() as u64;
        if now.saturating_sub(d.checked.load(Ordering::Relaxed)) < ALIVE_EVERY.as_nanos() as u64 {
            return Ok(());
        }
        let mut channel = self.channel.lock();
        let alive = channel.as_ref().is_some_and(|c| c.server_alive());
        if !alive {
            *channel = None;
            return Err(Error::Disconnected(io::ErrorKind::NotConnected.into()));
        }
        d.checked.store(now, Ordering::Relaxed);
        Ok(())
    }

    /// The page table of descriptor `fd`; `None` if the server gives none for it.
    fn fetch_table(&self, fd: u32) -> Result<Option<Arc<Words>>> {
        let (answer, fds) = self.call_with_fds(&Request::Table { fd })?;
        match answer {
            Answer::Table { pages, .. } if pages <= TABLE_PAGES => {
                let Some(t) = fds.into_iter().next() else {
                    return Err(Error::Protocol("a page table was not sent".into()));
                };
                let words = PAGE0 + pages as usize;
                let t = Words::map(&t, words, false)
                    .map_err(|e| Error::os("mapping a page table", e))?;
                Ok(Some(Arc::new(t)))
            }
            // Not a file this client reads directly: read it through requests.
            Answer::Error(libc::EOPNOTSUPP | libc::EISDIR) => Ok(None),
            other => Err(unexpected(other)),
        }
    }

    fn pread_requested(&self, fd: u32, buf: &mut [u8], off: u64) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            let len = (buf.len() - done).min(MAX_IO) as u32;
            let off = off + done as u64;
            let data = self.data(Request::Pread { fd, len, off })?;
            buf[done..done + data.len()].copy_from_slice(&data);
            done += data.len();
            if data.len() < len as usize {
                break;
            }
        }
        Ok(done)
    }

    /// `read` at the descriptor's position (at most [`MAX_IO`] bytes a call).
    pub fn read(&self, fd: u32, buf: &mut [u8]) -> Result<usize> {
        let len = buf.len().min(MAX_IO) as u32;
        let data = self.data(Request::Read { fd, len })?;
        buf[..data.len()].copy_from_slice(&data);
        Ok(data.len())
    }

    fn data(&self, req: Request) -> Result<Vec<u8>> {
        match self.call(&req)? {
            Answer::Data(d) if d.len() <= MAX_IO => Ok(d),
            other => Err(unexpected(other)),
        }
    }

    /// `pwrite` of all of `buf` at `off` (in requests of at most [`MAX_IO`] bytes).
    pub fn pwrite(&self, fd: u32, buf: &[u8], off: u64) -> Result<usize> {
        let mut done = 0;
        for piece in buf.chunks(MAX_IO) {
            let off = off + done as u64;
            done += self.count(Request::Pwrite {
                fd,
                data: piece.into(),
                off,
            })? as usize;
        }
        Ok(done)
    }

    /// `write` at the descriptor's position (at most [`MAX_IO`] bytes a call).
    pub fn write(&self, fd: u32, buf: &[u8]) -> Result<usize> {
        let data = buf[..buf.len().min(MAX_IO)].into();
        Ok(self.count(Request::Write { fd, data })? as usize)
    }

    fn count(&self, req: Request) -> Result<u64> {
        match self.call(&req)? {
            Answer::Count(n) => Ok(n),
            other => Err(unexpected(other)),
        }
    }

    /// `lseek(fd, off, whence)` with a `SEEK_*` value: the new position.
    pub fn lseek(&self, fd: u32, off: i64, whence: i32) -> Result<u64> {
        self.count(Request::Lseek { fd, off, whence })
    }

    /// `fsync(fd)`.
    pub fn fsync(&self, fd: u32) -> Result<()> {
        self.done(Request::Fsync { fd })
    }

    /// `ftruncate(fd, len)`.
    pub fn ftruncate(&self, fd: u32, len: u64) -> Result<()> {
        self.done(Request::Ftruncate { fd, len })
    }

    /// `fstat(fd)`.
    pub fn fstat(&self, fd: u32) -> Result<Stat> {
        self.stat_of(Request::Fstat { fd })
    }

    /// `stat(path)`. An absolute path is resolved here when it can be, from what
    /// earlier lookups told this client (see the `index` module): no request while
    /// nothing on the way changed.
    pub fn stat(&self, path: &str) -> Result<Stat> {
        match self.resolved(path, true) {
            Some(r) => r,
            None => self.stat_of(Request::Stat { path: path.into() }),
        }
    }

    /// `lstat(path)`, resolved here when it can be, as [`Client::stat`].
    pub fn lstat(&self, path: &str) -> Result<Stat> {
        match self.resolved(path, false) {
            Some(r) => r,
            None => self.stat_of(Request::Lstat { path: path.into() }),
        }
    }

    /// The error of an open that cannot succeed, found here with no request: a
    /// plain read-only open (no `O_CREAT`, no `O_TRUNC`…) of an absolute path that
    /// what this client keeps resolves to an error — a program probing again for a
    /// file it found missing (`make`, a shell). Only what is kept is used: an open
    /// never pays for lookups before its own request.
    fn open_refused(&self, path: &str, flags: i32) -> Option<Error> {
        const PLAIN: i32 = libc::O_CLOEXEC
            | libc::O_NONBLOCK
            | libc::O_NOCTTY
            | libc::O_LARGEFILE
            | libc::O_DIRECTORY
            | libc::O_NOFOLLOW;
        // O_RDONLY is 0: any other access mode or flag goes to the server.
        if flags & !PLAIN != 0 {
            return None;
        }
        self.resolved_asking(path, flags & libc::O_NOFOLLOW == 0, false)?
            .err()
    }

    /// The attributes at `path` as this client resolves it (see the `index`
    /// module); `None` when the server must resolve it.
    fn resolved(&self, path: &str, follow: bool) -> Option<Result<Stat>> {
        self.resolved_asking(path, follow, true)
    }

    /// [`Client::resolved`], asking the server for what is not kept only if `ask`.
    fn resolved_asking(&self, path: &str, follow: bool, ask: bool) -> Option<Result<Stat>> {
        let d = self.direct.as_ref()?;
        let index = d.index.as_ref()?;
        // No request may be made: look whether the server still runs, as direct
        // reads do.
        if let Err(e) = self.own_process().and_then(|()| self.check_alive(d)) {
            return Some(Err(e));
        }
        let r = index.stat(path, follow, |req| ask.then(|| self.call(req).ok())?)?;
        d.resolved.fetch_add(1, Ordering::Relaxed);
        Some(r.map_err(Error::Fs))
    }

    /// Paths this client resolved itself, for `stat`, `lstat`, `fstatat`,
    /// `access(F_OK)` and read-only opens (an open it resolved to a file is then
    /// made by the server).
    pub fn resolved_locally(&self) -> u64 {
        self.direct
            .as_ref()
            .map_or(0, |d| d.resolved.load(Ordering::Relaxed))
    }

    fn stat_of(&self, req: Request) -> Result<Stat> {
        match self.call(&req)? {
            Answer::Stat(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// `mkdir(path, mode)`.
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.done(Request::Mkdir {
            path: path.into(),
            mode,
        })
    }

    /// `rmdir(path)`.
    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.done(Request::Rmdir { path: path.into() })
    }

    /// `unlink(path)`.
    pub fn unlink(&self, path: &str) -> Result<()> {
        self.done(Request::Unlink { path: path.into() })
    }

    /// `rename(old, new)`.
    pub fn rename(&self, old: &str, new: &str) -> Result<()> {
        self.renameat2(old, new, 0)
    }

    /// `renameat2(old, new, flags)`.
    pub fn renameat2(&self, old: &str, new: &str, flags: u32) -> Result<()> {
        let (old, new) = (old.into(), new.into());
        self.done(Request::Rename { old, new, flags })
    }

    /// `link(old, new)`.
    pub fn link(&self, old: &str, new: &str) -> Result<()> {
        let (old, new) = (old.into(), new.into());
        self.done(Request::Link { old, new })
    }

    /// `symlink(target, path)`.
    pub fn symlink(&self, target: &str, path: &str) -> Result<()> {
        let (target, path) = (target.into(), path.into());
        self.done(Request::Symlink { target, path })
    }

    /// `readlink(path)`.
    pub fn readlink(&self, path: &str) -> Result<String> {
        match self.call(&Request::Readlink { path: path.into() })? {
            Answer::Text(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }

    /// `chmod(path, mode)`.
    pub fn chmod(&self, path: &str, mode: u32) -> Result<()> {
        self.done(Request::Chmod {
            path: path.into(),
            mode,
        })
    }

    /// `chown(path, uid, gid)`; `None` leaves one as it is.
    pub fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.done(Request::Chown {
            path: path.into(),
            uid,
            gid,
        })
    }

    /// `truncate(path, len)`.
    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        self.done(Request::Truncate {
            path: path.into(),
            len,
        })
    }

    /// The names of a directory, sorted.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        match self.call(&Request::Readdir { path: path.into() })? {
            Answer::Entries(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    /// `statfs`.
    pub fn statfs(&self) -> Result<StatFs> {
        match self.call(&Request::Statfs)? {
            Answer::StatFs(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// What the server holds for this connection and in all.
    pub fn status(&self) -> Result<Status> {
        match self.call(&Request::Status)? {
            Answer::Status(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }
}

/// The error an answer stands for: its errno, or a protocol error for an answer of
/// the wrong kind.
fn unexpected(a: Answer) -> Error {
    match a {
        Answer::Error(errno) => Error::Fs(errno),
        other => Error::Protocol(format!("unexpected answer {other:?}")),
    }
}

/// `fd`, moved to the lowest free number from `floor` up (close-on-exec); left where
/// it is without a floor or if the limit of descriptors is below it.
fn above(fd: OwnedFd, floor: Option<i32>) -> OwnedFd {
    match floor {
        Some(f) => rustix::io::fcntl_dupfd_cloexec(&fd, f).unwrap_or(fd),
        None => fd,
    }
}

/// This process's umask (read from `/proc`, which leaves it unchanged; 022 if unknown).
fn process_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// Reads the server's welcome frame and the descriptors that may come with it.
fn receive_welcome(stream: &UnixStream) -> Result<(Welcome, Vec<OwnedFd>)> {
    let (payload, fds) = receive_with_fds(stream).map_err(Error::Disconnected)?;
    let welcome = wire::decode::<Welcome>(&payload)
        .ok_or_else(|| Error::Protocol("a welcome that does not decode".into()))?;
    Ok((welcome, fds))
}

/// Reads one frame and the descriptors attached to its first byte.
fn receive_with_fds(stream: &UnixStream) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut len = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(5))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        stream,
        &mut [IoSliceMut::new(&mut len)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?
    .bytes;
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(sent) = msg {
            fds.extend(sent);
        }
    }
    if got == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let mut s = stream;
    s.read_exact(&mut len[got..])?;
    Ok((wire::payload(&mut s, u32::from_le_bytes(len))?, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_direct_read_registers_in_the_published_epoch_until_it_is_done() {
        let epoch = Words::create("test-epoch", 1, false).unwrap();
        let slot = Words::create("test-slot", 1, true).unwrap();
        epoch.at(0).store(7, Ordering::SeqCst);
        let d = Direct {
            epoch: Words::map(epoch.fd().unwrap(), 1, false).unwrap(),
            slot: Words::map(slot.fd().unwrap(), 1, true).unwrap(),
            tables: Mutex::new(HashMap::new()),
            index: None,
            reads: AtomicU64::new(0),
            resolved: AtomicU64::new(0),
            asked: AtomicU64::new(0),
            born: std::time::Instant::now(),
            checked: AtomicU64::new(0),
        };
        {
            let _pinned = d.pin();
            assert_eq!(
                slot.at(0).load(Ordering::SeqCst),
                7,
                "the server sees the registration"
            );
        }
        assert_eq!(slot.at(0).load(Ordering::SeqCst), 0, "cleared when done");
    }

    #[test]
    fn a_server_gone_is_seen_even_with_a_ring_byte_left_on_the_socket() {
        let (ours, server) = UnixStream::pair().unwrap();
        let c = Channel {
            stream: ours,
            mailbox: None,
            fds: Vec::new(),
        };
        assert!(c.server_alive());
        // A ring the client never read, then the server's end closes.
        rustix::net::send(&server, &[1], rustix::net::SendFlags::empty()).unwrap();
        assert!(c.server_alive(), "a byte waiting is not an end");
        drop(server);
        assert!(!c.server_alive(), "the end is seen behind the byte");
    }
}
