//! Memory shared with another process: the one way this crate touches it.
//!
//! The mailboxes, the staging buffers and the segments of 64-bit words are mappings
//! the server and a client both hold; either may store into them at any moment (a
//! client that misbehaves, on purpose or not, included). Rust's memory model allows
//! no reference (`&[u8]`, `&mut [u8]`) to memory that something else writes while
//! the reference lives, so a [`SharedBytes`] hands out none to its bytes. They are
//! reached only
//!
//! - by copies through raw pointers into or out of this process's own buffers
//!   ([`SharedBytes::copy_to`], [`SharedBytes::copy_from`],
//!   [`SharedBytes::read_into`], and [`SharedBytes::fill`]): a copy of bytes the other process changes
//!   meanwhile may be torn, a mix of old and new bytes, and whoever reads it checks
//!   it as it checks any input;
//! - by atomic 64-bit words ([`SharedBytes::word`]), for the headers both sides
//!   look at (states, lengths, epochs, versions).
//!
//! A program's buffer given by a C pointer (to the C library or the preload shim)
//! may lie in such memory too: a staging buffer the program was given, or a shared
//! mapping of the shim's. [`view`] and [`Place`] turn such a pointer into bytes: a
//! slice where the caller's own table says no other process stores into them, a
//! private copy made through raw pointers where one may.

use std::borrow::Cow;
use std::io;
use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use rustix::mm::{MapFlags, ProtFlags};

/// A shared mapping of a segment, unmapped when dropped; its bytes are reached only
/// through copies and atomic words (see the module's documentation).
pub struct SharedBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is reached only through raw-pointer copies and atomics, which
// any thread may make; no reference into it exists.
unsafe impl Send for SharedBytes {}
// SAFETY: as above.
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    /// Maps the first `len` bytes of segment `fd`, shared, writable or not;
    /// `InvalidData` if the segment is shorter or `len` is 0.
    pub fn map(fd: &impl AsFd, len: usize, writable: bool) -> io::Result<SharedBytes> {
        let st = rustix::fs::fstat(fd)?;
        if len == 0 || (st.st_size as u64) < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "shared segment shorter than said",
            ));
        }
        let prot = match writable {
            true => ProtFlags::READ | ProtFlags::WRITE,
            false => ProtFlags::READ,
        };
        // SAFETY: a fresh shared mapping of a segment at least `len` bytes long
        // (checked above; the segments this crate makes are sealed against
        // shrinking); nothing aliases it, and only Drop unmaps it.
        let ptr =
            unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0) }?;
        let ptr = NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(SharedBytes { ptr, len })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no byte is mapped (never: mapping refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the mapping starts in this process (to compare addresses with; this
    /// type never reads or writes through it but by its copies).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The offset of `[ptr, ptr + len)` in the mapping, if it lies inside.
    pub fn offset_of(&self, ptr: *const u8, len: usize) -> Option<usize> {
        let at = (ptr as usize).checked_sub(self.ptr.as_ptr() as usize)?;
        (at.checked_add(len)? <= self.len).then_some(at)
    }

    /// Whether `[at, at + len)` lies inside the mapping.
    fn inside(&self, at: usize, len: usize) -> bool {
        at.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Copies bytes `[at, at + out.len())` into `out`; `false`, and nothing copied,
    /// if they are not all inside. The copy is torn if the other process stores into
    /// them meanwhile.
    pub fn copy_to(&self, at: usize, out: &mut [u8]) -> bool {
        if !self.inside(at, out.len()) {
            return false;
        }
        // SAFETY: the source lies inside the live mapping (checked above) and is
        // read through a raw pointer only; `out` is this process's own memory, which
        // the mapping cannot overlap (no reference into the mapping exists).
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(at), out.as_mut_ptr(), out.len())
        };
        true
    }

    /// Copies `len` bytes at `at` into `buf`, replacing what it held (keeping its
    /// capacity for the next copy); `false`, and `buf` left alone, if they are not
    /// all inside.
    pub fn read_into(&self, at: usize, len: usize, buf: &mut Vec<u8>) -> bool {
        if !self.inside(at, len) {
            return false;
        }
        buf.clear();
        buf.reserve(len);
        // SAFETY: the source lies inside the live mapping (checked above) and is
        // read through a raw pointer only; `buf` has room for `len` bytes, all of
        // them written before `set_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(at), buf.as_mut_ptr(), len);
            buf.set_len(len);
        }
        true
    }

    /// Copies `data` to bytes `[at, at + data.len())`; `false`, and nothing copied,
    /// if they are not all inside. The mapping must be writable.
    pub fn copy_from(&self, at: usize, data: &[u8]) -> bool {
        if !self.inside(at, data.len()) {
            return false;
        }
        // SAFETY: the destination lies inside the live mapping (checked above) and is
        // written through a raw pointer only; `data` is this process's own memory.
        // A store into a read-only mapping faults, which is why clients map so what
        // they must not write.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(at), data.len()) };
        true
    }

    /// Sets bytes `[at, at + len)` to `byte`; `false`, and nothing set, if they are
    /// not all inside. The mapping must be writable.
    pub fn fill(&self, at: usize, len: usize, byte: u8) -> bool {
        if !self.inside(at, len) {
            return false;
        }
        // SAFETY: the destination lies inside the live mapping (checked above) and is
        // written through a raw pointer only.
        unsafe { std::ptr::write_bytes(self.as_ptr().add(at), byte, len) };
        true
    }

    /// The 64-bit word `i` (bytes `[8i, 8i + 8)`), to be loaded and stored
    /// atomically only; `None` past the end.
    pub fn word(&self, i: usize) -> Option<&AtomicU64> {
        let inside = i.checked_mul(8).is_some_and(|at| self.inside(at, 8));
        // SAFETY: inside the live mapping (checked), 8-aligned (the mapping starts on
        // a page); an `AtomicU64` may be shared, and every access to these words, in
        // both processes, is atomic. A read-only mapping is only loaded from: a store
        // would fault, which is the point of mapping it so.
        inside.then(|| unsafe { &*self.as_ptr().cast::<AtomicU64>().add(i) })
    }
}

