//! `easyio serve`: several processes on one image (KucoFS's split, in userspace).
//!
//! One server process holds the image — the only one that may write it — and serves
//! clients over a Unix socket:
//!
//! - **Who may write what.** The server alone maps the image writable. A client that
//!   may read the image file itself receives a read-only descriptor of it
//!   (`SCM_RIGHTS`) and maps it `PROT_READ`: the kernel refuses any store a client
//!   makes into it (SIGSEGV), so a stray pointer in a client cannot corrupt the file
//!   system.
//! - **Who a client is.** The server takes each client's uid and gid from the socket
//!   (`SO_PEERCRED`) and its groups from `/proc`, never from what the client says, and
//!   makes every call with them, checked as Linux checks them.
//! - **Calls.** Every call is one request and one answer ([`wire`]); descriptors
//!   belong to the connection that opened them, or that adopted them from the
//!   process that handed them over before a `fork` or an `exec` (only that process
//!   itself or a child of it may adopt them). Advisory locks are kept between
//!   processes as the kernel keeps them. A client may ask for staging buffers of
//!   shared memory ([`staging`]): writes from them and reads into them make no copy
//!   through the mailbox.
//! - **Crashes.** A client that dies (its socket closes) has its descriptors closed,
//!   so nothing it held leaks and what it unlinked is freed; what the server
//!   acknowledged is in the image. A server that dies makes every later call of its
//!   clients fail with `ENOTCONN`, never hang; the next server recovers the image as
//!   after any crash.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

mod client;
mod conn;
pub mod direct;
mod error;
pub mod fuzz;
mod locks;
mod mailbox;
mod server;
pub mod shared;
pub mod shm;
pub mod staging;
mod submitted;
pub mod wire;

pub use client::{Client, RegionView, Remote, StagingBuf, Submitted};
pub use error::{Error, Result};
pub use server::Server;
pub use wire::{HeldLock, LockKind, LockOwner, On};
