//! The protocol between a client and the server: one request, one answer, each a
//! frame — a little-endian `u32` length, then that many bytes of a `postcard`
//! encoding of [`Request`] or [`Answer`]. The first exchange is the greeting
//! ([`Hello`] from the client, [`Welcome`] from the server, which carries the region's
//! read-only descriptor by `SCM_RIGHTS` when the client may read the image).
//!
//! Nothing a client sends is trusted: a frame longer than [`MAX_FRAME`] ends the
//! connection (the stream cannot be resynchronised), a payload that does not decode
//! is answered with `EBADMSG`, and every descriptor, path and offset is checked by the
//! server as any call of the file system is.

use std::borrow::Cow;
use std::io::{self, Read, Write};

use fs::{DirEntry, DirEntryAt, Stat, StatFs, Time};
use serde::{Deserialize, Serialize};

pub use crate::locks::{Held as HeldLock, Kind as LockKind, LockOwner};

/// Version of this protocol: a client and a server of different versions refuse
/// each other at the greeting.
pub const VERSION: u32 = 5;

/// The longest frame either side accepts (a write or read of [`MAX_IO`] bytes fits).
pub const MAX_FRAME: usize = MAX_IO + 4096;

/// A version the version table never reaches: a lookup answer that holds at no
/// version (the inode changed while the server looked).
pub const UNSTABLE: u64 = u64::MAX;

/// The most bytes one read or write request moves; a client splits larger calls.
pub const MAX_IO: usize = 4 << 20;

/// The client's greeting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// [`VERSION`] of the client.
    pub version: u32,
    /// Bits cleared from the modes of what this client creates (its `umask`).
    pub umask: u32,
    /// Make calls through a mailbox of shared memory (see the `mailbox` module)
    /// instead of frames on the socket.
    pub mailbox: bool,
}

/// The server's answer to [`Hello`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Welcome {
    /// Accepted. When `mapped`, a read-only descriptor of the image comes with this
    /// frame: the region's bytes `[region_offset, region_offset + region_len)`.
    Accepted {
        /// [`VERSION`] of the server.
        version: u32,
        /// Whether a descriptor of the image comes with this frame (only for a client
        /// whose user may read the image file itself).
        mapped: bool,
        /// Whether the client may read file data from its mapping directly: then the
        /// published epoch (one word, read-only) and the client's epoch slot (one
        /// word, read-write) follow the image's descriptor. Off when the server
        /// emulates slow memory (every read must pay for it) or the client gets no
        /// mapping.
        direct: bool,
        /// Whether the mailbox's descriptor comes last with this frame: calls go
        /// through it from now on.
        mailbox: bool,
        /// Words of the version table, whose descriptor (read-only) follows the
        /// epoch slot's when `direct`: word `ino` counts the changes of inode `ino`
        /// (see [`Request::Lookup`]).
        versions: u64,
        /// Where the file system's region starts in the image, bytes.
        region_offset: u64,
        /// Bytes of the region.
        region_len: u64,
        /// The server's process id.
        server_pid: u32,
    },
    /// Refused, with an errno (e.g. `EPROTO` for another protocol version).
    Refused(i32),
}

