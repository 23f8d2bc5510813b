//! The server: holds the image (the only process that may write it), listens on a
//! Unix socket, and answers each client on a thread of its own with the uid and gid
//! the kernel gives for the socket's peer (`SO_PEERCRED`).

use std::fs::File;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fs::{Cred, FileSystem};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use crate::conn::{Attached, Common, Conn};
use crate::direct::Direct;
use crate::error::{Error, Result};
use crate::mailbox::{self, Mailbox};
use crate::shm::Words;
use crate::wire::{self, Hello, Welcome};

/// How often the accept loop looks at the stop request.
const POLL: Duration = Duration::from_millis(50);
/// How long a new connection may take to greet.
const GREETING: Duration = Duration::from_secs(10);
/// Clients served at once (a thread, a socket, a mailbox and a slot each); more are
/// refused with `EAGAIN`.
const MAX_CLIENTS: usize = 1024;
/// How long a client's thread spins for its next call before it sleeps.
const SERVER_SPIN: Duration = Duration::from_micros(50);

/// A bound server.
pub struct Server {
    fs: Arc<FileSystem>,
    listener: UnixListener,
    socket: PathBuf,
    image: Arc<Image>,
    common: Arc<Common>,
    direct: Option<Arc<Direct>>,
}

/// The image as clients may map it.
struct Image {
    /// Opened read-only: what a client that may read the image file receives.
    file: File,
    /// Owner, group and mode of the image file, to decide who may receive it.
    meta: std::fs::Metadata,
    /// Where the region starts in the image.
    region_offset: u64,
    /// Bytes of the region.
    region_len: u64,
}

/// One client's connection: its socket (shut down to end it) and its thread.
struct Client {
    stream: UnixStream,
    thread: JoinHandle<()>,
}

