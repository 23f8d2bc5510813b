//! Staging buffers: shared memory a client and its server thread both map, in which
//! the client keeps the data it writes and receives the data it reads (EASYIO's
//! client-side staging, KucoFS's shared buffers). A write from a staging buffer costs
//! no encoding into the mailbox and no decoding out of it: the server copies the
//! bytes out of the buffer into memory of its own (the client may change them at any
//! time: [`crate::shared`]) and writes them to the file; a read into one is read
//! into the server's memory and copied into the buffer.
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
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;

use crate::shared::SharedBytes;

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

/// Where this process maps staging buffers, `[start, end)` each: every buffer from
/// its mapping to its drop.
static MAPPED: RwLock<Vec<(usize, usize)>> = RwLock::new(Vec::new());
/// Entries of [`MAPPED`]: while 0, [`overlaps`] costs one load.
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Whether `[ptr, ptr + len)` meets a staging buffer this process maps (any
/// connection's). A caller that hands out no reference to such bytes (the C ABI,
/// given a program's pointer) asks this first: memory another process may store into
/// is reached only by copies ([`crate::shared`]).
pub fn overlaps(ptr: *const u8, len: usize) -> bool {
    if len == 0 || COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    let (a, b) = (ptr as usize, (ptr as usize).saturating_add(len));
    MAPPED.read().iter().any(|&(s, e)| s < b && a < e)
}

/// A mapped staging buffer. Its bytes are the client's as much as the server's: they
/// are reached only by copies ([`crate::shared`]).
pub struct Buffer {
    bytes: SharedBytes,
    /// The server's side: the segment, whose pages go when the buffer does.
    fd: Option<OwnedFd>,
}

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
        let bytes = SharedBytes::map(fd, len, true)?;
        let at = bytes.as_ptr() as usize;
        let mut mapped = MAPPED.write();
        mapped.push((at, at + bytes.len()));
        COUNT.store(mapped.len(), Ordering::Release);
        Ok(Buffer { bytes, fd: None })
    }

    /// Bytes of the buffer.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the buffer has no bytes (never: making one refuses that).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Where the buffer starts in this process.
    pub fn as_ptr(&self) -> *mut u8 {
        self.bytes.as_ptr()
    }

    /// [`Buffer::as_ptr`], never null.
    pub fn ptr(&self) -> NonNull<u8> {
        NonNull::new(self.as_ptr()).expect("a mapping is never at 0")
    }

    /// The offset of `[ptr, ptr + len)` in the buffer, if it lies inside.
    pub fn offset_of(&self, ptr: *const u8, len: usize) -> Option<u64> {
        self.bytes.offset_of(ptr, len).map(|at| at as u64)
    }

    /// Whether bytes `[at, at + len)` lie inside the buffer.
    pub fn holds(&self, at: u64, len: u64) -> bool {
        at.checked_add(len)
            .is_some_and(|end| end <= self.len() as u64)
    }

    /// Copies `len` bytes at `at` into `buf` (replacing what it held); `false` if
    /// they are not all inside the buffer. The other process may change them
    /// meanwhile: the copy is then torn, as a buffer changed during `write(2)`.
    pub fn read_into(&self, at: u64, len: u64, buf: &mut Vec<u8>) -> bool {
        match (usize::try_from(at), usize::try_from(len)) {
            (Ok(at), Ok(len)) => self.bytes.read_into(at, len, buf),
            _ => false,
        }
    }

    /// Copies bytes at `at` into `out`; `false`, and nothing copied, if they are not
    /// all inside the buffer.
    pub fn copy_to(&self, at: u64, out: &mut [u8]) -> bool {
        usize::try_from(at).is_ok_and(|at| self.bytes.copy_to(at, out))
    }

    /// Copies `data` into the buffer at `at`; `false`, and nothing copied, if it does
    /// not fit inside.
    pub fn copy_from(&self, at: u64, data: &[u8]) -> bool {
        usize::try_from(at).is_ok_and(|at| self.bytes.copy_from(at, data))
    }

    /// Sets `len` bytes at `at` to `byte`; `false`, and nothing set, if they are not
    /// all inside the buffer.
    pub fn fill(&self, at: usize, len: usize, byte: u8) -> bool {
        self.bytes.fill(at, len, byte)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        {
            let at = self.as_ptr() as usize;
            let mut mapped = MAPPED.write();
            mapped.retain(|&(s, _)| s != at);
            COUNT.store(mapped.len(), Ordering::Release);
        }
        if let Some(fd) = &self.fd {
            // The client may keep its mapping: it then reads zeros, and pages it
            // writes again are its own.
            let _ = rustix::fs::fallocate(
                fd,
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                0,
                self.len() as u64,
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
        assert!(client.copy_from(4090, b"0123456789"));
        let mut got = Vec::new();
        assert!(server.read_into(4090, 10, &mut got));
        assert_eq!(got, b"0123456789");
        assert!(
            rustix::fs::ftruncate(&fd, 0).is_err(),
            "sealed against shrinking"
        );
        assert!(Buffer::map(&fd, server.len() + 1).is_err());
        // Once the server lets it go, a client that kept its mapping sees no byte of
        // what was there (its pages are gone).
        drop(server);
        let mut after = [1u8; 10];
        assert!(client.copy_to(4090, &mut after));
        assert_eq!(after, [0u8; 10]);
    }

    #[test]
    fn ranges_outside_the_buffer_are_refused() {
        let (b, _fd) = Buffer::create(4096).unwrap();
        let mut v = Vec::new();
        assert!(b.read_into(0, 4096, &mut v));
        assert!(!b.read_into(1, 4096, &mut v));
        assert!(!b.read_into(u64::MAX, 2, &mut v));
        assert!(!b.copy_from(4096, &[1]));
        assert!(!b.copy_to(u64::MAX, &mut [0; 1]));
        assert_eq!(b.offset_of(b.as_ptr().wrapping_add(100), 10), Some(100));
        assert_eq!(b.offset_of(b.as_ptr().wrapping_add(4090), 10), None);
        assert_eq!(b.offset_of(b.as_ptr().wrapping_sub(1), 1), None);
        assert!(Buffer::create(0).is_err());
        assert!(Buffer::create(MAX_BYTES + 1).is_err());
    }

    #[test]
    fn overlaps_knows_every_mapped_buffer() {
        let (b, fd) = Buffer::create(4096).unwrap();
        let client = Buffer::map(&fd, b.len()).unwrap();
        for m in [&b, &client] {
            let p = m.as_ptr();
            assert!(overlaps(p, 1));
            assert!(overlaps(p.wrapping_add(4095), 100));
            assert!(overlaps(p.wrapping_sub(10), 11));
            assert!(!overlaps(p, 0));
        }
        let own = [0u8; 64];
        assert!(!overlaps(own.as_ptr(), own.len()));
        drop(client);
        assert!(overlaps(b.as_ptr(), 1));
    }
}
