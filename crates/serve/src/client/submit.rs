//! Submitted writes: EASYIO's orderless write across processes. The server answers
//! once the write is committed, with the SN of the copy that still runs; the client
//! computes meanwhile, then polls that SN's completion record in its read-only
//! mapping of the image — no request — and asks the server only if the record has
//! not said done within a short spin (a copy that failed never says it). A client in
//! a uthread of `rt` waits in its worker's wait set: the worker's other uthreads run
//! while the copy does.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::{unexpected, Client, RegionView};
use crate::error::Result;
use crate::wire::{Answer, Request};

/// How long [`Submitted::wait`] polls the completion record before it asks the
/// server (which waits for the copy, and knows whether it failed).
const POLL: Duration = Duration::from_micros(50);
/// Polling past this gives the core away between looks.
const PURE_POLL: Duration = Duration::from_micros(2);
/// How long a uthread waits for the record, letting its worker's other uthreads run,
/// before it asks the server (whose answer it then waits for on its thread).
const UTHREAD_POLL: Duration = Duration::from_millis(1);

/// A submitted write whose copy may still run: its buffer stays borrowed until it is
/// waited for (or dropped, which waits).
#[must_use = "dropping a submitted write waits for its copy; call wait() for its result"]
pub struct Submitted<'c, 'b> {
    client: &'c Client,
    /// Raw SN of the copy; 0 once it is known done.
    sn: u64,
    count: usize,
    _buf: PhantomData<&'b [u8]>,
}

impl Client {
    /// Starts writing `buf` at `off` of descriptor `fd` (at the end on an appending
    /// descriptor), as `pwrite`, and returns once the write is committed: a read
    /// from then on sees it. When `buf` lies inside a staging buffer
    /// ([`Client::staging_buffer`]) of a client that maps the image, the copy goes
    /// on after this returns and the caller computes meanwhile; the data is durable
    /// once [`Submitted::is_done`] says so or [`Submitted::wait`] returns. Any other
    /// buffer is written before this returns.
    pub fn submit_pwrite<'b>(&self, fd: u32, buf: &'b [u8], off: u64) -> Result<Submitted<'_, 'b>> {
        let (sn, count) = match self.staged(buf.as_ptr(), buf.len()) {
            Some((id, at)) => {
                let len = buf.len() as u64;
                match self.call(&Request::SubmitStaged {
                    fd,
                    id,
                    at,
                    len,
                    off,
                })? {
                    Answer::Submitted { count, sn } => (sn, count.min(len) as usize),
                    other => return Err(unexpected(other)),
                }
            }
            None => (0, self.pwrite(fd, buf, off)?),
        };
        Ok(Submitted {
            client: self,
            sn,
            count,
            _buf: PhantomData,
        })
    }
}

impl Submitted<'_, '_> {
    /// The raw SN of the copy (0: it was done when the write returned).
    pub fn sn(&self) -> u64 {
        self.sn
    }

    /// Whether the data is durable: one load of the completion record in the
    /// client's mapping. Never true for a copy that failed ([`Submitted::wait`]
    /// reports it).
    pub fn is_done(&self) -> bool {
        self.sn == 0 || self.client.region().is_some_and(|r| sn_done(r, self.sn))
    }

    /// Waits until the data is durable and returns the bytes written: polls the
    /// completion record for a moment, then asks the server (`EIO` if the copy
    /// failed).
    pub fn wait(mut self) -> Result<usize> {
        self.settle()?;
        Ok(self.count)
    }

    fn settle(&mut self) -> Result<()> {
        if self.sn == 0 {
            return Ok(());
        }
        let sn = std::mem::take(&mut self.sn);
        if let Some(r) = self.client.region() {
            let t0 = Instant::now();
            if rt::in_uthread() {
                // The worker's other uthreads run meanwhile; the worker looks at the
                // record between them.
                rt::wait_until(|| sn_done(r, sn) || t0.elapsed() >= UTHREAD_POLL);
                if sn_done(r, sn) {
                    return Ok(());
                }
                return self.client.done(Request::Settle { sn });
            }
            let mut n = 0u32;
            while !sn_done(r, sn) {
                n = n.wrapping_add(1);
                if n.is_multiple_of(64) {
                    let waited = t0.elapsed();
                    if waited >= POLL {
                        return self.client.done(Request::Settle { sn });
                    }
                    if waited >= PURE_POLL {
                        std::thread::yield_now();
                    }
                }
                std::hint::spin_loop();
            }
            return Ok(());
        }
        self.client.done(Request::Settle { sn })
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
