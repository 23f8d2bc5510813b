//! Staging buffers: shared memory a client and its server thread both map, in which
//! the client keeps the data it writes and receives the data it reads (EASYIO's
//! client-side staging, KucoFS's shared buffers). A write from a staging buffer costs
//! no copy into the mailbox and none out of it: the server copies straight from the
//! buffer into the file's new blocks; a read into one is copied straight from the
//! file into the buffer.
//!
//! The server makes each buffer (a memfd sealed against resizing, so that a client
//! cannot make the server's next access fault) and sends its descriptor with the
//! answer; the client maps it read-write. A client may change the bytes while the
//! server copies them: that tears only its own call's data, as changing a buffer
//! during `write(2)` does. When the server lets a buffer go it punches its pages out,
//! so a client that keeps its mapping keeps no memory the server paid for.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

/// The largest staging buffer, bytes.
pub const MAX_BYTES: u64 = 64 << 20;
/// The most bytes of staging buffers one connection holds at once.
pub const MAX_TOTAL: u64 = 256 << 20;
/// The most staging buffers one connection holds at once.
pub const MAX_COUNT: usize = 16;
/// The most bytes of staging buffers all connections of a server hold at once.
pub const SERVER_BYTES: u64 = 2 << 30;
/// The most staging buffers all connections of a server hold at once (each is a
/// mapping of the server's).
pub const SERVER_COUNT: u64 = 1024;

/// A mapped staging buffer.
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    /// The server's side: the segment, whose pages go when the buffer does.
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is plain shared memory, reached only through raw pointers
// whose users (this module's callers) say who may touch which bytes when.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// A new buffer of `len` bytes (rounded up to whole pages), zeroed, and a
    /// descriptor of it to send to the client (the server's side).
    pub fn create(len: u64) -> io::Result<(Buffer, OwnedFd)> {
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0 && l as u64 <= MAX_BYTES)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?
            .next_multiple_of(page());
        let fd = crate::shm::sealable("easyio-staging", len)?;
        crate::shm::seal(&fd, true)?;
        let sent = fd.try_clone()?;
        let mut b = Buffer::map(&fd, len)?;
        b.fd = Some(fd);
        Ok((b, sent))
    }

    /// Maps `len` bytes of the buffer `fd` read-write (the client's side).
    pub fn map(fd: &impl AsFd, len: usize) -> io::Result<Buffer> {
        let st = rustix::fs::fstat(fd)?;
        if len == 0 || (st.st_size as u64) < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "staging buffer shorter than said",
            ));
        }
        // SAFETY: a fresh shared mapping of a segment at least `len` bytes long (checked
        // above, and sealed against shrinking by the server); no Rust object aliases
        // it, and it is unmapped only by Drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        let ptr = NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Buffer { ptr, len, fd: None })
    }

    /// Bytes of the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes (never: making one refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the buffer starts in this process.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// [`Buffer::as_ptr`], never null.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The offset of `[ptr, ptr + len)` in the buffer, if it lies inside.
    pub fn offset_of(&self, ptr: *const u8, len: usize) -> Option<u64> {
        let at = (ptr as usize).checked_sub(self.ptr.as_ptr() as usize)?;
        (at.checked_add(len)? <= self.len).then_some(at as u64)
    }

    /// Bytes `[at, at + len)`, if inside the buffer.
    ///
    /// # Safety
    /// The bytes may change while the slice lives (the other process writes them):
    /// the caller only copies them, and accepts a torn copy.
    pub unsafe fn bytes(&self, at: u64, len: u64) -> Option<&[u8]> {
        let (at, len) = self.range(at, len)?;
        // SAFETY: inside the live mapping (range checked it); the caller accepts that
        // the other process may store into it meanwhile.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(at), len) })
    }

    /// Bytes `[at, at + len)` to fill, if inside the buffer.
    ///
    /// # Safety
    /// No other slice of these bytes may be alive in this process while this one is;
    /// the other process may read or write them meanwhile (it gets whatever is there).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, at: u64, len: u64) -> Option<&mut [u8]> {
        let (at, len) = self.range(at, len)?;
        // SAFETY: inside the live mapping; exclusive in this process per the caller.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(at), len) })
    }

    fn range(&self, at: u64, len: u64) -> Option<(usize, usize)> {
        let end = at.checked_add(len)?;
        (end <= self.len as u64).then_some((at as usize, len as usize))
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; slices handed out borrow
        // `self`, so none outlives it.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
        if let Some(fd) = &self.fd {
            // The client may keep its mapping: it then reads zeros, and pages it
            // writes again are its own.
            let _ = rustix::fs::fallocate(
                fd,
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                0,
                self.len as u64,
            );
        }
    }
}

fn page() -> usize {
    rustix::param::page_size()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_mapping_shares_the_servers_bytes_and_cannot_resize_them() {
        let (server, fd) = Buffer::create(5000).unwrap();
        assert_eq!(server.len() % page(), 0);
        assert!(server.len() >= 5000);
        let client = Buffer::map(&fd, server.len()).unwrap();
        // SAFETY: this test is the only user of both mappings.
        unsafe {
            client
                .bytes_mut(4090, 10)
                .unwrap()
                .copy_from_slice(b"0123456789");
            assert_eq!(server.bytes(4090, 10).unwrap(), b"0123456789");
        }
        assert!(
            rustix::fs::ftruncate(&fd, 0).is_err(),
            "sealed against shrinking"
        );
        assert!(Buffer::map(&fd, server.len() + 1).is_err());
        // Once the server lets it go, a client that kept its mapping sees no byte of
        // what was there (its pages are gone).
        drop(server);
        // SAFETY: as above.
        assert_eq!(unsafe { client.bytes(4090, 10) }.unwrap(), &[0u8; 10]);
    }

    #[test]
    fn ranges_outside_the_buffer_are_refused() {
        let (b, _fd) = Buffer::create(4096).unwrap();
        // SAFETY: nothing else maps the buffer.
        unsafe {
            assert!(b.bytes(0, 4096).is_some());
            assert!(b.bytes(1, 4096).is_none());
            assert!(b.bytes(u64::MAX, 2).is_none());
            assert!(b.bytes_mut(4096, 1).is_none());
        }
        assert_eq!(b.offset_of(b.as_ptr().wrapping_add(100), 10), Some(100));
        assert_eq!(b.offset_of(b.as_ptr().wrapping_add(4090), 10), None);
        assert_eq!(b.offset_of(b.as_ptr().wrapping_sub(1), 1), None);
        assert!(Buffer::create(0).is_err());
        assert!(Buffer::create(MAX_BYTES + 1).is_err());
    }
}