/// A call of the file system, made with the client's credentials. Descriptors are
/// those this connection opened; any other is `EBADF`.
// Each variant's documentation names its fields, most as the arguments of the call
// it carries (`pread(fd, len, off)`): a line on each field would say it again.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request<'a> {
    /// `open(path, flags, mode)` → [`Answer::Fd`].
    Open { path: String, flags: i32, mode: u32 },
    /// `close(fd)`.
    Close { fd: u32 },
    /// `read(fd, len)` at the descriptor's position → [`Answer::Data`].
    Read { fd: u32, len: u32 },
    /// `pread(fd, len, off)` → [`Answer::Data`].
    Pread { fd: u32, len: u32, off: u64 },
    /// `write(fd, data)` at the descriptor's position → [`Answer::Count`].
    Write {
        fd: u32,
        #[serde(borrow, with = "serde_bytes")]
        data: Cow<'a, [u8]>,
    },
    /// `pwrite(fd, data, off)` → [`Answer::Count`].
    Pwrite {
        fd: u32,
        #[serde(borrow, with = "serde_bytes")]
        data: Cow<'a, [u8]>,
        off: u64,
    },
    /// `lseek(fd, off, whence)` with the `SEEK_*` values → [`Answer::Count`].
    Lseek { fd: u32, off: i64, whence: i32 },
    /// `fsync(fd)`.
    Fsync { fd: u32 },
    /// `ftruncate(fd, len)`.
    Ftruncate { fd: u32, len: u64 },
    /// `fstat(fd)` → [`Answer::Stat`].
    Fstat { fd: u32 },
    /// `stat(path)` → [`Answer::Stat`].
    Stat { path: String },
    /// `lstat(path)` → [`Answer::Stat`].
    Lstat { path: String },
    /// `mkdir(path, mode)`.
    Mkdir { path: String, mode: u32 },
    /// `rmdir(path)`.
    Rmdir { path: String },
    /// `unlink(path)`.
    Unlink { path: String },
    /// `renameat2(old, new, flags)` (0, `RENAME_NOREPLACE` or `RENAME_EXCHANGE`).
    Rename {
        old: String,
        new: String,
        flags: u32,
    },
    /// `link(old, new)`.
    Link { old: String, new: String },
    /// `symlink(target, path)`.
    Symlink { target: String, path: String },
    /// `readlink(path)` → [`Answer::Text`].
    Readlink { path: String },
    /// `chmod(path, mode)`.
    Chmod { path: String, mode: u32 },
    /// `chown(path, uid, gid)`; `None` leaves one as it is.
    Chown {
        path: String,
        uid: Option<u32>,
        gid: Option<u32>,
    },
    /// `truncate(path, len)`.
    Truncate { path: String, len: u64 },
    /// The names of a directory → [`Answer::Entries`].
    Readdir { path: String },
    /// `statfs` → [`Answer::StatFs`].
    Statfs,
    /// What the server holds for this connection and in all → [`Answer::Status`].
    Status,
    /// The page table of open file `fd`, for direct reads → [`Answer::Table`] with
    /// the table's descriptor (`EOPNOTSUPP` when direct reads are off, `EBADF` for a
    /// descriptor not open for reading).
    Table { fd: u32 },
    /// `openat(dir, path, flags, mode)`: `dir` a directory descriptor of this
    /// connection, `None` the root (every `*at` request below reads `dir` so).
    Openat {
        dir: Option<u32>,
        path: String,
        flags: i32,
        mode: u32,
    },
    /// `fstatat(dir, path, flags)` → [`Answer::Stat`].
    Fstatat {
        dir: Option<u32>,
        path: String,
        flags: i32,
    },
    /// `faccessat(dir, path, mode, flags)`.
    Faccessat {
        dir: Option<u32>,
        path: String,
        mode: i32,
        flags: i32,
    },
    /// `mkdirat(dir, path, mode)`.
    Mkdirat {
        dir: Option<u32>,
        path: String,
        mode: u32,
    },
    /// `mknodat(dir, path, mode, rdev)`: a FIFO, socket, device (root only) or
    /// regular file, the kind from `mode`'s `S_IF*` bits.
    Mknodat {
        dir: Option<u32>,
        path: String,
        mode: u32,
        rdev: u64,
    },
    /// `unlinkat(dir, path, flags)`.
    Unlinkat {
        dir: Option<u32>,
        path: String,
        flags: i32,
    },
    /// `renameat2(old_dir, old, new_dir, new, flags)`.
    Renameat {
        old_dir: Option<u32>,
        old: String,
        new_dir: Option<u32>,
        new: String,
        flags: u32,
    },
    /// `linkat(old_dir, old, new_dir, new, flags)`.
    Linkat {
        old_dir: Option<u32>,
        old: String,
        new_dir: Option<u32>,
        new: String,
        flags: i32,
    },
    /// `symlinkat(target, dir, path)`.
    Symlinkat {
        target: String,
        dir: Option<u32>,
        path: String,
    },
    /// `readlinkat(dir, path)` → [`Answer::Text`].
    Readlinkat { dir: Option<u32>, path: String },
    /// `fchmodat(dir, path, mode, flags)`.
    Fchmodat {
        dir: Option<u32>,
        path: String,
        mode: u32,
        flags: i32,
    },
    /// `fchmod(fd, mode)`.
    Fchmod { fd: u32, mode: u32 },
    /// `fchownat(dir, path, uid, gid, flags)`; `None` leaves one as it is.
    Fchownat {
        dir: Option<u32>,
        path: String,
        uid: Option<u32>,
        gid: Option<u32>,
        flags: i32,
    },
    /// `fchown(fd, uid, gid)`.
    Fchown {
        fd: u32,
        uid: Option<u32>,
        gid: Option<u32>,
    },
    /// `utimensat(dir, path, atime, mtime, flags)`; `None` is `UTIME_OMIT`.
    Utimensat {
        dir: Option<u32>,
        path: String,
        atime: Option<Time>,
        mtime: Option<Time>,
        flags: i32,
    },
    /// `futimens(fd, atime, mtime)`.
    Futimens {
        fd: u32,
        atime: Option<Time>,
        mtime: Option<Time>,
    },
    /// `fallocate(fd, mode, off, len)`.
    Fallocate {
        fd: u32,
        mode: i32,
        off: u64,
        len: u64,
    },
    /// The entries of open directory `fd` after cookie `offset` → [`Answer::EntriesAt`],
    /// at most [`MAX_ENTRIES`] of them (ask again after the last one's cookie).
    ReaddirFd { fd: u32, offset: u64 },
    /// `getxattr` (`size` 0: how long the value is → [`Answer::Count`]; otherwise
    /// → [`Answer::Data`], `ERANGE` if longer than `size`).
    Getxattr { on: On, name: String, size: u32 },
    /// `setxattr(name, value, flags)`.
    Setxattr {
        on: On,
        name: String,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        flags: i32,
    },
    /// `listxattr` (`size` as for [`Request::Getxattr`]).
    Listxattr { on: On, size: u32 },
    /// `removexattr(name)`.
    Removexattr { on: On, name: String },
    /// Before a `fork` or an `exec`: keep descriptors `fds` of this connection
    /// open for the process that will adopt them (a child, or this process after
    /// `exec`) → [`Answer::Count`] with the token (unguessable). At most
    /// [`MAX_HANDOFFS`] of a process wait to be adopted (`EAGAIN`).
    Handoff { fds: Vec<u32> },
    /// The child a [`Request::Handoff`] was made for: from now on only it may adopt,
    /// and the server drops what it kept once it is gone (a `pid` that is not a child
    /// of this process is ignored); a negative `pid` gives the handoff up.
    Heir { token: u64, pid: i32 },
    /// An advisory lock on `[start, start + len)` (`len` 0: to the end of any file)
    /// of open file `fd`: set or cleared (`F_SETLK`; `EAGAIN` on a conflict), or
    /// with `test` the conflicting lock looked for (`F_GETLK` → [`Answer::Lock`]),
    /// owned by this process, the open file, or the open file's `flock`.
    Lock {
        fd: u32,
        test: bool,
        owner: LockOwner,
        kind: LockKind,
        start: u64,
        len: u64,
    },
    /// Adopts the descriptors kept by handoff `token`, under the same numbers →
    /// [`Answer::Fds`], the numbers adopted: only the heir named, or (none named
    /// yet) the process that made it (after an `exec`) or a child of it may.
    Adopt { token: u64 },
    /// A staging buffer of at least `len` bytes (see the `staging` module: at most
    /// 64 MiB, else `EINVAL`; 16 buffers and 256 MiB a connection, 1024 buffers and
    /// 2 GiB a server, else `ENOMEM`) → [`Answer::Staging`], with the buffer's
    /// descriptor.
    Staging { len: u64 },
    /// Gives staging buffer `id` back.
    DropStaging { id: u32 },
    /// Writes bytes `[at, at + len)` of staging buffer `id` to open file `fd`: at
    /// `off` as `pwrite`, or (`off` `None`) at the descriptor's position as `write`
    /// → [`Answer::Count`].
    WriteStaged {
        fd: u32,
        id: u32,
        at: u64,
        len: u64,
        off: Option<u64>,
    },
    /// Reads up to `len` bytes of open file `fd` into staging buffer `id` at `at`:
    /// from `off` as `pread`, or (`off` `None`) from the descriptor's position as
    /// `read` → [`Answer::Count`], the bytes read.
    ReadStaged {
        fd: u32,
        id: u32,
        at: u64,
        len: u64,
        off: Option<u64>,
    },
    /// Starts writing bytes `[at, at + len)` of staging buffer `id` to open file `fd`
    /// at `off`, as `pwrite` (EASYIO's orderless write across processes) → once the
    /// write is committed, [`Answer::Submitted`]: the bytes written and the SN of
    /// the copy if it still runs. The client leaves those bytes alone until the SN
    /// is done: it polls the SN's completion record in its read-only mapping of the
    /// image (`fs::layout::sn_progress_word`), or asks with [`Request::Settle`].
    SubmitStaged {
        fd: u32,
        id: u32,
        at: u64,
        len: u64,
        off: u64,
    },
    /// The copy of SN `sn` that a [`Request::SubmitStaged`] of this connection
    /// answered with: with `wait`, waits for it (and for the copies submitted before
    /// it); without, looks only → Done once it finished well (also for an SN this
    /// connection does not know), [`Answer::Running`] while it runs (without `wait`),
    /// or the errno it failed with.
    Settle { sn: u64, wait: bool },
    /// Looks `name` up in directory inode `dir` (`.` for the directory itself) as
    /// the client, for a client that resolves paths itself → [`Answer::Looked`] or
    /// [`Answer::NotThere`], each with the versions the answer holds at
    /// (`EOPNOTSUPP` for a client that does not read directly).
    Lookup { dir: u64, name: String },
    /// The client process changed its ids (`setuid`, `setgroups` and the like): the
    /// server takes its file-system user and group ids and its supplementary groups
    /// anew from the kernel (`/proc/PID/status`), keeping the umask → Done.
    Recredential,
}

