//! Writes a client submitted and whose copies still run (EASYIO's orderless write
//! across processes, [`crate::wire::Request::SubmitStaged`]): the server answers
//! once the write is committed, with the SN of its copy, and the client polls that
//! SN's completion record in its read-only mapping of the image while it computes.
//!
//! The server keeps each such copy until it is done, with the server's own copy of
//! the bytes it reads (taken from the staging buffer when the write came: the client
//! may change the buffer at once); letting the buffer go, or the connection ending,
//! waits for the copies first. The pages it writes say "ask" in their page table until the
//! copy is done and [`crate::direct::Direct::finish`] publishes them. Copies are
//! finished in the order they were submitted, when the connection next looks
//! ([`Submitted::reap`]: before each request) and before its thread sleeps.

use std::collections::VecDeque;

use fs::{BorrowedToken, FileSystem};

use crate::direct::{Direct, Unpublished};

/// Copies a connection may have running; one more waits for the oldest first.
pub const MAX_RUNNING: usize = 64;
/// Failed copies remembered until the client settles them (older ones are
/// forgotten: their SNs settle as done, and the client's poll of the record never
/// saw them done).
const MAX_FAILED: usize = 1024;

/// Spare copy buffers kept for the next submitted writes.
const SPARE: usize = 4;
/// The largest spare copy buffer kept, bytes.
const SPARE_BYTES: usize = 1 << 20;

/// One running copy.
struct Copy<'a> {
    /// Declared before `data`: dropping it waits for the copy, which reads `data`.
    token: BorrowedToken<'a>,
    /// The server's copy of the bytes written (the token reads from it).
    data: Vec<u8>,
    sn: u64,
    /// The staging buffer its bytes came from.
    buffer: u32,
    unpublished: Option<Unpublished>,
}

/// A connection's running copies, oldest first, and the SNs of those that failed.
#[derive(Default)]
pub(crate) struct Submitted<'a> {
    running: VecDeque<Copy<'a>>,
    failed: VecDeque<(u64, i32)>,
    /// Buffers of finished copies, for the next ones.
    spare: Vec<Vec<u8>>,
}

impl<'a> Submitted<'a> {
    /// A buffer for the bytes of a copy (one a finished copy gave back, if any).
    pub fn spare(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    /// Keeps `data` for [`Submitted::spare`] (unless enough are kept, or it is
    /// too large to keep).
    pub fn give_back(&mut self, data: Vec<u8>) {
        if self.spare.len() < SPARE && data.capacity() <= SPARE_BYTES {
            self.spare.push(data);
        }
    }

    /// Keeps the copy of `sn` (`token`'s, from `data`, the bytes of staging buffer
    /// `buffer`) until it is done.
    pub fn keep(
        &mut self,
        token: BorrowedToken<'a>,
        data: Vec<u8>,
        sn: u64,
        buffer: u32,
        unpublished: Option<Unpublished>,
    ) {
        self.running.push_back(Copy {
            token,
            data,
            sn,
            buffer,
            unpublished,
        });
    }

    /// Whether no copy runs.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Whether a running copy wrote bytes of staging buffer `buffer`.
    pub fn uses(&self, buffer: u32) -> bool {
        self.running.iter().any(|c| c.buffer == buffer)
    }

    /// Finishes the oldest copies that are done (one load each), and the oldest one
    /// whatever it takes if `MAX_RUNNING` run.
    pub fn reap(&mut self, fs: &FileSystem, direct: Option<&Direct>) {
        while let Some(c) = self.running.front() {
            if !c.token.is_done() && self.running.len() < MAX_RUNNING {
                break;
            }
            let c = self.running.pop_front().expect("a front copy");
            self.finish(fs, direct, c);
        }
    }

    /// Waits for the copy of `sn` and every one submitted before it: `Err(errno)`
    /// if it failed. An SN not running and not failed finished well.
    pub fn settle(&mut self, fs: &FileSystem, direct: Option<&Direct>, sn: u64) -> Result<(), i32> {
        if let Some(i) = self.running.iter().position(|c| c.sn == sn) {
            for c in self.running.drain(..=i).collect::<Vec<_>>() {
                self.finish(fs, direct, c);
            }
        }
        match self.failed.iter().position(|&(s, _)| s == sn) {
            Some(i) => Err(self.failed.remove(i).expect("a failed copy").1),
            None => Ok(()),
        }
    }

    /// Whether the copy of `sn` is over, without waiting (the copies done are
    /// finished first): `Ok(false)` while it runs, `Err(errno)` if it failed.
    pub fn poll(&mut self, fs: &FileSystem, direct: Option<&Direct>, sn: u64) -> Result<bool, i32> {
        self.reap(fs, direct);
        if self.running.iter().any(|c| c.sn == sn) {
            return Ok(false);
        }
        self.settle(fs, direct, sn).map(|()| true)
    }

    /// Waits for every running copy.
    pub fn settle_all(&mut self, fs: &FileSystem, direct: Option<&Direct>) {
        while let Some(c) = self.running.pop_front() {
            self.finish(fs, direct, c);
        }
    }

    fn finish(&mut self, fs: &FileSystem, direct: Option<&Direct>, c: Copy<'a>) {
        let result = c.token.wait();
        self.give_back(c.data);
        if let Err(e) = result {
            if self.failed.len() == MAX_FAILED {
                self.failed.pop_front();
            }
            self.failed.push_back((c.sn, e.errno()));
        }
        if let (Some(d), Some(u)) = (direct, c.unpublished) {
            d.finish(fs, u);
        }
    }
}
