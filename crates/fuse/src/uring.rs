//! FUSE over io_uring (Linux 6.14 and later, the `fuse` module's `enable_uring`): the
//! kernel places each request in buffers this server registered, one queue per CPU
//! (a request goes to the queue of the CPU its caller runs on), and takes the reply
//! back from the same buffers with the command that also waits for the next request.
//!
//! Each queue is an io_uring of 128-byte submission entries served by one thread
//! pinned to the queue's CPU. Where every reply is sent from that thread (handlers that
//! answer before they return), it is the ring's only issuer
//! (`IORING_SETUP_SINGLE_ISSUER`) and runs the ring's task work (the kernel's copy of a
//! request into the entry) only when it waits for completions
//! (`IORING_SETUP_DEFER_TASKRUN`): no signal-like interruption of the thread per
//! request. Where replies come later from other threads (uthread handlers), those
//! threads submit them themselves, as handing each to the queue's thread costs a
//! wake-up more. Each of its ring entries has a header buffer (the
//! request's `fuse_in_header`, its operation's own header, and the entry's
//! `commit_id` and payload size) and a payload buffer (names and data), registered
//! with `FUSE_IO_URING_CMD_REGISTER` on the `/dev/fuse` descriptor; a reply goes back
//! with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`. Forgets and interrupts still come
//! through `/dev/fuse`, as do the requests sent before every queue is registered.
//!
//! The request is handed to `fuser`'s dispatcher as a read of `/dev/fuse` would give
//! it: the headers and the payload laid out one after the other. A small payload is
//! copied beside the headers (into a buffer the queue's thread reuses); a large one
//! (a write's data) is read where the kernel put it, with the headers copied just
//! before it, and the reply waits until the handler has returned before it is
//! written into the payload buffer. A request that was copied leaves the payload
//! buffer free: a read's handler fills it directly ([`reply_buffer`]), and the reply,
//! already in place, is not copied again.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use fuser::{Dispatcher, Filesystem, ReplySink, Transport};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use parking_lot::Mutex;

/// `FUSE_IO_URING_CMD_REGISTER` (include/uapi/linux/fuse.h, `enum fuse_uring_cmd`).
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// Size of `struct fuse_in_header`.
const IN_HEADER: usize = 40;
/// Size of `struct fuse_out_header`.
const OUT_HEADER: usize = 16;
/// Offset of `op_in` in `struct fuse_uring_req_header` (after `in_out[128]`).
const OP_IN: usize = 128;
/// Size of `op_in`.
const OP_IN_SIZE: usize = 128;
/// Offset of `ring_ent_in_out` (`flags`, `commit_id`, `payload_sz`, `padding`,
/// `reserved`) in `struct fuse_uring_req_header`.
const ENT_IN_OUT: usize = 256;
/// Size of `struct fuse_uring_req_header`.
const REQ_HEADER: usize = 288;
/// Bytes of an entry's memory before its payload: the header buffer's page, then a
/// page into whose end a large request's headers are copied.
const PAYLOAD_OFFSET: usize = 2 * PAGE;
/// The page size the buffers are laid out by (the kernel's on every Linux this runs on
/// is at most this, and the buffers need no more alignment than a page).
const PAGE: usize = 4096;
/// Payloads up to this size (names, short values) are copied beside the request's
/// headers; a write of a page or more is read in place (copying a 4 KiB write's data
/// cost its round trip about 0.4 µs more than holding its reply).
const SMALL_PAYLOAD: usize = PAGE - 1;
/// `user_data` of the read of the queue's eventfd, which completes when another
/// thread wakes the queue's (a reply to submit, or the transport stopping).
const WAKE: u64 = u64::MAX;

/// Which transport the mount uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TransportChoice {
    /// FUSE over io_uring where the kernel offers it, `/dev/fuse` otherwise.
    #[default]
    Auto,
    /// FUSE over io_uring; mounting fails if the kernel does not grant it.
    Uring,
    /// Reads of `/dev/fuse` only.
    Dev,
}

