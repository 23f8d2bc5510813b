//! The requests of the asynchronous API in flight, which a mount keeps by id until
//! they are polled or waited for (`aio.rs` makes and completes them).

use fs::BorrowedToken;

/// A request in flight.
pub(crate) enum InFlight {
    /// On an image mounted here: the file system's token for the copy.
    Here(BorrowedToken<'static>),
    /// A write a server committed, whose copy it runs (its SN is polled in the
    /// image's completion record).
    Server(easyio_serve::Submitted<'static, 'static>),
    /// Made at once through a server (a read; a write from a buffer outside the
    /// staging buffers): its result.
    Finished(i64),
}

impl InFlight {
    /// Whether the copy is done (one load and a compare).
    pub(crate) fn is_done(&self) -> bool {
        match self {
            InFlight::Here(t) => t.is_done(),
            InFlight::Server(s) => s.is_done(),
            InFlight::Finished(_) => true,
        }
    }

    /// Waits for the copy: bytes read or written, or -errno.
    pub(crate) fn result(self) -> i64 {
        let r = match self {
            InFlight::Here(t) => t.wait().map_err(|e| e.errno()),
            InFlight::Server(s) => s.wait().map_err(|e| e.errno()),
            InFlight::Finished(res) => return res,
        };
        match r {
            Ok(n) => n as i64,
            Err(errno) => -i64::from(errno),
        }
    }
}
