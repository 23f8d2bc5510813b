//! The request ring of one client: a mailbox of shared memory both the client and its
//! server thread map, holding one request or one answer at a time (a client makes
//! its calls one after the other), so that a call costs no system call while both
//! sides are busy.
//!
//! The client writes a request frame's payload, then sets the state to [`POSTED`];
//! the server thread copies the payload out (the client could change it meanwhile),
//! answers into the same place and sets [`ANSWERED`]; the client copies the answer
//! out, and the next request follows. The state, the payload's length and whether
//! descriptors came with an answer share one word, written with one store: a message
//! moves that word's cache line between the two cores once each way. A side that has
//! nothing to do spins for a
//! moment, then says it sleeps (its `sleeps` word) and blocks reading the connection's
//! socket; the other side, seeing that word, rings it awake with one byte on the
//! socket. The socket also tells each side that the other is gone: a sleeping reader
//! of it gets the end of the stream.
//!
//! Descriptors an answer carries (`SCM_RIGHTS`) go over the socket before the answer
//! is set, and the answer says so: only then does the client read the socket, so that
//! a call with nothing on the socket makes no system call.
//!
//! Layout: word 0 the message (bits 0–1 the state, 0 before the first request, bit 2 whether descriptors came,
//! bits 32–63 the payload's length), word 2 whether the client sleeps, word 3 whether
//! the server sleeps; the payload from byte [`DATA`] on.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags};

use crate::shared::{Encoder, SharedBytes};
use crate::wire::MAX_FRAME;

/// A request waits for the server.
pub const POSTED: u64 = 1;
/// An answer waits for the client.
pub const ANSWERED: u64 = 2;
/// Where the payload starts.
pub const DATA: usize = 64;
/// Bytes of a mailbox.
pub const BYTES: usize = DATA + MAX_FRAME;

/// How long a wait spins without giving its core away.
const PURE_SPIN: Duration = Duration::from_micros(2);
/// Looks at the state between looks at the clock, on a core of its own.
const LOOKS_PER_CLOCK: u32 = 64;
/// A yield that takes this long ran another thread meanwhile.
const RAN_ANOTHER: Duration = Duration::from_micros(1);

const MESSAGE: usize = 0;
const CLIENT_SLEEPS: usize = 2;
const SERVER_SLEEPS: usize = 3;

/// The state's bits of the message word.
const STATE_BITS: u64 = 0b11;
/// The message word's bit saying descriptors came with the answer.
const FDS_CAME: u64 = 0b100;

/// Which side of the mailbox this process is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Posts requests, waits for answers.
    Client,
    /// Waits for requests, posts answers.
    Server,
}

/// A mapped mailbox.
pub struct Mailbox {
    /// The mapping: its words and payload reached as [`crate::shared`] says.
    bytes: SharedBytes,
    fd: OwnedFd,
    side: Side,
    /// Whether this side's last yield ran another thread: its core is shared, maybe
    /// with the other side, so its waits give the core away at once.
    crowded: std::sync::atomic::AtomicBool,
}

impl Mailbox {
    /// A new mailbox (the server makes it and sends its descriptor to the client).
    /// Sealed against resizing: a client that shrank it would make the server's next
    /// access fault.
    pub fn create() -> io::Result<Mailbox> {
        let fd = crate::shm::sealable("easyio-mailbox", BYTES)?;
        crate::shm::seal(&fd, true)?;
        Mailbox::map(fd, Side::Server)
    }