impl Server {
    /// Listens on `socket` for clients of `fs`, the file system of `image`; with
    /// `direct`, clients that may read the image read file data from their mapping
    /// with no request. A stale socket left by a server that died is replaced; a
    /// live one is `EADDRINUSE`, anything else at that path `EEXIST`.
    pub fn bind(
        fs: Arc<FileSystem>,
        image: &Path,
        socket: &Path,
        allow_other: bool,
        direct: bool,
    ) -> Result<Server> {
        let file = File::open(image).map_err(|e| Error::os(format!("{}", image.display()), e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::os(format!("{}", image.display()), e))?;
        let image = Arc::new(Image {
            file,
            meta,
            region_offset: pmem::HEADER_LEN,
            region_len: fs.pmem().len(),
        });
        let direct = if direct {
            let d = Direct::new(fs.geometry().inodes);
            let d = Arc::new(d.map_err(|e| Error::os("shared memory", e))?);
            fs.set_external_readers(d.clone());
            fs.set_data_changes(d.clone());
            fs.set_inode_changes(d.clone());
            Some(d)
        } else {
            None
        };
        raise_open_file_limit();
        clear_stale(socket)?;
        let listener = UnixListener::bind(socket)
            .map_err(|e| Error::os(format!("socket {}", socket.display()), e))?;
        let mode = if allow_other { 0o666 } else { 0o600 };
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::os(format!("socket {}", socket.display()), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::os("socket", e))?;
        Ok(Server {
            fs,
            listener,
            socket: socket.to_path_buf(),
            image,
            common: Arc::default(),
            direct,
        })
    }

    /// Serves clients until `stop_requested` says so, then ends every connection
    /// (closing what each left open) and returns the file system.
    pub fn run(self, stop_requested: fn() -> bool) -> Result<Arc<FileSystem>> {
        self.run_until(|_| stop_requested(), false)
    }

    /// Serves clients until none has been connected for `idle` (counted from the
    /// start too): a server started on demand for the clients of one image, which
    /// ends with its last client. At the end the socket is removed first, then the
    /// connections already queued are served, so that a client never waits on a
    /// server that will not answer; a later client starts a new server.
    pub fn run_until_idle(self, idle: Duration) -> Result<Arc<FileSystem>> {
        let mut last_seen = std::time::Instant::now();
        self.run_until(
            move |clients| {
                if clients > 0 {
                    last_seen = std::time::Instant::now();
                }
                last_seen.elapsed() >= idle
            },
            true,
        )
    }

    /// Serves clients until `stop(number of clients connected)` says so; with
    /// `drain_late`, a client queued when an idle server stops is served first.
    fn run_until(
        self,
        mut stop: impl FnMut(usize) -> bool,
        drain_late: bool,
    ) -> Result<Arc<FileSystem>> {
        let mut clients: Vec<Client> = Vec::new();
        loop {
            clients.retain(|c| !c.thread.is_finished());
            if stop(clients.len()) {
                let _ = std::fs::remove_file(&self.socket);
                // An idle server serves a client that connected before the socket
                // went, to its end.
                match self.listener.accept() {
                    Ok((stream, _)) if clients.is_empty() && drain_late => {
                        if let Ok(c) = self.start(stream) {
                            let _ = c.thread.join();
                        }
                        continue;
                    }
                    _ => break,
                }
            }
            self.common.sweep(&self.fs);
            match self.listener.accept() {
                Ok((mut stream, _)) if clients.len() >= MAX_CLIENTS => {
                    let _ = wire::send(&mut stream, &Welcome::Refused(libc::EAGAIN));
                }
                Ok((stream, _)) => match self.start(stream) {
                    Ok(c) => clients.push(c),
                    // One client that cannot be served does not end the others.
                    Err(e) => eprintln!("easyio: starting a client: {e}"),
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_readable(&self.listener),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // E.g. EMFILE: say it, and let the clients that hold descriptors
                    // go before trying again.
                    eprintln!("easyio: accepting a client: {e}");
                    std::thread::sleep(POLL);
                }
            }
        }
        let _ = std::fs::remove_file(&self.socket);
        for c in &clients {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
        for c in clients {
            let _ = c.thread.join();
        }
        Ok(self.fs)
    }

    /// Starts the thread that answers the client on `stream`.
    fn start(&self, stream: UnixStream) -> Result<Client> {
        stream
            .set_nonblocking(false)
            .map_err(|e| Error::os("client socket", e))?;
        let ours = stream
            .try_clone()
            .map_err(|e| Error::os("client socket", e))?;
        let (fs, image, common) = (self.fs.clone(), self.image.clone(), self.common.clone());
        let direct = self.direct.clone();
        let thread = std::thread::Builder::new()
            .name("easyio-client".into())
            .spawn(move || {
                let shared = Shared {
                    fs: &fs,
                    image: &image,
                    common: &common,
                    direct: direct.as_deref(),
                };
                if let Err(e) = answer_client(&shared, stream) {
                    eprintln!("easyio: client ended: {e}");
                }
            })
            .map_err(|e| Error::os("starting a client thread", e))?;
        Ok(Client {
            stream: ours,
            thread,
        })
    }
}

/// What every connection of a server uses.
struct Shared<'a> {
    fs: &'a FileSystem,
    image: &'a Image,
    common: &'a Common,
    direct: Option<&'a Direct>,
}

/// A client's epoch slot, dropped from reclamation when the connection ends.
struct Slot<'a>(&'a Direct, Arc<Words>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.remove_slot(&self.1);
    }
}

