//! `easyio-fuse`: a FUSE server for an easyio image — every request the kernel sends
//! translated onto the handle calls of the `fs` crate (by inode number, with the
//! caller's credentials), so that unmodified programs and every process on the
//! machine can use the image.
//!
//! The server is a thin translation: no data or metadata is cached here. What it
//! keeps is the kernel's lookup count of each inode (freed at `forget`) and, per open
//! file or directory, one `fs` descriptor whose number is the FUSE file handle.
//!
//! Mounting goes through the `fuser` crate without libfuse: as root it calls
//! `mount(2)` on `/dev/fuse` itself; otherwise (`mount(2)` fails with EPERM) it runs
//! the setuid `fusermount3` (Debian package `fuse3`) and receives the device from it.
//! Requests are served by [`Options::threads`] threads, each reading its own clone of
//! the device, where a handler waits for the copies of its request; with
//! [`Options::uthread_workers`] (what `easyio mount` sets in `async` mode) the reads,
//! writes and fsyncs are handed to uthreads of an `rt` runtime instead, so that a
//! request waiting for its copy yields to the next one ([`HandlerStats`] counts them).
//!
//! Around the server, the door a command opens: [`check_fuse_device`] and
//! [`check_mountpoint`] before mounting, [`detach`] to serve in the background and
//! [`serve`] to open the image and serve it until it is unmounted, and [`umount`],
//! which waits for the server to save the image (found through [`state_file`]).
//! Their [`Error`]s carry the errno a command exits with.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

mod attr;
mod bdi;
mod buffers;
mod control;
mod cred;
mod daemon;
mod inval;
mod lookups;
mod mount;
mod options;
mod server;
mod uring;
mod uthreads;

pub use attr::{ATTR_TTL, ENTRY_TTL, NEGATIVE_TTL};
pub use control::{
    check_fuse_device, check_mountpoint, mount_of, read_state, state_file, umount, write_state,
    Error, Result, SERVER_EXIT_WAIT,
};
pub use daemon::{
    detach, label, open_image, serve, transport, DetachOptions, Detached, ServeOptions,
};
pub use inval::{InvalStats, Invalidator};
pub use lookups::LookupCounts;
pub use mount::{unmount, Background, Mount};
pub use options::{default_threads, parse_options, Options, MAX_DEFAULT_THREADS};
pub use server::{Flushes, Server};
pub use uring::{kernel_offers_uring, RingStats, TransportChoice, UringTransport};
pub use uthreads::HandlerStats;
