//! Staging buffers on the client's side (see the crate's `staging` module): shared
//! memory the server copies from when the client writes and into when it reads, so
//! that the data makes no trip through the mailbox. The data calls recognise a
//! buffer that lies inside one; nothing else changes for the caller.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::{unexpected, Client};
use crate::error::{Error, Result};
use crate::staging::{Buffer, MAX_BYTES};
use crate::wire::{Answer, Request};

/// A staging buffer, given back to the server when dropped.
///
/// It derefs to its bytes, which this process may read and write like any of its
/// own: the server stores into them only while this process waits in a read it asked
/// for into those very bytes (a call that borrows them mutably; the mailbox's
/// sequentially consistent state word orders the server's stores before the call
/// returns), and reads them only by copies ([`crate::shared`]). Besides, a server
/// whose connection with this client ends (it stops) punches their pages out, so
/// that no client keeps memory it paid for: the buffer then reads as zeros. A
/// process that shares the mapping otherwise (a child it forks) shares it as any
/// shared mapping.
pub struct StagingBuf<'c> {
    client: &'c Client,
    id: u32,
    ptr: NonNull<u8>,
    len: usize,
}

impl Deref for StagingBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the buffer stays mapped while this handle lives (it is unmapped
        // only by `release`, which its drop calls); the server stores into it only
        // during a read this client makes into it, which borrows it mutably, and
        // that call returns only after the server's stores (see the type's docs).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for StagingBuf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`; the handle is the only way this process reaches it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for StagingBuf<'_> {
    fn drop(&mut self) {
        self.client.release(|(id, _)| *id == self.id);
    }
}

impl Client {
    /// A staging buffer of at least `len` bytes (at most 64 MiB; 16 buffers and
    /// 256 MiB a connection, and what the server allows in all): [`Client::pwrite`],
    /// [`Client::write`], [`Client::pread`] and [`Client::read`] of a buffer inside it
    /// make no copy through the mailbox. Like any shared mapping, it is shared with
    /// the children this process forks.
    pub fn staging_buffer(&self, len: usize) -> Result<StagingBuf<'_>> {
        let (id, ptr, len) = self.new_staging(len)?;
        Ok(StagingBuf {
            client: self,
            id,
            ptr,
            len,
        })
    }

    /// [`Client::staging_buffer`] for a caller that keeps the buffer itself (the C
    /// ABI): where it starts and how long it is (at least `len`). It stays mapped
    /// until [`Client::release_staging`] or the end of the client.
    pub fn map_staging(&self, len: usize) -> Result<(NonNull<u8>, usize)> {
        self.new_staging(len).map(|(_, ptr, len)| (ptr, len))
    }

    fn new_staging(&self, want: usize) -> Result<(u32, NonNull<u8>, usize)> {
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
        let (ptr, len) = (buffer.ptr(), buffer.len());
        self.staging.lock().push((id, buffer));
        self.has_staging.store(true, Ordering::Release);
        Ok((id, ptr, len))
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
    fn release(&self, which: impl Fn(&(u32, Buffer)) -> bool) -> bool {
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

    /// A write of `len` bytes at `at` in staging buffer `id`, at `off` or (`None`)
    /// at the descriptor's position.
    pub(super) fn write_staged(
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
    pub(super) fn read_staged(
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