/// Handoffs of one process that may wait to be adopted.
pub const MAX_HANDOFFS: usize = 64;

/// The most entries one [`Request::ReaddirFd`] answers.
pub const MAX_ENTRIES: usize = 1024;

/// What an extended-attribute request names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum On {
    /// A path, following a final symbolic link.
    Path(String),
    /// A path, a final symbolic link itself (`l*xattr`).
    Link(String),
    /// An open descriptor of this connection.
    Fd(u32),
}

/// The server's answer to one [`Request`].
// Each variant's documentation names its fields (as for `Request`).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// Done, nothing to return.
    Done,
    /// A new descriptor.
    Fd(u32),
    /// Bytes read (fewer than asked at the end of the file).
    Data(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Bytes written, or a new position.
    Count(u64),
    /// Attributes.
    Stat(Stat),
    /// A directory's names, sorted.
    Entries(Vec<DirEntry>),
    /// A symbolic link's target.
    Text(String),
    /// Blocks and inodes.
    StatFs(StatFs),
    /// The server's bookkeeping.
    Status(Status),
    /// A page table comes with this frame: the file's size, then one entry per page
    /// (see the server's `direct` module), `pages` of them.
    Table { ino: u64, pages: u64 },
    /// Descriptor numbers.
    Fds(Vec<u32>),
    /// The lock that conflicts, if any.
    Lock(Option<HeldLock>),
    /// Entries of a directory with their cookies.
    EntriesAt(Vec<DirEntryAt>),
    /// A staging buffer of `len` bytes comes with this answer, named `id`.
    Staging { id: u32, len: u64 },
    /// A write was committed: `count` bytes, whose copy runs until raw SN `sn` is
    /// done (0: finished already).
    Submitted { count: u64, sn: u64 },
    /// The copy asked about still runs.
    Running,
    /// Failed with this errno.
    Error(i32),
    /// A [`Request::Lookup`] found inode `ino`, with attributes `stat`. Holds while
    /// word `dir` of the version table is `dir_version` (the entry) and word `ino`
    /// is `version` (the attributes); [`UNSTABLE`] where it changed meanwhile.
    Looked {
        dir_version: u64,
        ino: u64,
        version: u64,
        stat: Stat,
    },
    /// A [`Request::Lookup`] failed with `errno`, which holds while word `dir` of
    /// the version table is `dir_version`.
    NotThere { dir_version: u64, errno: i32 },
}

