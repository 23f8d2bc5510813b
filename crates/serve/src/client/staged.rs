//! Staging buffers on the client's side (see the crate's `staging` module): shared
//! memory the server copies from when the client writes and into when it reads, so
//! that the data makes no trip through the mailbox. A [`StagingBuf`] has data calls
//! of its own; a buffer of the C ABI's ([`Client::map_staging`]) has the data calls
//! that take its address ([`Client::write_staged_at`], [`Client::read_staged_at`],
//! [`Client::submit_staged_at`]), which never make a reference to its bytes.

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::submit::Submitted;
use super::{unexpected, Client};
use crate::error::{Error, Result};
use crate::staging::{Buffer, MAX_BYTES};
use crate::wire::{Answer, Request};

/// A staging buffer, given back to the server when dropped.
///
/// Its bytes are shared memory the server maps too, so this process reaches them
/// only by copies ([`crate::shared`]), never through a reference: it fills them with
/// [`StagingBuf::copy_from`] or [`StagingBuf::fill`], reads them with
/// [`StagingBuf::copy_to`], and moves them to and from files with the buffer's own
/// data calls ([`StagingBuf::pwrite`], [`StagingBuf::write`], [`StagingBuf::pread`],
/// [`StagingBuf::read`], [`StagingBuf::submit_pwrite`]), which make no copy through
/// the mailbox. The server stores into the bytes only during a read this process asks
/// for into them (which borrows the handle mutably), and reads them only by copies.
/// A server whose connection with this client ends (it stops) punches their pages
/// out, so that no client keeps memory it paid for: the buffer then reads as zeros. A
/// process that shares the mapping otherwise (a child it forks) shares it as any
/// shared mapping.
pub struct StagingBuf<'c> {
    client: &'c Client,
    id: u32,
    buffer: Arc<Buffer>,
}

impl StagingBuf<'_> {
    /// Bytes of the buffer (at least what was asked for).
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether the buffer has no bytes (never: making one refuses that).
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// Where the buffer starts in this process: an address to compare, or for code
    /// that shares the memory knowingly (a program's own stores through raw pointers).
    pub fn as_ptr(&self) -> *mut u8 {
        self.buffer.as_ptr()
    }

    /// Copies `data` into the buffer at `at`.
    ///
    /// # Panics
    /// If `data` does not fit inside the buffer at `at`.
    pub fn copy_from(&mut self, at: usize, data: &[u8]) {
        assert!(
            self.buffer.copy_from(at as u64, data),
            "{} bytes at {at} of a staging buffer of {}",
            data.len(),
            self.len()
        );
    }

    /// Copies the bytes at `at` into `out`.
    ///
    /// # Panics
    /// If they do not all lie inside the buffer.
    pub fn copy_to(&self, at: usize, out: &mut [u8]) {
        assert!(
            self.buffer.copy_to(at as u64, out),
            "{} bytes at {at} of a staging buffer of {}",
            out.len(),
            self.len()
        );
    }

    /// The bytes of `range`, copied out.
    pub fn to_vec(&self, range: Range<usize>) -> Vec<u8> {
        let mut out = vec![0; range.len()];
        self.copy_to(range.start, &mut out);
        out
    }

    /// Sets the bytes of `range` to `byte`.
    ///
    /// # Panics
    /// If `range` does not lie inside the buffer.
    pub fn fill(&mut self, range: Range<usize>, byte: u8) {
        assert!(
            self.buffer.fill(range.start, range.len(), byte),
            "bytes {range:?} of a staging buffer of {}",
            self.len()
        );
    }

    /// Where the bytes of `range` are for the server: the buffer's number and the
    /// offset; `EINVAL` if `range` does not lie inside the buffer.
    fn place(&self, range: &Range<usize>) -> Result<(u32, u64)> {
        if range.start > range.end || range.end > self.len() {
            return Err(Error::Fs(libc::EINVAL));
        }
        self.client.staged_calls.fetch_add(1, Ordering::Relaxed);
        Ok((self.id, range.start as u64))
    }

    /// `pwrite` of the bytes of `range` at `off` of descriptor `fd`, as
    /// [`Client::pwrite`], with no copy through the mailbox.
    pub fn pwrite(&self, fd: u32, range: Range<usize>, off: u64) -> Result<usize> {
        let at = self.place(&range)?;
        self.client.staged_write(fd, at, range.len(), Some(off))
    }

    /// `write` of the bytes of `range` at the position of descriptor `fd`, as
    /// [`Client::write`].
    pub fn write(&self, fd: u32, range: Range<usize>) -> Result<usize> {
        let at = self.place(&range)?;
        self.client.staged_write(fd, at, range.len(), None)
    }

    /// `pread` into the bytes of `range` from `off` of descriptor `fd`, as
    /// [`Client::pread`]: the server stores them into the buffer before this returns.
    pub fn pread(&mut self, fd: u32, range: Range<usize>, off: u64) -> Result<usize> {
        let at = self.place(&range)?;
        self.client.staged_read(fd, at, range.len(), Some(off))
    }

    /// `read` into the bytes of `range` at the position of descriptor `fd`, as
    /// [`Client::read`].
    pub fn read(&mut self, fd: u32, range: Range<usize>) -> Result<usize> {
        let at = self.place(&range)?;
        self.client.staged_read(fd, at, range.len(), None)
    }

    /// Starts writing the bytes of `range` at `off` of descriptor `fd`, as
    /// [`Client::submit_pwrite`] of a staging buffer: the copy goes on after this
    /// returns, and the buffer stays borrowed until it is waited for.
    pub fn submit_pwrite(
        &self,
        fd: u32,
        range: Range<usize>,
        off: u64,
    ) -> Result<Submitted<'_, '_>> {
        let at = self.place(&range)?;
        self.client.submit_staged(fd, at, range.len(), off)
    }
}

