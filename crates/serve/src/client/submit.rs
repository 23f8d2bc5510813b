//! Submitted writes: EASYIO's orderless write across processes. The server answers
//! once the write is committed, with the SN of the copy that still runs; the client
//! computes meanwhile, then polls that SN's completion record in its read-only
//! mapping of the image — no request — and asks the server only if the record has
//! not said done within a short spin (a copy that failed never says it). A client in
//! a uthread of `rt` waits in its worker's wait set: the worker's other uthreads run
//! while the copy does.

use std::cell::Cell;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::{unexpected, Client, RegionView};
use crate::error::{Error, Result};
use crate::wire::{Answer, Request};

/// How long [`Submitted::wait`] polls the completion record before it asks the
/// server (which waits for the copy, and knows whether it failed).
const POLL: Duration = Duration::from_micros(50);
/// Polling past this gives the core away between looks.
const PURE_POLL: Duration = Duration::from_micros(2);
/// How long a uthread waits for the record, letting its worker's other uthreads run,
/// before it asks the server (whose answer it then waits for on its thread).
const UTHREAD_POLL: Duration = Duration::from_millis(1);
/// How long after the answer [`Submitted::is_done`] looks only at the record; past it,
/// each look also asks the server.
const ASK_AFTER: Duration = Duration::from_millis(1);

/// A submitted write whose copy may still run: its buffer stays borrowed until it is
/// waited for (or dropped, which waits).
#[must_use = "dropping a submitted write waits for its copy; call wait() for its result"]
pub struct Submitted<'c, 'b> {
    client: &'c Client,
    /// Raw SN of the copy (0: it was over when the server answered).
    sn: u64,
    /// Whether the copy is known to be over.
    over: Cell<bool>,
    /// The errno the copy failed with, once known (0: none).
    failed: Cell<i32>,
    count: usize,
    /// When the server answered.
    since: Instant,
    _buf: PhantomData<&'b [u8]>,
}

impl Client {
    /// Starts writing `buf` at `off` of descriptor `fd` (at the end on an appending
    /// descriptor), as `pwrite`. A buffer of this process's memory is written before
    /// this returns; the copy goes on after it returns only from a staging buffer
    /// ([`super::StagingBuf::submit_pwrite`], or for the C ABI's
    /// [`Client::submit_staged_at`]), with the data durable once [`Submitted::is_done`]
    /// says so or [`Submitted::wait`] returns.
    pub fn submit_pwrite<'b>(&self, fd: u32, buf: &'b [u8], off: u64) -> Result<Submitted<'_, 'b>> {
        Ok(self.submitted(0, self.pwrite(fd, buf, off)?))
    }

    /// A submitted write of `len` bytes at `at` in staging buffer `id`.
    pub(super) fn submit_staged<'b>(
        &self,
        fd: u32,
        (id, at): (u32, u64),
        len: usize,
        off: u64,
    ) -> Result<Submitted<'_, 'b>> {
        let len = len as u64;
        match self.call(&Request::SubmitStaged {
            fd,
            id,
            at,
            len,
            off,
        })? {
            Answer::Submitted { count, sn } => Ok(self.submitted(sn, count.min(len) as usize)),
            other => Err(unexpected(other)),
        }
    }

    /// The handle of a write the server answered with SN `sn` (0: done) and `count`.
    fn submitted<'b>(&self, sn: u64, count: usize) -> Submitted<'_, 'b> {
        Submitted {
            client: self,
            sn,
            over: Cell::new(sn == 0),
            failed: Cell::new(0),
            count,
            since: Instant::now(),
            _buf: PhantomData,
        }
    }
}

impl Submitted<'_, '_> {
    /// The raw SN of the copy (0: it was done when the write returned).
    pub fn sn(&self) -> u64 {
        self.sn
    }