impl Drop for SharedBytes {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; the words handed out
        // borrow `self`, so none outlives it.
        let _ = unsafe { rustix::mm::munmap(self.as_ptr().cast(), self.len) };
    }
}

/// A `postcard` output that encodes straight into shared bytes, from `at` up to
/// `end`, through [`SharedBytes::copy_from`]: a message is encoded where the other
/// side reads it, with no copy and no reference to the shared bytes.
pub struct Encoder<'a> {
    bytes: &'a SharedBytes,
    start: usize,
    at: usize,
    end: usize,
}

impl<'a> Encoder<'a> {
    /// An encoder into `bytes` from `start` to `end` (clamped to the mapping).
    pub fn new(bytes: &'a SharedBytes, start: usize, end: usize) -> Encoder<'a> {
        Encoder {
            bytes,
            start,
            at: start,
            end: end.min(bytes.len()),
        }
    }
}

impl postcard::ser_flavors::Flavor for Encoder<'_> {
    /// Bytes encoded.
    type Output = usize;

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        let next = self.at + data.len();
        if next > self.end || !self.bytes.copy_from(self.at, data) {
            return Err(postcard::Error::SerializeBufferFull);
        }
        self.at = next;
        Ok(())
    }

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.try_extend(&[data])
    }

    fn finalize(self) -> postcard::Result<usize> {
        Ok(self.at - self.start)
    }
}

/// A program's `n` items at `p` (given by a C pointer, not NULL, `n` > 0), to read: a
/// slice of them, or, where they lie in memory another process may store into
/// (`shared`, as the caller found by its own table: [`crate::staging::overlaps`] for
/// staging buffers), a private copy made through raw pointers. For the crates with a
/// C face, whose callers' pointers may point into such memory.
///
/// # Safety
/// `p` points to `n` readable items that live for the call, unchanged by the
/// program's other threads (what a C call asks of its buffers); and where `shared`
/// is false, nothing outside the program stores into them during the call.
pub unsafe fn view<'a, T: Copy>(p: *const T, n: usize, shared: bool) -> Cow<'a, [T]> {
    if shared {
        let mut own = Vec::with_capacity(n);
        // SAFETY: `p` points to `n` readable items (the caller's contract), read
        // through a raw pointer only; `own` has room for them, all written before
        // `set_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(p, own.as_mut_ptr(), n);
            own.set_len(n);
        }
        return Cow::Owned(own);
    }
    // SAFETY: the caller's contract: readable, and stored into by nothing while the
    // slice lives (not shared).
    Cow::Borrowed(unsafe { std::slice::from_raw_parts(p, n) })
}

/// A program's items that a call writes into (given by a C pointer): a slice of them
/// where nothing outside the program stores into them, a private copy where they lie
/// in memory another process may store into, copied back through raw pointers when
/// this is dropped (all of it: items the call did not write keep what they held when
/// the copy was made, as a copy torn by the other process's stores may).
pub enum Place<'a, T: Copy> {
    /// The program's own memory.
    Own(&'a mut [T]),
    /// A copy of shared memory, and where it goes back.
    Copied(Vec<T>, *mut T),
}

