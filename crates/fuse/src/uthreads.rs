//! Request handlers as uthreads (EASYIO §5): in `async` mode the reader threads hand
//! each read, write and fsync, with its reply, to a uthread of an `rt` runtime, so that
//! a request waiting for its copy yields its worker to the next request instead of
//! blocking a thread.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The runtime the handlers run on, and what they have done.
pub(crate) struct Uthreads {
    rt: rt::Runtime,
    stats: HandlerStats,
}

impl Uthreads {
    /// A runtime of `workers` workers (at least 1).
    pub(crate) fn new(workers: usize) -> io::Result<Uthreads> {
        let rt = rt::Runtime::builder()
            .workers(workers.max(1))
            .name("easyio-fuse")
            .build()
            .map_err(|e| io::Error::other(format!("starting the handlers' runtime: {e}")))?;
        let stats = HandlerStats {
            requests: Arc::new(AtomicU64::new(0)),
            rt: rt.handle().clone(),
        };
        Ok(Uthreads { rt, stats })
    }

    /// Runs `handler` (which answers its request) in a new uthread and returns at once.
    /// Dropping the runtime, when the session ends, waits for every handler.
    pub(crate) fn run(&self, handler: impl FnOnce() + Send + 'static) {
        let requests = self.stats.requests.clone();
        // The join handle is dropped: a handler's result is its reply, and a handler
        // that panics drops its reply, which answers EIO.
        drop(self.rt.spawn(move || {
            if rt::in_uthread() {
                requests.fetch_add(1, Ordering::Relaxed);
            }
            // The runtime's workers serve only FUSE requests.
            crate::inval::handling();
            handler();
        }));
    }

    /// A handle on the counters.
    pub(crate) fn stats(&self) -> HandlerStats {
        self.stats.clone()
    }
}

/// What the uthread handlers have done, readable while the mount runs and after.
#[derive(Clone)]
pub struct HandlerStats {
    requests: Arc<AtomicU64>,
    rt: rt::Handle,
}

impl HandlerStats {
    /// Requests whose handler ran in a uthread (checked by the handler itself).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Workers of the handlers' runtime.
    pub fn workers(&self) -> usize {
        self.rt.stats().len()
    }

    /// Switches into handler uthreads: one per start and one per resumption after a
    /// yield.
    pub fn switches(&self) -> u64 {
        self.rt.stats().iter().map(|w| w.switches).sum()
    }

    /// Handlers that waited for a copy in their worker's wait set and were made
    /// runnable again when it completed: each such wait let other requests run.
    pub fn copy_waits(&self) -> u64 {
        self.rt.stats().iter().map(|w| w.wait_ready).sum()
    }

    /// One line for the server's log.
    pub fn summary(&self) -> String {
        format!(
            "{} requests ran as uthreads on {} workers ({} switches, {} waits for a copy)",
            self.requests(),
            self.workers(),
            self.switches(),
            self.copy_waits()
        )
    }
}
