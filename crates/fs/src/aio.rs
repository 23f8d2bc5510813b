//! The explicit asynchronous API: submit a read or write, get a token, overlap your own
//! work, then wait or poll.
//!
//! A token *owns* the buffer while the copy may run and gives it back from `wait`, so
//! the buffer cannot be freed, reused or even read before the copy is done — the
//! compiler refuses. Ownership rather than a borrow keeps this sound even if a token is
//! leaked with `mem::forget`: the buffer then leaks with it instead of being freed under
//! a running copy. Dropping a token waits for its copy.
//!
//! ```compile_fail,E0382
//! # fn demo(fs: &fs::FileSystem, fd: fs::Fd) -> fs::Result<()> {
//! let buf = vec![7u8; 65536];
//! let token = fs.submit_pwrite(fd, buf, 0)?;
//! println!("{}", buf[0]); // error: `buf` was moved into the submitted write
//! token.wait()?;
//! # Ok(()) }
//! ```
//!
//! ```
//! # fn demo(fs: &fs::FileSystem, fd: fs::Fd) -> fs::Result<()> {
//! let token = fs.submit_pwrite(fd, vec![7u8; 65536], 0)?;
//! // ... compute while the engine copies ...
//! let (written, buf) = token.wait()?; // the buffer comes back once it is safe
//! assert_eq!(written, buf.len());
//! # Ok(()) }
//! ```

use crate::epoch::ReadGuard;
use crate::error::{Error, Result};
use crate::file::Fd;
use crate::FileSystem;
use mover::Pending;

/// A submitted write; owns its buffer until the data is durable.
#[must_use = "dropping a token waits for its copy; call wait() to get the buffer back"]
pub struct WriteToken<'fs> {
    fs: &'fs FileSystem,
    pending: Pending,
    buf: Option<Vec<u8>>,
    _pages: Vec<Vec<u8>>,
}

/// A submitted read; owns its buffer until the data is in it.
#[must_use = "dropping a token waits for its copy; call wait() to get the data"]
pub struct ReadToken<'fs> {
    fs: &'fs FileSystem,
    pending: Pending,
    buf: Option<Vec<u8>>,
    len: usize,
    _guard: Option<ReadGuard<'fs>>,
}

impl FileSystem {
    /// Starts writing `buf` at `off` (at the end with `O_APPEND`): the write is
    /// committed when this returns, its data durable once the token is done.
    pub fn submit_pwrite(&self, fd: Fd, buf: Vec<u8>, off: u64) -> Result<WriteToken<'_>> {
        let f = self.file(fd)?;
        if !f.writable() {
            return Err(Error::BadFd);
        }
        self.before_write(&f, buf.len())?;
        let at = if f.append() { None } else { Some(off) };
        // SAFETY: the Vec's heap buffer moves into the token, which waits for the copy
        // before dropping or returning it.
        let started = unsafe { self.start_write_inode(f.inode(), at, &buf, f.client())? };
        Ok(WriteToken {
            fs: self,
            pending: started.pending,
            buf: Some(buf),
            _pages: started._pages,
        })
    }

    /// Starts reading `buf.len()` bytes at `off` into `buf`.
    pub fn submit_pread(&self, fd: Fd, mut buf: Vec<u8>, off: u64) -> Result<ReadToken<'_>> {
        let f = self.file(fd)?;
        if !f.readable() {
            return Err(Error::BadFd);
        }
        // SAFETY: as for writes: the buffer and the epoch guard live in the token until
        // the copy is done.
        let (len, pending, guard) =
            unsafe { self.start_read_inode(f.inode(), off, &mut buf, f.client())? };
        Ok(ReadToken {
            fs: self,
            pending,
            buf: Some(buf),
            len,
            _guard: Some(guard),
        })
    }
}

impl WriteToken<'_> {
    /// Whether the data is durable yet (one load and a compare).
    pub fn is_done(&self) -> bool {
        self.fs.mover.is_done(self.pending)
    }

    /// Waits (yielding in a uthread) and returns the bytes written and the buffer.
    pub fn wait(mut self) -> Result<(usize, Vec<u8>)> {
        self.fs.mover.wait(self.pending)?;
        let buf = self.buf.take().expect("buffer present until wait");
        Ok((buf.len(), buf))
    }
}