impl Drop for StagingBuf<'_> {
    fn drop(&mut self) {
        self.client.release(|(id, _)| *id == self.id);
    }
}

impl Client {
    /// A staging buffer of at least `len` bytes (at most 64 MiB; 16 buffers and
    /// 256 MiB a connection, and what the server allows in all): its data calls make
    /// no copy through the mailbox. Like any shared mapping, it is shared with the
    /// children this process forks.
    pub fn staging_buffer(&self, len: usize) -> Result<StagingBuf<'_>> {
        let (id, buffer) = self.new_staging(len)?;
        Ok(StagingBuf {
            client: self,
            id,
            buffer,
        })
    }

    /// [`Client::staging_buffer`] for a caller that keeps the buffer itself (the C
    /// ABI): where it starts and how long it is (at least `len`). It stays mapped
    /// until [`Client::release_staging`] or the end of the client. Its bytes are
    /// shared with the server: reach them through raw pointers only, and move them
    /// with the data calls that take an address ([`Client::write_staged_at`] and the
    /// others); [`crate::staging::overlaps`] tells such an address from others.
    pub fn map_staging(&self, len: usize) -> Result<(NonNull<u8>, usize)> {
        self.new_staging(len).map(|(_, b)| (b.ptr(), b.len()))
    }

    fn new_staging(&self, want: usize) -> Result<(u32, Arc<Buffer>)> {
        let (answer, fds) = self.call_with_fds(&Request::Staging { len: want as u64 })?;
        let Answer::Staging { id, len } = answer else {
            return Err(unexpected(answer));
        };
        let mapped = (|| {
            let fd = fds
                .into_iter()
                .next()
                .ok_or_else(|| Error::Protocol("a staging buffer was not sent".into()))?;
            let len = usize::try_from(len)
                .ok()
                .filter(|&l| l as u64 <= MAX_BYTES && l >= want)
                .ok_or_else(|| Error::Protocol(format!("a staging buffer of {len} bytes")))?;
            Buffer::map(&fd, len).map_err(|e| Error::os("mapping a staging buffer", e))
        })();
        let buffer = match mapped {
            Ok(b) => b,
            Err(e) => {
                // The server holds it for nothing: give it back.
                let _ = self.done(Request::DropStaging { id });
                return Err(e);
            }
        };
        let buffer = Arc::new(buffer);
        self.staging.lock().push((id, buffer.clone()));
        self.has_staging.store(true, Ordering::Release);
        Ok((id, buffer))
    }

    /// Unmaps the staging buffer [`Client::map_staging`] gave out at `ptr` and gives
    /// it back to the server; `EINVAL` if no buffer starts there. The buffer is gone
    /// once this returns `Ok`, whatever the server answers (a server that is gone
    /// freed it already).
    ///
    /// # Safety
    /// Nothing may use the buffer's memory afterwards, and `ptr` must not be the
    /// start of a [`StagingBuf`] (its drop gives its buffer back).
    pub unsafe fn release_staging(&self, ptr: *const u8) -> Result<()> {
        match self.release(|(_, b)| std::ptr::eq(b.as_ptr(), ptr)) {
            true => Ok(()),
            false => Err(Error::Fs(libc::EINVAL)),
        }
    }

    /// Unmaps the first staging buffer `which` picks and gives it back; whether one
    /// was.
    fn release(&self, which: impl Fn(&(u32, Arc<Buffer>)) -> bool) -> bool {
        let found = {
            let mut staging = self.staging.lock();
            staging
                .iter()
                .position(which)
                .map(|i| staging.swap_remove(i))
        };
        let Some((id, buffer)) = found else {
            return false;
        };
        drop(buffer);
        let _ = self.done(Request::DropStaging { id });
        true
    }

    /// Data calls so far whose bytes a staging buffer carried.
    pub fn staged_calls(&self) -> u64 {
        self.staged_calls.load(Ordering::Relaxed)
    }

    /// The staging buffer that holds all of `[ptr, ptr + len)`: its number and where
    /// the bytes start in it.
    pub(super) fn staged(&self, ptr: *const u8, len: usize) -> Option<(u32, u64)> {
        if len == 0 || !self.has_staging.load(Ordering::Acquire) {
            return None;
        }
        let found = self
            .staging
            .lock()
            .iter()
            .find_map(|(id, b)| b.offset_of(ptr, len).map(|at| (*id, at)));
        if found.is_some() {
            self.staged_calls.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// `pwrite` (at `off`) or `write` (`None`: at the position) of the `len` bytes at
    /// `ptr`, when they lie inside a staging buffer of this client's
    /// ([`Client::map_staging`], the C ABI's): the server copies them out of the
    /// buffer, and this process does not touch them. `None`, and nothing done, when
    /// they do not lie inside one: they are then the caller's own memory, for
    /// [`Client::pwrite`].
    pub fn write_staged_at(
        &self,
        fd: u32,
        ptr: *const u8,
        len: usize,
        off: Option<u64>,
    ) -> Option<Result<usize>> {
        let at = self.staged(ptr, len)?;
        Some(self.staged_write(fd, at, len, off))
    }

    /// `pread` (from `off`) or `read` (`None`: from the position) of up to `len`
    /// bytes into `ptr`, when they lie inside a staging buffer of this client's: the
    /// server stores them there before this returns, and this process does not touch
    /// them. `None`, and nothing done, when they do not lie inside one.
    pub fn read_staged_at(
        &self,
        fd: u32,
        ptr: *mut u8,
        len: usize,
        off: Option<u64>,
    ) -> Option<Result<usize>> {
        let at = self.staged(ptr, len)?;
        Some(self.staged_read(fd, at, len, off))
    }

    /// [`Client::submit_pwrite`] of the `len` bytes at `ptr`, when they lie inside a
    /// staging buffer of this client's: the server's copy goes on after this returns,
    /// and the caller keeps the bytes unchanged until the write is waited for. `None`,
    /// and nothing done, when they do not lie inside one.
    pub fn submit_staged_at<'b>(
        &self,
        fd: u32,
        ptr: *const u8,
        len: usize,
        off: u64,
    ) -> Option<Result<Submitted<'_, 'b>>> {
        let at = self.staged(ptr, len)?;
        Some(self.submit_staged(fd, at, len, off))
    }

    /// A write of `len` bytes at `at` in staging buffer `id`, at `off` or (`None`)
    /// at the descriptor's position.
    pub(super) fn staged_write(
        &self,
        fd: u32,
        (id, at): (u32, u64),
        len: usize,
        off: Option<u64>,
    ) -> Result<usize> {
        let len = len as u64;
        Ok(self
            .count(Request::WriteStaged {
                fd,
                id,
                at,
                len,
                off,
            })?
            .min(len) as usize)
    }

    /// A read of up to `len` bytes into staging buffer `id` at `at`, from `off` or
    /// (`None`) from the descriptor's position.
    pub(super) fn staged_read(
        &self,
        fd: u32,
        (id, at): (u32, u64),
        len: usize,
        off: Option<u64>,
    ) -> Result<usize> {
        let len = len as u64;
        match self.count(Request::ReadStaged {
            fd,
            id,
            at,
            len,
            off,
        })? {
            n if n <= len => Ok(n as usize),
            n => Err(Error::Protocol(format!("{n} bytes read into {len}"))),
        }
    }
}
