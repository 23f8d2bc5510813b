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
pub struct StagingBuf<'c> {
    client: &'c Client,
    ptr: NonNull<u8>,
    len: usize,
}

impl Deref for StagingBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the buffer stays mapped while this handle lives (it is unmapped
        // only by `release_staging`, which its drop calls); the server stores into it
        // only during a read this client makes into it, which borrows it mutably.
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
        let _ = self.client.release_staging(self.ptr.as_ptr());
    }
}

impl Client {
    /// A staging buffer of at least `len` bytes (at most 64 MiB; 64 buffers and
    /// 256 MiB a connection): [`Client::pwrite`], [`Client::write`],
    /// [`Client::pread`] and [`Client::read`] of a buffer inside it make no copy
    /// through the mailbox.
    pub fn staging_buffer(&self, len: usize) -> Result<StagingBuf<'_>> {
        let (ptr, len) = self.map_staging(len)?;
        Ok(StagingBuf {
            client: self,
            ptr,
            len,
        })
    }

    /// [`Client::staging_buffer`] for a caller that keeps the buffer itself (the C
    /// ABI): where it starts and how long it is. It stays mapped until
    /// [`Client::release_staging`] or the end of the client.
    pub fn map_staging(&self, len: usize) -> Result<(NonNull<u8>, usize)> {
        let (answer, fds) = self.call_with_fds(&Request::Staging { len: len as u64 })?;
        let Answer::Staging { id, len } = answer else {
            return Err(unexpected(answer));
        };
        let Some(fd) = fds.into_iter().next() else {
            return Err(Error::Protocol("a staging buffer was not sent".into()));
        };
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l as u64 <= MAX_BYTES)
            .ok_or_else(|| Error::Protocol("a staging buffer too long".into()))?;
        let buffer = Buffer::map(&fd, len).map_err(|e| Error::os("mapping a staging buffer", e))?;
        let ptr = NonNull::new(buffer.as_ptr()).expect("a mapping is not null");
        self.staging.lock().push((id, buffer));
        self.has_staging.store(true, Ordering::Release);
        Ok((ptr, len))
    }

    /// Gives back the staging buffer that starts at `ptr` and unmaps it; `EINVAL` if
    /// none does.
    pub fn release_staging(&self, ptr: *const u8) -> Result<()> {
        let buffer = {
            let mut staging = self.staging.lock();
            let Some(i) = staging
                .iter()
                .position(|(_, b)| std::ptr::eq(b.as_ptr(), ptr))
            else {
                return Err(Error::Fs(libc::EINVAL));
            };
            staging.swap_remove(i)
        };
        let (id, buffer) = buffer;
        drop(buffer);
        self.done(Request::DropStaging { id })
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