impl std::str::FromStr for TransportChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(TransportChoice::Auto),
            "uring" | "io_uring" => Ok(TransportChoice::Uring),
            "dev" | "dev-fuse" => Ok(TransportChoice::Dev),
            x => Err(format!("unknown transport `{x}` (auto, uring, dev)")),
        }
    }
}

/// The `fuse` module's switch for FUSE over io_uring.
pub(crate) const URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether the kernel offers FUSE over io_uring to new mounts: `Some(true)` when the
/// module's switch is on, `Some(false)` when it is off, `None` when the kernel has none.
pub fn kernel_offers_uring() -> Option<bool> {
    std::fs::read_to_string(URING_PARAMETER)
        .ok()
        .map(|s| s.trim() == "Y")
}

/// The number of queues the kernel expects: one per possible CPU (the highest number
/// in `/sys/devices/system/cpu/possible`, plus one).
pub(crate) fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    text.trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max()
        .map_or_else(crate::default_threads, |m| m + 1)
}

/// What a FUSE-over-io_uring transport did, for inspection while the mount runs.
#[derive(Debug, Default)]
pub struct RingStats {
    ready: AtomicBool,
    requests: AtomicU64,
    replies_in_place: AtomicU64,
}

impl RingStats {
    /// Whether every queue's entries are registered (from then on the kernel sends
    /// requests through the rings; before, through `/dev/fuse`).
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Requests served through the rings so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Replies whose data a handler put straight into its entry's payload buffer (a
    /// read's), so far.
    pub fn replies_in_place(&self) -> u64 {
        self.replies_in_place.load(Ordering::Relaxed)
    }
}

/// Serves FUSE over io_uring: one queue per possible CPU, each with `depth` entries.
pub struct UringTransport {
    stats: Arc<RingStats>,
    device: OwnedFd,
    max_payload: usize,
    depth: usize,
    /// Replies are sent from other threads than the queues' (see [`Self::late_replies`]).
    late_replies: bool,
    queues: Vec<Arc<Queue>>,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl UringTransport {
    /// A transport for the connection of `device` (a descriptor of the mount's
    /// `/dev/fuse`), with payload buffers of `max_payload` bytes and `depth` entries
    /// per queue.
    pub fn new(device: OwnedFd, max_payload: usize, depth: usize) -> UringTransport {
        UringTransport {
            stats: Arc::default(),
            device,
            max_payload,
            depth: depth.max(1),
            late_replies: false,
            queues: Vec::new(),
            threads: Vec::new(),
        }
    }

    /// Says whether handlers reply after they return, from other threads (uthread
    /// handlers): then those threads submit their replies, and the queues' threads are
    /// not their rings' only issuers.
    pub fn late_replies(mut self, late: bool) -> UringTransport {
        self.late_replies = late;
        self
    }

    /// Entries of each queue.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Its counters.
    pub fn stats(&self) -> Arc<RingStats> {
        self.stats.clone()
    }
}

impl<FS: Filesystem> Transport<FS> for UringTransport {
    fn start(&mut self, dispatcher: Dispatcher<FS>) -> io::Result<()> {
        let (tx, rx) = mpsc::channel();
        for qid in 0..possible_cpus() {
            let q = Arc::new(Queue::new(
                qid,
                self.device.as_raw_fd(),
                self.depth,
                self.max_payload,
                !self.late_replies,
                self.stats.clone(),
            )?);
            self.queues.push(q.clone());
            let (d, tx) = (dispatcher.clone(), tx.clone());
            let t = std::thread::Builder::new()
                .name(format!("fuse-ring-{qid}"))
                .spawn(move || q.serve(&d, &tx))?;
            self.threads.push(t);
        }
        drop(tx);
        // Every queue says whether its entries were registered.
        let mut first_error = None;
        for _ in 0..self.threads.len() {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(io::Error::other("a ring thread ended"));
                }
            }
        }
        match first_error {
            None => {
                self.stats.ready.store(true, Ordering::SeqCst);
                Ok(())
            }
            Some(e) => {
                let _ = <Self as Transport<FS>>::stop(self);
                eprintln!(
                    "easyio: FUSE over io_uring did not start ({e}); serving through /dev/fuse"
                );
                Err(e)
            }
        }
    }

    fn stop(&mut self) -> io::Result<()> {
        for q in &self.queues {
            q.stopping.store(true, Ordering::SeqCst);
            q.wake();
        }
        let mut result = Ok(());
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = result.and(Err(e)),
                Err(_) => result = result.and(Err(io::Error::other("ring thread panicked"))),
            }
        }
        self.queues.clear();
        result
    }
}

