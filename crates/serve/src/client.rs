//! A client of `easyio serve`: connects, maps the image read-only when the server
//! sends it, and makes file system calls as requests.

use std::io::{self, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use fs::{DirEntry, Stat, StatFs};
use parking_lot::Mutex;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

use crate::error::{Error, Result};
use crate::wire::{self, Answer, Hello, Request, Status, Welcome, MAX_IO};

/// A connection to a server. Calls may come from several threads; they are made
/// one at a time.
pub struct Client {
    /// `None` once the server is gone: every call then fails at once.
    stream: Mutex<Option<UnixStream>>,
    region: Option<RegionView>,
    server_pid: u32,
}

/// The image as this client sees it: mapped `PROT_READ`, so any store into it faults.
pub struct RegionView {
    map: *mut u8,
    map_len: usize,
    region_offset: usize,
}

// SAFETY: the mapping is read-only shared memory; reads go through volatile loads of
// bytes, which may run from any thread.
unsafe impl Send for RegionView {}
// SAFETY: as above: nothing is written through the view.
unsafe impl Sync for RegionView {}

impl Client {
    /// Connects to the server listening on `socket`, as this process's user, creating
    /// with the process's umask.
    pub fn connect(socket: impl AsRef<Path>) -> Result<Client> {
        let socket = socket.as_ref();
        let mut stream = UnixStream::connect(socket)
            .map_err(|e| Error::os(format!("connecting to {}", socket.display()), e))?;
        let hello = Hello {
            version: wire::VERSION,
            umask: process_umask(),
        };
        wire::send(&mut stream, &hello).map_err(Error::Disconnected)?;
        let (welcome, fd) = receive_welcome(&stream)?;
        match welcome {
            Welcome::Accepted {
                mapped,
                region_offset,
                region_len,
                server_pid,
                ..
            } => {
                let region = match (mapped, fd) {
                    (true, Some(fd)) => Some(RegionView::map(&fd, region_offset, region_len)?),
                    (true, None) => return Err(Error::Protocol("the image was not sent".into())),
                    (false, _) => None,
                };
                Ok(Client {
                    stream: Mutex::new(Some(stream)),
                    region,
                    server_pid,
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

    /// The server's process id.
    pub fn server_pid(&self) -> u32 {
        self.server_pid
    }

    /// Makes one call. A server that is gone fails this call and every later one
    /// with [`Error::Disconnected`].
    pub fn call(&self, req: &Request) -> Result<Answer> {
        let mut guard = self.stream.lock();
        let Some(stream) = guard.as_mut() else {
            return Err(Error::Disconnected(io::ErrorKind::NotConnected.into()));
        };
        let answer = wire::send(stream, req).and_then(|()| {
            wire::receive(stream)?.ok_or_else(|| io::ErrorKind::UnexpectedEof.into())
        });
        match answer {
            Ok(bytes) => wire::decode::<Answer>(&bytes)
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
        let path = path.to_string();
        match self.call(&Request::Open { path, flags, mode })? {
            Answer::Fd(fd) => Ok(fd),
            other => Err(unexpected(other)),
        }
    }

    /// `close(fd)`.
    pub fn close(&self, fd: u32) -> Result<()> {
        self.done(Request::Close { fd })
    }

    /// `pread`: fills `buf` from `off` up to the end of the file; the bytes read.
    pub fn pread(&self, fd: u32, buf: &mut [u8], off: u64) -> Result<usize> {
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
                data: piece.to_vec(),
                off,
            })? as usize;
        }
        Ok(done)
    }

    /// `write` at the descriptor's position (at most [`MAX_IO`] bytes a call).
    pub fn write(&self, fd: u32, buf: &[u8]) -> Result<usize> {
        let data = buf[..buf.len().min(MAX_IO)].to_vec();
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

    /// `stat(path)`.
    pub fn stat(&self, path: &str) -> Result<Stat> {
        self.stat_of(Request::Stat { path: path.into() })
    }

    /// `lstat(path)`.
    pub fn lstat(&self, path: &str) -> Result<Stat> {
        self.stat_of(Request::Lstat { path: path.into() })
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

/// Reads the server's welcome frame and the descriptor that may come with it.
fn receive_welcome(stream: &UnixStream) -> Result<(Welcome, Option<OwnedFd>)> {
    let mut len = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        stream,
        &mut [IoSliceMut::new(&mut len)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| Error::Disconnected(e.into()))?
    .bytes;
    let mut fd = None;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            fd = fds.into_iter().next();
        }
    }
    if got == 0 {
        return Err(Error::Disconnected(io::ErrorKind::UnexpectedEof.into()));
    }
    let mut s = stream;
    s.read_exact(&mut len[got..]).map_err(Error::Disconnected)?;
    let payload = wire::payload(&mut s, u32::from_le_bytes(len)).map_err(Error::Disconnected)?;
    let welcome = wire::decode::<Welcome>(&payload)
        .ok_or_else(|| Error::Protocol("a welcome that does not decode".into()))?;
    Ok((welcome, fd))
}

impl RegionView {
    /// Maps `len` bytes of the region at `offset` in the image `fd`, read-only.
    fn map(fd: &OwnedFd, offset: u64, len: u64) -> Result<RegionView> {
        let map_len = usize::try_from(offset + len)
            .map_err(|_| Error::Protocol("a region larger than memory".into()))?;
        // SAFETY: a fresh shared read-only mapping of a file; no Rust object aliases
        // it, and it is unmapped only by Drop.
        let map = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                map_len,
                ProtFlags::READ,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| Error::os("mapping the image read-only", e.into()))?;
        Ok(RegionView {
            map: map.cast(),
            map_len,
            region_offset: offset as usize,
        })
    }

    /// Bytes of the region.
    pub fn len(&self) -> usize {
        self.map_len - self.region_offset
    }

    /// Whether the region is empty (never, for a mounted image).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the mapping of the whole image starts (the region starts at
    /// [`RegionView::region_offset`] in it). Read-only: a store through it faults.
    pub fn as_ptr(&self) -> *const u8 {
        self.map
    }

    /// Where the region starts in the mapping, bytes.
    pub fn region_offset(&self) -> usize {
        self.region_offset
    }

    /// Copies image bytes `[off, off + buf.len())` (image offsets, header included)
    /// into `buf`; false, and nothing copied, if that is past the end.
    pub fn read_image(&self, off: usize, buf: &mut [u8]) -> bool {
        if off
            .checked_add(buf.len())
            .is_none_or(|end| end > self.map_len)
        {
            return false;
        }
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: off + i < map_len, inside the live read-only mapping; a volatile
            // load because the server may store there at any time.
            *b = unsafe { self.map.add(off + i).read_volatile() };
        }
        true
    }
}

impl Drop for RegionView {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; nothing borrows it past
        // `self`.
        let _ = unsafe { rustix::mm::munmap(self.map.cast(), self.map_len) };
    }
}