impl ReadToken<'_> {
    /// Whether the data has arrived (one load and a compare).
    pub fn is_done(&self) -> bool {
        self.fs.mover.is_done(self.pending)
    }

    /// Waits (yielding in a uthread) and returns the buffer cut to the bytes read.
    pub fn wait(mut self) -> Result<Vec<u8>> {
        self.fs.mover.wait(self.pending)?;
        let mut buf = self.buf.take().expect("buffer present until wait");
        buf.truncate(self.len);
        Ok(buf)
    }
}

impl Drop for WriteToken<'_> {
    fn drop(&mut self) {
        if self.buf.is_some() {
            let _ = self.fs.mover.wait(self.pending);
        }
    }
}

impl Drop for ReadToken<'_> {
    fn drop(&mut self) {
        if self.buf.is_some() {
            let _ = self.fs.mover.wait(self.pending);
        }
    }
}

/// A submitted read or write into or from a buffer the caller keeps (the C ABI's
/// requests, where the caller promises what the type system cannot). Dropping it
/// waits for its copy.
#[must_use = "dropping a token waits for its copy"]
pub struct BorrowedToken<'fs> {
    fs: &'fs FileSystem,
    pending: Pending,
    len: usize,
    waited: bool,
    _guard: Option<ReadGuard<'fs>>,
    _pages: Vec<Vec<u8>>,
}

impl FileSystem {
    /// Starts reading `buf.len()` bytes at `off` into `buf`, which the caller keeps.
    ///
    /// # Safety
    ///
    /// `buf` must stay allocated, and must be neither read nor written by anyone else,
    /// until the token has been waited for or dropped (the copy writes into it until
    /// then); leaking the token leaves the copy free to write into `buf` at any time.
    pub unsafe fn submit_pread_borrowed(
        &self,
        fd: Fd,
        buf: &mut [u8],
        off: u64,
    ) -> Result<BorrowedToken<'_>> {
        let f = self.file(fd)?;
        if !f.readable() {
            return Err(Error::BadFd);
        }
        // SAFETY: forwarded from our caller; the epoch guard lives in the token.
        let (len, pending, guard) =
            unsafe { self.start_read_inode(f.inode(), off, buf, f.client())? };
        Ok(BorrowedToken {
            fs: self,
            pending,
            len,
            waited: false,
            _guard: Some(guard),
            _pages: Vec::new(),
        })
    }

    /// Starts writing `buf` at `off` (at the end with `O_APPEND`) from a buffer the
    /// caller keeps: committed when this returns, durable once the token is done.
    ///
    /// # Safety
    ///
    /// `buf` must stay allocated and unchanged until the token has been waited for or
    /// dropped (the copy reads from it until then).
    pub unsafe fn submit_pwrite_borrowed(
        &self,
        fd: Fd,
        buf: &[u8],
        off: u64,
    ) -> Result<BorrowedToken<'_>> {
        let f = self.file(fd)?;
        if !f.writable() {
            return Err(Error::BadFd);
        }
        self.before_write(&f, buf.len())?;
        let at = if f.append() { None } else { Some(off) };
        // SAFETY: forwarded from our caller.
        let started = unsafe { self.start_write_inode(f.inode(), at, buf, f.client())? };
        Ok(BorrowedToken {
            fs: self,
            pending: started.pending,
            len: buf.len(),
            waited: false,
            _guard: None,
            _pages: started._pages,
        })
    }
}

impl BorrowedToken<'_> {
    /// Whether the copy is done (one load and a compare).
    pub fn is_done(&self) -> bool {
        self.fs.mover.is_done(self.pending)
    }

    /// The raw SN of the copy while it runs on an engine channel (see
    /// [`crate::layout::Geometry::sn_done`]: another process that maps the region
    /// can poll its completion record); `None` once it finished or failed, or if it
    /// never ran on a channel.
    pub fn running_sn(&self) -> Option<u64> {
        match self.pending {
            Pending::Sn(sn) if !self.is_done() => Some(sn.to_raw()),
            _ => None,
        }
    }

    /// Waits (yielding in a uthread) and returns the bytes read or written.
    pub fn wait(mut self) -> Result<usize> {
        self.waited = true;
        self.fs.mover.wait(self.pending)?;
        Ok(self.len)
    }
}

impl Drop for BorrowedToken<'_> {
    fn drop(&mut self) {
        if !self.waited {
            let _ = self.fs.mover.wait(self.pending);
        }
    }
}