    /// Whether the copy is over: one load of the completion record in the client's
    /// mapping while it runs. Once the record says done, the server is checked to
    /// be the one that answered (a server restarted since would hand out the same
    /// SNs again, and the write it lost would look durable). A copy that does not
    /// say done within a millisecond is asked about (a copy that failed never marks
    /// its record; a client that does not map the image asks every time past that
    /// millisecond). True also once it failed: [`Submitted::wait`] reports how.
    pub fn is_done(&self) -> bool {
        if self.over.get() {
            return true;
        }
        let sn = self.sn;
        if self.client.region().is_some_and(|r| sn_done(r, sn)) {
            self.finish(self.alive_check());
            return true;
        }
        if self.since.elapsed() < ASK_AFTER {
            return false;
        }
        match self.client.call(&Request::Settle { sn, wait: false }) {
            Ok(Answer::Running) => false,
            Ok(Answer::Done) => {
                self.finish(0);
                true
            }
            Ok(Answer::Error(errno)) => {
                self.finish(errno);
                true
            }
            Ok(_) => {
                self.finish(libc::EPROTO);
                true
            }
            Err(e) => {
                self.finish(e.errno());
                true
            }
        }
    }

    /// 0 if the server that answered still runs, else `ENOTCONN`.
    fn alive_check(&self) -> i32 {
        match self.client.server_alive() {
            true => 0,
            false => libc::ENOTCONN,
        }
    }

    fn finish(&self, errno: i32) {
        self.over.set(true);
        self.failed.set(errno);
    }

    /// Waits until the data is durable and returns the bytes written: polls the
    /// completion record for a moment, then asks the server (`EIO` if the copy
    /// failed; `ENOTCONN` if the server is gone, or was replaced, before the record
    /// said done).
    pub fn wait(self) -> Result<usize> {
        self.settle()?;
        Ok(self.count)
    }

    fn settle(&self) -> Result<()> {
        if !self.over.get() {
            let errno = match self.poll_then_ask(self.sn) {
                Ok(()) => 0,
                Err(e) => e.errno(),
            };
            self.finish(errno);
        }
        match self.failed.get() {
            0 => Ok(()),
            libc::ENOTCONN => Err(Error::Disconnected(std::io::ErrorKind::NotConnected.into())),
            errno => Err(Error::Fs(errno)),
        }
    }

    /// Polls the record of `sn` for a moment, then asks the server to wait for it.
    fn poll_then_ask(&self, sn: u64) -> Result<()> {
        let ask = || self.client.done(Request::Settle { sn, wait: true });
        let Some(r) = self.client.region() else {
            return ask();
        };
        let t0 = Instant::now();
        let done = if rt::in_uthread() {
            // The worker's other uthreads run meanwhile; the worker looks at the
            // record between them.
            rt::wait_until(|| sn_done(r, sn) || t0.elapsed() >= UTHREAD_POLL);
            sn_done(r, sn)
        } else {
            let mut n = 0u32;
            loop {
                if sn_done(r, sn) {
                    break true;
                }
                n = n.wrapping_add(1);
                if n.is_multiple_of(64) {
                    let waited = t0.elapsed();
                    if waited >= POLL {
                        break false;
                    }
                    if waited >= PURE_POLL {
                        std::thread::yield_now();
                    }
                }
                std::hint::spin_loop();
            }
        };
        match (done, self.alive_check()) {
            (true, 0) => Ok(()),
            (true, _) => Err(Error::Disconnected(std::io::ErrorKind::NotConnected.into())),
            (false, _) => ask(),
        }
    }
}

impl Drop for Submitted<'_, '_> {
    fn drop(&mut self) {
        let _ = self.settle();
    }
}

/// Whether the record of raw SN `sn` in the mapped region says it is durably done.
fn sn_done(r: &RegionView, sn: u64) -> bool {
    match fs::layout::sn_progress_word(sn) {
        Some((word, counter)) => r.load_u64(word).is_some_and(|v| v >= counter),
        None => false,
    }
}
