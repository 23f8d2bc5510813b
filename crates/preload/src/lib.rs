//! `libeasyio_preload.so`: runs unmodified, dynamically linked programs on an easyio
//! image. `LD_PRELOAD=libeasyio_preload.so EASYIO_IMAGE=img prog args`: paths under
//! `EASYIO_MOUNT` (default `/easyio`) — absolute, relative to a current directory
//! inside it, or from a descriptor of one of its directories — are the image's; every
//! other call goes to libc unchanged. With `EASYIO_SERVER=socket` instead, the
//! process is a client of an `easyio serve` server, and several processes share the
//! image (open files pass across `fork` and `exec`, locks hold between processes).
//! See `docs/PRELOAD.md`.
//!
//! Each exported function has the name and C type of libc's. It passes the call on
//! to libc (module `real`) unless it is the mount's: a path under the prefix (module `path`) or
//! a descriptor of the mount (module `table`: a placeholder kernel descriptor stands for
//! each, so numbers never collide). The first such call mounts the image
//! (module `mount`); the process unmounts it cleanly at exit. A thread inside the shim
//! never re-enters it (module `guard`): easyio's own libc calls go straight to libc.
//!
//! Calls of the mount are the `fs` crate's calls with the process's credentials, so a
//! call made from a uthread of the easyio runtime yields while its copy runs, as the
//! library does (EASYIO §5); a call from an ordinary thread waits.
//!
//! # Place in the layers
//!
//! A door beside `capi`: it imports `fs` and `pmem` (to open the region), and
//! `serve` to join a server instead (`EASYIO_SERVER`, modules `backend` and
//! `inherit`); nothing imports it.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

// The C ABI's uthread runtime is exported from the shim too (see `docs/PRELOAD.md`):
// a C program's uthreads must be those of the runtime the shim's file system sees.
use easyio as _;

mod autoserve;
mod backend;
mod call;
mod copy;
mod cwd;
mod dir;
mod freopen;
mod guard;
mod ids;
mod image_exec;
mod inherit;
mod io;
mod live;
mod lock;
mod mmap;
mod mount;
mod names;
mod open;
mod path;
mod process;
mod real;
mod report;
mod spawn;
mod stat;
mod stdio;
mod table;
mod temp;
mod umask;
mod variadic;
mod walk;
mod xattr;