/// Greets the client on `stream`, then answers its requests until it goes.
fn answer_client(sh: &Shared<'_>, mut stream: UnixStream) -> io::Result<()> {
    let peer = rustix::net::sockopt::socket_peercred(&stream)?;
    // A connection that never greets does not keep its place for long.
    stream.set_read_timeout(Some(GREETING))?;
    let Some(hello) = wire::receive(&mut stream)? else {
        return Ok(());
    };
    stream.set_read_timeout(None)?;
    let hello = match wire::decode::<Hello>(&hello) {
        Some(h) if h.version == wire::VERSION => h,
        _ => return wire::send(&mut stream, &Welcome::Refused(libc::EPROTO)),
    };
    let cred = Cred {
        uid: peer.uid.as_raw(),
        gid: peer.gid.as_raw(),
        groups: peer_groups(&stream)
            .unwrap_or_else(|| groups(peer.pid.as_raw_nonzero().get() as u32)),
        umask: hello.umask & 0o777,
    };
    let mapped = may_read(&sh.image.meta, &cred);
    let slot = match sh.direct {
        Some(d) if mapped => Some(Slot(d, d.add_slot()?)),
        _ => None,
    };
    let mailbox = match hello.mailbox {
        true => Some(Mailbox::create()?),
        false => None,
    };
    welcome(&stream, sh, mapped, slot.as_ref(), mailbox.as_ref())?;
    let mut conn = Conn::new(sh.fs, cred, sh.common, sh.direct);
    conn.pid = peer.pid.as_raw_nonzero().get() as u32;
    // Only a client given the image (and an epoch slot) reads it: page tables and the
    // SNs of submitted writes are for it alone.
    conn.reads_directly = slot.is_some();
    if let Some(m) = mailbox {
        return answer_mailbox(&mut conn, &m, &stream);
    }
    loop {
        // Submitted writes are finished before this thread blocks on the socket.
        conn.settle_all();
        let Some(payload) = wire::receive(&mut stream)? else {
            break;
        };
        let (answer, attached) = conn.answer_bytes(&payload);
        let bytes = wire::answer_frame(&answer);
        match attached.fd() {
            Some(fd) => send_with(&stream, &bytes, &[fd])?,
            None => io::Write::write_all(&mut stream, &bytes)?,
        }
    }
    Ok(())
}

/// Answers the calls a client posts in its mailbox until it goes (its socket ends).
fn answer_mailbox(conn: &mut Conn<'_>, m: &Mailbox, bell: &UnixStream) -> io::Result<()> {
    let mut ignored = Vec::new();
    // One buffer for every request of the connection: a request costs no allocation.
    let mut request = Vec::new();
    loop {
        if !m.spin(mailbox::POSTED, SERVER_SPIN) {
            // Nothing of the client's runs on while this thread sleeps: its
            // submitted writes are finished and published first.
            conn.settle_all();
            match m.sleep(mailbox::POSTED, bell, &mut ignored) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                r => r?,
            }
        }
        ignored.clear();
        let (answer, attached) = match m.take_into(&mut request) {
            true => conn.answer_bytes(&request),
            false => (wire::Answer::Error(libc::EMSGSIZE), Attached::Nothing),
        };
        let fd = attached.fd();
        if let Some(fd) = fd {
            mailbox::send_fds(bell, &[fd])?;
        }
        match m.post(&answer, mailbox::ANSWERED, fd.is_some(), bell) {
            // An answer too long for the mailbox (a directory of very many names).
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => m.post(
                &wire::Answer::Error(libc::EOVERFLOW),
                mailbox::ANSWERED,
                fd.is_some(),
                bell,
            )?,
            r => r?,
        }
    }
}

/// Sends the welcome, with the image's read-only descriptor if `mapped`, the
/// published epoch and the client's epoch slot if it reads directly, and its
/// mailbox if it asked for one.
fn welcome(
    stream: &UnixStream,
    sh: &Shared<'_>,
    mapped: bool,
    slot: Option<&Slot<'_>>,
    mailbox: Option<&Mailbox>,
) -> io::Result<()> {
    let bytes = wire::frame(&Welcome::Accepted {
        version: wire::VERSION,
        mapped,
        direct: slot.is_some(),
        mailbox: mailbox.is_some(),
        versions: slot.map_or(0, |s| s.0.versions().len() as u64),
        region_offset: sh.image.region_offset,
        region_len: sh.image.region_len,
        server_pid: std::process::id(),
    })?;
    let mut fds = Vec::new();
    if mapped {
        fds.push(sh.image.file.as_fd());
    }
    if let Some(s) = slot {
        fds.extend(s.0.epoch().fd().map(|f| f.as_fd()));
        fds.extend(s.1.fd().map(|f| f.as_fd()));
        fds.extend(s.0.versions().fd().map(|f| f.as_fd()));
    }
    fds.extend(mailbox.map(|m| m.fd().as_fd()));
    send_with(stream, &bytes, &fds)
}