/// What the server holds, as [`Request::Status`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Clients connected now, this one included.
    pub clients: u32,
    /// Descriptors this connection has open.
    pub open_here: u32,
    /// Descriptors all connections have open.
    pub open_total: u32,
}

/// Writes `msg` as one frame.
pub fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    w.write_all(&frame(msg)?)
}

/// `msg` encoded as one frame (length, then payload).
pub fn frame<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4];
    buf = postcard::to_extend(msg, buf).map_err(|e| io::Error::other(e.to_string()))?;
    let len = u32::try_from(buf.len() - 4)
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "message too long"))?;
    buf[..4].copy_from_slice(&len.to_le_bytes());
    Ok(buf)
}

/// An answer as one frame; one too long to be a frame (a directory of very many
/// names) becomes `EOVERFLOW`, so the connection goes on.
pub fn answer_frame(answer: &Answer) -> Vec<u8> {
    frame(answer)
        .or_else(|_| frame(&Answer::Error(libc::EOVERFLOW)))
        .expect("an errno fits a frame")
}

/// Reads one frame's payload; `Ok(None)` at a clean end of the stream (no byte of a
/// new frame), `InvalidData` for a length above [`MAX_FRAME`].
pub fn receive(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(payload(r, u32::from_le_bytes(len))?))
}

