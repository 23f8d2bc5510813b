//! Reused buffers for read replies and for the copies of written data the uthreads take.

use parking_lot::Mutex;

/// Buffers for read replies (and, in `async` mode, the copies of written data the
/// uthreads take), reused: a fresh zeroed one per request cost a 1 MiB read an `mmap`,
/// page faults over the whole buffer and a `munmap`.
#[derive(Default)]
pub(crate) struct ReadBuffers(Mutex<Vec<Vec<u8>>>);

/// Read buffers kept for reuse at most (one per handler in flight is the most used).
const READ_BUFFERS_KEPT: usize = 16;

impl ReadBuffers {
    /// A buffer of `len` bytes (its contents are whatever it held).
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        let mut b = self.0.lock().pop().unwrap_or_default();
        if b.len() < len {
            b.resize(len, 0);
        }
        b.truncate(len);
        b
    }

    pub(crate) fn give_back(&self, b: Vec<u8>) {
        let mut kept = self.0.lock();
        if kept.len() < READ_BUFFERS_KEPT {
            kept.push(b);
        }
    }
}
