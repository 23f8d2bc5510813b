//! How to mount: the options of a mount and the threads that serve it.

use crate::uring::TransportChoice;

/// How to mount.
#[derive(Clone, Debug)]
pub struct Options {
    /// Threads serving requests (at least 1; default [`default_threads`]).
    pub threads: usize,
    /// Mount read-only (`ro`): the kernel refuses every change.
    pub read_only: bool,
    /// Options passed through (`-o`): `allow_other`, `allow_root`, `ro`, `nosuid`,
    /// `nodev`, `noexec`, `noatime`, `sync`, `dirsync`, `fsname=`, `subtype=`, and any
    /// other the kernel takes as is. `default_permissions` is on unless root mounts
    /// without `allow_other` or `allow_root` (see `mount.rs`, `kernel_checks`).
    /// `writeback_cache` is the same as [`Options::writeback_cache`].
    pub extra: Vec<String>,
    /// Workers of a uthread runtime that serves reads, writes and fsyncs (for the
    /// `async` mode, where a handler waiting for its copy then yields to the next
    /// request); 0: every request is handled on the thread that read it.
    pub uthread_workers: usize,
    /// Lets the kernel cache writes (FUSE's writeback cache): a `write()` that returns
    /// is then in the kernel's page cache only, sent to the server (and durable) at
    /// `fsync`, `close` or the kernel's writeback.
    pub writeback_cache: bool,
    /// Lets the kernel keep file data in its page cache (the default): reads of a
    /// cached page never reach the server, and every write still does before it
    /// returns (write-through). Off (`easyio mount --direct-io`), as on a DAX file
    /// system: reads and writes go straight between the caller's buffer and the
    /// server, one copy fewer for a write. The writeback cache implies it.
    pub page_cache: bool,
    /// How requests reach the server: FUSE over io_uring where the kernel offers it
    /// (the default), or only reads of `/dev/fuse`.
    pub transport: TransportChoice,
}

impl Options {
    /// Whether file data goes through the kernel's page cache: by
    /// [`Options::page_cache`], or because the writeback cache needs it.
    pub fn page_cache(&self) -> bool {
        self.page_cache || self.writeback_cache()
    }

    /// Whether the kernel's writeback cache is on: by [`Options::writeback_cache`] or
    /// by `-o writeback_cache`.
    pub fn writeback_cache(&self) -> bool {
        self.writeback_cache || self.extra.iter().any(|o| o == WRITEBACK_CACHE)
    }
}

impl Options {
    /// The share (per cent, 1 to 100) of the machine's dirty limit that the mount's
    /// device may hold with the writeback cache once relaxed (as root): `-o
    /// bdi_max_ratio=N`, or 50.
    pub fn bdi_max_ratio(&self) -> std::io::Result<u32> {
        let Some(v) = self
            .extra
            .iter()
            .rev()
            .find_map(|o| o.strip_prefix(crate::bdi::MAX_RATIO_OPTION))
        else {
            return Ok(crate::bdi::DEFAULT_MAX_RATIO);
        };
        v.parse()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("bdi_max_ratio={v}: a whole number from 1 to 100 is needed"),
                )
            })
    }
}

/// The `-o` option that turns the writeback cache on (an option of the server, not of
/// the kernel's mount).
pub(crate) const WRITEBACK_CACHE: &str = "writeback_cache";

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: default_threads(),
            read_only: false,
            extra: Vec::new(),
            uthread_workers: 0,
            writeback_cache: false,
            page_cache: true,
            transport: TransportChoice::Auto,
        }
    }
}

/// Most threads [`default_threads`] gives.
pub const MAX_DEFAULT_THREADS: usize = 8;

/// Threads serving requests unless told: one per core the process may run on, at most
/// [`MAX_DEFAULT_THREADS`]. Each request wakes one sleeping thread; threads beyond the
/// cores serve nothing more in parallel and add wake-ups and switches (on 2 cores, 2
/// threads ran `easyio bench fuse --workload programs` about 1.3× faster than 4).
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_DEFAULT_THREADS)
}

/// Splits a `-o` argument (`a,b=c`) into options.
pub fn parse_options(s: &str) -> Vec<String> {
    s.split(',')
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect()
}