/// Reads the `len` bytes of a frame whose length was read.
pub fn payload(r: &mut impl Read, len: u32) -> io::Result<Vec<u8>> {
    let len = len as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes, more than {MAX_FRAME}"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// Decodes a payload; a payload that is not exactly one `T` is `None`.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    match postcard::take_from_bytes(bytes) {
        Ok((msg, [])) => Some(msg),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_its_frame() {
        let req = Request::Pwrite {
            fd: 3,
            data: vec![7; 10_000].into(),
            off: 1 << 40,
        };
        let bytes = frame(&req).unwrap();
        let payload = receive(&mut &bytes[..]).unwrap().unwrap();
        assert_eq!(decode::<Request>(&payload), Some(req));
    }

    #[test]
    fn trailing_bytes_or_a_cut_payload_do_not_decode() {
        let bytes = frame(&Request::Close { fd: 1 }).unwrap();
        let mut longer = bytes[4..].to_vec();
        longer.push(0);
        assert_eq!(decode::<Request>(&longer), None);
        assert_eq!(decode::<Request>(&bytes[4..bytes.len() - 1]), None);
    }

    #[test]
    fn an_oversized_frame_is_refused_before_it_is_read() {
        let len = (MAX_FRAME as u32 + 1).to_le_bytes();
        let err = receive(&mut &len[..]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(receive(&mut &[][..]).unwrap().is_none());
        assert_eq!(
            receive(&mut &[1u8, 0][..]).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