/// One queue: its ring, its entries, and the lock its submissions take.
struct Queue {
    qid: u16,
    device: i32,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Taken to push submissions (from the queue's thread and repliers on others;
    /// only the queue's thread submits them to the kernel).
    submit: Mutex<()>,
    entries: Box<[Entry]>,
    stopping: AtomicBool,
    stats: Arc<RingStats>,
    /// The queue's thread is the ring's only issuer: replies from other threads are
    /// handed to it (through `wake_fd`).
    single_issuer: bool,
    /// Written by another thread to wake the queue's.
    wake_fd: OwnedFd,
    /// Where the ring's read of `wake_fd` puts the count (never looked at).
    wake_count: AtomicU64,
}

/// A ring entry's buffers (memory the kernel writes requests into and reads replies
/// from) and its state.
struct Entry {
    /// Start of the entry's mapping: the header buffer.
    base: *mut u8,
    /// Length of the mapping.
    len: usize,
    /// The two buffers as registered (kept here: the kernel reads them at
    /// registration).
    iov: [libc::iovec; 2],
    max_payload: usize,
    state: Mutex<EntryState>,
}

// SAFETY: the mapping is owned by the entry and only touched through `state`'s
// protocol (see `EntryState`); the raw pointers are what makes it `!Send`.
unsafe impl Send for Entry {}
// SAFETY: as above: writes to the buffers happen under `state`'s lock or on the
// queue's thread while the kernel holds no request in the entry.
unsafe impl Sync for Entry {}

/// Who may write an entry's buffers.
#[derive(Default)]
struct EntryState {
    /// The request's unique id (the `commit_id` its reply is committed with).
    unique: u64,
    /// The handler is running on a request read in place from the payload buffer:
    /// a reply must wait (in `stash`) until it has returned.
    in_place: bool,
    /// A reply sent while the handler of an in-place request was running (its
    /// allocation kept from one request to the next).
    stash: Vec<u8>,
    /// `stash` holds a reply.
    stashed: bool,
    /// The reply was sent (by the handler or after it).
    replied: bool,
}

impl Drop for Entry {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` are the mapping `Entry::new` made; the ring that
        // registered it was closed before the queue (and so the entry) is dropped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl Entry {
    fn new(max_payload: usize) -> io::Result<Entry> {
        let len = PAYLOAD_OFFSET + max_payload.div_ceil(PAGE) * PAGE;
        // SAFETY: an anonymous private mapping of `len` bytes; its pages are zero and
        // committed only when touched (the payload buffer is as large as the largest
        // request the kernel may send, most requests touch a page of it).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        let iov = [
            libc::iovec {
                iov_base: base.cast(),
                iov_len: REQ_HEADER,
            },
            libc::iovec {
                // SAFETY: within the mapping (`PAYLOAD_OFFSET` < `len`).
                iov_base: unsafe { base.add(PAYLOAD_OFFSET) }.cast(),
                iov_len: max_payload,
            },
        ];
        Ok(Entry {
            base,
            len,
            iov,
            max_payload,
            state: Mutex::new(EntryState::default()),
        })
    }

    /// Reads `n` bytes of the header buffer at `off`.
    fn header(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= REQ_HEADER);
        // SAFETY: within the header buffer; the kernel wrote it before it posted the
        // completion this is called for, and writes it again only after a commit.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), out.as_mut_ptr(), out.len()) };
    }

    fn header_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.header(off, &mut b);
        u64::from_ne_bytes(b)
    }

    fn header_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.header(off, &mut b);
        u32::from_ne_bytes(b)
    }

    /// Writes a reply (`fuse_out_header` then its arguments, as `data` lays them out)
    /// into the buffers: the header into `in_out`, the rest into the payload, its
    /// size into `payload_sz`. Called with the entry's lock held, while no handler
    /// reads the payload buffer. A slice that is already where it goes (a read's data
    /// that its handler put in the payload buffer) is not copied; says whether there
    /// was one.
    fn write_reply(&self, data: &[IoSlice<'_>]) -> bool {
        let total: usize = data.iter().map(|d| d.len()).sum();
        if total < OUT_HEADER || total - OUT_HEADER > self.max_payload {
            let unique = self.header_u64(ENT_IN_OUT + 8);
            self.write_error(libc::EIO, unique);
            return false;
        }
        let (mut at, mut in_place) = (0usize, false);
        for d in data {
            let head = OUT_HEADER.saturating_sub(at).min(d.len());
            // SAFETY: `at + head` <= 16 bytes of `in_out`; the rest at `at + head - 16`
            // within the payload buffer (`total - 16` <= `max_payload`). A source that
            // is not its destination does not overlap it: the handlers' buffers are
            // their own, and only a read's handler writes into the payload buffer
            // (`reply_buffer`), from its start, where its data goes.
            unsafe {
                std::ptr::copy_nonoverlapping(d.as_ptr(), self.base.add(at), head);
                let payload = self.base.add(PAYLOAD_OFFSET + at + head - OUT_HEADER);
                let rest = d.as_ptr().add(head);
                if std::ptr::eq(rest, payload) {
                    in_place |= d.len() > head;
                } else {
                    std::ptr::copy_nonoverlapping(rest, payload, d.len() - head);
                }
            }
            at += d.len();
        }
        self.set_payload_size(total - OUT_HEADER);
        in_place
    }

    /// Writes an error reply with no payload.
    fn write_error(&self, errno: i32, unique: u64) {
        let mut h = [0u8; OUT_HEADER];
        h[..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&(-errno).to_ne_bytes());
        h[8..].copy_from_slice(&unique.to_ne_bytes());
        // SAFETY: the first 16 bytes of the header buffer (`in_out`).
        unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), self.base, OUT_HEADER) };
        self.set_payload_size(0);
    }

    fn set_payload_size(&self, n: usize) {
        let b = (n as u32).to_ne_bytes();
        // SAFETY: `payload_sz` of `ring_ent_in_out`, within the header buffer.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.base.add(ENT_IN_OUT + 16), 4) };
    }
}

impl Queue {
    fn new(
        qid: usize,
        device: i32,
        depth: usize,
        max_payload: usize,
        single_issuer: bool,
        stats: Arc<RingStats>,
    ) -> io::Result<Queue> {
        let mut builder = IoUring::<squeue::Entry128, cqueue::Entry>::builder();
        builder.setup_cqsize(2 * depth as u32 + 2);
        if single_issuer {
            // Enabled by the queue's thread, which becomes its only issuer.
            builder
                .setup_single_issuer()
                .setup_defer_taskrun()
                .setup_r_disabled();
        }
        let ring = builder.build(depth as u32 + 1)?;
        // Blocking: the ring's read of it waits (a non-blocking one would fail).
        let wake_fd = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)?;
        let entries = (0..depth)
            .map(|_| Entry::new(max_payload))
            .collect::<io::Result<Vec<_>>>()?
            .into_boxed_slice();
        Ok(Queue {
            qid: u16::try_from(qid).map_err(|_| io::Error::other("too many CPUs"))?,
            device,
            ring,
            submit: Mutex::new(()),
            entries,
            stopping: AtomicBool::new(false),
            stats,
            single_issuer,
            wake_fd,
            wake_count: AtomicU64::new(0),
        })
    }

    /// The queue's thread: registers the entries, says so on `ready`, then serves
    /// requests until every entry has ended (the connection is gone) or it is woken
    /// to stop.
    fn serve<FS: Filesystem>(
        self: Arc<Self>,
        d: &Dispatcher<FS>,
        ready: &mpsc::Sender<io::Result<()>>,
    ) -> io::Result<()> {
        pin_to_cpu(self.qid as usize);
        ON_QUEUE_THREAD.with(|q| q.set(Arc::as_ptr(&self) as usize));
        // Requests may already have come while the entries were registered.
        let mut done = match self.enable().and_then(|()| self.register()) {
            Ok(done) => {
                let _ = ready.send(Ok(()));
                done
            }
            Err(e) => {
                let _ = ready.send(Err(io::Error::new(e.kind(), e.to_string())));
                return Err(e);
            }
        };
        let sink: Arc<dyn ReplySink> = self.clone();
        let mut scratch = Vec::new();
        let mut ended = 0;
        while ended < self.entries.len() {
            if done.is_empty() {
                match self.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => return Err(e),
                }
                done = self.completions();
            }
            for (idx, res) in std::mem::take(&mut done) {
                if idx == WAKE {
                    if self.stopping.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    // The replies pushed by other threads go with the next wait.
                    self.arm_wake();
                    continue;
                }
                let idx = idx as usize;
                match res {
                    0 => {
                        self.stats.requests.fetch_add(1, Ordering::Relaxed);
                        self.handle(d, &sink, idx, &mut scratch)
                    }
                    r if r == -libc::EINTR || r == -libc::EAGAIN => self.resubmit(idx),
                    r => {
                        // The connection's end completes every entry with ENOTCONN.
                        if r != -libc::ENOTCONN && r != -libc::ECANCELED {
                            let e = io::Error::from_raw_os_error(-r);
                            eprintln!("easyio: fuse ring {}: entry {idx} ended: {e}", self.qid);
                        }
                        ended += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Enables a ring of a single issuer from the queue's thread (its only issuer
    /// from then on).
    fn enable(&self) -> io::Result<()> {
        match self.single_issuer {
            true => self.ring.submitter().register_enable_rings(),
            false => Ok(()),
        }
    }

    /// Pushes the read of the wake eventfd (not yet submitted).
    fn arm_wake(&self) {
        let read = opcode::Read::new(
            types::Fd(self.wake_fd.as_raw_fd()),
            self.wake_count.as_ptr().cast::<u8>(),
            8,
        );
        let sqe = squeue::Entry128::from(read.build().user_data(WAKE));
        self.push_sqe(&sqe);
    }

    /// Registers every entry and checks that the kernel took them: a refusal
    /// completes at once, an accepted entry completes only with a request. Gives
    /// back the completions read (requests that came already).
    fn register(&self) -> io::Result<Vec<(u64, i32)>> {
        self.arm_wake();
        for idx in 0..self.entries.len() {
            self.push(idx, CMD_REGISTER, 0);
        }
        self.ring.submit()?;
        let done = self.completions();
        match done.iter().find(|(_, res)| *res < 0) {
            None => Ok(done),
            Some((_, r)) => Err(io::Error::from_raw_os_error(-r)),
        }
    }

    /// The completions waiting: (`user_data`, result).
    fn completions(&self) -> Vec<(u64, i32)> {
        // SAFETY: only this thread reads the completion queue.
        unsafe { self.ring.completion_shared() }
            .map(|c| (c.user_data(), c.result()))
            .collect()
    }

    /// Pushes a command for entry `idx` (not yet submitted).
    fn push(&self, idx: usize, cmd_op: u32, commit_id: u64) {
        let mut cmd = [0u8; 80];
        cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let e = &self.entries[idx];
        let sqe = opcode::UringCmd80::new(types::Fd(self.device), cmd_op)
            .cmd(cmd)
            .addr(Some(e.iov.as_ptr() as u64))
            .build()
            .user_data(idx as u64);
        self.push_sqe(&with_len(sqe, 2));
    }

    /// Pushes `sqe` (not yet submitted): a command of an entry, or the read of the
    /// wake eventfd, whose memory lives as long as the queue (and so the ring).
    fn push_sqe(&self, sqe: &squeue::Entry128) {
        let _g = self.submit.lock();
        // SAFETY: only under `submit`; the SQE points at the queue's own memory.
        let mut sq = unsafe { self.ring.submission_shared() };
        // SAFETY: as above.
        if unsafe { sq.push(sqe) }.is_err() {
            // Never full: one command per entry at a time, and one read of the
            // eventfd: the ring has room for one more than the entries.
            unreachable!("fuse ring submission queue full");
        }
    }

    fn resubmit(&self, idx: usize) {
        let unique = self.entries[idx].state.lock().unique;
        let cmd = if unique == 0 {
            CMD_REGISTER
        } else {
            CMD_COMMIT_AND_FETCH
        };
        self.push(idx, cmd, unique);
    }

    /// Serves the request in entry `idx`, copying it into `scratch` unless it is read
    /// in place.
    fn handle<FS: Filesystem>(
        &self,
        d: &Dispatcher<FS>,
        sink: &Arc<dyn ReplySink>,
        idx: usize,
        scratch: &mut Vec<u64>,
    ) {
        let e = &self.entries[idx];
        let len = e.header_u32(0) as usize;
        let unique = e.header_u64(ENT_IN_OUT + 8);
        let payload = e.header_u32(ENT_IN_OUT + 16) as usize;
        let op = len
            .checked_sub(IN_HEADER + payload)
            .filter(|n| *n <= OP_IN_SIZE);
        // In place only where the headers end on an 8-byte boundary (the decoder's
        // alignment): a write's do.
        let in_place =
            payload > SMALL_PAYLOAD && op.is_some_and(|n| (IN_HEADER + n).is_multiple_of(8));
        {
            let mut s = e.state.lock();
            s.unique = unique;
            s.in_place = in_place;
            s.stashed = false;
            s.replied = false;
        }
        let Some(op) = op.filter(|_| payload <= e.max_payload) else {
            return self.reply_error(idx, libc::EIO);
        };
        let request: &[u8] = if in_place {
            let start = PAYLOAD_OFFSET - IN_HEADER - op;
            // SAFETY: `start` is within the page before the payload; the headers are
            // copied there and then the request read as one slice, which the kernel
            // does not write until the entry is committed (after the handler returns,
            // see `send`).
            unsafe {
                std::ptr::copy_nonoverlapping(e.base, e.base.add(start), IN_HEADER);
                std::ptr::copy_nonoverlapping(e.base.add(OP_IN), e.base.add(start + IN_HEADER), op);
                std::slice::from_raw_parts(e.base.add(start), len)
            }
        } else {
            // Grown once to the largest request copied, never cleared: every byte
            // of the request is written before it is read.
            if scratch.len() < len.div_ceil(8) {
                scratch.resize(len.div_ceil(8), 0);
            }
            let bytes = as_bytes_mut(scratch);
            e.header(0, &mut bytes[..IN_HEADER]);
            e.header(OP_IN, &mut bytes[IN_HEADER..IN_HEADER + op]);
            // SAFETY: `payload` bytes of the payload buffer, written by the kernel
            // before the completion.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    e.base.add(PAYLOAD_OFFSET),
                    bytes[IN_HEADER + op..].as_mut_ptr(),
                    payload,
                )
            };
            &bytes[..len]
        };
        // A copied request leaves the payload buffer to the reply.
        if !in_place {
            REPLY_BUFFER
                .with(|b| b.set(Some((e.base.wrapping_add(PAYLOAD_OFFSET), e.max_payload))));
        }
        let r = d.dispatch(request, sink.clone(), idx as u64);
        REPLY_BUFFER.with(|b| b.set(None));
        if r.is_err() {
            return self.reply_error(idx, libc::EIO);
        }
        let mut s = e.state.lock();
        s.in_place = false;
        if std::mem::take(&mut s.stashed) {
            e.write_reply(&[IoSlice::new(&s.stash)]);
            self.commit(idx, s.unique);
        }
    }

    fn reply_error(&self, idx: usize, errno: i32) {
        let e = &self.entries[idx];
        let mut s = e.state.lock();
        s.in_place = false;
        s.stashed = false;
        s.replied = true;
        e.write_error(errno, s.unique);
        self.commit(idx, s.unique);
    }

    /// Commits the reply in entry `idx` and fetches the next request: submitted with
    /// the next wait of the queue's thread; from another thread, at once or, to a
    /// single issuer's ring, by the queue's thread, woken for it.
    fn commit(&self, idx: usize, unique: u64) {
        self.push(idx, CMD_COMMIT_AND_FETCH, unique);
        if ON_QUEUE_THREAD.with(|q| q.get() == self as *const Queue as usize) {
            return;
        }
        if self.single_issuer {
            return self.wake();
        }
        let _g = self.submit.lock();
        if let Err(e) = self.ring.submit() {
            eprintln!("easyio: fuse ring {}: submitting a reply: {e}", self.qid);
        }
    }

    /// Wakes the queue's thread (its read of the eventfd completes).
    fn wake(&self) {
        // An eventfd takes an 8-byte count to add.
        if let Err(e) = rustix::io::write(&self.wake_fd, &1u64.to_ne_bytes()) {
            eprintln!("easyio: fuse ring {}: waking the queue: {e}", self.qid);
        }
    }
}

thread_local! {
    /// The queue whose thread this is (its address), 0 on other threads.
    static ON_QUEUE_THREAD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// While a queue's thread dispatches a copied request: its entry's payload buffer
    /// (start, length), which the reply is written into.
    static REPLY_BUFFER: std::cell::Cell<Option<(*mut u8, usize)>> =
        const { std::cell::Cell::new(None) };
}

/// The buffer the reply to the request being dispatched on this thread is written
/// into, taken by a handler that puts a read's data there itself (it is then not
/// copied again): `None` on other threads, for a request read in place, once taken,
/// or if `len` bytes do not fit.
pub(crate) fn reply_buffer(len: usize) -> Option<ReplyBuffer> {
    let (ptr, room) = REPLY_BUFFER.with(|b| b.take())?;
    (len <= room).then_some(ReplyBuffer { ptr, len })
}

/// A ring entry's payload buffer, lent to the handler of the request the entry holds
/// until it replies (see [`reply_buffer`]).
pub(crate) struct ReplyBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is the entry's, which the kernel and the queue leave alone until
// the request is replied to; the handler that took it may reply from any thread.
unsafe impl Send for ReplyBuffer {}

impl ReplyBuffer {
    /// The buffer, to fill and then reply with (a part of it, from its start).
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes of the entry's payload buffer (checked against its
        // size), which nothing else reads or writes until the reply is sent: the
        // request was copied out, the kernel reads the buffer only once the reply is
        // committed, and the reply's writer skips the bytes already in place.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fuse ring queue {}", self.qid)
    }
}

impl ReplySink for Queue {
    fn send(&self, token: u64, data: &[IoSlice<'_>]) -> io::Result<()> {
        let idx = token as usize;
        let e = &self.entries[idx];
        let mut s = e.state.lock();
        if s.replied {
            return Err(io::Error::other("a second reply to one request"));
        }
        s.replied = true;
        if s.in_place {
            s.stash.clear();
            for d in data {
                s.stash.extend_from_slice(d);
            }
            s.stashed = true;
            return Ok(());
        }
        if e.write_reply(data) {
            self.stats.replies_in_place.fetch_add(1, Ordering::Relaxed);
        }
        self.commit(idx, s.unique);
        Ok(())
    }
}

/// Pins this thread to `cpu` (where the queue's requests come from), and marks it as
/// a queue's thread; a CPU this process may not run on is left as it is.
fn pin_to_cpu(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// `sqe` with its `len` field set (`UringCmd80` leaves it 0; the fuse ring's
/// registration reads the number of iovecs from it).
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: `Entry128` is `#[repr(C)]`: a 64-byte `struct io_uring_sqe` and 64 more
    // bytes, plain data with no invalid bit patterns; `len` is the `__u32` at offset
    // 24 of `struct io_uring_sqe` (include/uapi/linux/io_uring.h).
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    bytes[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes) }
}

fn as_bytes_mut(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: `u64`s are 8 bytes with no padding; any byte pattern is a valid `u8`.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 8) }
}