/// Sends a frame with descriptors attached to its first byte.
fn send_with(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(5))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("no room for the descriptors"));
    }
    let mut sent = rustix::net::sendmsg(
        stream,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    while sent < bytes.len() {
        sent += rustix::net::send(stream, &bytes[sent..], SendFlags::NOSIGNAL)?;
    }
    Ok(())
}

/// Whether `cred` may read the image file itself (so giving it a read-only mapping of
/// the whole image shows it nothing it could not read anyway).
fn may_read(meta: &std::fs::Metadata, cred: &Cred) -> bool {
    let mode = meta.mode();
    cred.is_root()
        || if cred.uid == meta.uid() {
            mode & 0o400 != 0
        } else if cred.in_group(meta.gid()) {
            mode & 0o040 != 0
        } else {
            mode & 0o004 != 0
        }
}

/// `SO_PEERGROUPS` of Linux's `asm-generic/socket.h` (x86-64, arm64; the `libc`
/// crate does not export it for these targets).
const SO_PEERGROUPS: libc::c_int = 59;

/// The supplementary groups of the socket's peer as the kernel took them when it
/// connected (`SO_PEERGROUPS`, Linux 4.13); `None` where the kernel does not say.
fn peer_groups(stream: &UnixStream) -> Option<Vec<u32>> {
    use std::os::fd::AsRawFd;
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `groups`, a live buffer of
        // exactly that many bytes, and the new length into `len`.
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        match rc {
            0 => {
                groups.truncate(n);
                return Some(groups);
            }
            _ if io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE)
                && n > groups.len() =>
            {
                groups.resize(n, 0)
            }
            _ => return None,
        }
    }
}

/// The supplementary groups of process `pid` (none if it cannot be read), where the
/// socket does not say them.
fn groups(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|n| n.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// Waits until a client knocks on `listener`, or [`POLL`] passes (to look at the stop
/// request).
fn wait_readable(listener: &UnixListener) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(listener, PollFlags::IN)];
    let timeout = Timespec {
        tv_sec: 0,
        tv_nsec: POLL.as_nanos() as i64,
    };
    let _ = poll(&mut fds, Some(&timeout));
}

/// Raises this process's soft limit of open descriptors to its hard limit: the server
/// holds a socket, a mailbox and an epoch slot per client and a page table per file
/// read directly, and a client refused for want of descriptors gets an error.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            eprintln!("easyio: raising the open file limit: {e}");
        }
    }
}

/// Removes a socket at `path` that no server answers; refuses a live one or a file
/// that is not a socket.
fn clear_stale(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let what = || format!("socket {}", path.display());
    if !meta.file_type().is_socket() {
        return Err(Error::os(
            what(),
            io::Error::from_raw_os_error(libc::EEXIST),
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(Error::os(
            format!("{}: a server already listens there", what()),
            io::Error::from_raw_os_error(libc::EADDRINUSE),
        )),
        Err(_) => std::fs::remove_file(path).map_err(|e| Error::os(what(), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peers_groups_come_from_the_socket() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut mine = groups(std::process::id());
        let mut said = peer_groups(&a).expect("SO_PEERGROUPS on this kernel");
        mine.sort_unstable();
        said.sort_unstable();
        assert_eq!(said, mine);
    }

    #[test]
    fn who_may_receive_the_image() {
        let dir = std::env::temp_dir().join(format!("easyio-serve-perm-{}", std::process::id()));
        std::fs::write(&dir, b"x").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o640)).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        let owner = Cred::user(meta.uid(), 12345);
        let group = Cred::user(54321, meta.gid());
        let other = Cred::user(54321, 12345);
        assert!(may_read(&meta, &Cred::root()));
        assert!(may_read(&meta, &owner) || meta.uid() == 0);
        assert!(may_read(&meta, &group) || meta.gid() == 12345);
        assert!(!may_read(&meta, &other));
    }
}