impl<'a, T: Copy> Place<'a, T> {
    /// `n` items at `p` (not NULL, `n` > 0); `shared` as for [`view`].
    ///
    /// # Safety
    /// `p` points to `n` writable items that live for the call and that the
    /// program's other threads do not touch during it; and where `shared` is false,
    /// nothing outside the program touches them during the call either.
    pub unsafe fn new(p: *mut T, n: usize, shared: bool) -> Place<'a, T> {
        if shared {
            // SAFETY: as in `view`; the copy goes back in `drop`.
            let own = unsafe { view(p, n, true) }.into_owned();
            return Place::Copied(own, p);
        }
        // SAFETY: the caller's contract: writable, and touched by nothing else while
        // the slice lives (not shared).
        Place::Own(unsafe { std::slice::from_raw_parts_mut(p, n) })
    }

    /// The program's own memory, for a call that keeps it past this value's life (a
    /// submitted read); the place itself back when it is a copy of shared memory.
    pub fn into_own(mut self) -> std::result::Result<&'a mut [T], Self> {
        match &mut self {
            Place::Own(s) => Ok(std::mem::take(s)),
            Place::Copied(..) => Err(self),
        }
    }
}

impl<T: Copy> std::ops::Deref for Place<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Place::Own(s) => s,
            Place::Copied(v, _) => v,
        }
    }
}

impl<T: Copy> std::ops::DerefMut for Place<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Place::Own(s) => s,
            Place::Copied(v, _) => v,
        }
    }
}

impl<T: Copy> Drop for Place<'_, T> {
    fn drop(&mut self) {
        if let Place::Copied(v, p) = self {
            // SAFETY: `p` points to `v.len()` writable items for the call (`new`'s
            // contract), written through a raw pointer only.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), *p, v.len()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    fn segment(len: usize) -> std::os::fd::OwnedFd {
        crate::shm::sealable("test-shared", len).unwrap()
    }

    #[test]
    fn two_mappings_see_each_others_copies_and_words() {
        let fd = segment(8192);
        let a = SharedBytes::map(&fd, 8192, true).unwrap();
        let b = SharedBytes::map(&fd, 8192, true).unwrap();
        assert!(a.copy_from(4090, b"0123456789"));
        let mut out = [0u8; 10];
        assert!(b.copy_to(4090, &mut out));
        assert_eq!(&out, b"0123456789");
        let mut v = vec![7u8; 3];
        assert!(b.read_into(4092, 4, &mut v));
        assert_eq!(v, b"2345");
        a.word(1).unwrap().store(u64::MAX - 1, Ordering::SeqCst);
        assert_eq!(b.word(1).unwrap().load(Ordering::SeqCst), u64::MAX - 1);
        let mut word = [0u8; 8];
        assert!(b.copy_to(8, &mut word));
        assert_eq!(u64::from_ne_bytes(word), u64::MAX - 1);
    }

    #[test]
    fn copies_and_words_past_the_end_are_refused_and_touch_nothing() {
        let fd = segment(4096);
        let s = SharedBytes::map(&fd, 4096, true).unwrap();
        assert!(!s.copy_from(4090, &[1; 7]));
        assert!(!s.copy_from(usize::MAX, &[1; 2]));
        let mut out = [9u8; 7];
        assert!(!s.copy_to(4090, &mut out));
        assert_eq!(out, [9; 7]);
        let mut v = vec![5u8];
        assert!(!s.read_into(1, 4096, &mut v));
        assert_eq!(v, [5]);
        assert!(s.word(511).is_some());
        assert!(s.word(512).is_none());
        assert!(s.word(usize::MAX).is_none());
        let mut all = vec![1u8; 4096];
        assert!(s.copy_to(0, &mut all));
        assert!(all.iter().all(|&b| b == 0), "a refused copy stored nothing");
        assert_eq!(s.offset_of(s.as_ptr().wrapping_add(100), 10), Some(100));
        assert_eq!(s.offset_of(s.as_ptr().wrapping_add(4090), 10), None);
        assert_eq!(s.offset_of(s.as_ptr().wrapping_sub(1), 1), None);
        assert!(SharedBytes::map(&fd, 4097, true).is_err());
        assert!(SharedBytes::map(&fd, 0, true).is_err());
    }

    #[test]
    fn an_encoder_writes_what_postcard_would_and_stops_at_its_end() {
        let fd = segment(4096);
        let s = SharedBytes::map(&fd, 4096, true).unwrap();
        let msg = (7u32, "a message".to_string(), vec![1u8, 2, 3]);
        let n = postcard::serialize_with_flavor(&msg, Encoder::new(&s, 100, 4096)).unwrap();
        let want = postcard::to_allocvec(&msg).unwrap();
        assert_eq!(n, want.len());
        let mut got = Vec::new();
        assert!(s.read_into(100, n, &mut got));
        assert_eq!(got, want);
        let short = Encoder::new(&s, 100, 100 + want.len() - 1);
        assert!(postcard::serialize_with_flavor(&msg, short).is_err());
    }
}