    /// Maps the mailbox `fd` as `side`.
    pub fn map(fd: OwnedFd, side: Side) -> io::Result<Mailbox> {
        Ok(Mailbox {
            bytes: SharedBytes::map(&fd, BYTES, true)?,
            fd,
            side,
            crowded: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The descriptor, to send to the client.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        self.bytes
            .word(i)
            .expect("the words lie before the payload")
    }

    /// Copies the payload out: `None` if its length is past the mailbox.
    pub fn take(&self) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        self.take_into(&mut buf).then_some(buf)
    }

    /// Copies the payload into `buf` (replacing what it held, keeping its capacity
    /// for the next call); `false` if its length is past the mailbox.
    pub fn take_into(&self, buf: &mut Vec<u8>) -> bool {
        let len = (self.word(MESSAGE).load(Ordering::SeqCst) >> 32) as usize;
        if len > MAX_FRAME {
            return false;
        }
        // The other side may store into the payload meanwhile (it breaks only its
        // own call): the copy is then of whatever bytes were there.
        self.bytes.read_into(DATA, len, buf)
    }

    /// Whether descriptors came with the answer just taken (the client's look).
    pub fn fds_came(&self) -> bool {
        self.word(MESSAGE).load(Ordering::SeqCst) & FDS_CAME != 0
    }

    /// Encodes `msg` straight into the mailbox and sets the state to `state` (the
    /// client's [`POSTED`] request, the server's [`ANSWERED`] answer, saying whether
    /// descriptors went over the socket for it: `fds_sent`), ringing the other side
    /// if it sleeps. The side whose turn it is owns the payload: the other does not
    /// touch it until the state says so (a client that does anyway breaks only its
    /// own call). A message too long for the mailbox is `InvalidInput`.
    pub fn post<T: serde::Serialize>(
        &self,
        msg: &T,
        state: u64,
        fds_sent: bool,
        bell: &UnixStream,
    ) -> io::Result<()> {
        // Encoded straight into the payload, which is this side's until the state
        // store below.
        let len = postcard::serialize_with_flavor(msg, Encoder::new(&self.bytes, DATA, BYTES))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let fds = if fds_sent { FDS_CAME } else { 0 };
        self.word(MESSAGE)
            .store((len as u64) << 32 | fds | state, Ordering::SeqCst);
        let peer = match self.side {
            Side::Client => SERVER_SLEEPS,
            Side::Server => CLIENT_SLEEPS,
        };
        if self.word(peer).load(Ordering::SeqCst) != 0 {
            ring(bell)?;
        }
        Ok(())
    }

    /// The state part of the message word.
    fn state(&self) -> u64 {
        self.word(MESSAGE).load(Ordering::SeqCst) & STATE_BITS
    }

    /// Waits until the state is `want`: spins for `spin`, then sleeps on the socket
    /// until rung. Descriptors that come over the socket meanwhile are added to
    /// `fds`. Fails (`UnexpectedEof`) once the other side is gone.
    pub fn wait(
        &self,
        want: u64,
        spin: Duration,
        bell: &UnixStream,
        fds: &mut Vec<OwnedFd>,
    ) -> io::Result<()> {
        match self.spin(want, spin) {
            true => Ok(()),
            false => self.sleep(want, bell, fds),
        }
    }

    /// The spinning part of [`Mailbox::wait`]: whether the state became `want`
    /// within `spin`.
    pub fn spin(&self, want: u64, spin: Duration) -> bool {
        let t0 = Instant::now();
        let mut n = 0u32;
        while self.state() != want {
            n = n.wrapping_add(1);
            // A crowded core looks at the clock (and yields) at every turn: the other
            // side may be waiting for this core, and each turn spent spinning delays
            // it (two client processes on 2 cores create about 1.7x faster so).
            let every = match self.crowded.load(Ordering::Relaxed) {
                true => 1,
                false => LOOKS_PER_CLOCK,
            };
            if n.is_multiple_of(every) {
                let waited = t0.elapsed();
                if waited >= spin {
                    return false;
                }
                // Past a first moment — at once if the last yield ran another thread
                // — give the core away while spinning: on a machine with fewer cores
                // than busy threads, the other side may be waiting for this one.
                if waited >= PURE_SPIN || self.crowded.load(Ordering::Relaxed) {
                    let y = Instant::now();
                    std::thread::yield_now();
                    self.crowded
                        .store(y.elapsed() >= RAN_ANOTHER, Ordering::Relaxed);
                }
            }
            std::hint::spin_loop();
        }
        true
    }

    /// The sleeping part of [`Mailbox::wait`]: says it sleeps, then blocks on the
    /// socket until the state is `want`.
    pub fn sleep(&self, want: u64, bell: &UnixStream, fds: &mut Vec<OwnedFd>) -> io::Result<()> {
        let mine = match self.side {
            Side::Client => CLIENT_SLEEPS,
            Side::Server => SERVER_SLEEPS,
        };
        let flag = self.word(mine);
        flag.store(1, Ordering::SeqCst);
        let r = loop {
            if self.state() == want {
                break Ok(());
            }
            if let Err(e) = listen(bell, fds, true) {
                break Err(e);
            }
        };
        flag.store(0, Ordering::SeqCst);
        r
    }
}

/// Rings the other side: one byte on the socket.
fn ring(bell: &UnixStream) -> io::Result<()> {
    rustix::net::send(bell, &[1], SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Takes every byte on the socket (and any descriptors, into `fds`), first blocking
/// until something arrives if `block`; `UnexpectedEof` at the end of the stream.
pub fn listen(bell: &UnixStream, fds: &mut Vec<OwnedFd>, block: bool) -> io::Result<()> {
    let mut flags = RecvFlags::CMSG_CLOEXEC;
    if !block {
        flags |= RecvFlags::DONTWAIT;
    }
    loop {
        let mut buf = [0u8; 64];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = match rustix::net::recvmsg(
            bell.as_fd(),
            &mut [io::IoSliceMut::new(&mut buf)],
            &mut control,
            flags,
        ) {
            Ok(r) => r.bytes,
            Err(rustix::io::Errno::AGAIN) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(sent) = msg {
                fds.extend(sent);
            }
        }
        if got == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        // Then take whatever else is there without blocking.
        flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
    }
}

/// Sends descriptors over the socket with one byte (which also rings).
pub fn send_fds(bell: &UnixStream, fds: &[std::os::fd::BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    if !control.push(rustix::net::SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("no room for the descriptors"));
    }
    rustix::net::sendmsg(
        bell,
        &[io::IoSlice::new(&[1])],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}
